#include "api/api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "inference/device.h"
#include "inference/kv_cache.h"
#include "lql/executor.h"
#include "lql/parser.h"
#include "lql/printer.h"
#include "lql/script.h"
#include "model/vindex_source.h"
#include "util/error.h"
#include "vindex/index.h"
#ifdef LARQL_CUDA
#include "cuda/cuda_model.h"
#endif

namespace larql::api {

namespace fs = std::filesystem;

void check_model_dir(const std::string& path, const std::string& verb) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || !is_vindex_model_dir(path)) return;  // a Hugging Face directory runs as is
  const std::string why = vindex_not_runnable_reason(path, vindex::read_index(path), verb);
  if (!why.empty()) throw Error(ErrorKind::Unsupported, why);
}

std::shared_ptr<LoadedModel> LoadedModel::open(const std::string& path, const OpenOptions& opt) {
  std::error_code ec;
  if (path.empty()) throw Error(ErrorKind::InvalidArgument, "no model path given");
  if (!fs::exists(path, ec)) throw Error(ErrorKind::NotFound, "model " + path + " not found: no such file or directory");
  const Device device = parse_device(opt.device);
  if (!opt.ffn.empty() && !opt.pipeline.empty())
    throw Error(ErrorKind::InvalidArgument,
                "--ffn (attention here, the FFN on shards) and --pipeline (whole layers on shards) do not go together");
  if (device == Device::Cuda) {
    if (!opt.pipeline.empty())
      throw Error(ErrorKind::InvalidArgument, "--device cuda with --pipeline is not supported: the layers run on the shards");
    if (!opt.ffn.empty())
      throw Error(ErrorKind::InvalidArgument, "--device cuda with a remote FFN (--ffn) is not supported: the GPU runs whole layers");
    if (opt.verb == "perplexity")
      throw Error(ErrorKind::BackendUnavailable, "perplexity runs on the CPU only (--device cpu)");
#ifndef LARQL_CUDA
    throw Error(ErrorKind::BackendUnavailable,
                "this larql was built without CUDA: configure with -DLARQL_CUDA=ON where nvcc is installed "
                "(docs/backends.md), or use --device cpu");
#endif
  }
  if (!opt.pipeline.empty()) {
    const std::string addrs = shard::remote_pipeline_addresses(opt.pipeline);
    if (addrs.empty())
      throw Error(ErrorKind::InvalidArgument, "pipeline \"" + opt.pipeline + "\": expected remote:HOST:PORT[,HOST:PORT...]");
    ModelPart part;  // the embedding, the final norm, lm_head (and the layers' norms, a few KB)
    part.attention = false;
    part.ffn = false;
    auto m = wrap(Model::load(path, part), opt.threads);
    shard::Pipeline stages = shard::connect_pipeline_shards(*m->model_, addrs, opt.shard_tls, opt.shard_timeout);
    m->pipeline_shards_ = shard::pipeline_shard_map(stages, m->config().n_layers);
    m->pipeline_ = std::make_shared<shard::PipelineModel>(std::make_shared<Forward>(m->model_, m->pool_), std::move(stages));
    m->device_ = m->pipeline_;
    return m;
  }
  if (opt.ffn.empty()) {
    check_model_dir(path, opt.verb);
    auto m = wrap(Model::load(path), opt.threads);
#ifdef LARQL_CUDA
    if (device == Device::Cuda) m->device_ = cuda::open_model(m->model_);
#endif
    return m;
  }
  const std::string addrs = shard::remote_ffn_addresses(opt.ffn);
  if (addrs.empty())
    throw Error(ErrorKind::InvalidArgument, "FFN \"" + opt.ffn + "\": expected remote:HOST:PORT[,HOST:PORT...]");
  ModelPart part;
  part.ffn = false;
  std::shared_ptr<const Model> local = Model::load(path, part);
  if (local->config().n_experts > 0) {  // the router and the shared expert run here: no routed expert
    ModelPart moe;
    moe.expert_begin = moe.expert_end = 0;
    local = Model::load(path, moe);
  }
  auto m = wrap(std::move(local), opt.threads);
  m->ffn_shards_ = shard::connect_ffn_shards(*m->model_, addrs, opt.shard_tls, opt.shard_timeout);
  return m;
}

