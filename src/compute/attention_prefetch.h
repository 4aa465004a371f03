// Internal to compute/: the K/V prefetch of the attend_chunk kernels (attention_avx2.cc,
// attention_avx512.cc). In an anonymous namespace: each kernel file, compiled for its own ISA,
// keeps its own copy (the linker must never pick the AVX-512 file's copy for the AVX2 one).
//
// Decode reads a layer's K/V rows from memory (the weights streamed since its last visit evict
// them), and the kernels' access (several rows side by side, then V in slices of each row) is
// not a pattern the hardware prefetchers follow well: 6-7 GB/s on one AMD Zen 4 core
// (bench/kernels_bench.cc AttentionCold, 4 heads over 512-1024 rows). So while the scores of key
// j are computed, K row j + kAhead is prefetched to L1 and V row j to L2 (the p.v pass reads it
// after the chunk's scores): 8-12 GB/s there, the same speed when the rows are in cache. The
// last rows' look-ahead falls in the next chunk (or past the buffer: the address is formed as an
// integer, and a prefetch never faults).
#pragma once

#include <cstdint>

namespace larql::compute::detail {
namespace {

constexpr int64_t kAhead = 8;

// kLocality as __builtin_prefetch's: 3 = prefetcht0 (to L1), 2 = prefetcht1 (to L2).
template <int kLocality>
inline void prefetch_row(const float* base, int64_t row, int64_t stride, int64_t n) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(row * stride) * sizeof(float);
  for (int64_t i = 0; i < n; i += 16)
    __builtin_prefetch(reinterpret_cast<const char*>(p + static_cast<uintptr_t>(i) * sizeof(float)), 0, kLocality);
}

inline void prefetch_key(const float* k, const float* v, int64_t stride, int64_t hd, int64_t j) {
  prefetch_row<3>(k, j + kAhead, stride, hd);
  prefetch_row<2>(v, j, stride, hd);
}

}  // namespace
}  // namespace larql::compute::detail
