// `larql bench MODEL [--engines "a;b;c"]`: per engine, prefill and decode speed, state sizes, and
// agreement with the standard engine over the same decoded tokens.
//
// Protocol: every engine prefills the same fixed prompt; a standard engine runs in lockstep as
// the reference and its greedy tokens are fed to both (teacher forcing), so per-step
// KL(standard || engine) and top-1 agreement compare like with like. Only the engine under test
// is timed.
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "compute/logits.h"
#include "compute/roofline.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "util/error.h"
#include "util/parse.h"

namespace larql::cli {
namespace {

struct BenchArgs {
  FfnArgs ffn;
  std::string model, engines;
  int64_t prompt_tokens = 512, decode_tokens = 128;
  int threads = 0;
  bool json = false, roofline = false;
  std::vector<int64_t> batch;  ///< --batch 1,2,4,8,16: aggregate decode of that many standard sequences at once
};

// Each layer matrix one token reads, with the share of tokens that read it: 1 for dense ones, for
// a mixture of experts n_experts_used / n_experts per expert (its expected share).
template <typename F>
void each_matrix(const ModelConfig& c, const ModelWeights& w, F&& f) {
  const double share = c.n_experts > 0 ? static_cast<double>(c.n_experts_used) / static_cast<double>(c.n_experts) : 1.0;
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.shexp_gate,
                                &l.shexp_up, &l.shexp_down})
      f(*t, 1.0);
    for (const auto* v : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (const TensorView& t : *v) f(t, share);
  }
}

// Weight bytes one decode step reads: every layer matrix (experts by their share) and the lm_head.
double decode_bytes_per_token(const ModelConfig& c, const ModelWeights& w) {
  double b = static_cast<double>(w.lm_head.rows) * w.lm_head.row_bytes;
  each_matrix(c, w, [&](const TensorView& t, double share) { b += share * static_cast<double>(t.rows) * t.row_bytes; });
  return b;
}