std::shared_ptr<LoadedModel> LoadedModel::wrap(std::shared_ptr<const Model> model, int threads) {
  return wrap(std::move(model), std::make_shared<ThreadPool>(threads));
}

std::shared_ptr<LoadedModel> LoadedModel::wrap(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool) {
  if (!model || !pool) throw Error(ErrorKind::InvalidArgument, "LoadedModel::wrap: no model or no pool");
  auto m = std::shared_ptr<LoadedModel>(new LoadedModel());
  m->tok_ = std::make_shared<const Tokenizer>(model->source().vocabulary());
  m->model_ = std::move(model);
  m->pool_ = std::move(pool);
  return m;
}

std::shared_ptr<Forward> LoadedModel::forward() const {
  auto f = std::make_shared<Forward>(model_, pool_);
  if (!ffn_shards_.empty()) shard::attach_remote_ffn(*f, ffn_shards_);
  if (device_) f->set_device(device_);
  return f;
}

std::vector<int32_t> LoadedModel::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  return tok_->encode(std::string(text), add_bos && tok_->add_bos(), parse_special);
}

std::string LoadedModel::detokenize(const std::vector<int32_t>& ids, bool skip_special) const {
  const int64_t vocab = tok_->vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                                  ") is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return tok_->decode(ids, skip_special);
}

void LoadedModel::logits(const std::vector<int32_t>& ids, float* out, LayerObserver* observer,
                         const std::atomic<bool>* cancel) const {
  const int64_t vocab = model_->config().vocab;
  logit_rows(ids, [&](int64_t row0, int64_t rows, const float* lg) {
    std::copy(lg, lg + rows * vocab, out + row0 * vocab);
  }, observer, cancel);
}

void LoadedModel::logit_rows(const std::vector<int32_t>& ids,
                             const std::function<void(int64_t row0, int64_t rows, const float* logits)>& on_rows,
                             LayerObserver* observer, const std::atomic<bool>* cancel) const {
  check_ids(ids);
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  if (pipeline_) return pipeline_logit_rows(ids, on_rows, observer, cancel);
  const auto fp = forward();  // the FFNs this model runs (a remote one included)
  Forward& fwd = *fp;
  fwd.set_observer(observer);
  fwd.set_cancel(cancel);
  KvCache cache(c);
  std::vector<float> x(static_cast<size_t>(fwd.chunk() * c.hidden));
  // As `larql perplexity` (cli/perplexity.cc score_batched): chunks of Forward::chunk(), the
  // logits of 32 rows at a time.
  constexpr int64_t kLogitRows = 32;
  std::vector<float> lg(static_cast<size_t>(kLogitRows * c.vocab));
  for (int64_t off = 0; off < n; off += fwd.chunk()) {
    const int64_t m = std::min(fwd.chunk(), n - off);
    fwd.forward(ids.data() + off, m, cache, x.data());
    for (int64_t r0 = 0; r0 < m; r0 += kLogitRows) {
      // The output matrix is most of a long text's work: the flag is read between its blocks too.
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Error(ErrorKind::Cancelled, "logits: cancelled");
      const int64_t rn = std::min(kLogitRows, m - r0);
      fwd.logits(x.data() + r0 * c.hidden, rn, lg.data());
      on_rows(off + r0, rn, lg.data());
    }
  }
}

void LoadedModel::pipeline_logit_rows(const std::vector<int32_t>& ids,
                                      const std::function<void(int64_t, int64_t, const float*)>& on_rows,
                                      LayerObserver* observer, const std::atomic<bool>* cancel) const {
  if (observer != nullptr)
    throw Error(ErrorKind::BackendUnavailable, "observing layers needs them here, but they run on the pipeline's shards (" +
                                                   pipeline_->info().name + ")");
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  const auto fp = forward();
  Forward& fwd = *fp;
  auto seq = pipeline_->open(c.context_length);
  std::vector<float> x(static_cast<size_t>(fwd.chunk() * c.hidden));
  constexpr int64_t kLogitRows = 32;  // as logit_rows
  std::vector<float> lg(static_cast<size_t>(kLogitRows * c.vocab));
  for (int64_t off = 0; off < n; off += fwd.chunk()) {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Error(ErrorKind::Cancelled, "logits: cancelled");
    const int64_t m = std::min(fwd.chunk(), n - off);
    seq->append_rows(ids.data() + off, m, x.data());
    for (int64_t r0 = 0; r0 < m; r0 += kLogitRows) {
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Error(ErrorKind::Cancelled, "logits: cancelled");
      const int64_t rn = std::min(kLogitRows, m - r0);
      fwd.logits(x.data() + r0 * c.hidden, rn, lg.data());
      on_rows(off + r0, rn, lg.data());
    }
  }
}

