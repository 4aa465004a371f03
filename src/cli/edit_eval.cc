// `larql edit-eval VINDEX --set FILE`: knowledge edits measured as the editing literature does
// (docs/cli.md "edit-eval"). Every edit is an LQL INSERT run by the LQL executor on one session
// (api::run_lql_json); every prediction is INFER's (lql::predict: the same forward pass and KNN
// store); perplexity is `larql perplexity`'s batched pass (score_batched) on the session's model.
//
// Two phases over the set's facts:
// - single: each fact alone — BEGIN PATCH, INSERT, measure, REMOVE PATCH — so nothing accumulates;
// - sequential: the first N facts INSERTed one after another into one patch; every `--every`
//   edits (and after the last) every fact inserted so far is re-tested.
// Measures per fact: efficacy (the target top-1 on the canonical prompt; and P(target) > P(old),
// old = the base model's top-1 there), paraphrase (the target top-1 on each paraphrase),
// neighbourhood (the base top-1 unchanged on each neighbourhood prompt); per state: real-fact
// retention (the base top-1 unchanged), held-out perplexity (vs the base), fluency (n-gram
// entropy of 32-token greedy continuations); per edit: the INSERT's wall time. After each phase
// REMOVE PATCH must give the base's held-out logits bit for bit (XXH3-64 of every logit row).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

#include "api/api.h"
#include "cli/common.h"
#include "lql/printer.h"
#include "cli/edit_eval_report.h"
#include "cli/edit_eval_set.h"
#include "cli/progress.h"
#include "cli/scoring.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "lql/predict.h"
#include "lql/session.h"
#include "util/error.h"
#include "util/atomic_file.h"
#include "util/hash.h"

namespace larql::cli {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

struct Args {
  std::string vindex, set, mode = "compose", clauses, logits_out, json_out, patch_out;
  int64_t facts = 0, single = -1, sequential = -1, every = 100, global_sample = 10, fluency_tokens = 32;
  int threads = 0;
  bool json = false;
};

// An LQL string literal: the escapes the lexer reads (docs/lql.md "Lexical").
std::string lql_string(const std::string& s) { return lql::quote_string(s); }

class Evaluator {
 public:
  Evaluator(const Args& a, EditEvalSet set)
      : a_(a), set_(std::move(set)), pool_(std::make_shared<ThreadPool>(a.threads)),
        sess_(lql::SessionOptions{a.threads, ".", model_dirs()}, pool_) {
    sess_.use(a.vindex);
    base_model_ = sess_.model("edit-eval");  // Unsupported, naming the extract command, without weights
    patch_dir_ = fs::temp_directory_path().string();
  }

  ordered_json run() {
    check_set();
    ordered_json out;
    out["vindex"] = sess_.path();
    out["set"] = set_.path;
    out["mode"] = a_.mode;
    out["threads"] = pool_->size();
    out["facts"] = static_cast<int64_t>(facts_.size());
    out["base"] = measure_base();
    if (n_single_ > 0) out["single"] = run_single();
    if (n_seq_ > 0) out["sequential"] = run_sequential();
    if (!a_.logits_out.empty()) write_logits();
    return out;
  }

