// The turbo-quant vector codec (docs/engines.md "turbo-quant"): a vector x of length D
// (a power of two; one attention head) is stored as an f32 gain (about its norm) plus one b-bit index per
// coordinate of the rotated unit vector R·x/‖x‖, where R is a randomised, orthonormal
// Walsh–Hadamard transform and the indices select Lloyd–Max levels for N(0, 1/D).
//
// Why this works: for a unit vector u, the coordinates of R·u are close to i.i.d. N(0, 1/D)
// whatever u looked like (the sign flips spread every input direction over all coordinates), so
// one fixed scalar codebook, optimal for that Gaussian, serves every vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace larql::turbo {

/// The ±1 diagonal of the rotation: coordinate i is negated iff the top bit of splitmix64 output
/// number i from the fixed seed kSignSeed is 1 (Steele et al. 2014, "Fast splittable
/// pseudorandom number generators"; state += 0x9E3779B97F4A7C15 then the standard mix).
inline constexpr uint64_t kSignSeed = 0x7475726271756174ull;  // "turbquat"
/// True if coordinate i is negated (the first 16: see turbo_quant_test.cc).
bool sign_negated(int64_t i);

/// In-place normalised Walsh–Hadamard transform: H·x/√d with H the Sylvester-ordered ±1 matrix
/// (log₂d butterfly stages (a, b) → (a+b, a−b) with half-sizes 1, 2, 4, ...). Orthonormal and
/// symmetric, hence self-inverse. d must be a power of two.
void wht(float* x, int64_t d);

/// In-place rotation R·x with R = S·H·S/√d (S the sign diagonal above). Orthonormal, symmetric
/// and self-inverse (R·R = I), so the same call undoes it. d must be a power of two.
void rotate(float* x, int64_t d);

/// A scalar quantiser: `levels` increasing (2^bits of them), `boundaries` the midpoints between
/// neighbours (2^bits − 1). A value's index = the number of boundaries ≤ it.
struct Codebook {
  int bits = 0;
  std::vector<double> levels;
  std::vector<double> boundaries;
};

/// The Lloyd–Max quantiser for the unit Gaussian N(0, 1) with 2^bits levels (bits in 1..8).
/// Method: start from levels evenly spaced on [−2.5, 2.5] (scaled for the count) and iterate
/// Lloyd's two conditions until no level moves by more than 1e-12 (at most 20,000 iterations):
/// boundaries = midpoints of neighbouring levels; level = E[X | X in its cell], where the
/// integrals ∫φ and ∫xφ over the cell are evaluated in closed form (Φ via std::erfc, and
/// ∫_a^b xφ(x)dx = φ(a) − φ(b)), so the result is deterministic to double precision.
Codebook lloyd_max_gaussian(int bits);

/// Bytes that n indices of `bits` bits occupy packed: ceil(n·bits / 8).
inline size_t packed_bytes(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

/// Bit packing: index i occupies bits [bits·i, bits·(i+1)) of a little-endian bit stream (for
/// 4 bits: two per byte, the first in the low nibble; for 3 bits: eight per three bytes as one
/// little-endian 24-bit word, index j at bits 3j..3j+2). Unused tail bits are zero.
/// idx values must be < 2^bits.
void pack_indices(const uint8_t* idx, int64_t n, int bits, uint8_t* out);
void unpack_indices(const uint8_t* in, int64_t n, int bits, uint8_t* idx);

/// The codec for vectors of length d (power of two, ≥ 2) at 3 or 4 bits.
/// Encoded layout per vector: an f32 gain g (4 bytes, little-endian), then packed indices.
/// Encoding quantises u = R·x/‖x‖ against the levels stretched by each gain s of a small search
/// (0.8..1.4) and keeps the indices whose levels L point closest to u; g = ‖x‖·<u, L>/<L, L>
/// (the least-squares scale, close to ‖x‖), so decode(x) = g·R·L is the nearest multiple of R·L
/// to x. The search lifts the worst rows of the real model's K/V from cosine 0.986 to 0.992
/// (4-bit).
class Codec {
 public:
  /// Errors: Error{InvalidArgument} if d is not a power of two ≥ 2 or bits is not 3 or 4.
  Codec(int64_t d, int bits);
  int64_t dim() const { return d_; }
  int bits() const { return bits_; }
  /// 4 + packed_bytes(d, bits): 132 for d=256 at 4 bits, 100 at 3 bits.
  size_t bytes_per_vector() const { return bytes_; }
  /// Levels for this d: the unit-Gaussian Lloyd–Max levels times 1/√d (2^bits floats).
  const std::vector<float>& levels() const { return levels_; }
  const std::vector<float>& boundaries() const { return bounds_; }

  /// Encode x [d] into out [bytes_per_vector()]. A zero (or < 1e-30) vector stores norm 0.
  void encode(const float* x, uint8_t* out) const;
  /// x [d] = g · R · levels[idx] (the original domain).
  void decode(const uint8_t* in, float* x) const;
  /// y [d] = g · levels[idx] (the rotated domain: R·decode). Dot products and weighted sums
  /// can be taken here, since R is orthonormal: a·b = (R a)·(R b).
  void decode_rotated(const uint8_t* in, float* y) const;
  /// Use the AVX2 decoders (3 and 4 bits) when the active ISA allows it (quant::active_isa() >= AVX2,
  /// the one selection all kernel families read; default true); false forces the scalar loop
  /// (tests compare the two, which must agree bit for bit).
  void set_simd(bool on) { use_simd_ = on; }
  /// The decoder decode_rotated runs now: "avx2" (4 bits with d % 16 == 0 or 3 bits with
  /// d % 8 == 0, active ISA >= AVX2, set_simd(true)) or "scalar".
  const char* decode_variant() const;

 private:
  bool simd_decode() const;
  int64_t d_;
  int bits_;
  size_t bytes_;
  std::vector<float> levels_, bounds_;
  bool use_simd_ = true;
};

}  // namespace larql::turbo
