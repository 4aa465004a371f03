#include "accuracy/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compute/logits.h"
#include "inference/forward.h"
#include "kv/engine.h"
#include "util/error.h"
#include "util/text_file.h"

#ifndef LARQL_ACCURACY_DATA_DIR
#define LARQL_ACCURACY_DATA_DIR "data/accuracy"
#endif

namespace larql::accuracy {

// ---- distributions -----------------------------------------------------------------------------

static void check_same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty())
    throw Error(ErrorKind::InvalidArgument, "distributions differ in length or are empty");
}

double kl_nats(const std::vector<double>& logp, const std::vector<double>& logq) {
  check_same(logp, logq);
  return compute::kl_nats(logp.data(), logq.data(), static_cast<int64_t>(logp.size()));
}

double js_nats(const std::vector<double>& logp, const std::vector<double>& logq) {
  check_same(logp, logq);
  double js = 0;
  for (size_t i = 0; i < logp.size(); ++i) {
    const double p = std::exp(logp[i]), q = std::exp(logq[i]), m = 0.5 * (p + q);
    if (m <= 0) continue;
    const double lm = std::log(m);
    if (p > 0) js += 0.5 * p * (logp[i] - lm);
    if (q > 0) js += 0.5 * q * (logq[i] - lm);
  }
  return std::clamp(js, 0.0, std::log(2.0));
}

double cosine_probs(const std::vector<double>& logp, const std::vector<double>& logq) {
  check_same(logp, logq);
  double dot = 0, np = 0, nq = 0;
  for (size_t i = 0; i < logp.size(); ++i) {
    const double p = std::exp(logp[i]), q = std::exp(logq[i]);
    dot += p * q;
    np += p * p;
    nq += q * q;
  }
  return np > 0 && nq > 0 ? dot / std::sqrt(np * nq) : 0.0;
}

double surprisal_bits(const std::vector<double>& logp, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= logp.size())
    throw Error(ErrorKind::InvalidArgument, "surprisal_bits: token id " + std::to_string(id) + " out of range");
  return -logp[static_cast<size_t>(id)] / std::log(2.0);
}

// ---- corpora -----------------------------------------------------------------------------------

std::vector<Case> parse_jsonl(std::string_view text, const std::string& corpus) {
  std::vector<Case> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorKind::Format, corpus + " line " + std::to_string(lineno) + ": bad JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string() || !j.contains("answer") ||
        !j["answer"].is_string())
      throw Error(ErrorKind::Format,
                  corpus + " line " + std::to_string(lineno) + ": needs string fields \"prompt\" and \"answer\"");
    Case c;
    c.corpus = corpus;
    c.label = corpus + ":" + std::to_string(lineno);
    c.prompt = j["prompt"].get<std::string>();
    c.answer = j["answer"].get<std::string>();
    if (j.contains("parametric") && j["parametric"].is_string()) c.parametric = j["parametric"].get<std::string>();
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Case> load_jsonl(const std::string& path, const std::string& corpus) {
  return parse_jsonl(read_text_file(path, "the " + corpus + " corpus"), corpus);
}

std::string find_data_dir(const std::string& override_dir, const std::string& first_choice) {
  namespace fs = std::filesystem;
  std::vector<std::string> tried;
  auto ok = [](const std::string& d) { return fs::exists(fs::path(d) / "parametric.jsonl"); };
  if (!override_dir.empty()) {
    if (ok(override_dir)) return override_dir;
    throw Error(ErrorKind::NotFound, "no parametric.jsonl in --data " + override_dir);
  }
  if (!first_choice.empty()) tried.push_back(first_choice);
  tried.push_back("data/accuracy");
  tried.push_back(LARQL_ACCURACY_DATA_DIR);
  for (const auto& d : tried)
    if (ok(d)) return d;
  std::string list;
  for (const auto& d : tried) list += (list.empty() ? "" : ", ") + d;
  throw Error(ErrorKind::NotFound, "accuracy data (parametric.jsonl) not found; tried " + list + " (use --data)");
}

namespace {
// Neutral filler: no doors, colours of doors, codes or numbers.
const char* kFiller[] = {
    "The morning light moved slowly across the quiet valley.",
    "A farmer walked along the edge of the field, checking the rows of wheat.",
    "In the small town, the baker opened his shop before anyone else was awake.",
    "Rivers in this region are wide and shallow, and they flood in the spring.",
    "The old library kept its books in tall wooden shelves that reached the ceiling.",
    "Children played in the park while their parents talked on the benches.",
    "Travelers often stopped at the inn to rest their horses and share news.",
    "The mountain path was narrow, but the view from the top was worth the climb.",
    "During the winter, the lake froze and people skated on it every afternoon.",
    "The market was busy with merchants selling fruit, cloth and spices.",
    "A gentle wind carried the smell of pine trees through the open window.",
    "The teacher read a story aloud, and the class listened without a sound.",
};
constexpr size_t kFillerCount = sizeof(kFiller) / sizeof(kFiller[0]);
}  // namespace