 private:
  // --- the set against the vindex in use ---------------------------------------------------
  void check_set() {
    const int64_t have = static_cast<int64_t>(set_.facts.size());
    if (a_.facts > have)
      throw Error(ErrorKind::InvalidArgument, "--facts " + std::to_string(a_.facts) + ": " + set_.path + " holds " +
                                                  std::to_string(have) + " facts");
    const int64_t n = a_.facts > 0 ? a_.facts : have;
    facts_.assign(set_.facts.begin(), set_.facts.begin() + n);
    n_single_ = a_.single < 0 ? n : a_.single;
    n_seq_ = a_.sequential < 0 ? n : a_.sequential;
    for (const auto& [v, flag] : {std::pair{n_single_, "--single"}, {n_seq_, "--sequential"}})
      if (v > n)
        throw Error(ErrorKind::InvalidArgument, std::string(flag) + " " + std::to_string(v) + ": only " + std::to_string(n) +
                                                    " facts are evaluated (" + set_.path + ", --facts)");
    if (!set_.model.empty() && set_.model != sess_.index().model)
      std::fprintf(stderr, "warning: %s was made on model \"%s\"; %s holds \"%s\" (its answers may not be this model's)\n",
                   set_.path.c_str(), set_.model.c_str(), sess_.path().c_str(), sess_.index().model.c_str());
    const Tokenizer& tok = sess_.tokenizer();
    auto first = [&](const std::string& t) -> int64_t {
      auto ids = tok.encode(!t.empty() && t.front() == ' ' ? t : " " + t, false, false);
      return ids.empty() ? -1 : ids[0];
    };
    auto mismatch = [&](int64_t line, const std::string& what, const std::string& text, int64_t want, int64_t got) {
      throw Error(ErrorKind::InvalidArgument, set_.path + ":" + std::to_string(line) + ": " + what + " \"" + text +
                                                  "\" begins with token " + std::to_string(got) + " on " + sess_.path() +
                                                  ", the set says " + std::to_string(want) +
                                                  " (the set was made for another tokenizer)");
    };
    for (const auto& f : facts_) {
      if (f.prompt != lql::fact_prompt(f.relation, f.entity))
        throw Error(ErrorKind::InvalidArgument, set_.path + ":" + std::to_string(f.line) + ": prompt \"" + f.prompt +
                                                    "\" is not the prompt INSERT installs the fact on (\"" +
                                                    lql::fact_prompt(f.relation, f.entity) + "\")");
      if (const int64_t t = first(f.target); t != f.target_id) mismatch(f.line, "target", f.target, f.target_id, t);
      for (const auto& nb : f.neighbourhood)
        if (const int64_t t = first(nb.answer); t != nb.answer_id) mismatch(f.line, "answer", nb.answer, nb.answer_id, t);
    }
    for (const auto& r : set_.real)
      if (const int64_t t = first(r.answer); t != r.answer_id) mismatch(r.line, "answer", r.answer, r.answer_id, t);
  }

  // --- measurements ------------------------------------------------------------------------
  int64_t top1(const std::string& prompt) { return lql::predict(sess_, prompt).top1(); }
  // Top-1 of a prompt in the current state, cached until the state changes (neighbourhood
  // prompts repeat across facts).
  int64_t top1_cached(const std::string& prompt) {
    auto it = cache_.find(prompt);
    if (it != cache_.end()) return it->second;
    return cache_[prompt] = top1(prompt);
  }

  // The fact's measures in the current state, into r (its INSERT fields kept).
  void measure_fact(size_t i, FactResult& r) {
    const EditFact& f = facts_[i];
    r.para_top1.clear(), r.neigh_top1.clear(), r.neigh_base.clear();
    const lql::Prediction p = lql::predict(sess_, f.prompt);
    r.top1 = p.top1();
    r.old_id = base_old_[i];
    r.p_target = p.probability(f.target_id);
    r.p_old = p.probability(r.old_id);
    for (const auto& q : f.paraphrases) r.para_top1.push_back(top1_cached(q));
    for (const auto& nb : f.neighbourhood) {
      r.neigh_top1.push_back(top1_cached(nb.prompt));
      r.neigh_base.push_back(base_cache_.at(nb.prompt));
    }
  }

  // Perplexity of the held-out text through `larql perplexity`'s batched pass on `model`.
  double perplexity(const std::shared_ptr<const Model>& model) {
    if (heldout_ids_.size() < 2) return NAN;
    auto handle = api::LoadedModel::wrap(model, pool_);
    Loaded l{handle, handle->model_ptr(), handle->forward(), handle->tokenizer()};
    return std::exp(score_batched(l, heldout_ids_, nullptr, nullptr, false) / static_cast<double>(heldout_ids_.size() - 1));
  }

  // XXH3-64 of every logit row of the held-out text (api::LoadedModel::logit_rows, as `larql
  // perplexity --logits-out` writes them).
  std::string logits_digest(const std::shared_ptr<const Model>& model) {
    if (heldout_ids_.empty()) return "";
    auto handle = api::LoadedModel::wrap(model, pool_);
    Xxh3Stream h;
    const int64_t vocab = model->config().vocab;
    handle->logit_rows(heldout_ids_, [&](int64_t, int64_t rows, const float* lg) {
      h.update(lg, static_cast<size_t>(rows * vocab) * sizeof(float));
    });
    return hex64(h.digest());
  }

