// The CUDA backend's DeviceModel and DeviceSequence (cuda/cuda_model.h; docs/backends.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/blocks.h"
#include "cuda/cuda_model.h"
#include "cuda/kernels.h"
#include "util/error.h"

namespace larql::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error
  throw Error(ErrorKind::BackendFailure, std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
#define LARQL_CK(call) check((call), #call)

std::string gib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  return buf;
}

/// Device memory owned by one object; allocation failures name the bytes and the purpose.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, const std::string& what) { alloc(bytes, what); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~Buffer() { release(); }
  void alloc(size_t bytes, const std::string& what) {
    release();
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(ErrorKind::BackendFailure, "cuda: out of device memory: asked for " + std::to_string(bytes) + " bytes (" +
                                                 gib(bytes) + ") for " + what + "; " + gib(free_b) + " free of " +
                                                 gib(total_b) + " (" + cudaGetErrorString(e) + ")");
    }
    bytes_ = bytes;
  }
  void release() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

struct DevLayer {
  DevWeight wq, wk, wv, wo, gate, up, down;
  const float *attn_norm = nullptr, *post_attn_norm = nullptr, *ffn_norm = nullptr, *post_ffn_norm = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr;
  RopeParams rope;
  AttnParams attn;
};

constexpr int kChunk = 2048;  ///< prefill rows per pass
constexpr int kGemvRows = 16;  ///< up to this many rows run as GEMV, more as tensor-core GEMM

class CudaSequence;

class CudaModel final : public DeviceModel {
 public:
  CudaModel(std::shared_ptr<const Model> model, int ordinal);
  ~CudaModel() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  DeviceInfo info() const override { return DeviceInfo{"cuda", name_, weight_bytes_}; }
  bool supports(DeviceFeature f) const override {
    return f == DeviceFeature::DeviceLogits || f == DeviceFeature::BatchedDecode;
  }
  std::unique_ptr<DeviceSequence> new_sequence(int64_t capacity) override;
  void decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) override;

  const ModelConfig& config() const { return c_; }
  const DevWeight& embd() const { return embd_; }
  cudaStream_t stream() const { return stream_; }
  std::mutex& mutex() { return mu_; }
  int ordinal() const { return ordinal_; }

  /// out [n, W.rows] = in [n, W.cols] · W^T (+bias): GEMV for few rows, tensor cores for many.
  void linear(const DevWeight& W, const float* in, int n, float* out, const float* bias = nullptr) const;
  /// The layers over n rows x [n, H] with their K/V rows `kv(li)`; `prefill`: the n rows are
  /// consecutive positions pos0.. of one sequence whose layer caches are kc(li)/vc(li).
  struct Work {
    float *x, *h, *q, *k, *v, *attn, *o, *gate, *up, *part;
    int splits;
  };
  template <typename KvOf, typename CacheOf>
  void run_layers(const Work& w, int n, KvOf kv_of, bool prefill, int pos0, CacheOf cache_of) const;
  /// logits [n, vocab] of rows x [n, H] (final norm into h), then argmax into am.
  void head(const float* x, float* h, int n, float* logits, void* argpart, int32_t* am) const;

  void check_launch(const char* what) const { check(cudaGetLastError(), what); }

 private:
  const float* upload_floats(const std::vector<float>& v, const std::string& what);
  DevWeight upload_weight(const TensorView& t, const std::string& what);

  std::shared_ptr<const Model> model_;
  ModelConfig c_;
  int ordinal_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::vector<Buffer> bufs_;
  size_t weight_bytes_ = 0;
  DevWeight embd_, lm_head_;
  const float* out_norm_ = nullptr;
  std::vector<DevLayer> layers_;
  mutable Buffer wf16_, af16_;  ///< GEMM scratch: one weight and one activation block as f16
  size_t max_weight_values_ = 0;
  int64_t max_cols_ = 0;
  std::mutex mu_;
  // decode_batch's workspace (rows <= kGemvRows)
  Buffer b_x_, b_h_, b_q_, b_k_, b_v_, b_attn_, b_o_, b_gate_, b_up_, b_part_, b_logits_, b_arg_, b_am_, b_tok_, b_pos_,
      b_ptrs_;
  int b_splits_ = 0;
};