Haystack build_haystack(const std::function<int64_t(std::string_view)>& count_tokens, int64_t target_tokens,
                        double depth, const std::string& needle, const std::string& question) {
  if (depth < 0 || depth > 1) throw Error(ErrorKind::InvalidArgument, "needle depth must be in [0, 1]");
  auto cost = [&](const std::string& s) { return count_tokens(" " + s); };
  int64_t cost_f[kFillerCount];
  for (size_t i = 0; i < kFillerCount; ++i) cost_f[i] = cost(kFiller[i]);
  const int64_t fixed = 1 + cost(needle) + cost(question);
  const int64_t budget = target_tokens - fixed;
  if (budget < 0)
    throw Error(ErrorKind::InvalidArgument, "needle target of " + std::to_string(target_tokens) + " tokens is too short");
  std::vector<size_t> chosen;
  int64_t filler = 0;
  for (size_t i = 0;; ++i) {
    const int64_t c = cost_f[i % kFillerCount];
    if (filler + c <= budget) {
      chosen.push_back(i % kFillerCount);
      filler += c;
      continue;
    }
    if (budget - filler > c / 2) {  // overshooting by under half a sentence is closer
      chosen.push_back(i % kFillerCount);
      filler += c;
    }
    break;
  }
  // Insert the needle at the sentence boundary closest to depth * filler.
  const double want = depth * static_cast<double>(filler);
  size_t at = 0;
  double best = want;  // boundary 0: distance |0 - want|
  int64_t cum = 0;
  for (size_t k = 0; k < chosen.size(); ++k) {
    cum += cost_f[chosen[k]];
    if (std::abs(static_cast<double>(cum) - want) < best) {
      best = std::abs(static_cast<double>(cum) - want);
      at = k + 1;
    }
  }
  Haystack h;
  int64_t pos = 1;  // BOS
  for (size_t k = 0; k <= chosen.size(); ++k) {
    if (k == at) {
      h.needle_token_pos = pos;
      if (!h.text.empty()) h.text += ' ';
      h.text += needle;
      pos += cost(needle);
    }
    if (k == chosen.size()) break;
    if (!h.text.empty()) h.text += ' ';
    h.text += kFiller[chosen[k]];
    pos += cost_f[chosen[k]];
  }
  h.text += " " + question;
  pos += cost(question);
  h.tokens = pos;
  return h;
}

std::string length_label(int64_t tokens) {
  if (tokens >= 1024 && tokens % 1024 == 0) return std::to_string(tokens / 1024) + "k";
  return std::to_string(tokens);
}

std::vector<int64_t> needle_lengths(bool quick) {
  return quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
}

