#include "compute/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/simd.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::compute {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  const SimdKernels& k = simd_kernels();
  const double ss = k.sum_squares(x, n);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  k.scale_mul(x, scale, w, y, n);
}

void rmsnorm_rows(float* x, const float* w, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm(x + r * n, w, x + r * n, n, eps);
}

namespace {

// cos/sin of every rotation angle at one position: row[i] = cos theta_i, row[half + i] =
// sin theta_i, computed exactly as rope_neox defines them (double, then rounded to float).
void rope_angles(int64_t pos, int64_t head_dim, double base, double freq_scale, const float* factors, double mscale,
                 float* row) {
  const int64_t half = head_dim / 2;
  const double p = static_cast<double>(pos) * freq_scale;
  for (int64_t i = 0; i < half; ++i) {
    double theta = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    if (factors != nullptr) theta /= static_cast<double>(factors[i]);
    row[i] = static_cast<float>(std::cos(theta) * mscale);
    row[half + i] = static_cast<float>(std::sin(theta) * mscale);
  }
}

// Positions below this are served from a per-thread table per (base, scale, head_dim), filled on
// first use (a model's layers share one or two bases; q and k share the position): the same
// values, computed once. Up to head_dim floats per position and table.
constexpr int64_t kRopeTablePositions = 8192;

const float* rope_table_row(int64_t pos, int64_t head_dim, double base, double freq_scale, const float* factors,
                           double mscale) {
  struct Table {
    double base, scale, mscale;
    int64_t head_dim, rows;
    std::vector<float> factors;  // a copy: tables outlive the model that passed them
    std::vector<float> v;
  };
  thread_local std::vector<Table> tables;
  if (pos >= kRopeTablePositions) return nullptr;
  const size_t nf = factors != nullptr ? static_cast<size_t>(head_dim / 2) : 0;
  Table* t = nullptr;
  for (auto& x : tables)
    if (x.base == base && x.scale == freq_scale && x.mscale == mscale && x.head_dim == head_dim && x.factors.size() == nf &&
        std::equal(x.factors.begin(), x.factors.end(), factors))
      t = &x;
  if (t == nullptr)
    t = &tables.emplace_back(Table{base, freq_scale, mscale, head_dim, 0, std::vector<float>(factors, factors + nf), {}});
  if (pos >= t->rows) {
    const int64_t rows = std::min(kRopeTablePositions, std::max<int64_t>({pos + 1, 2 * t->rows, 64}));
    t->v.resize(static_cast<size_t>(rows * head_dim));
    const float* f = t->factors.empty() ? nullptr : t->factors.data();
    for (int64_t r = t->rows; r < rows; ++r) rope_angles(r, head_dim, base, freq_scale, f, mscale, t->v.data() + r * head_dim);
    t->rows = rows;
  }
  return t->v.data() + pos * head_dim;
}

// The [cos | sin] row of `pos` (head_dim floats): the per-thread table's below
// kRopeTablePositions, else computed into `own`.
const float* rope_cos_sin(int64_t pos, int64_t head_dim, double base, double freq_scale, const float* factors,
                          double mscale, std::vector<float>& own) {
  if (const float* row = rope_table_row(pos, head_dim, base, freq_scale, factors, mscale)) return row;
  own.resize(static_cast<size_t>(head_dim));
  rope_angles(pos, head_dim, base, freq_scale, factors, mscale, own.data());
  return own.data();
}

}  // namespace

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base, double freq_scale,
               const float* factors, double mscale) {
  const int64_t half = head_dim / 2;
  std::vector<float> own;
  const float* c = rope_cos_sin(pos, head_dim, base, freq_scale, factors, mscale, own);
  const float* s = c + half;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = a * s[i] + b * c[i];
    }
  }
}

void add_bias_rows(float* x, const float* b, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += b[i];
}

void rope_adjacent(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base, double freq_scale,
                   const float* factors, double mscale) {
  const int64_t half = head_dim / 2;
  std::vector<float> own;
  const float* c = rope_cos_sin(pos, head_dim, base, freq_scale, factors, mscale, own);
  const float* s = c + half;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c[i] - b * s[i];
      v[2 * i + 1] = a * s[i] + b * c[i];
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const SimdKernels& k = simd_kernels();
  k.exp_shifted(x, k.max(x, n), x, n);
  k.scale(x, static_cast<float>(1.0 / k.sum(x, n)), x, n);
}

ExpSum exp_shifted_sum(float* x, int64_t n) {
  const SimdKernels& k = simd_kernels();
  const float mx = k.max(x, n);
  k.exp_shifted(x, mx, x, n);
  return {mx, static_cast<float>(k.sum(x, n))};
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  simd_kernels().gelu_tanh_mul(gate, up, out, n);
}

