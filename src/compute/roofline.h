// Machine limits for `larql bench --roofline`: streaming read bandwidth and the int8
// dot-product peak, measured with the threads of a pool.
#pragma once

#include <cstddef>
#include <string>

#include "util/thread_pool.h"

namespace larql::compute {

/// Read bandwidth in bytes/s: every thread of `pool` streams its contiguous share of a
/// `bytes`-byte buffer (allocated and touched first, so page faults are not timed), summing it
/// with SIMD loads; the best of `repeats` passes. The buffer should exceed the last-level cache
/// (decode reads ~250 MB per token from a memory-mapped file). Errors: none (std::bad_alloc).
double read_bandwidth(ThreadPool& pool, size_t bytes = size_t{512} << 20, int repeats = 3);

struct Int8Peak {
  double ops_per_s = 0;  ///< 2 ops per int8 multiply-add, all threads together
  std::string isa;       ///< the tiled kernels' variant (quant::gemm_isa_name()) or "scalar"
};
/// The int8 multiply-add peak of the instruction the tiled kernels use now (512-bit or 256-bit
/// dpbusd, or AVX2 maddubs + madd), measured with a register-only loop (12 independent
/// accumulators) on every thread of `pool` for about `seconds`.
Int8Peak int8_peak(ThreadPool& pool, double seconds = 0.2);

}  // namespace larql::compute
