#include "kv/generate.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace larql {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Longest suffix of `text` that is a proper prefix of some stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > best; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

}  // namespace

std::vector<int32_t> eog_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  for (const char* name : {"<end_of_turn>", "<eot>", "<|eot_id|>", "<|im_end|>"})
    if (auto id = tok.find_token(name)) ids.push_back(*id);
  return ids;
}

GenerateResult generate(Engine& engine, Forward& forward, const Tokenizer& tok,
                        const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<void(std::string_view)>& on_text) {
  GenerateResult r;
  r.prompt_ids = prompt;
  Sampler sampler(opt.sampler);
  const int64_t vocab = forward.config().vocab;
  const int64_t ctx = opt.context_limit > 0 ? std::min(opt.context_limit, forward.config().context_length)
                                           : forward.config().context_length;
  const std::vector<int32_t> eog = eog_ids(tok);
  std::vector<int32_t> history = prompt;
  std::vector<float> logits(static_cast<size_t>(vocab));

  double t0 = now_s();
  std::vector<float> h;
  if (opt.continue_sequence && engine.n_past() > 0) {
    if (prompt.empty()) throw Error(ErrorKind::EmptyPrompt, "generate: nothing to continue with");
    for (int32_t id : prompt) h = engine.decode_step(id);
    r.prefill_tokens = static_cast<int64_t>(prompt.size());
  } else {
    h = engine.prefill(prompt);
    r.prefill_tokens = engine.n_past();
  }
  if (engine.n_past() > ctx)
    throw Error(ErrorKind::ContextOverflow, "the engine's context is " + std::to_string(engine.n_past()) +
                                                " tokens after the prompt, more than the " + std::to_string(ctx) + " allowed");
  forward.logits(h.data(), 1, logits.data());
  r.prefill_seconds = now_s() - t0;

  StreamDecoder dec(tok, /*skip_special=*/true);
  std::string pending;  // decoded text not yet emitted (may be the start of a stop string)
  auto emit = [&](size_t n) {
    if (n == 0) return;
    if (on_text) on_text(std::string_view(pending).substr(0, n));
    r.text += pending.substr(0, n);
    pending.erase(0, n);
  };
  r.stop_reason = "max_tokens";
  t0 = now_s();
  for (int64_t step = 0; step < opt.max_tokens; ++step) {
    if (engine.n_past() >= ctx) {  // no position left for another token
      r.stop_reason = "context";
      break;
    }
    const int32_t next = sampler.sample(logits.data(), vocab, history);
    if (opt.stop_at_eog && std::find(eog.begin(), eog.end(), next) != eog.end()) {
      r.stop_reason = "eog";
      break;
    }
    r.ids.push_back(next);
    history.push_back(next);
    pending += dec.push(next);
    if (!opt.stop_strings.empty()) {
      size_t cut = std::string::npos;
      for (const auto& s : opt.stop_strings) cut = std::min(cut, pending.find(s));
      if (cut != std::string::npos) {
        pending.resize(cut);
        emit(pending.size());
        r.stop_reason = "stop_string";
        r.decode_seconds = now_s() - t0;
        return r;
      }
      emit(pending.size() - held_suffix(pending, opt.stop_strings));
    } else {
      emit(pending.size());
    }
    if (step + 1 == opt.max_tokens) {
      if (opt.consume_last) engine.decode_step(next);  // n_past < ctx: checked at the top
      break;
    }
    h = engine.decode_step(next);
    ++r.decoded;
    forward.logits(h.data(), 1, logits.data());
  }
  r.decode_seconds = now_s() - t0;
  pending += dec.flush();
  emit(pending.size());
  return r;
}

}  // namespace larql