std::vector<Case> build_cases(const Tokenizer& tok, const std::vector<std::string>& corpora, bool quick,
                              const std::string& data_dir, int64_t context_length) {
  auto wants = [&](const std::string& c) {
    return std::find(corpora.begin(), corpora.end(), c) != corpora.end() ||
           std::find(corpora.begin(), corpora.end(), "all") != corpora.end();
  };
  auto thin = [&](std::vector<Case> v) {
    if (!quick) return v;
    std::vector<Case> out;
    for (size_t i = 0; i < v.size(); i += 4) out.push_back(v[i]);
    return out;
  };
  std::vector<Case> out;
  if (wants("parametric")) {
    auto v = thin(load_jsonl((std::filesystem::path(data_dir) / "parametric.jsonl").string(), "parametric"));
    out.insert(out.end(), v.begin(), v.end());
  }
  if (wants("in-context")) {
    const std::vector<int64_t> lengths = needle_lengths(quick);
    const std::vector<double> depths = quick ? std::vector<double>{0.5} : std::vector<double>{0.1, 0.5, 0.9};
    auto count = [&](std::string_view s) { return static_cast<int64_t>(tok.encode(s, false, false).size()); };
    for (int64_t n : lengths) {
      if (n > context_length) continue;
      for (double d : depths) {
        Haystack h = build_haystack(count, n, d);
        Case c;
        c.corpus = "in-context-" + length_label(n);
        char buf[64];
        std::snprintf(buf, sizeof buf, "needle@%s depth %.2f", length_label(n).c_str(), d);
        c.label = buf;
        c.prompt = h.text;
        c.answer = kNeedleAnswer;
        out.push_back(std::move(c));
      }
    }
  }
  if (wants("conflict")) {
    auto v = thin(load_jsonl((std::filesystem::path(data_dir) / "conflict.jsonl").string(), "conflict"));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// ---- scoring -----------------------------------------------------------------------------------

namespace {
bool whitespace_only(const std::string& s) {
  return !s.empty() && s.find_first_not_of(" \t\n\r") == std::string::npos;
}

/// Index in `full` of the first answer token after the prompt's tokens, skipping whitespace.
size_t answer_index(const Tokenizer& tok, const std::vector<int32_t>& pre, const std::vector<int32_t>& full,
                    const std::string& label) {
  size_t p = 0;
  while (p < pre.size() && p < full.size() && pre[p] == full[p]) ++p;
  size_t t = p;
  while (t < full.size() && whitespace_only(tok.token_to_piece(full[t]))) ++t;
  if (t >= full.size()) throw Error(ErrorKind::InvalidArgument, label + ": the answer adds no scoreable token");
  return t;
}
}  // namespace

Target make_target(const Tokenizer& tok, const Case& c) {
  const auto pre = tok.encode(c.prompt, true, false);
  const auto full = tok.encode(c.prompt + c.answer, true, false);
  const size_t t = answer_index(tok, pre, full, c.label);
  Target out;
  out.prompt_ids.assign(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(t));
  out.answer_id = full[t];
  if (!c.parametric.empty()) {
    const auto fp = tok.encode(c.prompt + c.parametric, true, false);
    out.parametric_id = fp[answer_index(tok, pre, fp, c.label + " (parametric)")];
  }
  return out;
}

std::vector<Score> run_suite(std::shared_ptr<Forward> forward, const Tokenizer& tok,
                             const std::vector<EngineSpec>& specs, const std::vector<Case>& cases,
                             const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t V = forward->config().vocab;
  const size_t E = specs.size();
  // Corpora in order of first appearance.
  std::vector<std::string> corpora;
  std::map<std::string, size_t> corpus_index;
  for (const Case& c : cases)
    if (corpus_index.emplace(c.corpus, corpora.size()).second) corpora.push_back(c.corpus);

  struct Acc {
    std::string skipped;
    int64_t n = 0, top1 = 0, param = 0;
    double bits = 0, kl = 0, js = 0, cos = 0;
    bool has_param = false;
  };
  std::vector<std::vector<Acc>> acc(corpora.size(), std::vector<Acc>(E));

  std::vector<std::unique_ptr<Engine>> engines(E);
  std::vector<bool> is_ref(E);
  std::vector<std::string> build_error(E);
  for (size_t i = 0; i < E; ++i) {
    is_ref[i] = specs[i].name == "standard" && specs[i].params.empty();
    if (is_ref[i]) continue;
    try {
      engines[i] = make_engine(specs[i], forward);
    } catch (const std::exception& e) {
      build_error[i] = e.what();
    }
  }
  std::unique_ptr<Engine> reference = make_engine(parse_engine_spec("standard"), forward);

  auto describe = [](const std::exception& e) {
    if (const auto* le = dynamic_cast<const Error*>(&e)) return std::string(error_kind_name(le->kind())) + ": " + e.what();
    return std::string(e.what());
  };

  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> lref, lq;
  const int64_t total = static_cast<int64_t>(cases.size() * E);
  int64_t done = 0;
  for (const Case& c : cases) {
    auto& row = acc[corpus_index[c.corpus]];
    const Target t = make_target(tok, c);
    try {
      auto h = reference->prefill(t.prompt_ids);
      forward->logits(h.data(), 1, logits.data());
      compute::log_softmax(logits.data(), V, lref);
    } catch (const std::exception& e) {
      for (Acc& a : row)
        if (a.skipped.empty()) a.skipped = "reference: " + describe(e) + " (" + c.label + ")";
      done += static_cast<int64_t>(E);
      if (progress) progress(done, total);
      continue;
    }
    for (size_t i = 0; i < E; ++i) {
      Acc& a = row[i];
      if (a.skipped.empty() && !build_error[i].empty()) a.skipped = build_error[i];
      if (a.skipped.empty()) {
        try {
          if (is_ref[i]) {
            lq = lref;
          } else {
            auto h = engines[i]->prefill(t.prompt_ids);
            forward->logits(h.data(), 1, logits.data());
            compute::log_softmax(logits.data(), V, lq);
          }
          const int64_t top = compute::argmax(lq.data(), V);
          ++a.n;
          a.top1 += top == t.answer_id;
          a.bits += surprisal_bits(lq, t.answer_id);
          a.kl += kl_nats(lref, lq);
          a.js += js_nats(lref, lq);
          a.cos += cosine_probs(lref, lq);
          if (t.parametric_id >= 0) {
            a.has_param = true;
            a.param += top == t.parametric_id;
          }
        } catch (const std::exception& e) {
          a.skipped = describe(e) + " (" + c.label + ")";
        }
      }
      ++done;
      if (progress) progress(done, total);
    }
  }

  std::vector<Score> out;
  for (size_t k = 0; k < corpora.size(); ++k) {
    for (size_t i = 0; i < E; ++i) {
      const Acc& a = acc[k][i];
      Score s;
      s.engine = specs[i].to_string();
      s.corpus = corpora[k];
      s.skipped = a.skipped;
      s.cases = a.n;
      if (a.skipped.empty() && a.n > 0) {
        const double n = static_cast<double>(a.n);
        s.top1 = a.top1 / n;
        s.mean_bits = a.bits / n;
        s.mean_kl = a.kl / n;
        s.mean_js = a.js / n;
        s.mean_cosine = a.cos / n;
        if (a.has_param) s.parametric_rate = a.param / n;
      }
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace larql::accuracy