  // Greedy continuations (a_.fluency_tokens tokens each, no stop) of the fluency prompts.
  std::vector<std::vector<int32_t>> continuations(const std::shared_ptr<const Model>& model) {
    std::vector<std::vector<int32_t>> out;
    const ModelConfig& c = model->config();
    for (const auto& p : set_.fluency) {
      std::vector<int32_t> ids = sess_.tokenizer().encode(p, true, false);
      Forward fwd(model, pool_);
      KvCache cache(c);
      std::vector<float> x(ids.size() * static_cast<size_t>(c.hidden)), lg(static_cast<size_t>(c.vocab));
      fwd.forward(ids.data(), static_cast<int64_t>(ids.size()), cache, x.data());
      fwd.logits(x.data() + (ids.size() - 1) * static_cast<size_t>(c.hidden), 1, lg.data());
      std::vector<int32_t> gen;
      for (int64_t k = 0; k < a_.fluency_tokens; ++k) {
        const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
        gen.push_back(next);
        if (k + 1 == a_.fluency_tokens) break;
        fwd.forward(&next, 1, cache, x.data());
        fwd.logits(x.data(), 1, lg.data());
      }
      out.push_back(std::move(gen));
    }
    return out;
  }

  GlobalResult measure_global() {
    GlobalResult g;
    for (size_t i = 0; i < set_.real.size(); ++i)
      if (top1_cached(set_.real[i].prompt) != base_real_[i]) g.real_changed.push_back(static_cast<int64_t>(i));
    g.real_total = static_cast<int64_t>(set_.real.size());
    auto model = sess_.model("edit-eval");
    g.perplexity = perplexity(model);
    g.fluency_ids = continuations(model);
    return g;
  }

  ordered_json measure_base() {
    Progress bar("base", static_cast<int64_t>(facts_.size()));
    int64_t known = 0, neigh_ok = 0, neigh_n = 0, real_ok = 0;
    for (size_t i = 0; i < facts_.size(); ++i) {
      const EditFact& f = facts_[i];
      base_old_.push_back(top1(f.prompt));
      known += base_old_.back() == f.target_id;
      for (const auto& nb : f.neighbourhood) {
        neigh_ok += top1_cached(nb.prompt) == nb.answer_id;
        ++neigh_n;
      }
      bar.update(static_cast<int64_t>(i + 1));
    }
    for (const auto& r : set_.real) {
      base_real_.push_back(top1_cached(r.prompt));
      real_ok += base_real_.back() == r.answer_id;
    }
    base_cache_ = cache_;
    if (!set_.heldout.empty()) heldout_ids_ = sess_.tokenizer().encode(set_.heldout, true, false);
    base_ppl_ = perplexity(base_model_);
    base_digest_ = logits_digest(base_model_);
    base_fluency_ = continuations(base_model_);
    ordered_json j;
    j["facts_already_answered"] = known;
    j["neighbourhood_answered"] = ratio(neigh_ok, neigh_n);
    j["real_answered"] = ratio(real_ok, static_cast<int64_t>(set_.real.size()));
    j["real_prompts"] = static_cast<int64_t>(set_.real.size());
    j["heldout_tokens"] = static_cast<int64_t>(heldout_ids_.size());
    j["perplexity"] = num(base_ppl_);
    j["fluency"] = fluency_json(base_fluency_);
    j["logits_xxh3"] = base_digest_;
    return j;
  }

  // --- edits ---------------------------------------------------------------------------------
  std::vector<ordered_json> lql(const std::string& text) {
    std::vector<ordered_json> out;
    for (const auto& d : api::run_lql_json(sess_, text)) out.push_back(ordered_json::parse(d));
    return out;
  }

