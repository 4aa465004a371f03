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
  if (tok.eot_id() >= 0 && tok.eot_id() != tok.eos_id()) ids.push_back(tok.eot_id());
  for (const char* name : {"<end_of_turn>", "</s>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|eom_id|>",
                           "<EOT>"})
    if (auto id = tok.find_token(name); id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  return ids;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool add_bos,
                                   std::vector<std::string>* notes) {
  std::vector<int32_t> ids = tok.encode(text, add_bos, /*parse_special=*/true);
  const int32_t bos = tok.bos_id();
  if (add_bos && bos >= 0 && ids.size() >= 2 && ids[0] == bos && ids[1] == bos) {
    ids.erase(ids.begin());
    if (notes) notes->push_back("the prompt already starts with the BOS token; not adding another");
  }
  return ids;
}

StopTextStream::StopTextStream(const Tokenizer& tok, std::vector<std::string> stops, bool skip_special)
    : dec_(tok, skip_special) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopTextStream::push(int32_t id) {
  if (stopped_) return {};
  pending_ += dec_.push(id);
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, pending_.find(s));
  size_t n = pending_.size();
  if (cut != std::string::npos) {
    n = cut;
    stopped_ = true;
  } else {
    n -= held_suffix(pending_, stops_);
  }
  std::string out = pending_.substr(0, n);
  pending_.erase(0, stopped_ ? pending_.size() : n);
  return out;
}

std::string StopTextStream::finish() {
  if (stopped_) return {};
  pending_ += dec_.flush();
  std::string out;
  out.swap(pending_);
  return out;
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
  const bool continuing = opt.continue_sequence && engine.n_past() > 0;
  SessionState& session = engine.session();
  std::vector<int32_t> feed = prompt;  // tokens to decode on top of the engine's state
  if (continuing) {
    const auto consumed = static_cast<size_t>(engine.n_past());
    if (!session.history.empty()) {
      if (session.history.size() < consumed)
        throw Error(ErrorKind::Format, "session history has " + std::to_string(session.history.size()) +
                                           " tokens, fewer than the engine's " + std::to_string(consumed));
      for (int32_t id : session.history)
        if (id < 0 || id >= vocab)
          throw Error(ErrorKind::Format, "session history holds token id " + std::to_string(id) +
                                             ", outside the vocabulary of " + std::to_string(vocab));
      feed.insert(feed.begin(), session.history.begin() + static_cast<std::ptrdiff_t>(consumed), session.history.end());
    }
    if (opt.restore_rng && !session.rng.empty()) {
      if (session.sampler == opt.sampler.config_string())
        sampler.set_rng_state(session.rng);
      else
        r.notes.push_back("the saved sequence was sampled with " + session.sampler + "; continuing with " +
                          opt.sampler.config_string() + " and a fresh random state");
    }
  }
  std::vector<float> logits(static_cast<size_t>(vocab));

  double t0 = now_s();
  std::vector<float> h;
  // Prompt progress and cancellation, observed after every layer of the prompt's tokens.
  struct ProgressHook {
    Forward& f;
    ~ProgressHook() { f.set_layer_progress({}); }
  } hook{forward};
  if (opt.on_prefill_progress || opt.cancel) {
    const int64_t layers = forward.config().n_layers;
    const int64_t total = static_cast<int64_t>(continuing ? feed.size() : prompt.size());
    forward.set_layer_progress([&, rows = int64_t{0}, layers, total](int64_t n) mutable {
      if (opt.cancel && opt.cancel->load(std::memory_order_relaxed))
        throw Error(ErrorKind::Cancelled, "cancelled while reading the prompt");
      rows += n;
      if (opt.on_prefill_progress) opt.on_prefill_progress(std::min(total, rows / layers), total);
    });
  }
  if (continuing) {
    if (feed.empty()) throw Error(ErrorKind::EmptyPrompt, "generate: nothing to continue with");
    if (engine.n_past() + static_cast<int64_t>(feed.size()) > ctx)
      throw Error(ErrorKind::ContextOverflow, "the prompt is " + std::to_string(feed.size()) + " tokens after " +
                                                  std::to_string(engine.n_past()) + " resumed tokens, longer than the context of " +
                                                  std::to_string(ctx) + " tokens");
    for (int32_t id : feed) h = engine.decode_step(id);
    r.prefill_tokens = static_cast<int64_t>(feed.size());
  } else {
    h = engine.prefill(prompt);
    r.prefill_tokens = engine.n_past();
  }
  if (engine.n_past() > ctx)
    throw Error(ErrorKind::ContextOverflow, "the engine's context is " + std::to_string(engine.n_past()) +
                                                " tokens after the prompt, more than the " + std::to_string(ctx) + " allowed");
  forward.set_layer_progress({});
  // Greedy decoding on an engine that computes logits where it runs (a GPU) reads the argmax
  // alone; otherwise the logits come from the engine or from Forward::logits on the residual.
  const bool device_greedy = opt.sampler.temperature == 0 && opt.sampler.repeat_penalty == 1.0f &&
                             engine.device_argmax() >= 0;
  auto next_logits = [&] {
    if (device_greedy) return;
    if (!engine.device_logits(logits.data())) forward.logits(h.data(), 1, logits.data());
  };
  next_logits();
  r.prefill_seconds = now_s() - t0;
  // From here on the session describes the sequence, however the loop ends (even by an error).
  std::vector<int32_t>& history = session.history;  // also the repetition penalty's window
  if (!continuing) history.clear();
  history.insert(history.end(), prompt.begin(), prompt.end());
  struct SamplerStateOnExit {
    SessionState& s;
    const Sampler& sampler;
    std::string config;
    ~SamplerStateOnExit() {
      s.sampler = config;
      s.rng = sampler.rng_state();
    }
  } on_exit{session, sampler, opt.sampler.config_string()};

  StopTextStream text(tok, opt.stop_strings);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    if (on_text) on_text(piece);
    r.text += piece;
  };
  r.stop_reason = "max_tokens";
  t0 = now_s();
  for (int64_t step = 0; step < opt.max_tokens; ++step) {
    if (engine.n_past() >= ctx) {  // no position left for another token
      r.stop_reason = "context";
      break;
    }
    if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) {
      r.stop_reason = "cancelled";
      break;
    }
    const int32_t next = device_greedy ? engine.device_argmax() : sampler.sample(logits.data(), vocab, history);
    if (opt.stop_at_eog && std::find(eog.begin(), eog.end(), next) != eog.end()) {
      r.stop_reason = "eog";
      break;
    }
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) {
      r.stop_reason = "stop_id";
      break;
    }
    r.ids.push_back(next);
    history.push_back(next);
    emit(text.push(next));
    if (text.stopped()) {
      r.stop_reason = "stop_string";
      r.decode_seconds = now_s() - t0;
      return r;
    }
    if (step + 1 == opt.max_tokens) break;  // `next` stays in the history, not yet consumed
    h = engine.decode_step(next);
    ++r.decoded;
    next_logits();
  }
  r.decode_seconds = now_s() - t0;
  emit(text.finish());
  return r;
}

}  // namespace larql
