#include "kv/turbo_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "quant/quant.h"
#include "util/error.h"

namespace larql::turbo {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Signs for the first kMaxSigns coordinates, computed once.
constexpr int64_t kMaxSigns = 1 << 16;
const std::vector<float>& sign_table() {
  static const std::vector<float> t = [] {
    std::vector<float> s(static_cast<size_t>(kMaxSigns));
    uint64_t state = kSignSeed;
    for (auto& x : s) x = (splitmix64(state) >> 63) ? -1.0f : 1.0f;
    return s;
  }();
  return t;
}

/// Gains tried by Codec::encode (1 = the plain Lloyd–Max codebook).
constexpr float kScaleSearch[] = {0.8f, 0.85f, 0.9f, 0.95f, 1.0f, 1.05f, 1.1f, 1.15f, 1.2f, 1.3f, 1.4f};

bool is_pow2(int64_t d) { return d >= 2 && (d & (d - 1)) == 0; }

double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
/// Φ(b) − Φ(a), accurate in both tails.
double mass(double a, double b) { return 0.5 * (std::erfc(a / std::sqrt(2.0)) - std::erfc(b / std::sqrt(2.0))); }

}  // namespace

bool sign_negated(int64_t i) { return sign_table()[static_cast<size_t>(i)] < 0; }

void wht(float* x, int64_t d) {
  for (int64_t h = 1; h < d; h *= 2)
    for (int64_t i = 0; i < d; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t i = 0; i < d; ++i) x[i] *= s;
}

void rotate(float* x, int64_t d) {
  const float* s = sign_table().data();
  for (int64_t i = 0; i < d; ++i) x[i] *= s[i];
  wht(x, d);
  for (int64_t i = 0; i < d; ++i) x[i] *= s[i];
}

Codebook lloyd_max_gaussian(int bits) {
  if (bits < 1 || bits > 8) throw Error(ErrorKind::InvalidArgument, "lloyd_max_gaussian: bits must be 1..8");
  const int n = 1 << bits;
  Codebook cb;
  cb.bits = bits;
  cb.levels.resize(static_cast<size_t>(n));
  cb.boundaries.resize(static_cast<size_t>(n - 1));
  const double span = 1.0 + 0.5 * bits;  // a rough outer level; Lloyd moves it to the optimum
  for (int i = 0; i < n; ++i) cb.levels[static_cast<size_t>(i)] = n == 1 ? 0.0 : -span + 2.0 * span * i / (n - 1);
  for (int it = 0; it < 20000; ++it) {
    for (int i = 0; i + 1 < n; ++i)
      cb.boundaries[static_cast<size_t>(i)] = 0.5 * (cb.levels[static_cast<size_t>(i)] + cb.levels[static_cast<size_t>(i) + 1]);
    double moved = 0;
    for (int i = 0; i < n; ++i) {
      const double a = i == 0 ? -INFINITY : cb.boundaries[static_cast<size_t>(i) - 1];
      const double b = i == n - 1 ? INFINITY : cb.boundaries[static_cast<size_t>(i)];
      const double m = mass(a, b);
      const double first_moment = (std::isinf(a) ? 0.0 : phi(a)) - (std::isinf(b) ? 0.0 : phi(b));
      const double c = m > 0 ? first_moment / m : cb.levels[static_cast<size_t>(i)];
      moved = std::max(moved, std::fabs(c - cb.levels[static_cast<size_t>(i)]));
      cb.levels[static_cast<size_t>(i)] = c;
    }
    if (moved <= 1e-12) break;
  }
  for (int i = 0; i + 1 < n; ++i)
    cb.boundaries[static_cast<size_t>(i)] = 0.5 * (cb.levels[static_cast<size_t>(i)] + cb.levels[static_cast<size_t>(i) + 1]);
  return cb;
}

void pack_indices(const uint8_t* idx, int64_t n, int bits, uint8_t* out) {
  std::memset(out, 0, packed_bytes(n, bits));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const uint32_t v = static_cast<uint32_t>(idx[i]) << (bit & 7);
    out[bit >> 3] |= static_cast<uint8_t>(v);
    if ((bit & 7) + bits > 8) out[(bit >> 3) + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

void unpack_indices(const uint8_t* in, int64_t n, int bits, uint8_t* idx) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    uint32_t v = in[bit >> 3];
    if ((bit & 7) + bits > 8) v |= static_cast<uint32_t>(in[(bit >> 3) + 1]) << 8;
    idx[i] = static_cast<uint8_t>((v >> (bit & 7)) & mask);
  }
}