  void insert(size_t i, FactResult& r) {
    const EditFact& f = facts_[i];
    const std::string st = "INSERT INTO EDGES (entity, relation, target) VALUES (" + lql_string(f.entity) + ", " +
                           lql_string(f.relation) + ", " + lql_string(f.target) + ") MODE " +
                           (a_.mode == "knn" ? "KNN" : a_.mode == "robust" ? "ROBUST" : a_.mode == "subject" ? "SUBJECT" : "COMPOSE") + (a_.clauses.empty() ? "" : " " + a_.clauses);
    const auto t0 = std::chrono::steady_clock::now();
    ordered_json d;
    try {
      d = lql(st).at(0);
    } catch (const Error& e) {
      // A fact the mode refuses (it does not stand out, no scale makes it top-1): nothing was
      // installed; it is measured as the model stands, so it counts as not learned.
      if (e.kind() != ErrorKind::InvalidArgument && e.kind() != ErrorKind::Unsupported) throw;
      r.insert_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.refused = e.what();
      cache_.clear();
      return;
    }
    r.insert_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto& cols = d.at("columns");
    const auto& row = d.at("rows").at(0);
    for (size_t c = 0; c < cols.size(); ++c) {
      const std::string name = cols[c].at("name");
      if (name == "layer" && row[c].is_number()) r.layer = row[c];
      if (name == "feature" && row[c].is_number()) r.feature = row[c];
      if (name == "probability" && row[c].is_number()) r.insert_p = row[c];
      if (name == "target_id" && row[c] != f.target_id)
        throw Error(ErrorKind::InvalidArgument, "INSERT of fact " + f.id + " wrote token " + row[c].dump() +
                                                    ", the set's target_id is " + std::to_string(f.target_id));
    }
    cache_.clear();
  }

  std::string patch_name(const char* phase) const {
    return (fs::path(patch_dir_) / ("larql-edit-eval-" + std::to_string(::getpid()) + "-" + phase + ".vlp")).string();
  }

  void remove_patch(const std::string& name) {
    lql("REMOVE PATCH " + lql_string(name));
    cache_ = base_cache_;
  }

  std::vector<size_t> global_points(size_t n) const {
    std::vector<size_t> pts;
    const size_t m = std::min<size_t>(n, static_cast<size_t>(std::max<int64_t>(0, a_.global_sample)));
    for (size_t k = 0; k < m; ++k) pts.push_back(k * n / m);
    return pts;
  }

  ordered_json run_single() {
    const size_t n = static_cast<size_t>(n_single_);
    const std::string name = patch_name("single");
    const auto pts = global_points(n);
    std::vector<FactResult> res(n);
    std::vector<std::pair<size_t, GlobalResult>> globals;
    Progress bar("single edits", static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      lql("BEGIN PATCH " + lql_string(name));
      insert(i, res[i]);
      measure_fact(i, res[i]);
      if (std::find(pts.begin(), pts.end(), i) != pts.end()) globals.emplace_back(i, measure_global());
      remove_patch(name);
      bar.update(static_cast<int64_t>(i + 1));
    }
    ordered_json j = phase_json(res, n);
    ordered_json g = ordered_json::array();
    std::vector<double> real, ppl, flu;
    for (const auto& [i, gr] : globals) {
      ordered_json e = global_json(gr, base_ppl_, base_fluency_);
      e["fact"] = facts_[i].id;
      for (auto [key, v] : {std::pair{"real_retention", &real}, {"perplexity_change", &ppl}, {"fluency_change", &flu}})
        if (e[key].is_number()) v->push_back(e[key].get<double>());
      g.push_back(e);
    }
    // The sampled states' means (and the largest perplexity change).
    auto mean = [](const std::vector<double>& v) { return v.empty() ? ordered_json(nullptr) : ordered_json(std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size())); };
    j["summary"]["real_retention"] = mean(real);
    j["summary"]["perplexity_change"] = mean(ppl);
    j["summary"]["perplexity_change_max"] = ppl.empty() ? ordered_json(nullptr) : ordered_json(*std::max_element(ppl.begin(), ppl.end()));
    j["summary"]["fluency_change"] = mean(flu);
    j["global"] = g;
    j["remove_patch_logits_xxh3"] = logits_digest(sess_.model("edit-eval"));
    j["remove_patch_bit_identical"] = j["remove_patch_logits_xxh3"] == base_digest_;
    return j;
  }

