#include "cli/edit_eval_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace larql::cli {

using nlohmann::ordered_json;

ordered_json num(double x) { return std::isnan(x) ? ordered_json(nullptr) : ordered_json(x); }

ordered_json ratio(int64_t a, int64_t b) {
  return b == 0 ? ordered_json(nullptr) : ordered_json(static_cast<double>(a) / static_cast<double>(b));
}

ordered_json fluency_json(const std::vector<std::vector<int32_t>>& ids) {
  ordered_json j;
  double s = 0;
  for (const auto& c : ids) s += ngram_entropy(c);
  j["entropy"] = ids.empty() ? ordered_json(nullptr) : ordered_json(s / static_cast<double>(ids.size()));
  j["continuations"] = ids;
  return j;
}

ordered_json ms_json(const std::vector<double>& ms) {
  std::vector<double> v;
  for (double x : ms)
    if (!std::isnan(x)) v.push_back(x);
  ordered_json j;
  j["n"] = static_cast<int64_t>(v.size());
  if (v.empty()) {
    for (const char* k : {"mean", "median", "p90", "max"}) j[k] = nullptr;
    return j;
  }
  std::sort(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += x;
  j["mean"] = s / static_cast<double>(v.size());
  j["median"] = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  j["p90"] = v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.9 * static_cast<double>(v.size()))) - 1)];
  j["max"] = v.back();
  return j;
}

namespace {

struct Counts {
  int64_t facts = 0, eff = 0, eff_p = 0, para = 0, para_n = 0, neigh = 0, neigh_n = 0, at_insert = 0, at_insert_n = 0, refused = 0;
  void add(const EditFact& f, const FactResult& r) {
    ++facts;
    refused += !r.refused.empty();
    eff += r.top1 == f.target_id;
    eff_p += r.p_target > r.p_old;
    for (int64_t t : r.para_top1) para += t == f.target_id;
    para_n += static_cast<int64_t>(r.para_top1.size());
    for (size_t i = 0; i < r.neigh_top1.size(); ++i) neigh += r.neigh_top1[i] == r.neigh_base.at(i);
    neigh_n += static_cast<int64_t>(r.neigh_top1.size());
    if (r.at_insert_top1 >= 0) {
      at_insert += r.at_insert_top1 == f.target_id;
      ++at_insert_n;
    }
  }
  ordered_json json() const {
    ordered_json j;
    j["facts"] = facts;
    j["efficacy"] = ratio(eff, facts);
    j["efficacy_prob"] = ratio(eff_p, facts);
    j["paraphrase"] = ratio(para, para_n);
    j["neighbourhood"] = ratio(neigh, neigh_n);
    if (at_insert_n > 0) j["efficacy_at_insert"] = ratio(at_insert, at_insert_n);
    j["refused"] = refused;
    return j;
  }
};

}  // namespace

ordered_json summary_json(const std::vector<FactResult>& res, size_t n, const std::vector<EditFact>& facts) {
  Counts c;
  for (size_t i = 0; i < n; ++i) c.add(facts[i], res[i]);
  return c.json();
}

ordered_json per_relation_json(const std::vector<FactResult>& res, size_t n, const std::vector<EditFact>& facts) {
  std::vector<std::string> order;
  std::map<std::string, Counts> by;
  for (size_t i = 0; i < n; ++i) {
    if (!by.count(facts[i].relation)) order.push_back(facts[i].relation);
    by[facts[i].relation].add(facts[i], res[i]);
  }
  ordered_json j = ordered_json::object();
  for (const auto& r : order) j[r] = by[r].json();
  return j;
}

ordered_json fact_json(const EditFact& f, const FactResult& r) {
  ordered_json j;
  j["id"] = f.id;
  j["relation"] = f.relation;
  j["target_id"] = f.target_id;
  j["old_id"] = r.old_id;
  j["top1"] = r.top1;
  j["p_target"] = num(r.p_target);
  j["p_old"] = num(r.p_old);
  j["paraphrase_top1"] = r.para_top1;
  j["neighbourhood_top1"] = r.neigh_top1;
  j["neighbourhood_base"] = r.neigh_base;
  if (!std::isnan(r.insert_ms)) {
    j["insert_ms"] = r.insert_ms;
    j["layer"] = r.layer;
    j["feature"] = r.feature;
    j["insert_probability"] = num(r.insert_p);
  }
  if (r.at_insert_top1 >= 0) j["at_insert_top1"] = r.at_insert_top1;
  if (!r.refused.empty()) j["refused"] = r.refused;
  return j;
}

ordered_json global_json(const GlobalResult& g, double base_ppl, const std::vector<std::vector<int32_t>>& base_fluency) {
  ordered_json j;
  j["real_retention"] = g.real_total ? ordered_json(1.0 - static_cast<double>(g.real_changed.size()) / static_cast<double>(g.real_total))
                                     : ordered_json(nullptr);
  j["real_changed"] = g.real_changed;
  j["perplexity"] = num(g.perplexity);
  j["perplexity_change"] = num(g.perplexity / base_ppl - 1.0);
  j["fluency"] = fluency_json(g.fluency_ids);
  const ordered_json b = fluency_json(base_fluency);
  j["fluency_change"] = j["fluency"]["entropy"].is_number() && b["entropy"].is_number()
                            ? ordered_json(j["fluency"]["entropy"].get<double>() - b["entropy"].get<double>())
                            : ordered_json(nullptr);
  return j;
}

namespace {

std::string pct(const ordered_json& v) {
  if (!v.is_number()) return "—";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100.0 * v.get<double>());
  return b;
}

std::string fmt(const ordered_json& v, const char* f) {
  if (!v.is_number()) return "—";
  char b[48];
  std::snprintf(b, sizeof b, f, v.get<double>());
  return b;
}

