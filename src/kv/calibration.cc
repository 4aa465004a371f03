#include "kv/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "compute/logits.h"
#include "kv/cached_residual.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/text_file.h"

namespace larql {
namespace {

ColdCodec codec_from_name(const std::string& s, const std::string& where) {
  if (s == "f32") return ColdCodec::F32;
  if (s == "bf16") return ColdCodec::Bf16;
  if (s == "int8") return ColdCodec::Int8;
  throw Error(ErrorKind::Format, where + ": unknown codec '" + s + "' (accepted: f32, bf16, int8)");
}

int idx(ColdCodec c) { return c == ColdCodec::F32 ? 0 : c == ColdCodec::Bf16 ? 1 : 2; }

std::string how_to_make() {
  return "run `larql calibrate MODEL --engine boundary-per-layer --budget X` (X: KL budget in nats, e.g. 0.01)";
}

}  // namespace

std::string bpl_record_path(const std::string& model_path) { return model_path + ".bpl.json"; }

std::string corpus_id(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens)
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint8_t>(static_cast<uint32_t>(t) >> (8 * b));
      h *= 1099511628211ull;
    }
  char buf[40];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

/// "xxh3:<16 hex>" of the record without its "checksum" member, dumped compactly (keys sorted:
/// nlohmann::json objects are ordered maps, so the dump is canonical).
std::string record_checksum(nlohmann::json j) {
  j.erase("checksum");
  return "xxh3:" + hex64(xxh3_64(j.dump()));
}

void require_finite(double v, const std::string& what, const std::string& path) {
  if (!std::isfinite(v)) throw Error(ErrorKind::Format, path + ": " + what + " is not a finite number");
}

}  // namespace

void write_bpl_record(const std::string& path, const BplRecord& r) {
  require_finite(r.budget, "budget", path);
  require_finite(r.bound, "bound", path);
  nlohmann::json j;
  j["version"] = r.version;
  j["engine"] = "boundary-per-layer";
  j["model_fingerprint"] = r.fingerprint;
  j["window"] = r.window;
  j["corpus_id"] = r.corpus_id;
  j["corpus_tokens"] = r.corpus_tokens;
  j["budget"] = r.budget;
  j["bound"] = r.bound;
  j["samples"] = r.samples;
  j["joint_cost"] = r.joint;
  j["noise"] = r.noise;
  j["layers"] = nlohmann::json::array();
  for (size_t i = 0; i < r.policy.size(); ++i) {
    nlohmann::json l = {{"layer", i},
                        {"codec", cold_codec_name(r.policy[i])},
                        {"cost", {{"f32", r.cost[i][0]}, {"bf16", r.cost[i][1]}, {"int8", r.cost[i][2]}}},
                        {"cold_rows", r.cold_rows[i]}};
    if (i < r.cost_se.size())
      l["cost_se"] = {{"f32", r.cost_se[i][0]}, {"bf16", r.cost_se[i][1]}, {"int8", r.cost_se[i][2]}};
    j["layers"].push_back(l);
  }
  j["checksum"] = record_checksum(j);
  write_file_atomic(path, j.dump(2) + "\n", "calibration record");
}

