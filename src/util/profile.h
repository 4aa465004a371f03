// Stage timers for `--profile`: where a step's time goes (embed, K/V derivation, attention,
// FFN, codecs, lm_head). Off by default; when off a Scope costs one branch.
// Timed from the calling thread only (the work inside a stage may fan out to the pool).
// Counters are per thread (each thread writes only its own, as relaxed atomics) and summed on
// read, so threads that time stages at once (several sequences) neither race nor lose counts.
#pragma once

#include <chrono>
#include <cstdint>

namespace larql::profile {

enum class Stage : int { Embed, Qkv, Attention, AttnOut, Ffn, Codec, LmHead, kCount };
inline constexpr int kStages = static_cast<int>(Stage::kCount);

const char* stage_name(Stage s);
/// e.g. "K/V (and Q) derivation: norm, projections, q/k-norm, RoPE".
const char* stage_description(Stage s);

void set_enabled(bool on);
bool enabled();
/// Zero every thread's counters (a count added by another thread at the same moment may survive).
void reset();

struct Totals {
  double seconds[kStages] = {};
  int64_t calls[kStages] = {};
};
/// The sum over every thread that has added since the last reset(), live or exited.
Totals totals();

/// Add one call of `seconds` to stage s, on the calling thread's counters.
void add(Stage s, double seconds);

/// Times its lifetime into `s` when profiling is enabled.
class Scope {
 public:
  explicit Scope(Stage s) : stage_(s), on_(enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (on_) add(stage_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Stage stage_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace larql::profile