Codec::Codec(int64_t d, int bits) : d_(d), bits_(bits) {
  if (!is_pow2(d) || d > kMaxSigns)
    throw Error(ErrorKind::InvalidArgument, "turbo-quant codec: vector length " + std::to_string(d) +
                                                " is not a power of two in [2, 65536]");
  if (bits != 3 && bits != 4)
    throw Error(ErrorKind::InvalidArgument, "turbo-quant codec: bits = " + std::to_string(bits) + " (accepted: 3, 4)");
  bytes_ = 4 + packed_bytes(d, bits);
  // Cached per bit width: the iteration is deterministic, so every Codec gets the same levels.
  static const Codebook cb3 = lloyd_max_gaussian(3), cb4 = lloyd_max_gaussian(4);
  const Codebook& cb = bits == 3 ? cb3 : cb4;
  const double sigma = 1.0 / std::sqrt(static_cast<double>(d));
  for (double l : cb.levels) levels_.push_back(static_cast<float>(l * sigma));
  for (double b : cb.boundaries) bounds_.push_back(static_cast<float>(b * sigma));
}

void Codec::encode(const float* x, uint8_t* out) const {
  // Not profiled here: callers run it on pool threads and time the stage from their own thread.
  thread_local std::vector<float> u;
  thread_local std::vector<uint8_t> idx;
  u.resize(static_cast<size_t>(d_));
  idx.resize(static_cast<size_t>(d_));
  double ss = 0;
  for (int64_t i = 0; i < d_; ++i) ss += static_cast<double>(x[i]) * x[i];
  float norm = static_cast<float>(std::sqrt(ss));
  if (!(norm >= 1e-30f)) norm = 0.0f;  // zero (or NaN) vector: decodes to zeros
  const float inv = norm > 0 ? 1.0f / norm : 0.0f;
  for (int64_t i = 0; i < d_; ++i) u[static_cast<size_t>(i)] = x[i] * inv;
  rotate(u.data(), d_);
  // Scale search: quantise u / s for a few gains s and keep the indices whose levels point
  // closest to u (highest cosine). A row whose rotated coordinates are not quite N(0, 1/D) —
  // heavier tails, or flatter — is served by a stretched or shrunk codebook. The stored norm is
  // then the least-squares gain ‖x‖·<u, L>/<L, L> for the chosen levels L, so the decoded vector
  // is the closest multiple of L to x.
  thread_local std::vector<int32_t> cnt;
  cnt.resize(static_cast<size_t>(d_));
  const auto nb = static_cast<int64_t>(bounds_.size());
  double best_cos = -2, best_dot = 0, best_ll = 0;
  for (const float s : kScaleSearch) {
    // index = number of boundaries <= u/s = number of (s * boundary) <= u; boundary-major so the
    // inner loop is a branch-free compare over the whole vector (vectorised).
    std::fill(cnt.begin(), cnt.end(), 0);
    for (int64_t j = 0; j < nb; ++j) {
      const float b = bounds_[static_cast<size_t>(j)] * s;
      for (int64_t i = 0; i < d_; ++i) cnt[static_cast<size_t>(i)] += u[static_cast<size_t>(i)] >= b ? 1 : 0;
    }
    double dot = 0, ll = 0;
    for (int64_t i = 0; i < d_; ++i) {
      const double l = levels_[static_cast<size_t>(cnt[static_cast<size_t>(i)])];
      dot += l * u[static_cast<size_t>(i)];
      ll += l * l;
    }
    const double cos = ll > 0 ? dot / std::sqrt(ll) : -1;  // ‖u‖ = 1
    if (cos > best_cos) {
      best_cos = cos;
      best_dot = dot;
      best_ll = ll;
      for (int64_t i = 0; i < d_; ++i) idx[static_cast<size_t>(i)] = static_cast<uint8_t>(cnt[static_cast<size_t>(i)]);
    }
  }
  if (norm > 0 && best_ll > 0) norm = static_cast<float>(norm * best_dot / best_ll);
  std::memcpy(out, &norm, 4);
  pack_indices(idx.data(), d_, bits_, out + 4);
}