void LoadedModel::check_ids(const std::vector<int32_t>& ids, const std::string& what) const {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) throw Error(ErrorKind::EmptyPrompt, what + ": no token ids");
  if (n > c.context_length)
    throw Error(ErrorKind::ContextOverflow, what + ": " + std::to_string(n) + " tokens exceed the model's context of " +
                                                std::to_string(c.context_length));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                                  ") is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
}

double LoadedModel::mean_nll(const std::vector<int32_t>& ids, const std::atomic<bool>* cancel) const {
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = model_->config().vocab;
  if (n < 2) throw Error(ErrorKind::InvalidArgument, "perplexity needs at least 2 tokens, got " + std::to_string(n));
  double nll = 0;
  logit_rows(ids, [&](int64_t row0, int64_t rows, const float* lg) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = row0 + r;
      if (p + 1 >= n) break;
      const float* row = lg + r * vocab;
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      nll += mx + std::log(sum) - static_cast<double>(row[ids[static_cast<size_t>(p + 1)]]);
    }
  }, nullptr, cancel);
  return nll / static_cast<double>(n - 1);
}

Generator::Generator(std::shared_ptr<const LoadedModel> model, const EngineSpec& spec, const SessionOptions& opt)
    : model_(std::move(model)) {
  if (!model_) throw Error(ErrorKind::InvalidArgument, "Generator: no model");
  fwd_ = model_->forward();
  session_ = std::make_unique<Session>(fwd_, model_->tokenizer_ptr(), spec, opt);
}

GenerateResult Generator::run_guarded(const std::vector<int32_t>& ids, const GenerateOptions& opt,
                                      const std::function<void(std::string_view)>& on_text) {
  if (busy_.exchange(true))
    throw Error(ErrorKind::InvalidArgument,
                "the session is busy: another generation on it has not finished (one sequence runs one generation at a time; "
                "finish or close it, or use another session)");
  struct Release {
    std::atomic<bool>& b;
    ~Release() { b.store(false); }
  } release{busy_};
  return session_->generate(ids, opt, on_text);
}

GenerateResult Generator::generate(const std::string& prompt, const GenerateOptions& opt,
                                   const std::function<void(std::string_view)>& on_text) {
  return run_guarded(session_->encode(prompt), opt, on_text);
}

GenerateResult Generator::generate_ids(const std::vector<int32_t>& ids, const GenerateOptions& opt,
                                       const std::function<void(std::string_view)>& on_text) {
  const int64_t vocab = model_->config().vocab;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                                  ") is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return run_guarded(ids, opt, on_text);
}

std::unique_ptr<lql::Session> open_lql(const std::string& vindex, int threads) {
  auto s = std::make_unique<lql::Session>(lql::SessionOptions{threads});
  if (!vindex.empty()) s->use(vindex);
  return s;
}

std::vector<std::string> run_lql_json(lql::Session& session, std::string_view text) {
  std::vector<std::string> out;
  run_lql_json(session, text, out);
  return out;
}

void run_lql_json(lql::Session& session, std::string_view text, std::vector<std::string>& out) {
  lql::Executor exec(session);
  for (const auto& ch : lql::script_statements(text)) {
    const lql::Pipeline p = lql::parse_one(ch.text, ch.pos);
    for (const auto& st : p.stages) {
      const auto t0 = std::chrono::steady_clock::now();
      lql::Table t = exec.run(st);
      t.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      out.push_back(lql::render_json(t));
    }
  }
}

}  // namespace larql::api