  ordered_json run_sequential() {
    const size_t n = static_cast<size_t>(n_seq_);
    const std::string name = patch_name("sequential");
    lql("BEGIN PATCH " + lql_string(name));
    std::vector<FactResult> res(n);  // INSERT info, the top-1 right after it, the last re-test
    ordered_json curve = ordered_json::array();
    size_t prev = 0;
    Progress bar("sequential edits", static_cast<int64_t>(n));
    const size_t every = static_cast<size_t>(std::max<int64_t>(1, a_.every));
    for (size_t i = 0; i < n; ++i) {
      insert(i, res[i]);
      res[i].at_insert_top1 = top1(facts_[i].prompt);
      bar.update(static_cast<int64_t>(i + 1));
      if ((i + 1) % every != 0 && i + 1 != n) continue;
      // Re-test every fact inserted so far, in this state.
      const size_t k = i + 1;
      Progress rb("re-test " + std::to_string(k), static_cast<int64_t>(k));
      for (size_t q = 0; q < k; ++q) {
        measure_fact(q, res[q]);
        rb.update(static_cast<int64_t>(q + 1));
      }
      ordered_json pt;
      pt["edits"] = static_cast<int64_t>(k);
      pt.update(summary_json(res, k, facts_));
      pt.update(global_json(measure_global(), base_ppl_, base_fluency_));
      std::vector<double> seg;  // the INSERTs since the previous point
      for (size_t q = prev; q < k; ++q) seg.push_back(res[q].insert_ms);
      pt["insert_ms"] = ms_json(seg);
      curve.push_back(pt);
      prev = k;
      // A line per point on stderr: a long run shows its curve as it goes.
      std::fprintf(stderr, "sequential %zu edits: efficacy %.3f, paraphrase %.3f, neighbourhood %.3f, real %.3f, "
                           "perplexity %+.4f, INSERT mean %.0f ms\n", k, pt["efficacy"].get<double>(),
                   pt["paraphrase"].is_number() ? pt["paraphrase"].get<double>() : NAN,
                   pt["neighbourhood"].is_number() ? pt["neighbourhood"].get<double>() : NAN,
                   pt["real_retention"].is_number() ? pt["real_retention"].get<double>() : NAN,
                   pt["perplexity_change"].is_number() ? pt["perplexity_change"].get<double>() : NAN,
                   pt["insert_ms"]["mean"].get<double>());
    }
    ordered_json j = phase_json(res, n);
    for (const char* key : {"real_retention", "perplexity", "perplexity_change", "fluency_change"}) j["summary"][key] = curve.back()[key];
    j["every"] = static_cast<int64_t>(every);
    j["curve"] = curve;
    const std::string edited = logits_digest(sess_.model("edit-eval"));
    if (!a_.patch_out.empty()) {
      // SAVE PATCH writes the recording to its temporary name; it is copied to --patch-out (and
      // the temporary removed) after REMOVE PATCH took it off the stack.
      lql("SAVE PATCH");
    }
    remove_patch(name);
    if (!a_.patch_out.empty()) {
      // Checked writable before the run; a failure now is reported, not the run's results lost.
      std::error_code ec;
      fs::copy_file(name, a_.patch_out, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        std::fprintf(stderr, "warning: --patch-out %s: %s (the patch stays at %s)\n", a_.patch_out.c_str(), ec.message().c_str(),
                     name.c_str());
      } else {
        fs::remove(name, ec);
        j["patch_out"] = a_.patch_out;
      }
    }
    j["edited_logits_xxh3"] = edited;
    j["remove_patch_logits_xxh3"] = logits_digest(sess_.model("edit-eval"));
    j["remove_patch_bit_identical"] = j["remove_patch_logits_xxh3"] == base_digest_;
    return j;
  }

  ordered_json phase_json(const std::vector<FactResult>& res, size_t n) {
    ordered_json j;
    j["edits"] = static_cast<int64_t>(n);
    j["summary"] = summary_json(res, n, facts_);
    std::vector<double> ms;
    for (size_t i = 0; i < n; ++i) ms.push_back(res[i].insert_ms);
    j["summary"]["insert_ms"] = ms_json(ms);
    j["per_relation"] = per_relation_json(res, n, facts_);
    ordered_json fs = ordered_json::array();
    for (size_t i = 0; i < n; ++i) fs.push_back(fact_json(facts_[i], res[i]));
    j["facts"] = fs;
    return j;
  }

  void write_logits() {
    if (heldout_ids_.empty()) throw Error(ErrorKind::InvalidArgument, "--logits-out: " + set_.path + " has no heldout text");
    auto model = sess_.model("edit-eval");
    auto handle = api::LoadedModel::wrap(model, pool_);
    NpyWriter npy(a_.logits_out, {static_cast<int64_t>(heldout_ids_.size()), model->config().vocab});
    handle->logit_rows(heldout_ids_, [&](int64_t, int64_t rows, const float* lg) {
      npy.rows(lg, static_cast<size_t>(rows * model->config().vocab));
    });
    npy.close();
  }