CudaModel::CudaModel(std::shared_ptr<const Model> model, int ordinal)
    : model_(std::move(model)), c_(model_->config()), ordinal_(ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw Error(ErrorKind::BackendUnavailable, std::string("--device cuda: no usable CUDA device (") +
                                                   (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
  }
  if (ordinal < 0 || ordinal >= count)
    throw Error(ErrorKind::BackendUnavailable, "--device cuda: device " + std::to_string(ordinal) + " of " +
                                                   std::to_string(count));
  LARQL_CK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  LARQL_CK(cudaGetDeviceProperties(&prop, ordinal));
  name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
          gib(prop.totalGlobalMem) + ")";
  // What the kernels support.
  const std::string who = "--device cuda: " + model_->path() + ": ";
  if (c_.n_experts > 0) throw Error(ErrorKind::BackendUnavailable, who + "mixture-of-experts models run on the CPU only");
  if (!model_->part().whole(c_)) throw Error(ErrorKind::BackendUnavailable, who + "a partial model (a shard) runs on the CPU only");
  if (c_.head_dim != 64 && c_.head_dim != 128 && c_.head_dim != 256)
    throw Error(ErrorKind::BackendUnavailable, who + "head_dim " + std::to_string(c_.head_dim) + " (the kernels take 64, 128 or 256)");
  if (c_.n_heads % c_.n_kv_heads != 0 || c_.n_heads / c_.n_kv_heads > 8)
    throw Error(ErrorKind::BackendUnavailable, who + std::to_string(c_.n_heads) + " query heads over " +
                                                   std::to_string(c_.n_kv_heads) + " K/V heads (at most 8 per K/V head)");
  LARQL_CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  prepare_kernels();

  const ModelWeights& w = model_->weights();
  embd_ = upload_weight(w.token_embd, "token_embd");
  lm_head_ = w.lm_head.data == w.token_embd.data ? embd_ : upload_weight(w.lm_head, "output (lm_head)");
  out_norm_ = upload_floats(w.output_norm, "output_norm");
  const float* factors = nullptr;
  if (!c_.rope_freq_factors.empty()) factors = upload_floats(c_.rope_freq_factors, "rope_freqs");
  for (int64_t li = 0; li < c_.n_layers; ++li) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(li)];
    const LayerConfig& lc = c_.layers[static_cast<size_t>(li)];
    const std::string b = "blk." + std::to_string(li) + ".";
    DevLayer d;
    d.wq = upload_weight(lw.wq, b + "attn_q");
    d.wk = upload_weight(lw.wk, b + "attn_k");
    d.wv = upload_weight(lw.wv, b + "attn_v");
    d.wo = upload_weight(lw.wo, b + "attn_output");
    d.gate = upload_weight(lw.w_gate, b + "ffn_gate");
    d.up = upload_weight(lw.w_up, b + "ffn_up");
    d.down = upload_weight(lw.w_down, b + "ffn_down");
    if (d.gate.type != d.up.type)
      throw Error(ErrorKind::BackendUnavailable, who + b + "ffn_gate and ffn_up have different types");
    d.attn_norm = upload_floats(lw.attn_norm, b + "attn_norm");
    d.ffn_norm = upload_floats(lw.ffn_norm, b + "ffn_norm");
    if (c_.post_norms) {
      d.post_attn_norm = upload_floats(lw.post_attn_norm, b + "post_attention_norm");
      d.post_ffn_norm = upload_floats(lw.post_ffn_norm, b + "post_ffw_norm");
    }
    if (c_.qk_norm) {
      d.q_norm = upload_floats(lw.q_norm, b + "attn_q_norm");
      d.k_norm = upload_floats(lw.k_norm, b + "attn_k_norm");
    }
    if (c_.qkv_bias) {
      d.bq = upload_floats(lw.bq, b + "attn_q.bias");
      d.bk = upload_floats(lw.bk, b + "attn_k.bias");
      d.bv = upload_floats(lw.bv, b + "attn_v.bias");
    }
    d.rope = RopeParams{static_cast<int>(c_.n_heads), static_cast<int>(c_.n_kv_heads), static_cast<int>(c_.head_dim),
                        lc.rope_base, lc.rope_freq_scale, c_.rope_attn_factor, factors,
                        lc.rope_form == RopeForm::Adjacent, c_.norm_eps};
    d.attn = AttnParams{static_cast<int>(c_.n_heads), static_cast<int>(c_.n_kv_heads), static_cast<int>(c_.head_dim),
                        lc.sliding ? static_cast<int>(lc.window) : 0, c_.attn_scale, c_.attn_logit_softcap};
    for (const DevWeight* x : {&d.wq, &d.wk, &d.wv, &d.wo, &d.gate, &d.up, &d.down}) {
      max_weight_values_ = std::max(max_weight_values_, static_cast<size_t>(x->rows * x->cols));
      max_cols_ = std::max(max_cols_, x->cols);
    }
    layers_.push_back(d);
  }
  wf16_.alloc(max_weight_values_ * 2, "the prefill GEMM's weight scratch");
  af16_.alloc(static_cast<size_t>(kChunk) * static_cast<size_t>(max_cols_) * 2, "the prefill GEMM's activation scratch");
  LARQL_CK(cudaStreamSynchronize(stream_));
}

