// AVX2 / AVX-VNNI loops for compute/roofline.h (only called after the CPUID checks there).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace larql::compute::detail {

uint64_t stream_sum_avx2(const uint8_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
  const auto* v = reinterpret_cast<const __m256i*>(p);
  for (size_t i = 0; i < n / 32; i += 4) {
    s0 = _mm256_add_epi8(s0, _mm256_add_epi8(_mm256_loadu_si256(v + i), _mm256_loadu_si256(v + i + 1)));
    s1 = _mm256_add_epi8(s1, _mm256_add_epi8(_mm256_loadu_si256(v + i + 2), _mm256_loadu_si256(v + i + 3)));
  }
  const __m256i s = _mm256_sad_epu8(_mm256_add_epi8(s0, s1), _mm256_setzero_si256());
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                               _mm256_extract_epi64(s, 3));
}

namespace {
template <typename Step>
inline int64_t run12(int64_t iters, Step step) {
  __m256i acc[12];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    __m256i ai = a;
    asm volatile("" : "+x"(ai));  // opaque each round: the products cannot be hoisted
    for (auto& x : acc) x = step(x, ai, b);
  }
  __m256i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_epi32(s, acc[k]);
  return _mm256_extract_epi32(s, 0);
}
}  // namespace

int64_t int8_loop_avx2(int64_t iters) {
  const __m256i ones = _mm256_set1_epi16(1);
  return run12(iters, [&](__m256i x, __m256i a, __m256i b) {
    return _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
  });
}

__attribute__((target("avxvnni"))) int64_t int8_loop_avxvnni(int64_t iters) {
  __m256i acc[12];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    __m256i ai = a;
    asm volatile("" : "+x"(ai));
    for (auto& x : acc) x = _mm256_dpbusd_avx_epi32(x, ai, b);
  }
  __m256i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_epi32(s, acc[k]);
  return _mm256_extract_epi32(s, 0);
}

__attribute__((target("avx512f,avx512vnni"))) int64_t int8_loop_avx512vnni(int64_t iters) {
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    __m512i ai = a;
    asm volatile("" : "+v"(ai));
    for (auto& x : acc) x = _mm512_dpbusd_epi32(x, ai, b);
  }
  __m512i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_epi32(s, acc[k]);
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(s));
}

}  // namespace larql::compute::detail