#if defined(__x86_64__)
namespace {

/// 4-bit rows with AVX2: 8 code bytes -> 16 floats per iteration. The 16 scaled levels sit in
/// two registers; vpermps picks within each by the low 3 bits and a blend by bit 3 chooses the
/// register, then the low/high nibbles are interleaved back into coordinate order. Pure table
/// lookups: bit-identical to the scalar loop.
__attribute__((target("avx2"))) void decode4_avx2(const uint8_t* p, const float* lv, int64_t d, float* y) {
  const __m256 t0 = _mm256_loadu_ps(lv), t1 = _mm256_loadu_ps(lv + 8);
  const __m256i fifteen = _mm256_set1_epi32(15), seven = _mm256_set1_epi32(7);
  for (int64_t i = 0; i < d / 2; i += 8) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)));
    const __m256i lo = _mm256_and_si256(b, fifteen), hi = _mm256_srli_epi32(b, 4);
    const __m256 vlo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, lo), _mm256_permutevar8x32_ps(t1, lo),
                                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(lo, seven)));
    const __m256 vhi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, hi), _mm256_permutevar8x32_ps(t1, hi),
                                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(hi, seven)));
    const __m256 a = _mm256_unpacklo_ps(vlo, vhi), c = _mm256_unpackhi_ps(vlo, vhi);
    _mm256_storeu_ps(y + 2 * i, _mm256_permute2f128_ps(a, c, 0x20));
    _mm256_storeu_ps(y + 2 * i + 8, _mm256_permute2f128_ps(a, c, 0x31));
  }
}

// 3 bits: eight indices per three bytes (index j of a group at bits 3j..3j+2 of the 24-bit
// little-endian word). The group's word goes to all 8 lanes, a per-lane shift and mask give the
// indices, and the 8 levels fit one register: one permute is the table lookup.
__attribute__((target("avx2"))) void decode3_avx2(const uint8_t* p, const float* lv, int64_t d, float* y) {
  const __m256 t = _mm256_loadu_ps(lv);
  const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21), seven = _mm256_set1_epi32(7);
  for (int64_t g = 0; g < d / 8; ++g) {
    const uint8_t* q = p + 3 * g;
    const uint32_t w = q[0] | (static_cast<uint32_t>(q[1]) << 8) | (static_cast<uint32_t>(q[2]) << 16);
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts), seven);
    _mm256_storeu_ps(y + 8 * g, _mm256_permutevar8x32_ps(t, idx));
  }
}

}  // namespace
#endif

bool Codec::simd_decode() const {
#if defined(__x86_64__)
  // The one ISA selection (quant::active_isa()), read at each call like every kernel family.
  return ((bits_ == 4 && d_ % 16 == 0) || (bits_ == 3 && d_ % 8 == 0)) && use_simd_ &&
         quant::active_isa() >= quant::Isa::AVX2;
#else
  return false;
#endif
}

const char* Codec::decode_variant() const { return simd_decode() ? "avx2" : "scalar"; }

void Codec::decode_rotated(const uint8_t* in, float* y) const {
  // Not profiled here: it runs per row inside attention (see TurboQuantEngine::layer_step).
#if defined(__x86_64__)
  if (simd_decode()) {
    float norm;
    std::memcpy(&norm, in, 4);
    float lv[16];
    for (size_t i = 0; i < levels_.size(); ++i) lv[i] = levels_[i] * norm;
    if (bits_ == 4) {
      decode4_avx2(in + 4, lv, d_, y);
    } else {
      decode3_avx2(in + 4, lv, d_, y);
    }
    return;
  }
#endif
  float norm;
  std::memcpy(&norm, in, 4);
  const uint8_t* p = in + 4;
  float lv[16];
  for (size_t i = 0; i < levels_.size(); ++i) lv[i] = levels_[i] * norm;
  if (bits_ == 4) {
    for (int64_t i = 0; i < d_ / 2; ++i) {
      y[2 * i] = lv[p[i] & 15];
      y[2 * i + 1] = lv[p[i] >> 4];
    }
  } else if (d_ % 8 == 0) {  // 3 bits: eight indices per three bytes
    for (int64_t g = 0; g < d_ / 8; ++g) {
      const uint32_t w = p[3 * g] | (static_cast<uint32_t>(p[3 * g + 1]) << 8) | (static_cast<uint32_t>(p[3 * g + 2]) << 16);
      for (int j = 0; j < 8; ++j) y[8 * g + j] = lv[(w >> (3 * j)) & 7];
    }
  } else {
    thread_local std::vector<uint8_t> idx;
    idx.resize(static_cast<size_t>(d_));
    unpack_indices(p, d_, bits_, idx.data());
    for (int64_t i = 0; i < d_; ++i) y[i] = lv[idx[static_cast<size_t>(i)]];
  }
}

void Codec::decode(const uint8_t* in, float* x) const {
  decode_rotated(in, x);
  rotate(x, d_);
}

}  // namespace larql::turbo