void relations_table(const ordered_json& per) {
  std::printf("  %-20s %6s %9s %9s %11s %14s\n", "relation", "facts", "efficacy", "P>P(old)", "paraphrase", "neighbourhood");
  for (const auto& [rel, c] : per.items())
    std::printf("  %-20s %6lld %9s %9s %11s %14s\n", rel.c_str(), static_cast<long long>(c["facts"].get<int64_t>()),
                pct(c["efficacy"]).c_str(), pct(c["efficacy_prob"]).c_str(), pct(c["paraphrase"]).c_str(),
                pct(c["neighbourhood"]).c_str());
}

std::string secs(const ordered_json& ms) {
  return ms.is_number() ? fmt(ordered_json(ms.get<double>() / 1e3), "%.2f") : "—";
}

void edit_line(const ordered_json& s) {
  std::printf("  efficacy %s (top-1), %s (P(target) > P(old)); paraphrase %s; neighbourhood %s\n", pct(s["efficacy"]).c_str(),
              pct(s["efficacy_prob"]).c_str(), pct(s["paraphrase"]).c_str(), pct(s["neighbourhood"]).c_str());
  const auto& t = s["insert_ms"];
  std::printf("  INSERT: mean %s s, median %s s, p90 %s s, max %s s\n", secs(t["mean"]).c_str(), secs(t["median"]).c_str(),
              secs(t["p90"]).c_str(), secs(t["max"]).c_str());
  if (s.value("refused", int64_t{0}) > 0)
    std::printf("  refused by INSERT (nothing installed, counted as not learned): %lld facts\n",
                static_cast<long long>(s["refused"].get<int64_t>()));
}

std::string signed_pct(const ordered_json& v) {
  if (!v.is_number()) return "—";
  char b[32];
  std::snprintf(b, sizeof b, "%+.3f%%", 100.0 * v.get<double>());
  return b;
}

}  // namespace

void print_report(const ordered_json& out) {
  const auto& b = out["base"];
  std::printf("edit-eval of %s with %s: %lld facts, MODE %s, %lld threads\n", out["vindex"].get<std::string>().c_str(),
              out["set"].get<std::string>().c_str(), static_cast<long long>(out["facts"].get<int64_t>()),
              out["mode"] == "knn" ? "KNN" : out["mode"] == "robust" ? "ROBUST" : out["mode"] == "subject" ? "SUBJECT" : "COMPOSE", static_cast<long long>(out["threads"].get<int64_t>()));
  std::printf("base: facts already answered %lld; neighbourhood prompts answered %s; real-fact prompts answered %s of %lld; "
              "held-out perplexity %s (%lld tokens); fluency %s\n",
              static_cast<long long>(b["facts_already_answered"].get<int64_t>()), pct(b["neighbourhood_answered"]).c_str(),
              pct(b["real_answered"]).c_str(), static_cast<long long>(b["real_prompts"].get<int64_t>()),
              fmt(b["perplexity"], "%.4f").c_str(), static_cast<long long>(b["heldout_tokens"].get<int64_t>()),
              fmt(b["fluency"]["entropy"], "%.3f").c_str());
  if (out.contains("single")) {
    const auto& s = out["single"];
    std::printf("\nsingle edits (each alone: INSERT, measure, REMOVE PATCH), %lld facts:\n",
                static_cast<long long>(s["edits"].get<int64_t>()));
    edit_line(s["summary"]);
    for (const auto& g : s["global"])
      std::printf("  after %-24s real-fact retention %s, perplexity %s, fluency %s (%s)\n", g["fact"].get<std::string>().c_str(),
                  pct(g["real_retention"]).c_str(), signed_pct(g["perplexity_change"]).c_str(),
                  fmt(g["fluency"]["entropy"], "%.3f").c_str(), fmt(g["fluency_change"], "%+.3f").c_str());
    relations_table(s["per_relation"]);
    std::printf("  REMOVE PATCH: held-out logits bit-identical to the base: %s\n", s["remove_patch_bit_identical"].get<bool>() ? "yes" : "NO");
  }
  if (out.contains("sequential")) {
    const auto& s = out["sequential"];
    std::printf("\nsequential edits (%lld in one patch; every earlier edit re-tested every %lld and after the last):\n",
                static_cast<long long>(s["edits"].get<int64_t>()), static_cast<long long>(s["every"].get<int64_t>()));
    std::printf("  %6s %9s %9s %11s %14s %10s %11s %8s %9s\n", "edits", "efficacy", "P>P(old)", "paraphrase", "neighbourhood",
                "real", "perplexity", "fluency", "insert_s");
    for (const auto& p : s["curve"])
      std::printf("  %6lld %9s %9s %11s %14s %10s %11s %8s %9s\n", static_cast<long long>(p["edits"].get<int64_t>()),
                  pct(p["efficacy"]).c_str(), pct(p["efficacy_prob"]).c_str(), pct(p["paraphrase"]).c_str(),
                  pct(p["neighbourhood"]).c_str(), pct(p["real_retention"]).c_str(), signed_pct(p["perplexity_change"]).c_str(),
                  fmt(p["fluency"]["entropy"], "%.3f").c_str(),
                  secs(p["insert_ms"]["mean"]).c_str());
    std::printf("  efficacy right after each INSERT: %s\n", pct(s["summary"].value("efficacy_at_insert", ordered_json())).c_str());
    edit_line(s["summary"]);
    relations_table(s["per_relation"]);
    std::printf("  REMOVE PATCH: held-out logits bit-identical to the base: %s\n", s["remove_patch_bit_identical"].get<bool>() ? "yes" : "NO");
  }
}

}  // namespace larql::cli
