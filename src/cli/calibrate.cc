// `larql calibrate MODEL --engine boundary-per-layer --budget NATS [--window N] [--corpus FILE]
// [--tokens N] [--steps N] [-o RECORD]`: measure each layer's KL cost per cold-tier codec and
// write the boundary-per-layer record (default <model>.bpl.json). Corpus: --corpus FILE, else
// /usr/share/common-licenses/GPL-3 when present, else a built-in text; its first --tokens tokens.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/common.h"
#include "cli/progress.h"
#include "kv/calibration.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct CalibrateArgs {
  std::string model, engine = "boundary-per-layer", corpus, out;
  double budget = -1;
  int64_t window = 64, tokens = 1000, steps = 12;
  int threads = 0;
};

const char* kBuiltinCorpus =
    "The lighthouse keeper wrote in his log every evening: the direction of the wind, the height of the sea, "
    "the ships that passed and the ones that did not. Over forty years the entries grew shorter, but he never "
    "missed a day. When the light was automated, the log was sent to the museum in the harbour town, where "
    "visitors read it under glass and wondered what he had left out. ";

void run(const CalibrateArgs& a) {
  const EngineSpec spec = parse_engine_spec(a.engine);
  if (spec.name != "boundary-per-layer")
    throw Error(ErrorKind::InvalidArgument, "calibrate: only --engine boundary-per-layer is calibrated (got '" + spec.name + "')");
  if (!(a.budget >= 0)) throw Error(ErrorKind::InvalidArgument, "calibrate: --budget NATS (>= 0) is required");
  std::string text, source;
  const std::string gpl = "/usr/share/common-licenses/GPL-3";
  const std::string file = !a.corpus.empty() ? a.corpus : (std::filesystem::exists(gpl) ? gpl : "");
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) throw Error(ErrorKind::Io, "calibrate: cannot read corpus " + file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    source = file;
  } else {
    text = kBuiltinCorpus;
    source = "built-in text";
  }
  Loaded l = load(a.model, a.threads);
  std::vector<int32_t> ids{l.tokenizer.bos_id()};
  const auto body = l.tokenizer.encode(text, false, false);
  if (body.empty()) throw Error(ErrorKind::InvalidArgument, "calibrate: the corpus has no tokens");
  while (static_cast<int64_t>(ids.size()) < a.tokens) ids.insert(ids.end(), body.begin(), body.end());
  ids.resize(static_cast<size_t>(a.tokens));
  CalibrationOptions opt;
  opt.window = a.window;
  opt.budget = a.budget;
  opt.decode_steps = a.steps;
  std::printf("calibrating boundary-per-layer: %s, corpus %s (%lld tokens), window %lld, %lld steps, budget %g nats\n",
              l.model->path().c_str(), source.c_str(), static_cast<long long>(ids.size()),
              static_cast<long long>(a.window), static_cast<long long>(a.steps), a.budget);
  std::fflush(stdout);
  Progress bar("calibrate", l.model->config().n_layers * 2);
  const BplRecord r = calibrate_boundary_per_layer(l.forward, ids, opt, [&](int done, int) { bar.update(done); });
  std::printf("%5s %6s %12s %12s  %s\n", "layer", "cold", "bf16 KL", "int8 KL", "codec");
  for (size_t li = 0; li < r.policy.size(); ++li)
    std::printf("%5zu %6lld %12.4g %12.4g  %s\n", li, static_cast<long long>(r.cold_rows[li]), r.cost[li][1],
                r.cost[li][2], cold_codec_name(r.policy[li]));
  const std::string out = a.out.empty() ? bpl_record_path(l.model->path()) : a.out;
  write_bpl_record(out, r);
  std::printf("bound %.4g nats (budget %g), corpus %s, %lld samples -> %s\n", r.bound, r.budget, r.corpus_id.c_str(),
              static_cast<long long>(r.samples), out.c_str());
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* s = app.add_subcommand("calibrate", "measure per-layer codec KL costs and write a boundary-per-layer record");
  s->add_option("model", a->model, "GGUF path or a name in models/")->required();
  s->add_option("--engine", a->engine, "engine to calibrate (boundary-per-layer)")->capture_default_str();
  s->add_option("--budget", a->budget, "KL budget in nats for the summed per-layer cost")->required();
  s->add_option("--window", a->window, "hot-tier window the record is for")->capture_default_str();
  s->add_option("--corpus", a->corpus, "text file (default: /usr/share/common-licenses/GPL-3 if present, else built-in)");
  s->add_option("--tokens", a->tokens, "corpus tokens used (BOS first; the text repeats if shorter)")->capture_default_str();
  s->add_option("--steps", a->steps, "teacher-forced decode steps measured per layer and codec")->capture_default_str();
  s->add_option("-o,--output", a->out, "record path (default: <model>.bpl.json, or $LARQL_BPL_RECORD)");
  add_threads_flag(s, a->threads);
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