void gelu_tanh_mul(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
  constexpr int64_t kGrain = 16384;  // below this a thread meeting costs more than it saves
  if (n < 2 * kGrain) return gelu_tanh_mul(gate, up, out, n);
  pool.parallel_for(
      n, [&](int64_t b, int64_t e) { simd_kernels().gelu_tanh_mul(gate + b, up + b, out + b, e - b); }, kGrain);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void silu_mul(const float* gate, const float* up, float* out, int64_t n) { simd_kernels().silu_mul(gate, up, out, n); }

void silu_mul(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
  constexpr int64_t kGrain = 16384;  // as gelu_tanh_mul
  if (n < 2 * kGrain) return silu_mul(gate, up, out, n);
  pool.parallel_for(
      n, [&](int64_t b, int64_t e) { simd_kernels().silu_mul(gate + b, up + b, out + b, e - b); }, kGrain);
}

void axpy(float a, const float* x, float* y, int64_t n) { simd_kernels().axpy(a, x, y, n); }
float dot_f32(const float* x, const float* y, int64_t n) { return simd_kernels().dot(x, y, n); }
void dot_f32_rows(const float* x, int64_t rows, const float* y, int64_t n, float* out) {
  simd_kernels().dot_rows(x, rows, y, n, out);
}
void axpy_rows(const float* a, const float* x, float* y, int64_t rows, int64_t n) {
  simd_kernels().axpy_rows(a, x, y, rows, n);
}

namespace {
// The f32 GEMM kernels for the active ISA: AVX-512's when it is active (the same bits as the
// table's), else the SimdKernels table's.
GemmF32Kernels gemm_f32_kernels() {
  if (quant::active_isa() >= quant::Isa::AVX512) return *gemm_f32_avx512();
  return {simd_kernels().gemm_nt, simd_kernels().gemm_nn_acc};
}
}  // namespace

void gemm_f32_nt(ThreadPool& pool, const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y) {
  // Blocks of 24 rows of w (a multiple of the tiles' 3 and 4 rows): ~200 KB at k = 2048, in L2
  // while every token passes.
  constexpr int64_t kRows = 24;
  const GemmF32Kernels kern = gemm_f32_kernels();
  pool.parallel_for((rows + kRows - 1) / kRows, [&](int64_t b0, int64_t b1) {
    const int64_t r0 = b0 * kRows, r1 = std::min(rows, b1 * kRows);
    kern.nt(x, n, w + r0 * k, r1 - r0, k, y + r0, rows);
  });
}
void gemm_f32_nn_acc(ThreadPool& pool, const float* a, int64_t n, const float* w, int64_t rows, int64_t cols, float* y) {
  // Blocks of 32 columns (the tiles' 16 and 32) packed into [rows][32] before the tokens pass:
  // read in place, a block's rows lie cols * 4 bytes apart, and at a power-of-two width (2048
  // floats: 8 KB) every one of them falls in the same few cache sets, so the block would not stay
  // in cache between groups of tokens.
  constexpr int64_t kCols = 32;
  const GemmF32Kernels kern = gemm_f32_kernels();
  pool.parallel_for((cols + kCols - 1) / kCols, [&](int64_t b0, int64_t b1) {
    std::vector<float> panel(static_cast<size_t>(rows * kCols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kCols, len = std::min(kCols, cols - c0);
      for (int64_t o = 0; o < rows; ++o) std::memcpy(panel.data() + o * len, w + o * cols + c0, static_cast<size_t>(len) * sizeof(float));
      kern.nn_acc(a, rows, n, panel.data(), len, rows, len, y + c0, cols);
    }
  });
}

void Activations::reset(const float* x, int64_t n, int64_t cols) {
  x_ = x;
  n_ = n;
  cols_ = cols;
  q8_0_.ready = false;
  q8_k_.ready = false;
}

const quant::GemmActs& Activations::quantised(ThreadPool& pool, DType type) {
  Slot& s = type == DType::Q8_0 ? q8_0_ : q8_k_;
  if (s.ready) return s.acts;
  const auto rb = row_bytes(type, static_cast<uint64_t>(cols_));
  if (!rb || (type != DType::Q8_0 && type != DType::Q8_K))
    throw Error(ErrorKind::Unsupported, std::string("matmul: row length ") + std::to_string(cols_) +
                                            " is not a multiple of the " + dtype_name(type) + " block size");
  const size_t row_bytes = *rb;
  s.rows.resize(row_bytes * static_cast<size_t>(n_));
  quant::GemmActs& a = s.acts;
  a = quant::GemmActs{type, cols_, n_, s.rows.data(), row_bytes, nullptr, nullptr};
  const bool extras = type == DType::Q8_0;
  const int64_t nb = cols_ / 32;
  if (extras) {
    s.scale.resize(static_cast<size_t>(n_ * nb));
    s.sum.resize(static_cast<size_t>(n_ * nb));
  }
  auto work = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      quant::quantize_row(type, x_ + t * cols_, s.rows.data() + static_cast<size_t>(t) * row_bytes, cols_);
    if (extras) {
      quant::GemmActs part = a;
      part.rows = a.rows + static_cast<size_t>(t0) * row_bytes;
      part.n = t1 - t0;
      quant::prepare_gemm_acts(part, s.scale.data() + t0 * nb, s.sum.data() + t0 * nb);
    }
  };
  // Quantising is cheap per row: split only batches worth a thread meeting.
  if (n_ >= 8) {
    pool.parallel_for(n_, work);
  } else {
    work(0, n_);
  }
  if (extras) {
    a.scale = s.scale.data();
    a.sum = s.sum.data();
  }
  s.ready = true;
  return a;
}

namespace {

// Tokens from which the tiled kernels beat one row kernel call per (row, token).
constexpr int64_t kGemmMinTokens = 4;
// Row kernel path: a tile of weight rows stays in L1 while every token's activation streams past.
constexpr int64_t kRowTile = 16;
// Decode's gemv path: units of 4 rows (the kernel's row group), so that small matrices split
// evenly over many threads (attn_output's 640 rows are 40 tiles of 16: 3 for some of 16 threads,
// 2 for others; 160 units of 4 give each thread 10).
constexpr int64_t kGemvUnit = 4;

// One weight's part of a pass over the pool: `units` work items of `unit` rows: GEMM panels of
// kGemmRows rows, gemv groups of kGemvUnit rows or row tiles of kRowTile rows.
struct Job {
  const TensorView* w = nullptr;
  float* y = nullptr;
  int64_t n_tokens = 0, units = 0, unit = kRowTile;
  const quant::GemmActs* gemm = nullptr;  // tiled path when set
  const quant::GemmActs* gemv = nullptr;  // decode path with prepared activations when set
  const uint8_t* act = nullptr;           // row path: activation rows
  size_t act_row_bytes = 0;
  quant::VecDotFn dot = nullptr;

  void run(int64_t u0, int64_t u1) const {
    const int64_t rows = w->rows, cols = w->cols;
    if (gemm != nullptr) {
      quant::gemm(w->type, cols, w->data, w->row_bytes, u0 * quant::kGemmRows, std::min(rows, u1 * quant::kGemmRows),
                  *gemm, y, rows);
      return;
    }
    if (gemv != nullptr) {
      quant::gemv(w->type, cols, w->data, w->row_bytes, u0 * unit, std::min(rows, u1 * unit), *gemv, y, rows);
      return;
    }
    for (int64_t rb = u0 * kRowTile; rb < std::min(rows, u1 * kRowTile); rb += kRowTile) {
      const int64_t re = std::min(rows, rb + kRowTile);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* at = act + static_cast<size_t>(t) * act_row_bytes;
        float* yt = y + t * rows;
        for (int64_t r = rb; r < re; ++r) yt[r] = dot(cols, w->row(r), at);
      }
    }
  }
};

// Checks, quantises (in the calling thread, so nothing throws inside a worker) and picks the path.
Job plan(ThreadPool& pool, const TensorView& w, Activations& x, float* y) {
  const DType act_type = quant::vec_dot_type(w.type);
  if (x.cols() != w.cols)
    throw Error(ErrorKind::InvalidArgument, "matmul: activation rows have " + std::to_string(x.cols()) +
                                                " columns, the weight has " + std::to_string(w.cols));
  Job j;
  j.w = &w;
  j.y = y;
  j.n_tokens = x.n();
  j.dot = quant::vec_dot_fn(w.type);  // Error{Unsupported} for a type without a kernel
  if (act_type == DType::F32) {
    j.act = reinterpret_cast<const uint8_t*>(x.x());
    j.act_row_bytes = static_cast<size_t>(w.cols) * sizeof(float);
  } else {
    const quant::GemmActs& a = x.quantised(pool, act_type);
    if (x.n() >= kGemmMinTokens && quant::gemm_supported(w.type)) {
      j.gemm = &a;
    } else if (quant::gemv_supported(w.type)) {
      j.gemv = &a;
    }
    j.act = a.rows;
    j.act_row_bytes = a.row_bytes;
  }
  j.unit = j.gemm != nullptr ? quant::kGemmRows : j.gemv != nullptr ? kGemvUnit : kRowTile;
  j.units = (w.rows + j.unit - 1) / j.unit;
  return j;
}

// All jobs' units in one parallel_for: one thread meeting for several weights.
void run_jobs(ThreadPool& pool, const Job* jobs, size_t n_jobs) {
  int64_t total = 0;
  for (size_t i = 0; i < n_jobs; ++i) total += jobs[i].units;
  pool.parallel_for(total, [&](int64_t b, int64_t e) {
    int64_t off = 0;
    for (size_t i = 0; i < n_jobs && off < e; off += jobs[i].units, ++i) {
      const int64_t u0 = std::max(b, off), u1 = std::min(e, off + jobs[i].units);
      if (u0 < u1) jobs[i].run(u0 - off, u1 - off);
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, const TensorView& w, Activations& x, float* y) {
  const Job j = plan(pool, w, x, y);
  run_jobs(pool, &j, 1);
}

void matmul_many(ThreadPool& pool, Activations& x, std::initializer_list<MatmulOut> outs) {
  Job jobs[8];
  if (outs.size() > 8) throw Error(ErrorKind::InvalidArgument, "matmul_many: more than 8 weights");
  size_t n = 0;
  for (const MatmulOut& o : outs) jobs[n++] = plan(pool, o.w, x, o.y);
  run_jobs(pool, jobs, n);
}

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  Activations a;
  a.reset(x, n_tokens, w.cols);
  matmul(pool, w, a, y);
}

}  // namespace larql::compute