// int8 operations (2 per multiply-add) of one prompt token through the layer matrices.
double prefill_ops_per_token(const ModelConfig& c, const ModelWeights& w) {
  double ops = 0;
  each_matrix(c, w, [&](const TensorView& t, double share) { ops += share * 2.0 * static_cast<double>(t.rows) * t.cols; });
  return ops;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Row {
  std::string engine, error;
  double prefill_tok_s = 0, decode_tok_s = 0, ms_per_token = 0, mean_kl = 0, max_kl = 0, top1 = 0;
  size_t hot = 0, cold = 0, state_file = 0;
  int64_t steps = 0;
};

std::vector<int32_t> bench_prompt(const Tokenizer& tok, int64_t n) {
  // A fixed, natural-looking text repeated to length, BOS first when the model uses one (Qwen has
  // none): the same ids every run.
  const std::string text =
      "The history of the printing press begins in the fifteenth century, when movable type changed how "
      "books were made, sold and read across Europe. ";
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto unit = tok.encode(text, false, false);
  while (static_cast<int64_t>(ids.size()) < n) ids.insert(ids.end(), unit.begin(), unit.end());
  ids.resize(static_cast<size_t>(n));
  return ids;
}

// N standard engines on the CPU, stepped together through StandardEngine::decode_batch.
void run_batch_cpu(const Loaded& l, const BenchArgs& a, const std::vector<int32_t>& text, int64_t n,
                   std::vector<double>& step_s) {
  const ModelConfig& c = l.model->config();
  std::vector<std::unique_ptr<StandardEngine>> engines;
  std::vector<StandardEngine::BatchStep> steps(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    engines.push_back(std::make_unique<StandardEngine>(l.forward, 0));
    std::vector<int32_t> ids{text[0]};  // the BOS, or the text's first token (shifted rest)
    ids.insert(ids.end(), text.begin() + 1 + i, text.begin() + a.prompt_tokens + i);
    engines.back()->prefill(ids);
    steps[static_cast<size_t>(i)].engine = engines.back().get();
    steps[static_cast<size_t>(i)].token = text[static_cast<size_t>(a.prompt_tokens + i)];
  }
  std::vector<float> x(static_cast<size_t>(n * c.hidden)), logits(static_cast<size_t>(n * c.vocab));
  for (int64_t step = 0; step < a.decode_tokens; ++step) {
    const double t0 = now_s();
    StandardEngine::decode_batch(*l.forward, steps);
    for (int64_t i = 0; i < n; ++i)
      std::copy(steps[i].hidden.begin(), steps[i].hidden.end(), x.begin() + i * c.hidden);
    l.forward->logits(x.data(), n, logits.data());
    for (int64_t i = 0; i < n; ++i)
      steps[static_cast<size_t>(i)].token = static_cast<int32_t>(compute::argmax(logits.data() + i * c.vocab, c.vocab));
    step_s.push_back(now_s() - t0);
  }
}

// `--batch 1,2,4,8,16`: for each N, N standard engines each prefill a prompt of --prompt-tokens
// (the bench text, shifted by one token per sequence), then step together --decode-tokens times
// through StandardEngine::decode_batch (one pass over the weights per step) with a batched
// lm_head and greedy tokens. Aggregate tok/s = N / median step time (step + logits + argmax).
// With --device cuda: N device sequences through DeviceModel::decode_batch (argmax on the GPU).
void run_batch(const BenchArgs& a) {
  const std::vector<int64_t>& sizes = a.batch;
  Loaded l = load(a.model, a.threads, "bench", &a.ffn);
  const ModelConfig& c = l.model->config();
  if (a.prompt_tokens + a.decode_tokens > c.context_length)
    throw Error(ErrorKind::ContextOverflow, "--prompt-tokens + --decode-tokens exceed the context of " +
                                                std::to_string(c.context_length));
  const int64_t max_n = *std::max_element(sizes.begin(), sizes.end());
  const auto text = bench_prompt(l.tokenizer, a.prompt_tokens + max_n);
  nlohmann::json list = nlohmann::json::array();
  if (!a.json)
    std::printf("%s, %d threads, standard engine, %lld-token prompts, %lld decode steps per sequence\n%10s %14s %14s %10s\n",
                c.name.c_str(), l.forward->pool().size(), (long long)a.prompt_tokens, (long long)a.decode_tokens,
                "sequences", "aggregate/s", "per-seq/s", "ms/step");
  double single = 0;
  const std::shared_ptr<DeviceModel>& device = l.handle->device();
  for (const int64_t n : sizes) {
    std::vector<double> step_s;
    if (device) {  // --device cuda: the backend's decode_batch, greedy tokens read on the device
      std::vector<std::unique_ptr<DeviceSequence>> seqs;
      std::vector<DeviceSequence*> ptrs;
      std::vector<int32_t> tok(static_cast<size_t>(n)), next(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int32_t> ids{text[0]};
        ids.insert(ids.end(), text.begin() + 1 + i, text.begin() + a.prompt_tokens + i);
        seqs.push_back(device->new_sequence(a.prompt_tokens + a.decode_tokens + 1));
        seqs.back()->append(ids.data(), static_cast<int64_t>(ids.size()));
        ptrs.push_back(seqs.back().get());
        tok[static_cast<size_t>(i)] = text[static_cast<size_t>(a.prompt_tokens + i)];
      }
      for (int64_t step = 0; step < a.decode_tokens; ++step) {
        const double t0 = now_s();
        device->decode_batch(ptrs, tok.data(), next.data());
        tok = next;
        step_s.push_back(now_s() - t0);
      }
    } else {
      run_batch_cpu(l, a, text, n, step_s);
    }
    std::sort(step_s.begin(), step_s.end());
    const size_t m = step_s.size();
    const double median = m % 2 ? step_s[m / 2] : 0.5 * (step_s[m / 2 - 1] + step_s[m / 2]);
    const double agg = static_cast<double>(n) / median;
    if (n == 1) single = agg;
    list.push_back({{"sequences", n}, {"aggregate_tok_s", agg}, {"per_sequence_tok_s", 1.0 / median},
                    {"ms_per_step", 1000.0 * median}, {"vs_single", single > 0 ? agg / single : 0.0}});
    if (!a.json) {
      std::printf("%10lld %14.1f %14.1f %10.2f", (long long)n, agg, 1.0 / median, 1000.0 * median);
      if (single > 0) std::printf("   %.2fx one sequence", agg / single);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (a.json) {
    nlohmann::json out = {{"model", l.model->path()}, {"prompt_tokens", a.prompt_tokens},
                          {"decode_tokens", a.decode_tokens}, {"threads", l.forward->pool().size()},
                          {"engine", "standard"}, {"batches", list}, {"peak_rss_bytes", peak_rss_bytes()}};
    std::printf("%s\n", out.dump().c_str());
  }
}

void run(const BenchArgs& a) {
  if (!a.batch.empty()) return run_batch(a);
  if (a.prompt_tokens < 1 || a.decode_tokens < 1)
    throw Error(ErrorKind::InvalidArgument, "--prompt-tokens and --decode-tokens must be >= 1");
  const std::vector<EngineSpec> specs = parse_cli_engine_list(a.engines);  // fail before loading
  Loaded l = load(a.model, a.threads, "bench", &a.ffn);
  const ModelConfig& c = l.model->config();
  if (a.prompt_tokens + a.decode_tokens > c.context_length)
    throw Error(ErrorKind::ContextOverflow, "--prompt-tokens + --decode-tokens exceed the context of " +
                                                std::to_string(c.context_length));
  const auto ids = bench_prompt(l.tokenizer, a.prompt_tokens);
  const int64_t V = c.vocab, steps = a.decode_tokens;

  // Reference: a standard engine runs in lockstep with each engine under test (so no
  // [steps, vocab] buffer is held); its greedy tokens are fed to both.
  std::vector<Row> rows;
  std::vector<float> logits(static_cast<size_t>(V)), ref(static_cast<size_t>(V));
  std::vector<double> lp, lq;
  const std::string tmp = (std::filesystem::temp_directory_path() / ("larql-bench-" + std::to_string(getpid()) + ".state")).string();
  for (const EngineSpec& spec : specs) {
    Row r;
    r.engine = spec.to_string();
    try {
      const bool is_reference = spec.name == "standard" && spec.params.empty();
      auto engine = make_engine(spec, l.forward);
      std::unique_ptr<Engine> reference = is_reference ? nullptr : make_engine(parse_engine_spec("standard"), l.forward);
      Progress bar(r.engine, steps);
      double t0 = now_s();
      auto h = engine->prefill(ids);
      // A GPU engine computes its logits on the device (docs/backends.md); the others here.
      if (!engine->device_logits(logits.data())) l.forward->logits(h.data(), 1, logits.data());
      r.prefill_tok_s = static_cast<double>(engine->n_past()) / (now_s() - t0);  // apollo runs more than the prompt
      std::vector<float> hr = reference ? reference->prefill(ids) : std::vector<float>();
      double kl_sum = 0;
      std::vector<double> step_s;  // wall time of each decode step (+ its logits)
      int64_t agree = 0;
      for (int64_t i = 0; i < steps; ++i) {
        if (reference) {
          l.forward->logits(hr.data(), 1, ref.data());
        } else {
          ref = logits;
        }
        const int32_t next = static_cast<int32_t>(compute::argmax(ref.data(), V));
        compute::log_softmax(ref.data(), V, lp);
        compute::log_softmax(logits.data(), V, lq);
        const double kl = compute::kl_nats(lp.data(), lq.data(), V);
        kl_sum += kl;
        r.max_kl = std::max(r.max_kl, kl);
        agree += compute::argmax(logits.data(), V) == next;
        bar.update(i + 1);
        if (i + 1 == steps) break;
        t0 = now_s();
        h = engine->decode_step(next);
        if (!engine->device_logits(logits.data())) l.forward->logits(h.data(), 1, logits.data());
        step_s.push_back(now_s() - t0);
        if (reference) hr = reference->decode_step(next);
      }
      r.steps = steps;
      // The median step: robust to the bursts of a shared machine (neighbours, page cache).
      if (!step_s.empty()) {
        std::sort(step_s.begin(), step_s.end());
        const size_t m = step_s.size();
        const double median = m % 2 ? step_s[m / 2] : 0.5 * (step_s[m / 2 - 1] + step_s[m / 2]);
        r.decode_tok_s = 1.0 / median;
        r.ms_per_token = 1000.0 * median;
      }
      r.mean_kl = kl_sum / steps;
      r.top1 = static_cast<double>(agree) / steps;
      const EngineMemory m = engine->memory();
      r.hot = m.hot_bytes;
      r.cold = m.cold_bytes;
      try {
        engine->save_state(tmp);
        r.state_file = std::filesystem::file_size(tmp);
        std::filesystem::remove(tmp);
      } catch (const Error& e) {
        // A backend that keeps the K/V elsewhere (a GPU, a pipeline's shards) writes no state
        // file: its speed is still measured (file MiB 0).
        if (e.kind() != ErrorKind::BackendUnavailable) throw;
      }
    } catch (const Error& e) {
      r.error = e.what();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
    }
    rows.push_back(r);
  }

  // Roofline: measured after the engines ran; the peak RSS is taken before its probe buffer.
  const size_t peak_rss = peak_rss_bytes();
  nlohmann::json roof;
  if (a.roofline) {
    const double bw = compute::read_bandwidth(l.forward->pool());
    const compute::Int8Peak peak = compute::int8_peak(l.forward->pool());
    const ModelConfig& mc = l.model->config();
    const double bytes = decode_bytes_per_token(mc, l.model->weights()), ops = prefill_ops_per_token(mc, l.model->weights());
    roof = {{"read_bytes_per_s", bw}, {"decode_bytes_per_token", bytes}, {"decode_bound_tok_s", bw / bytes},
            {"int8_ops_per_s", peak.ops_per_s}, {"int8_isa", peak.isa}, {"prefill_ops_per_token", ops},
            {"prefill_bound_tok_s", peak.ops_per_s > 0 ? peak.ops_per_s / ops : 0.0}};
    nlohmann::json per = nlohmann::json::array();
    for (const Row& r : rows) {
      if (!r.error.empty()) continue;
      per.push_back({{"engine", r.engine},
                     {"decode_fraction_of_bound", r.decode_tok_s * bytes / bw},
                     {"prefill_fraction_of_int8_peak", peak.ops_per_s > 0 ? r.prefill_tok_s * ops / peak.ops_per_s : 0.0}});
    }
    roof["engines"] = per;
  }

  // Every engine skipped: the run measured nothing, which is a failure (after the rows say why).
  const bool none_ran = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return !r.error.empty(); });
  auto fail_if_none_ran = [&] {
    if (none_ran) throw Error(ErrorKind::InvalidArgument, "bench: no engine ran (" + rows[0].error + ")");
  };
  if (a.json) {
    nlohmann::json out = {{"model", l.model->path()}, {"prompt_tokens", a.prompt_tokens},
                          {"decode_tokens", steps}, {"threads", l.forward->pool().size()},
                          {"peak_rss_bytes", peak_rss}, {"model_bytes", l.model->source().byte_size()}};
    if (a.roofline) out["roofline"] = roof;
    nlohmann::json list = nlohmann::json::array();
    for (const Row& r : rows) {
      if (!r.error.empty()) {
        list.push_back({{"engine", r.engine}, {"skipped", r.error}});
        continue;
      }
      list.push_back({{"engine", r.engine}, {"prefill_tok_s", r.prefill_tok_s}, {"decode_tok_s", r.decode_tok_s},
                      {"ms_per_token", r.ms_per_token}, {"hot_bytes", r.hot}, {"cold_bytes", r.cold},
                      {"state_file_bytes", r.state_file}, {"mean_kl_vs_standard", r.mean_kl},
                      {"max_kl_vs_standard", r.max_kl}, {"top1_vs_standard", r.top1}});
    }
    out["engines"] = list;
    // Single-engine runs also expose the first row at top level (scripts read these keys).
    if (rows.size() == 1 && rows[0].error.empty()) {
      out["engine"] = rows[0].engine;
      out["prefill_tok_s"] = rows[0].prefill_tok_s;
      out["decode_tok_s"] = rows[0].decode_tok_s;
      out["ms_per_token"] = rows[0].ms_per_token;
    }
    std::printf("%s\n", out.dump().c_str());
    fail_if_none_ran();
    return;
  }
  std::printf("%s, %d threads, prompt %lld tokens, %lld decode steps\n", c.name.c_str(), l.forward->pool().size(),
              (long long)a.prompt_tokens, (long long)steps);
  int w = 28;  // the engine column fits the longest spec
  for (const Row& r : rows) w = std::max(w, static_cast<int>(r.engine.size()));
  std::printf("%-*s %10s %10s %8s %10s %10s %10s %10s %7s\n", w, "engine", "prefill/s", "decode/s", "ms/tok",
              "hot MiB", "cold MiB", "file MiB", "mean KL", "top-1");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-*s skipped: %s\n", w, r.engine.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%-*s %10.1f %10.1f %8.2f %10.2f %10.2f %10.2f %10.2e %6.1f%%\n", w, r.engine.c_str(), r.prefill_tok_s,
                r.decode_tok_s, r.ms_per_token, r.hot / 1048576.0, r.cold / 1048576.0, r.state_file / 1048576.0,
                r.mean_kl, 100 * r.top1);
  }
  std::printf("peak RSS %.1f MiB (model file %.1f MiB)\n", peak_rss / 1048576.0,
              l.model->source().byte_size() / 1048576.0);
  if (a.roofline) {
    const double bw = roof["read_bytes_per_s"], bytes = roof["decode_bytes_per_token"];
    const double peak = roof["int8_ops_per_s"], ops = roof["prefill_ops_per_token"];
    std::printf("roofline (%d threads): read %.1f GB/s; decode reads %.1f MB/token -> at most %.1f tok/s\n",
                l.forward->pool().size(), bw / 1e9, bytes / 1e6, bw / bytes);
    if (peak > 0) {
      std::printf("          int8 peak %.0f GOP/s (%s); prefill %.2f GOP/token in the matrices -> at most %.0f tok/s\n",
                  peak / 1e9, roof["int8_isa"].get<std::string>().c_str(), ops / 1e9, peak / ops);
    } else {  // the scalar kernels: no SIMD int8 instruction to measure
      std::printf("          int8 peak not measured (%s kernels)\n", roof["int8_isa"].get<std::string>().c_str());
    }
    for (const auto& e : roof["engines"]) {
      std::printf("%-*s decode %5.1f%% of the bandwidth bound", w, e["engine"].get<std::string>().c_str(),
                  100.0 * e["decode_fraction_of_bound"].get<double>());
      if (peak > 0)
        std::printf(", prefill %5.1f%% of the int8 peak", 100.0 * e["prefill_fraction_of_int8_peak"].get<double>());
      std::printf("\n");
    }
  }
  fail_if_none_ran();
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* s = app.add_subcommand("bench", "measure prefill/decode tok/s, state size and agreement with standard");
  s->add_option("model", a->model, kModelHelp)->required();
  add_engine_flag(s, a->engines, true);
  add_int_flag(s, "--prompt-tokens", a->prompt_tokens, 1, INT32_MAX, "prompt length for prefill,");
  add_int_flag(s, "--decode-tokens", a->decode_tokens, 1, INT32_MAX, "tokens to decode,");
  add_threads_flag(s, a->threads);
  add_ffn_flags(s, a->ffn);
  s->add_flag("--json", a->json, "one JSON object");
  s->add_flag("--roofline", a->roofline,
              "also measure read bandwidth and the int8 peak with these threads; print decode as a fraction of "
              "bytes-read / bandwidth and prefill as a fraction of the int8 peak");
  s->add_option_function<std::string>(
       "--batch",
       [a](const std::string& v) {
         a->batch.clear();
         try {
           for (size_t b = 0; b <= v.size();) {
             const size_t e = std::min(v.find(',', b), v.size());
             a->batch.push_back(parse_int(std::string_view(v).substr(b, e - b), 1, 4096, "--batch"));
             b = e + 1;
           }
         } catch (const Error& e) {
           throw CLI::ValidationError(e.what());
         }
       },
       "comma-separated sequence counts, each in [1, 4,096] (e.g. 1,2,4,8,16): aggregate decode tok/s of that "
       "many standard sequences stepped together, one pass over the weights per step; --engines is ignored")
      ->type_name("N,N,...");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