BplRecord read_bpl_record(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(ErrorKind::BackendUnavailable,
                "boundary-per-layer: no calibration record at " + path + "; " + how_to_make());
  const std::string text = read_text_file(path, "the calibration record", 64 << 20);
  BplRecord r;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    r.version = j.at("version").get<int>();
    if (r.version != 2)
      throw Error(ErrorKind::Format, path + ": record version " + std::to_string(r.version) +
                                         " (this build reads 2; calibrate again)");
    const std::string want = j.at("checksum").get<std::string>();
    if (want != record_checksum(j))
      throw Error(ErrorKind::Format, path + ": checksum mismatch (stored " + want + ", contents " + record_checksum(j) +
                                         "): the record is damaged or was edited; calibrate again");
    r.fingerprint = j.at("model_fingerprint").get<std::string>();
    r.window = j.at("window").get<int64_t>();
    r.corpus_id = j.at("corpus_id").get<std::string>();
    r.corpus_tokens = j.value("corpus_tokens", int64_t{0});
    r.budget = j.at("budget").get<double>();
    r.bound = j.at("bound").get<double>();
    r.samples = j.at("samples").get<int64_t>();
    r.joint = j.value("joint_cost", 0.0);
    r.noise = j.value("noise", 0.0);
    require_finite(r.budget, "budget", path);
    require_finite(r.bound, "bound", path);
    if (r.window < 1) throw Error(ErrorKind::Format, path + ": window " + std::to_string(r.window) + " is not >= 1");
    for (const auto& l : j.at("layers")) {
      r.policy.push_back(codec_from_name(l.at("codec").get<std::string>(), path));
      const auto& c = l.at("cost");
      r.cost.push_back({c.at("f32").get<double>(), c.at("bf16").get<double>(), c.at("int8").get<double>()});
      for (double v : r.cost.back()) require_finite(v, "a layer cost", path);
      r.cold_rows.push_back(l.value("cold_rows", int64_t{0}));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Format, path + ": malformed calibration record: " + e.what());
  }
  return r;
}

std::vector<ColdCodec> choose_policy(const std::vector<std::array<double, 3>>& cost, const std::vector<int64_t>& cold_rows,
                                     int64_t hidden, double budget, double* bound) {
  std::vector<ColdCodec> pol(cost.size(), ColdCodec::F32);
  const ColdCodec codecs[3] = {ColdCodec::F32, ColdCodec::Bf16, ColdCodec::Int8};
  auto bytes = [&](size_t li, ColdCodec c) {
    return static_cast<double>(std::max<int64_t>(1, cold_rows[li])) * 4.0 * static_cast<double>(cold_codec_words(c, hidden));
  };
  double total = 0;
  for (;;) {
    double best = -1, best_dc = 0;
    size_t best_l = 0;
    ColdCodec best_c = ColdCodec::F32;
    for (size_t li = 0; li < cost.size(); ++li)
      for (int ci = idx(pol[li]) + 1; ci < 3; ++ci) {
        const double dc = std::max(0.0, cost[li][static_cast<size_t>(ci)] - cost[li][static_cast<size_t>(idx(pol[li]))]);
        if (total + dc > budget) continue;
        const double ratio = (bytes(li, pol[li]) - bytes(li, codecs[ci])) / std::max(dc, 1e-12);
        if (ratio > best) best = ratio, best_l = li, best_c = codecs[ci], best_dc = dc;
      }
    if (best < 0) break;
    pol[best_l] = best_c;
    total += best_dc;
  }
  // The bound: the summed measured cost of the chosen codecs.
  double b = 0;
  for (size_t li = 0; li < cost.size(); ++li) b += cost[li][static_cast<size_t>(idx(pol[li]))];
  if (bound) *bound = b;
  return pol;
}