const float* CudaModel::upload_floats(const std::vector<float>& v, const std::string& what) {
  bufs_.emplace_back(std::max<size_t>(v.size(), 1) * 4, what);
  LARQL_CK(cudaMemcpy(bufs_.back().get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  weight_bytes_ += v.size() * 4;
  return bufs_.back().get<float>();
}

DevWeight CudaModel::upload_weight(const TensorView& t, const std::string& what) {
  if (t.empty()) throw Error(ErrorKind::BackendUnavailable, "--device cuda: " + model_->path() + " has no " + what);
  if (!device_supports(t.type))
    throw Error(ErrorKind::BackendUnavailable, "--device cuda: " + what + " is " + dtype_name(t.type) +
                                                   ", which the cuda backend does not hold (it takes F32, F16, BF16, "
                                                   "Q8_0, Q5_0, Q4_K, Q6_K); use --device cpu");
  if (t.cols % (t.type == DType::Q4_K || t.type == DType::Q6_K ? 256 : kUnit) != 0)
    throw Error(ErrorKind::BackendUnavailable, "--device cuda: " + what + " has " + std::to_string(t.cols) +
                                                   " columns, not a multiple of its block");
  DevWeight d;
  d.type = t.type;
  d.rows = t.rows;
  d.cols = t.cols;
  d.row_bytes = device_row_bytes(t.type, t.cols);
  const size_t total = d.row_bytes * static_cast<size_t>(t.rows);
  bufs_.emplace_back(total, what + " (" + std::to_string(t.rows) + " x " + std::to_string(t.cols) + " " +
                                dtype_name(t.type) + ")");
  uint8_t* dst = bufs_.back().get<uint8_t>();
  // Repack in slabs of ~64 MiB through one host buffer.
  const int64_t slab = std::max<int64_t>(1, static_cast<int64_t>((64u << 20) / d.row_bytes));
  std::vector<uint8_t> host(static_cast<size_t>(std::min(slab, t.rows)) * d.row_bytes);
  for (int64_t r0 = 0; r0 < t.rows; r0 += slab) {
    const int64_t nr = std::min(slab, t.rows - r0);
    for (int64_t r = 0; r < nr; ++r) repack_row(t.type, t.row(r0 + r), t.cols, host.data() + r * d.row_bytes);
    LARQL_CK(cudaMemcpy(dst + r0 * d.row_bytes, host.data(), static_cast<size_t>(nr) * d.row_bytes, cudaMemcpyHostToDevice));
  }
  weight_bytes_ += total;
  d.data = dst;
  return d;
}

void CudaModel::linear(const DevWeight& W, const float* in, int n, float* out, const float* bias) const {
  if (n <= kGemvRows) return gemv(stream_, W, in, n, out, bias);
  to_f16(stream_, in, af16_.get(), static_cast<int64_t>(n) * W.cols);
  dequant_f16(stream_, W, wf16_.get());
  gemm_f16(stream_, af16_.get(), wf16_.get(), n, static_cast<int>(W.rows), static_cast<int>(W.cols), out, bias);
}

template <typename KvOf, typename CacheOf>
void CudaModel::run_layers(const Work& w, int n, KvOf kv_of, bool prefill, int pos0, CacheOf cache_of) const {
  const int H = static_cast<int>(c_.hidden);
  const bool gelu = c_.activation == Activation::GeluTanh;
  rmsnorm(stream_, w.x, layers_[0].attn_norm, w.h, n, H, c_.norm_eps);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const DevLayer& L = layers_[li];
    linear(L.wq, w.h, n, w.q, L.bq);
    linear(L.wk, w.h, n, w.k, L.bk);
    linear(L.wv, w.h, n, w.v, L.bv);
    const KvRows kv = kv_of(li);
    qk_rope_store(stream_, w.q, w.k, w.v, L.q_norm, L.k_norm, n, L.rope, kv);
    if (prefill) {
      const auto [kc, vc] = cache_of(li);
      attend_prefill(stream_, w.q, n, pos0, kc, vc, L.attn, w.attn);
    } else {
      attend_decode(stream_, w.q, n, kv, L.attn, w.splits, w.part, w.attn);
    }
    linear(L.wo, w.attn, n, w.o);
    add_norm(stream_, w.x, w.o, L.post_attn_norm, L.ffn_norm, w.h, n, H, c_.norm_eps);
    if (n <= kGemvRows) {
      gemv_gated(stream_, L.gate, L.up, w.h, n, w.gate, gelu);
    } else {
      linear(L.gate, w.h, n, w.gate);
      linear(L.up, w.h, n, w.up);
      gated_act(stream_, w.gate, w.up, w.gate, static_cast<int64_t>(n) * L.gate.rows, gelu);
    }
    linear(L.down, w.gate, n, w.o);
    const float* next = li + 1 < layers_.size() ? layers_[li + 1].attn_norm : nullptr;
    add_norm(stream_, w.x, w.o, L.post_ffn_norm, next, w.h, n, H, c_.norm_eps);
  }
}

void CudaModel::head(const float* x, float* h, int n, float* logits, void* argpart, int32_t* am) const {
  rmsnorm(stream_, x, out_norm_, h, n, static_cast<int>(c_.hidden), c_.norm_eps);
  gemv(stream_, lm_head_, h, n, logits, nullptr, c_.final_logit_softcap);
  argmax_rows(stream_, logits, n, static_cast<int>(lm_head_.rows), argpart, am);
}

// ---- one sequence ---------------------------------------------------------------------------

class CudaSequence final : public DeviceSequence {
 public:
  CudaSequence(CudaModel* m, int64_t limit) : m_(m), limit_(limit) {
    const ModelConfig& c = m->config();
    const size_t H = static_cast<size_t>(c.hidden), Q = static_cast<size_t>(c.q_dim()),
                 KV = static_cast<size_t>(c.kv_dim()), F = static_cast<size_t>(c.ffn), R = kChunk;
    x_.alloc(R * H * 4, "a sequence's residual rows");
    h_.alloc(R * H * 4, "a sequence's normed rows");
    q_.alloc(R * Q * 4, "a sequence's queries");
    k_.alloc(R * KV * 4, "a sequence's keys");
    v_.alloc(R * KV * 4, "a sequence's values");
    attn_.alloc(R * Q * 4, "a sequence's attention output");
    o_.alloc(R * H * 4, "a sequence's projections");
    gate_.alloc(R * F * 4, "a sequence's FFN gate");
    up_.alloc(R * F * 4, "a sequence's FFN up");
    logits_.alloc(static_cast<size_t>(c.vocab) * 4, "a sequence's logits");
    argpart_.alloc(2 * kArgmaxBlocks * 4, "argmax scratch");
    am_.alloc(4, "argmax");
    tok_.alloc(R * 4, "token ids");
    io_.alloc(8, "the decode step's token and position");
    LARQL_CK(cudaMallocHost(&pinned_, 8));
    grow(std::min<int64_t>(limit_, 4096));
  }
  ~CudaSequence() override {
    drop_graph();
    if (pinned_) cudaFreeHost(pinned_);
  }

  void append(const int32_t* tokens, int64_t n) override {
    if (n <= 0) return;
    const ModelConfig& c = m_->config();
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c.vocab)
        throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                                                    std::to_string(c.vocab) + ")");
    if (n_past_ + n > limit_)
      throw Error(ErrorKind::ContextOverflow, std::to_string(n) + " tokens after " + std::to_string(n_past_) +
                                                  " do not fit the sequence's " + std::to_string(limit_) + " positions");
    std::lock_guard<std::mutex> lock(m_->mutex());
    LARQL_CK(cudaSetDevice(m_->ordinal()));
    if (n_past_ + n > alloc_) grow(std::min(limit_, std::max(n_past_ + n, 2 * alloc_)));
    am_valid_ = false;
    if (n == 1) return decode_one(tokens[0]);
    for (int64_t off = 0; off < n; off += kChunk) {
      const int m = static_cast<int>(std::min<int64_t>(kChunk, n - off));
      run_chunk(tokens + off, m);
    }
  }
  int64_t n_past() const override { return n_past_; }
  int64_t capacity() const override { return limit_; }
  void hidden(float* out) override {
    require_ran();
    std::lock_guard<std::mutex> lock(m_->mutex());
    LARQL_CK(cudaMemcpy(out, x_.get<float>() + last_row_ * m_->config().hidden, m_->config().hidden * 4,
                        cudaMemcpyDeviceToHost));
  }
  void logits(float* out) override {
    require_ran();
    std::lock_guard<std::mutex> lock(m_->mutex());
    LARQL_CK(cudaMemcpy(out, logits_.get(), m_->config().vocab * 4, cudaMemcpyDeviceToHost));
  }
  int32_t argmax() override {
    require_ran();
    if (!am_valid_) {
      std::lock_guard<std::mutex> lock(m_->mutex());
      LARQL_CK(cudaMemcpy(&am_host_, am_.get(), 4, cudaMemcpyDeviceToHost));
      am_valid_ = true;
    }
    return am_host_;
  }
  void truncate(int64_t pos) override {
    if (pos < 0 || pos > n_past_)
      throw Error(ErrorKind::InvalidArgument, "truncate: position " + std::to_string(pos) + " is outside [0, " +
                                                  std::to_string(n_past_) + "]");
    n_past_ = pos;  // rows past it are overwritten by the next append
    ran_ = false;
  }
  size_t kv_bytes() const override {
    return static_cast<size_t>(n_past_) * static_cast<size_t>(m_->config().kv_dim()) * 2 * 4 *
           static_cast<size_t>(m_->config().n_layers);
  }

  // decode_batch's access
  CudaModel* model() const { return m_; }
  float* k_layer(size_t li) const { return kc_.get<float>() + li * static_cast<size_t>(alloc_) * m_->config().kv_dim(); }
  float* v_layer(size_t li) const { return vc_.get<float>() + li * static_cast<size_t>(alloc_) * m_->config().kv_dim(); }
  void ensure(int64_t positions) {
    if (positions > alloc_) grow(std::min(limit_, std::max(positions, 2 * alloc_)));
  }
  void after_batch_step(const float* x_row, const float* logits_row, const int32_t* am) {
    const ModelConfig& c = m_->config();
    LARQL_CK(cudaMemcpyAsync(x_.get(), x_row, c.hidden * 4, cudaMemcpyDeviceToDevice, m_->stream()));
    LARQL_CK(cudaMemcpyAsync(logits_.get(), logits_row, c.vocab * 4, cudaMemcpyDeviceToDevice, m_->stream()));
    LARQL_CK(cudaMemcpyAsync(am_.get(), am, 4, cudaMemcpyDeviceToDevice, m_->stream()));
    last_row_ = 0;
    ++n_past_;
    ran_ = true;
    am_valid_ = false;
  }
  void check_token(int32_t t) const {
    if (t < 0 || t >= m_->config().vocab)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                                  std::to_string(m_->config().vocab) + ")");
    if (n_past_ + 1 > limit_)
      throw Error(ErrorKind::ContextOverflow, "a token after " + std::to_string(n_past_) + " does not fit the sequence's " +
                                                  std::to_string(limit_) + " positions");
  }

 private:
  void require_ran() const {
    if (!ran_) throw Error(ErrorKind::InvariantViolation, "the sequence has no last position to read (append first)");
  }

  void grow(int64_t positions) {
    const ModelConfig& c = m_->config();
    const size_t per = static_cast<size_t>(c.kv_dim()) * 4, L = static_cast<size_t>(c.n_layers);
    Buffer nk(L * static_cast<size_t>(positions) * per, "the K cache (" + std::to_string(positions) + " positions)");
    Buffer nv(L * static_cast<size_t>(positions) * per, "the V cache (" + std::to_string(positions) + " positions)");
    if (n_past_ > 0) {
      LARQL_CK(cudaMemcpy2D(nk.get(), positions * per, kc_.get(), alloc_ * per, n_past_ * per, L, cudaMemcpyDeviceToDevice));
      LARQL_CK(cudaMemcpy2D(nv.get(), positions * per, vc_.get(), alloc_ * per, n_past_ * per, L, cudaMemcpyDeviceToDevice));
    }
    kc_ = std::move(nk);
    vc_ = std::move(nv);
    alloc_ = positions;
    splits_ = static_cast<int>((alloc_ + kAttnSplit - 1) / kAttnSplit);
    part_.alloc(static_cast<size_t>(kGemvRows) * c.n_heads * splits_ * (c.head_dim + 2) * 4,
                "attention partials");
    std::vector<float*> ptrs(2 * L);
    for (size_t li = 0; li < L; ++li) {
      ptrs[li] = k_layer(li);
      ptrs[L + li] = v_layer(li);
    }
    ptrs_.alloc(ptrs.size() * sizeof(float*), "K/V layer pointers");
    LARQL_CK(cudaMemcpy(ptrs_.get(), ptrs.data(), ptrs.size() * sizeof(float*), cudaMemcpyHostToDevice));
    drop_graph();
  }

  void drop_graph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }

  CudaModel::Work work() const {
    return CudaModel::Work{x_.get<float>(), h_.get<float>(), q_.get<float>(), k_.get<float>(), v_.get<float>(),
                           attn_.get<float>(), o_.get<float>(), gate_.get<float>(), up_.get<float>(), part_.get<float>(),
                           splits_};
  }

  KvRows rows_at(size_t li, const int32_t* pos) const {
    const size_t L = static_cast<size_t>(m_->config().n_layers);
    float* const* p = ptrs_.get<float*>();
    return KvRows{p + li, p + L + li, pos, 0};
  }

  // n tokens (n > 1) at positions n_past_.. through every layer, then the last row's head.
  void run_chunk(const int32_t* tokens, int n) {
    const ModelConfig& c = m_->config();
    cudaStream_t s = m_->stream();
    pinned_[1] = static_cast<int32_t>(n_past_);
    LARQL_CK(cudaMemcpyAsync(tok_.get(), tokens, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, s));
    LARQL_CK(cudaMemcpyAsync(io_.get<int32_t>() + 1, pinned_ + 1, 4, cudaMemcpyHostToDevice, s));
    const int32_t* pos = io_.get<int32_t>() + 1;
    embed(s, m_embd(), tok_.get<int32_t>(), n, c.embed_scale, x_.get<float>());
    const bool prefill = n > 16;
    m_->run_layers(
        work(), n, [&](size_t li) { return rows_at(li, pos); }, prefill, static_cast<int>(n_past_),
        [&](size_t li) { return std::pair<const float*, const float*>{k_layer(li), v_layer(li)}; });
    const float* last = x_.get<float>() + static_cast<int64_t>(n - 1) * c.hidden;
    m_->head(last, h_.get<float>(), 1, logits_.get<float>(), argpart_.get(), am_.get<int32_t>());
    m_->check_launch("prefill kernels");
    LARQL_CK(cudaStreamSynchronize(s));
    n_past_ += n;
    last_row_ = n - 1;
    ran_ = true;
  }

  // One token: the whole step captured once as a CUDA graph, replayed with the token and the
  // position written to pinned memory the graph's first copy reads.
  void decode_one(int32_t token) {
    cudaStream_t s = m_->stream();
    pinned_[0] = token;
    pinned_[1] = static_cast<int32_t>(n_past_);
    if (!exec_) {
      const ModelConfig& c = m_->config();
      cudaGraph_t graph = nullptr;
      LARQL_CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      cudaMemcpyAsync(io_.get(), pinned_, 8, cudaMemcpyHostToDevice, s);
      const int32_t* pos = io_.get<int32_t>() + 1;
      embed(s, m_embd(), io_.get<int32_t>(), 1, c.embed_scale, x_.get<float>());
      m_->run_layers(
          work(), 1, [&](size_t li) { return rows_at(li, pos); }, false, 0,
          [&](size_t li) { return std::pair<const float*, const float*>{k_layer(li), v_layer(li)}; });
      m_->head(x_.get<float>(), h_.get<float>(), 1, logits_.get<float>(), argpart_.get(), am_.get<int32_t>());
      const cudaError_t e = cudaStreamEndCapture(s, &graph);
      check(e, "capturing the decode step");
      const cudaError_t ie = cudaGraphInstantiate(&exec_, graph, 0);
      cudaGraphDestroy(graph);
      check(ie, "instantiating the decode step's graph");
    }
    LARQL_CK(cudaGraphLaunch(exec_, s));
    LARQL_CK(cudaStreamSynchronize(s));
    ++n_past_;
    last_row_ = 0;
    ran_ = true;
  }

  const DevWeight& m_embd() const;

  CudaModel* m_;
  int64_t limit_;
  int64_t alloc_ = 0, n_past_ = 0, last_row_ = 0;
  int splits_ = 0;
  bool ran_ = false, am_valid_ = false;
  int32_t am_host_ = 0;
  Buffer kc_, vc_, ptrs_, x_, h_, q_, k_, v_, attn_, o_, gate_, up_, part_, logits_, argpart_, am_, tok_, io_;
  int32_t* pinned_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;

  friend class CudaModel;
};

