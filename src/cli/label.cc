// `larql label NAME.vindex [--relations FILE] [--top-k K] [--threads N]`: probe labels for a
// vindex's FFN features (docs/cli.md "label"), written to NAME.vindex/feature_labels.json.
#include <chrono>
#include <cstdio>
#include <map>

#include "cli/common.h"
#include "cli/progress.h"
#include "lql/labeler.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::cli {

extern const char* const kDefaultRelationsJson;

namespace {

struct LabelArgs {
  std::string vindex, relations;
  int threads = 0, top_k = 32;
  double min_fraction = 0.5, min_margin = 0.3;
};

void run_label(const LabelArgs& a) {
  const auto rels = a.relations.empty()
                        ? lql::parse_relations(kDefaultRelationsJson, "the built-in data/relations.json")
                        : lql::parse_relations(read_text_file(a.relations, "the relation set"), a.relations);
  lql::Session s(lql::SessionOptions{a.threads, "."});
  s.use(a.vindex);
  int64_t total = 0;
  for (const auto& r : rels) total += static_cast<int64_t>(r.facts.size());
  Progress progress("label " + std::to_string(rels.size()) + " relations", total);
  lql::LabelOptions opt;
  opt.top_k = a.top_k;
  opt.min_fraction = a.min_fraction;
  opt.min_margin = a.min_margin;
  opt.progress = [&](int64_t done, int64_t) { progress.update(done); };
  const auto t0 = std::chrono::steady_clock::now();
  const auto labels = lql::label_features(s, rels, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lql::write_feature_labels(a.vindex, labels);
  std::map<std::string, int64_t> per;
  for (const auto& f : labels.features) ++per[f.relation];
  std::printf("wrote %s/feature_labels.json: %zu labelled features from %lld prompts in %.1f s\n", a.vindex.c_str(),
              labels.features.size(), static_cast<long long>(total), secs);
  for (const auto& r : rels) std::printf("  %-20s %lld features\n", r.name.c_str(), static_cast<long long>(per[r.name]));
}

}  // namespace

void register_label(CLI::App& app) {
  auto a = std::make_shared<LabelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "label", "label a vindex's FFN features with probe relations (writes feature_labels.json; docs/cli.md)");
  cmd->add_option("vindex", a->vindex, "a vindex with model weights (extract --level inference)")->required();
  cmd->add_option("--relations", a->relations,
                  "the relation set (JSON, data/relations.json's schema; default: the built-in data/relations.json)");
  add_int_flag(cmd, "--top-k", a->top_k, 1, 4096, "features that fire per layer and prompt (the largest positive gates),")
      ->default_str("32");
  add_float_flag(cmd, "--min-fraction", a->min_fraction, {0, 1},
                 "a label needs its relation's prompts to fire the feature at least this often,")
      ->default_str("0.5");
  add_float_flag(cmd, "--min-margin", a->min_margin, {0, 1},
                 "... and that fraction to beat every other relation's by this much,")
      ->default_str("0.3");
  add_threads_flag(cmd, a->threads);
  cmd->callback([a] { run_label(*a); });
}

}  // namespace larql::cli