BplRecord calibrate_boundary_per_layer(std::shared_ptr<Forward> fwd, const std::vector<int32_t>& corpus,
                                       const CalibrationOptions& opt, const std::function<void(int, int)>& progress) {
  const ModelConfig& c = fwd->config();
  const int64_t S = opt.decode_steps, P = static_cast<int64_t>(corpus.size()) - S;
  if (S < 1) throw Error(ErrorKind::InvalidArgument, "calibration needs at least one decode step");
  if (opt.window < 1) throw Error(ErrorKind::InvalidArgument, "calibration needs a window >= 1 (a cold tier to encode)");
  if (P <= opt.window)
    throw Error(ErrorKind::InvalidArgument, "calibration corpus of " + std::to_string(corpus.size()) +
                                                " tokens is too short for window " + std::to_string(opt.window) + " + " +
                                                std::to_string(S) + " decode steps");
  const std::vector<int32_t> prompt(corpus.begin(), corpus.begin() + P);
  std::vector<float> lg(static_cast<size_t>(c.vocab));
  auto logits = [&](const std::vector<float>& h) {
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  };
  // Reference: every cold tier f32 (= markov-rs, exact). Its per-step log-probs are kept.
  CachedResidualEngine base(fwd, opt.window, std::vector<ColdCodec>(static_cast<size_t>(c.n_layers), ColdCodec::F32));
  base.prefill(prompt);
  const CachedResidualEngine after_prefill = base;
  std::vector<std::vector<float>> ref(static_cast<size_t>(S));
  std::vector<double> lp, lq;
  for (int64_t s = 0; s < S; ++s) {
    compute::log_softmax(logits(base.decode_step(corpus[static_cast<size_t>(P + s)])).data(), c.vocab, lp);
    ref[static_cast<size_t>(s)].assign(lp.begin(), lp.end());
  }
  BplRecord r;
  r.fingerprint = fwd->model().fingerprint();
  r.window = opt.window;
  r.corpus_id = corpus_id(corpus);
  r.corpus_tokens = static_cast<int64_t>(corpus.size());
  r.budget = opt.budget;
  r.samples = S;
  r.cost.assign(static_cast<size_t>(c.n_layers), {0.0, 0.0, 0.0});
  r.cost_se.assign(static_cast<size_t>(c.n_layers), {0.0, 0.0, 0.0});
  for (int64_t li = 0; li < c.n_layers; ++li) {
    // Cold rows of this layer at the end of the context (bytes weight for the greedy choice).
    const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
    const int64_t n = P + S, retain = lc.sliding ? std::max<int64_t>(1, lc.window - 1) : n;
    r.cold_rows.push_back(std::max<int64_t>(0, std::min(n, retain) - opt.window));
  }
  // Mean KL(exact || e) over the S teacher-forced steps, e with some layers' codecs changed.
  // Also the standard error of that mean over the steps (the measurement's noise).
  double last_se = 0;
  auto mean_kl = [&](CachedResidualEngine e) {
    double sum = 0, sum2 = 0;
    for (int64_t s = 0; s < S; ++s) {
      compute::log_softmax(logits(e.decode_step(corpus[static_cast<size_t>(P + s)])).data(), c.vocab, lq);
      // The reference's log-probabilities are kept in f32 (S x vocab of them).
      const double k = compute::kl_nats(ref[static_cast<size_t>(s)].data(), lq.data(), c.vocab);
      sum += k;
      sum2 += k * k;
    }
    const double n = static_cast<double>(S), mean = sum / n;
    last_se = S > 1 ? std::sqrt(std::max(0.0, (sum2 - n * mean * mean) / (n - 1)) / n) : 0.0;
    return mean;
  };
  const int total = static_cast<int>(c.n_layers * 2);
  int done = 0;
  for (int64_t li = 0; li < c.n_layers; ++li)
    for (ColdCodec codec : {ColdCodec::Bf16, ColdCodec::Int8}) {
      CachedResidualEngine e = after_prefill;
      e.set_layer_codec(li, codec);
      r.cost[static_cast<size_t>(li)][static_cast<size_t>(idx(codec))] = mean_kl(std::move(e));
      r.cost_se[static_cast<size_t>(li)][static_cast<size_t>(idx(codec))] = last_se;
      if (progress) progress(++done, total);
    }
  // Per-layer errors do not add exactly (measured: all-int8 at a summed 0.006 nats gave 0.025
  // end to end), so the chosen policy is also measured jointly on the same steps; while the
  // joint cost is over the budget the greedy choice is redone under half the effective budget.
  // bound = max(summed per-layer cost, joint cost).
  auto joint_cost = [&](const std::vector<ColdCodec>& pol) {
    CachedResidualEngine e = after_prefill;
    for (int64_t li = 0; li < c.n_layers; ++li)
      if (pol[static_cast<size_t>(li)] != ColdCodec::F32) e.set_layer_codec(li, pol[static_cast<size_t>(li)]);
    return mean_kl(std::move(e));
  };
  double eff = opt.budget, summed = 0;
  for (int iter = 0;; ++iter) {
    r.policy = choose_policy(r.cost, r.cold_rows, c.hidden, eff, &summed);
    const bool all_f32 = std::all_of(r.policy.begin(), r.policy.end(), [](ColdCodec x) { return x == ColdCodec::F32; });
    r.joint = all_f32 ? 0.0 : joint_cost(r.policy);
    if (r.joint <= opt.budget || all_f32 || iter >= 12) break;
    eff *= 0.5;
  }
  r.bound = std::max(summed, r.joint);
  std::vector<double> ses;
  for (const auto& se : r.cost_se) ses.insert(ses.end(), {se[1], se[2]});
  std::nth_element(ses.begin(), ses.begin() + static_cast<std::ptrdiff_t>(ses.size() / 2), ses.end());
  r.noise = ses.empty() ? 0.0 : ses[ses.size() / 2];
  return r;
}

