// `larql accuracy MODEL --engines "a;b" [--quick] [--json] [--corpus parametric|in-context|conflict|all]`:
// per engine and corpus, first-token top-1 match and surprisal of the expected answer, plus
// KL / JS / cosine of the next-token distribution vs a standard engine fed the same prompt.
// Corpora and protocol: src/accuracy/accuracy.h.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "accuracy/accuracy.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct AccuracyArgs {
  std::string model, engines = "standard", corpus = "all", data;
  int threads = 0;
  bool quick = false, json = false;
};

void run(const AccuracyArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<EngineSpec> specs = parse_cli_engine_list(a.engines);  // fail before loading
  std::vector<std::string> corpora;
  for (const char* c : {"parametric", "in-context", "conflict", "all"})
    if (a.corpus == c) corpora.push_back(c);
  if (corpora.empty())
    throw Error(ErrorKind::InvalidArgument,
                "--corpus must be parametric, in-context, conflict or all (got '" + a.corpus + "')");
  const char* env_data = std::getenv("LARQL_ACCURACY_DATA");  // the library reads no environment
  const std::string data_dir = accuracy::find_data_dir(a.data, env_data != nullptr ? env_data : "");
  Loaded l = load(a.model, a.threads, "accuracy");
  const auto cases =
      accuracy::build_cases(l.tokenizer, corpora, a.quick, data_dir, l.model->config().context_length);
  std::map<std::string, int64_t> case_count;
  for (const auto& c : cases) ++case_count[c.corpus];

  Progress bar("accuracy", static_cast<int64_t>(cases.size() * specs.size()));
  const auto scores =
      accuracy::run_suite(l.forward, l.tokenizer, specs, cases, [&](int64_t done, int64_t) { bar.update(done); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (a.json) {
    nlohmann::json out = {{"model", l.model->path()}, {"quick", a.quick}, {"corpus", a.corpus},
                          {"threads", l.forward->pool().size()}, {"wall_s", wall},
                          {"kl", "KL(standard || engine), nats"}, {"js", "Jensen-Shannon, nats"},
                          {"cosine", "cosine of the probability vectors"}};
    nlohmann::json blocks = nlohmann::json::array();
    std::string current;
    for (const auto& s : scores) {
      if (s.corpus != current) {
        blocks.push_back({{"corpus", s.corpus}, {"cases", case_count[s.corpus]}, {"engines", nlohmann::json::array()}});
        current = s.corpus;
      }
      nlohmann::json row = {{"engine", s.engine}};
      if (!s.skipped.empty()) {
        row["skipped"] = s.skipped;
      } else {
        row.update({{"cases", s.cases}, {"top1", s.top1}, {"mean_bits", s.mean_bits}, {"mean_kl_vs_standard", s.mean_kl},
                    {"mean_js_vs_standard", s.mean_js}, {"mean_cosine_vs_standard", s.mean_cosine}});
        if (s.parametric_rate >= 0) row["parametric_rate"] = s.parametric_rate;
      }
      blocks.back()["engines"].push_back(row);
    }
    out["corpora"] = blocks;
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s, %d threads%s; KL = KL(standard || engine) nats, JS nats, cos = cosine of probabilities\n",
              l.model->config().name.c_str(), l.forward->pool().size(), a.quick ? ", --quick" : "");
  std::string current;
  for (const auto& s : scores) {
    if (s.corpus != current) {
      current = s.corpus;
      const bool conflict = s.corpus == "conflict";
      std::printf("\n== %s (%lld cases) ==\n", s.corpus.c_str(), (long long)case_count[s.corpus]);
      std::printf("%-28s %7s %8s %10s %10s %9s%s\n", "engine", "top-1", "bits", "KL", "JS", "cos",
                  conflict ? "  parametric" : "");
    }
    if (!s.skipped.empty()) {
      std::printf("%-28s skipped: %s\n", s.engine.c_str(), s.skipped.c_str());
      continue;
    }
    std::printf("%-28s %6.1f%% %8.3f %10.2e %10.2e %9.6f", s.engine.c_str(), 100 * s.top1, s.mean_bits, s.mean_kl,
                s.mean_js, s.mean_cosine);
    if (s.parametric_rate >= 0) std::printf("  %9.1f%%", 100 * s.parametric_rate);
    std::printf("\n");
  }
  std::printf("\nwall %.1f s\n", wall);
}

}  // namespace

void register_accuracy(CLI::App& app) {
  auto a = std::make_shared<AccuracyArgs>();
  CLI::App* s = app.add_subcommand("accuracy", "score engines on fact, needle-in-haystack and conflict corpora vs standard");
  s->add_option("model", a->model, kModelHelp)->required();
  add_engine_flag(s, a->engines, true);
  s->add_option("--corpus", a->corpus, "parametric, in-context, conflict or all")->capture_default_str();
  s->add_flag("--quick", a->quick, "a smoke run: every 4th fact/conflict item, needles at 512 and 1k only");
  s->add_option("--data", a->data, "directory with parametric.jsonl and conflict.jsonl (default: data/accuracy)");
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
