#include "accuracy/apollo_qa.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "accuracy/accuracy.h"
#include "compute/logits.h"
#include "kv/standard.h"
#include "util/error.h"

namespace larql::accuracy {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<QaItem> parse_qa_jsonl(const std::string& text) {
  std::vector<QaItem> out;
  std::istringstream in(text);
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "questions line " + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorKind::Format, where + ": bad JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("question") || !j["question"].is_string())
      throw Error(ErrorKind::Format, where + ": needs a string field \"question\"");
    QaItem q;
    q.question = j["question"].get<std::string>();
    if (q.question.find_first_not_of(" \t\r\n") == std::string::npos)
      throw Error(ErrorKind::Format, where + ": \"question\" is empty");
    auto text = [&](const char* key, std::string& out) {
      if (!j.contains(key)) return;
      if (!j[key].is_string()) throw Error(ErrorKind::Format, where + ": \"" + key + "\" must be a string");
      out = j[key].get<std::string>();
    };
    if (j.contains("miss") && !j["miss"].is_boolean())
      throw Error(ErrorKind::Format, where + ": \"miss\" must be true or false");
    q.miss = j.value("miss", false);
    text("answer", q.answer);
    text("evidence", q.evidence);
    if (!q.miss && q.answer.empty()) throw Error(ErrorKind::Format, where + ": needs a non-empty \"answer\" (or \"miss\": true)");
    out.push_back(std::move(q));
  }
  if (out.empty()) throw Error(ErrorKind::Format, "questions: no questions in the file");
  return out;
}

std::string qa_prompt(const std::string& question) { return "Question: " + question + "\nAnswer:"; }

QaReport run_apollo_qa(std::shared_ptr<Forward> fwd, const Tokenizer& tok, ApolloEngine& apollo,
                       const std::string& document, const std::vector<QaItem>& items, bool with_standard,
                       const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t V = fwd->config().vocab;
  if (tok.encode(document, false, false) != apollo.store().doc)
    throw Error(ErrorKind::InvalidArgument, "apollo eval: the store was not built from this document");
  QaReport rep;
  rep.with_standard = with_standard;
  rep.apollo_store_bytes = apollo.store().bytes();
  const std::string prefix = document + "\n\n";
  const std::vector<int32_t> prefix_ids = tok.encode(prefix, true, false);
  rep.document_tokens = static_cast<int64_t>(apollo.store().doc.size());
  StandardEngine base(fwd, 0);
  if (with_standard) {
    const auto t0 = std::chrono::steady_clock::now();
    base.prefill(prefix_ids);
    rep.standard_prefill_seconds = ms_since(t0) / 1000.0;
    rep.standard_state_bytes = base.memory().hot_bytes;
  }
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> lp;
  auto score = [&](const std::vector<float>& h, int32_t answer, bool& correct, double& bits) {
    fwd->logits(h.data(), 1, logits.data());
    compute::log_softmax(logits.data(), V, lp);
    correct = compute::argmax(lp.data(), V) == answer;
    bits = surprisal_bits(lp, answer);
  };
  int64_t done = 0;
  for (const QaItem& q : items) {
    QaResult r;
    r.question = q.question;
    r.miss = q.miss;
    r.has_evidence = !q.evidence.empty();
    Case c;
    c.label = "question " + std::to_string(done + 1);
    c.prompt = qa_prompt(q.question);
    c.answer = q.miss ? " unknown" : q.answer;
    const Target t = make_target(tok, c);
    try {
      const auto t0 = std::chrono::steady_clock::now();
      const auto h = apollo.prefill(t.prompt_ids);
      r.apollo_ms = ms_since(t0);
      rep.apollo_state_bytes = std::max(rep.apollo_state_bytes, apollo.memory().hot_bytes);
      score(h, t.answer_id, r.apollo_correct, r.apollo_bits);
    } catch (const Error& e) {
      r.apollo_error = std::string(error_kind_name(e.kind())) + ": " + e.what();
      r.apollo_miss = e.kind() == ErrorKind::RetrievalMiss;
    }
    // The engine's own routing decision, refusals included: one notion of "retrieved".
    r.window = apollo.last_route().window;
    r.best_window = apollo.last_route().best;
    r.coverage = apollo.last_route().coverage;
    if (r.window >= 0 && !q.evidence.empty()) {
      const std::string text = tok.decode(apollo.store().window_tokens_of(r.window));
      r.retrieval_hit = text.find(q.evidence) != std::string::npos;
    }
    if (with_standard && !q.miss) {
      const Target full = make_target(tok, {"qa", c.label, prefix + c.prompt, c.answer, ""});
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<float> h;
      const bool shares = full.prompt_ids.size() > prefix_ids.size() &&
                          std::equal(prefix_ids.begin(), prefix_ids.end(), full.prompt_ids.begin());
      StandardEngine eng = base;
      if (shares) {
        for (size_t i = prefix_ids.size(); i < full.prompt_ids.size(); ++i) h = eng.decode_step(full.prompt_ids[i]);
      } else {
        h = eng.prefill(full.prompt_ids);
      }
      r.standard_ms = ms_since(t0);
      score(h, full.answer_id, r.standard_correct, r.standard_bits);
    }
    if (q.miss) {
      ++rep.misses;
      rep.misses_refused += r.apollo_miss ? 1 : 0;
    } else {
      ++rep.answerable;
      rep.apollo_correct += r.apollo_correct ? 1 : 0;
      rep.standard_correct += r.standard_correct ? 1 : 0;
      if (!q.evidence.empty()) {
        ++rep.with_evidence;
        rep.retrieval_hits += r.retrieval_hit ? 1 : 0;
      }
      rep.false_misses += r.apollo_miss ? 1 : 0;
    }
    rep.items.push_back(std::move(r));
    if (progress) progress(++done, static_cast<int64_t>(items.size()));
  }
  return rep;
}

}  // namespace larql::accuracy