const DevWeight& CudaSequence::m_embd() const { return m_->embd(); }

std::unique_ptr<DeviceSequence> CudaModel::new_sequence(int64_t capacity) {
  if (capacity < 1 || capacity > c_.context_length)
    throw Error(ErrorKind::InvalidArgument, "a sequence of " + std::to_string(capacity) + " positions: must be in [1, " +
                                                std::to_string(c_.context_length) + "]");
  std::lock_guard<std::mutex> lock(mu_);
  LARQL_CK(cudaSetDevice(ordinal_));
  return std::make_unique<CudaSequence>(this, capacity);
}

void CudaModel::decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) {
  std::vector<CudaSequence*> cs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto* s = dynamic_cast<CudaSequence*>(seqs[i]);
    if (s == nullptr || s->model() != this)
      throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " belongs to another model");
    if (std::find(cs.begin(), cs.end(), s) != cs.end())
      throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " appears twice");
    s->check_token(tokens[i]);
    cs.push_back(s);
  }
  if (cs.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  LARQL_CK(cudaSetDevice(ordinal_));
  const size_t H = static_cast<size_t>(c_.hidden), Q = static_cast<size_t>(c_.q_dim()), KV = static_cast<size_t>(c_.kv_dim()),
               F = static_cast<size_t>(c_.ffn), V = static_cast<size_t>(c_.vocab), L = layers_.size(), R = kGemvRows;
  if (!b_x_.get()) {
    b_x_.alloc(R * H * 4, "the batch's residual rows");
    b_h_.alloc(R * H * 4, "the batch's normed rows");
    b_q_.alloc(R * Q * 4, "the batch's queries");
    b_k_.alloc(R * KV * 4, "the batch's keys");
    b_v_.alloc(R * KV * 4, "the batch's values");
    b_attn_.alloc(R * Q * 4, "the batch's attention output");
    b_o_.alloc(R * H * 4, "the batch's projections");
    b_gate_.alloc(R * F * 4, "the batch's FFN rows");
    b_up_.alloc(R * F * 4, "the batch's FFN rows");
    b_logits_.alloc(R * V * 4, "the batch's logits");
    b_arg_.alloc(2 * R * kArgmaxBlocks * 4, "the batch's argmax scratch");
    b_am_.alloc(R * 4, "the batch's argmax");
    b_tok_.alloc(R * 4, "the batch's tokens");
    b_pos_.alloc(R * 4, "the batch's positions");
    b_ptrs_.alloc(2 * L * R * sizeof(float*), "the batch's K/V pointers");
  }
  std::vector<int32_t> am(cs.size());
  for (size_t g0 = 0; g0 < cs.size(); g0 += R) {
    const size_t N = std::min(R, cs.size() - g0);
    int splits = 1;
    std::vector<int32_t> tok(N), pos(N);
    std::vector<float*> ptrs(2 * L * N);
    for (size_t r = 0; r < N; ++r) {
      CudaSequence* s = cs[g0 + r];
      s->ensure(s->n_past() + 1);
      splits = std::max(splits, s->splits_);
      tok[r] = tokens[g0 + r];
      pos[r] = static_cast<int32_t>(s->n_past());
      for (size_t li = 0; li < L; ++li) {
        ptrs[li * N + r] = s->k_layer(li);
        ptrs[L * N + li * N + r] = s->v_layer(li);
      }
    }
    const size_t part_bytes = N * static_cast<size_t>(c_.n_heads) * static_cast<size_t>(splits) * (c_.head_dim + 2) * 4;
    if (b_part_.bytes() < part_bytes) b_part_.alloc(part_bytes, "the batch's attention partials");
    LARQL_CK(cudaMemcpy(b_tok_.get(), tok.data(), N * 4, cudaMemcpyHostToDevice));
    LARQL_CK(cudaMemcpy(b_pos_.get(), pos.data(), N * 4, cudaMemcpyHostToDevice));
    LARQL_CK(cudaMemcpy(b_ptrs_.get(), ptrs.data(), ptrs.size() * sizeof(float*), cudaMemcpyHostToDevice));
    const int n = static_cast<int>(N);
    embed(stream_, embd_, b_tok_.get<int32_t>(), n, c_.embed_scale, b_x_.get<float>());
    float* const* p = b_ptrs_.get<float*>();
    const Work w{b_x_.get<float>(), b_h_.get<float>(), b_q_.get<float>(), b_k_.get<float>(), b_v_.get<float>(),
                 b_attn_.get<float>(), b_o_.get<float>(), b_gate_.get<float>(), b_up_.get<float>(),
                 b_part_.get<float>(), splits};
    run_layers(
        w, n, [&](size_t li) { return KvRows{p + li * N, p + L * N + li * N, b_pos_.get<int32_t>(), 1}; }, false, 0,
        [](size_t) { return std::pair<const float*, const float*>{nullptr, nullptr}; });
    head(b_x_.get<float>(), b_h_.get<float>(), n, b_logits_.get<float>(), b_arg_.get(), b_am_.get<int32_t>());
    check_launch("batched decode kernels");
    for (size_t r = 0; r < N; ++r)
      cs[g0 + r]->after_batch_step(b_x_.get<float>() + r * H, b_logits_.get<float>() + r * V, b_am_.get<int32_t>() + r);
    LARQL_CK(cudaMemcpyAsync(am.data() + g0, b_am_.get(), N * 4, cudaMemcpyDeviceToHost, stream_));
    LARQL_CK(cudaStreamSynchronize(stream_));
  }
  if (argmax_out != nullptr) std::copy(am.begin(), am.end(), argmax_out);
}

}  // namespace

std::shared_ptr<DeviceModel> open_model(std::shared_ptr<const Model> model, int ordinal) {
  if (!model) throw Error(ErrorKind::InvalidArgument, "cuda::open_model: no model");
  return std::make_shared<CudaModel>(std::move(model), ordinal);
}

}  // namespace larql::cuda