  const Args& a_;
  EditEvalSet set_;
  std::vector<EditFact> facts_;
  int64_t n_single_ = 0, n_seq_ = 0;
  std::shared_ptr<ThreadPool> pool_;
  lql::Session sess_;
  std::shared_ptr<const Model> base_model_;
  std::string patch_dir_;
  std::vector<int64_t> base_old_, base_real_;
  std::map<std::string, int64_t> cache_, base_cache_;
  std::vector<int32_t> heldout_ids_;
  double base_ppl_ = NAN;
  std::string base_digest_;
  std::vector<std::vector<int32_t>> base_fluency_;
};

void run(const Args& a) {
  if (a.mode != "compose" && a.mode != "knn" && a.mode != "robust" && a.mode != "subject")
    throw Error(ErrorKind::Usage, "--mode " + a.mode + ": expected compose, knn, robust or subject");
  EditEvalSet set = read_edit_eval_set(a.set);
  // The outputs are checked before the run (which may take hours), not after it; the set (an
  // input now) is never one of them.
  if (!a.json_out.empty()) check_output_path(a.json_out, "--json-out");
  if (!a.logits_out.empty()) check_output_path(a.logits_out, "--logits-out");
  if (!a.patch_out.empty()) check_output_path(a.patch_out, "--patch-out");
  Evaluator ev(a, std::move(set));
  const ordered_json out = ev.run();
  if (!a.json_out.empty()) {
    AtomicWriter w(a.json_out, "--json-out");
    const std::string text = out.dump() + "\n";
    w.write(text.data(), text.size());
    w.commit();
  }
  if (a.json)
    std::printf("%s\n", out.dump().c_str());
  else
    print_report(out);
  for (const char* phase : {"single", "sequential"})
    if (out.contains(phase) && !out[phase].value("remove_patch_bit_identical", true))
      throw Error(ErrorKind::InvariantViolation, std::string("REMOVE PATCH after the ") + phase +
                                                     " phase did not give the base's held-out logits bit for bit");
}

}  // namespace

void register_edit_eval(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* s = app.add_subcommand("edit-eval", "measure knowledge edits (LQL INSERT): efficacy, paraphrase, neighbourhood, "
                                                "retention, perplexity, fluency, time; each alone and accumulated");
  s->add_option("vindex", a->vindex, "a vindex at level inference (a path or a name in models/)")->required();
  s->add_option("--set", a->set, "the evaluation set, JSON Lines (data/edit_eval/*.jsonl, scripts/make_edit_eval.py)")->required();
  add_int_flag(s, "--facts", a->facts, 0, INT32_MAX, "evaluate the set's first N facts (0 = all),");
  add_int_flag(s, "--single", a->single, -1, INT32_MAX,
               "edit each of the first N facts alone (INSERT, measure, REMOVE PATCH; -1 = all, 0 = skip),");
  add_int_flag(s, "--sequential", a->sequential, -1, INT32_MAX,
               "INSERT the first N facts into one patch, re-testing every earlier one (-1 = all, 0 = skip),");
  add_int_flag(s, "--every", a->every, 1, INT32_MAX, "re-test the sequential edits every K edits (and after the last),");
  add_int_flag(s, "--global-sample", a->global_sample, 0, INT32_MAX,
               "single phase: measure retention, perplexity and fluency after M edits spread over the facts,");
  add_int_flag(s, "--fluency-tokens", a->fluency_tokens, 1, 4096, "greedy tokens per fluency prompt,");
  s->add_option("--mode", a->mode, "INSERT's MODE: compose (default), knn, robust or subject");
  s->add_option("--clauses", a->clauses, "LQL clauses appended to every INSERT, e.g. \"AT LAYER 14 ALPHA 2\"");
  s->add_option("--logits-out", a->logits_out,
                "at the end (after REMOVE PATCH), write the held-out text's logits [positions, vocab] f32 to this .npy");
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "print one JSON document (docs/cli.md lists its fields)");
  s->add_option("--json-out", a->json_out, "also write that JSON document to this file (the text report still prints)");
  s->add_option("--patch-out", a->patch_out,
                "write the sequential phase's patch (every INSERT of it) to this .vlp file, for APPLY PATCH in larql lql");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
