#include "compute/roofline.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <cstdlib>
#include <memory>
#include <vector>

#include <sys/mman.h>

#include "quant/gemm.h"
#include "quant/quant.h"

namespace larql::compute {

namespace detail {
// roofline_avx2.cc: sum of n bytes (n a multiple of 128), and `iters` rounds of 12 accumulators.
uint64_t stream_sum_avx2(const uint8_t* p, size_t n);
int64_t int8_loop_avx2(int64_t iters);     // returns a value depending on every accumulator
int64_t int8_loop_avxvnni(int64_t iters);
int64_t int8_loop_avx512vnni(int64_t iters);  // 64 multiply-adds per instruction
constexpr int64_t kInt8MacsPerIter = 12 * 32;  // 12 accumulators x 32 multiply-adds (256-bit)
}  // namespace detail

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t stream_sum(const uint8_t* p, size_t n) {
  if (quant::active_isa() >= quant::Isa::AVX2) return detail::stream_sum_avx2(p, n);
  uint64_t s = 0;
  for (size_t i = 0; i < n; i += 64) s += p[i];
  return s;
}

}  // namespace

double read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  bytes = bytes / 4096 * 4096;
  // 2 MiB-aligned and advised for huge pages, as the weight mappings are (util/mmap.cc): the
  // bound must not be lowered by TLB misses the decode step does not pay.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<uint8_t, void (*)(void*)> mem(static_cast<uint8_t*>(std::aligned_alloc(kHuge, alloc)), std::free);
  if (!mem) throw std::bad_alloc();
  (void)::madvise(mem.get(), alloc, MADV_HUGEPAGE);  // advice: ignored where THP is off
  struct {
    uint8_t* p;
    uint8_t* data() const { return p; }
  } buf{mem.get()};
  const int64_t chunks = static_cast<int64_t>(bytes / 4096);
  // Touch every page from the threads that will read it (first-touch placement).
  pool.parallel_for(chunks, [&](int64_t b, int64_t e) { std::memset(buf.data() + b * 4096, 1, (e - b) * 4096); });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_s();
    pool.parallel_for(chunks, [&](int64_t b, int64_t e) {
      sink += stream_sum(buf.data() + b * 4096, static_cast<size_t>(e - b) * 4096);
    });
    const double dt = now_s() - t0;
    if (dt > 0) best = std::max(best, static_cast<double>(bytes) / dt);
  }
  if (sink.load() == 1) std::memset(buf.data(), 0, 1);  // keep the sums alive
  return best;
}

Int8Peak int8_peak(ThreadPool& pool, double seconds) {
  Int8Peak out;
  int64_t (*loop)(int64_t) = nullptr;
  int64_t macs_per_iter = detail::kInt8MacsPerIter;
  const std::string variant = quant::gemm_isa_name();  // the tiled kernels' instruction
  if (variant == "avx512-vnni") {
    loop = detail::int8_loop_avx512vnni;
    macs_per_iter *= 2;
  } else if (variant == "avx-vnni") {
    loop = detail::int8_loop_avxvnni;
  } else if (variant == "avx2") {
    loop = detail::int8_loop_avx2;
  }
  if (loop != nullptr) out.isa = variant;
  if (loop == nullptr) {
    out.isa = "scalar";
    return out;
  }
  // Calibrate on one thread, then time every thread running the same count.
  int64_t iters = 1 << 16;
  for (;;) {
    const double t0 = now_s();
    (void)loop(iters);
    if (now_s() - t0 > seconds / 4 || iters > (int64_t{1} << 40)) break;
    iters *= 2;
  }
  std::atomic<int64_t> sink{0};
  const int n = pool.size();
  const double t0 = now_s();
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sink += loop(iters);
  });
  const double dt = now_s() - t0;
  out.ops_per_s = 2.0 * static_cast<double>(macs_per_iter) * static_cast<double>(iters) * n / dt;
  if (sink.load() == 42) out.ops_per_s += 0;  // keep the loops alive
  return out;
}

}  // namespace larql::compute
