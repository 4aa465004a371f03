#include "util/profile.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace larql::profile {
namespace {

std::atomic<bool> g_enabled{false};

/// One thread's counters. Written only by their thread (relaxed load + store, no RMW needed),
/// read by totals() from any thread: atomics, so TSan-clean without a lock on the hot path.
struct Counters {
  std::atomic<double> seconds[kStages] = {};
  std::atomic<int64_t> calls[kStages] = {};
};

/// Every live thread's counters, and the sum left by threads that have exited.
struct Registry {
  std::mutex mu;
  std::vector<Counters*> live;
  Totals retired;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may exit during static teardown
  return *r;
}

void accumulate(Totals& t, const Counters& c) {
  for (int i = 0; i < kStages; ++i) {
    t.seconds[i] += c.seconds[i].load(std::memory_order_relaxed);
    t.calls[i] += c.calls[i].load(std::memory_order_relaxed);
  }
}

/// The calling thread's counters, registered on first use and folded into `retired` at exit.
struct ThreadSlot {
  Counters c;
  ThreadSlot() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.push_back(&c);
  }
  ~ThreadSlot() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    accumulate(r.retired, c);
    std::erase(r.live, &c);
  }
};
Counters& mine() {
  thread_local ThreadSlot slot;
  return slot.c;
}

}  // namespace

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::Embed: return "embed";
    case Stage::Qkv: return "qkv";
    case Stage::Attention: return "attention";
    case Stage::AttnOut: return "attn_out";
    case Stage::Ffn: return "ffn";
    case Stage::Codec: return "codec";
    case Stage::LmHead: return "lm_head";
    case Stage::kCount: break;
  }
  return "?";
}

const char* stage_description(Stage s) {
  switch (s) {
    case Stage::Embed: return "token embedding lookup and scaling";
    case Stage::Qkv: return "K/V (and Q) derivation: input norm, projections, q/k-norm, RoPE";
    case Stage::Attention: return "scores, softmax and the weighted sum of V";
    case Stage::AttnOut: return "output projection, post-attention norm, residual add";
    case Stage::Ffn: return "pre-FFN norm, gate/up, GELU, down, post-FFN norm, residual add";
    case Stage::Codec: return "engine codecs: encode/decode of compressed state";
    case Stage::LmHead: return "final norm and lm_head";
    case Stage::kCount: break;
  }
  return "";
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.retired = Totals{};
  for (Counters* c : r.live)
    for (int i = 0; i < kStages; ++i) {
      c->seconds[i].store(0.0, std::memory_order_relaxed);
      c->calls[i].store(0, std::memory_order_relaxed);
    }
}

Totals totals() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Totals t = r.retired;
  for (const Counters* c : r.live) accumulate(t, *c);
  return t;
}

void add(Stage s, double seconds) {
  Counters& c = mine();
  const int i = static_cast<int>(s);
  c.seconds[i].store(c.seconds[i].load(std::memory_order_relaxed) + seconds, std::memory_order_relaxed);
  c.calls[i].store(c.calls[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace larql::profile