std::unique_ptr<Engine> make_boundary_per_layer(std::shared_ptr<Forward> fwd, const std::string& record_path,
                                                int64_t window, int64_t layers, double budget) {
  const ModelConfig& c = fwd->config();
  if (layers > 0 && layers != c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "boundary-per-layer: layers=" + std::to_string(layers) + " but the model has " +
                                                std::to_string(c.n_layers) + " layers (layers is the model's)");
  std::error_code ec;
  if (!std::filesystem::exists(record_path, ec)) {
    // Uncalibrated: bf16 on every layer, the codec whose measured cost is smallest among those
    // that compress (markov-rs-codec's bf16 contract: mean KL <= 0.01 nats, measured ~5e-4).
    if (budget >= 0)
      throw Error(ErrorKind::BackendUnavailable, "boundary-per-layer: budget=" + std::to_string(budget) +
                                                     " needs a calibration record, and there is none at " + record_path +
                                                     "; " + how_to_make());
    const int64_t w = window > 0 ? window : kUncalibratedWindow;
    auto e = std::make_unique<CachedResidualEngine>(std::move(fwd), w,
                                                    std::vector<ColdCodec>(static_cast<size_t>(c.n_layers), ColdCodec::Bf16));
    e->set_config_note("uncalibrated");
    e->set_user_note("no calibration record at " + record_path + ": running bf16 on every layer (window " +
                     std::to_string(w) + "); to choose per-layer codecs under a KL budget, " + how_to_make());
    return e;
  }
  const BplRecord r = read_bpl_record(record_path);
  if (r.fingerprint != fwd->model().fingerprint())
    throw Error(ErrorKind::InvalidArgument, "boundary-per-layer: calibration record " + record_path +
                                                " is for model fingerprint " + r.fingerprint + ", this model is " +
                                                fwd->model().fingerprint() + "; " + how_to_make());
  if (static_cast<int64_t>(r.policy.size()) != c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "boundary-per-layer: record " + record_path + " has " +
                                                std::to_string(r.policy.size()) + " layers, the model " +
                                                std::to_string(c.n_layers));
  if (window > 0 && window != r.window)
    throw Error(ErrorKind::InvalidArgument, "boundary-per-layer: record " + record_path + " was calibrated at window=" +
                                                std::to_string(r.window) + ", not " + std::to_string(window) +
                                                "; recalibrate with --window " + std::to_string(window));
  if (budget >= 0 && r.bound > budget)
    throw Error(ErrorKind::InvalidArgument, "boundary-per-layer: record " + record_path + " has bound " +
                                                std::to_string(r.bound) + " nats, over budget=" + std::to_string(budget) +
                                                "; " + how_to_make());
  auto e = std::make_unique<CachedResidualEngine>(std::move(fwd), r.window, r.policy);
  char note[64];
  std::snprintf(note, sizeof note, "bound=%.3g", r.bound);
  e->set_config_note(note);
  return e;
}

}  // namespace larql
