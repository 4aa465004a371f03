#include "util/profile.h"

#include <atomic>

namespace larql::profile {
namespace {

std::atomic<bool> g_enabled{false};
Totals g_totals;

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
void reset() { g_totals = Totals{}; }
Totals totals() { return g_totals; }

void add(Stage s, double seconds) {
  g_totals.seconds[static_cast<int>(s)] += seconds;
  g_totals.calls[static_cast<int>(s)] += 1;
}

}  // namespace larql::profile
