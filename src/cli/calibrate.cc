// `larql calibrate MODEL --engine boundary-per-layer --budget NATS [--window N] [--corpus FILE]
// [--tokens N] [--steps N] [-o RECORD]`: measure each layer's KL cost per cold-tier codec and
// write the boundary-per-layer record (default <model>.bpl.json). Corpus: --corpus FILE, else
// /usr/share/common-licenses/GPL-3 when present; its first --tokens tokens.
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "cli/progress.h"
#include "kv/calibration.h"
#include "kv/registry.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct CalibrateArgs {
  std::string model, engine = "boundary-per-layer", corpus, out;
  double budget = -1;
  int64_t window = 64, tokens = 1000, steps = 12;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  int threads = 0;
};

void run(const CalibrateArgs& a) {
  const EngineSpec spec = parse_cli_engine_spec(a.engine);
  if (spec.name != "boundary-per-layer")
    throw Error(ErrorKind::InvalidArgument, "calibrate: only --engine boundary-per-layer is calibrated (got '" + spec.name + "')");
  const std::string gpl = "/usr/share/common-licenses/GPL-3";
  std::error_code ec;
  const std::string file = !a.corpus.empty() ? a.corpus : (std::filesystem::exists(gpl, ec) ? gpl : "");
  if (file.empty())
    throw Error(ErrorKind::InvalidArgument, "calibrate: give a corpus of real text with --corpus FILE "
                                            "(the default, " + gpl + ", is not on this machine)");
  const std::string text = read_text_file(file, "the corpus", a.max_input_bytes);
  const std::string& source = file;
  Loaded l = load(a.model, a.threads, "calibrate");
  // -o, else the spec's record (the CLI sets it from $LARQL_BPL_RECORD), else <model>.bpl.json.
  const std::string record = spec.get_string("record", "");
  const std::string out = !a.out.empty() ? a.out : !record.empty() ? record : bpl_record_path(l.model->path());
  check_output_path(out, "-o");  // before minutes of measuring
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
  std::printf("%5s %6s %22s %22s  %s\n", "layer", "cold", "bf16 KL (± s.e.)", "int8 KL (± s.e.)", "codec");
  for (size_t li = 0; li < r.policy.size(); ++li)
    std::printf("%5zu %6lld %11.3g ± %-8.2g %11.3g ± %-8.2g  %s\n", li, static_cast<long long>(r.cold_rows[li]),
                r.cost[li][1], r.cost_se[li][1], r.cost[li][2], r.cost_se[li][2], cold_codec_name(r.policy[li]));
  std::printf("measurement noise: median standard error %.3g nats over %lld steps; costs closer than that are "
              "not told apart (more --steps lowers it)\n",
              r.noise, static_cast<long long>(r.samples));
  write_bpl_record(out, r);
  std::printf("bound %.4g nats (budget %g), corpus %s, %lld samples -> %s\n", r.bound, r.budget, r.corpus_id.c_str(),
              static_cast<long long>(r.samples), out.c_str());
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* s = app.add_subcommand("calibrate", "measure per-layer codec KL costs and write a boundary-per-layer record");
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_option("--engine", a->engine, "engine to calibrate (boundary-per-layer)")->capture_default_str();
  add_float_flag(s, "--budget", a->budget, {0, 100, true, false}, "KL budget in nats for the summed per-layer cost,")
      ->required()
      ->default_str("");
  add_int_flag(s, "--window", a->window, 1, 32768, "hot-tier window the record is for,");
  s->add_option("--corpus", a->corpus, "real text (default: /usr/share/common-licenses/GPL-3 if present)");
  add_int_flag(s, "--tokens", a->tokens, 3, 32768, "corpus tokens used (BOS first; the text repeats if shorter),");
  add_int_flag(s, "--steps", a->steps, 1, 4096, "teacher-forced decode steps measured per layer and codec,");
  add_max_input_flag(s, a->max_input_bytes);
  s->add_option("-o,--output", a->out, "record path (default: <model>.bpl.json, or $LARQL_BPL_RECORD)");
  add_threads_flag(s, a->threads);
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
