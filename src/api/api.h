// The C++ API facade (docs/architecture.md "API facade"): what the CLI, the server and the Python
// bindings share to open a model and run it. One recipe loads a model from any source (a GGUF
// file, a vindex or a Hugging Face directory) with its tokenizer and an executor; a generation
// session owns everything it uses (the model, the tokenizer, its own forward-pass scratch), so
// nothing it refers to can be freed under it; an LQL session runs statement text. No process-
// global state: two models of different thread counts, or two of the same file, live side by side.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inference/forward.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "kv/session.h"
#include "lql/session.h"
#include "model/model.h"
#include "shard/pipeline.h"
#include "shard/shard.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace larql::api {

struct OpenOptions {
  /// Compute threads of the model's own pool; <= 0: one per core.
  int threads = 0;
  /// The verb errors name ("run", "perplexity", "larql.Model"): a vindex that cannot run a
  /// model says which verb needs level inference.
  std::string verb = "run";
  /// Where the FFN runs: "" here; "remote:HOST:PORT[,HOST:PORT...]" on shards (docs/sharding.md)
  /// that together hold every layer's FFN of the same model file: the FFN weights are then not
  /// read here, and every forward() runs each layer's FFN on its shard (shard::RemoteFfn).
  std::string ffn;
  /// Where the layers run: "" here; "remote:HOST:PORT[,HOST:PORT...]" on pipeline shards
  /// (docs/sharding.md "Pipeline") holding whole layers of the same model file, which together
  /// hold every layer once (shards of the same range are replicas). Only the token embedding, the
  /// final norm and lm_head are read here; forwards run on a shard::PipelineModel backend (the K/V
  /// kept on the shards), so only the `standard` engine and logits run. Not with `ffn`.
  std::string pipeline;
  shard::ClientTls shard_tls;                          ///< TLS to the shards (empty CA: plaintext)
  std::chrono::milliseconds shard_timeout{30000};      ///< the deadline of each shard call
  /// Where the forward pass runs: "cpu" (the CPU code) or "cuda" (the weights uploaded to GPU 0
  /// of a -DLARQL_CUDA=ON build; only the `standard` engine runs there: docs/backends.md).
  std::string device = "cpu";
};

/// A model opened for running: its weights (memory-mapped, read-only), its tokenizer and a thread
/// pool of its own. Immutable once opened, so any number of sessions and threads may share one;
/// each session runs on its own Forward (forward()) over the shared weights and pool (the pool
/// serialises its dispatches).
class LoadedModel {
 public:
  /// Open `path`: a GGUF file, a vindex directory at level inference (or all), or a Hugging Face
  /// directory (model/model.h Model::load). Errors: Error{NotFound} for a path that is not there or
  /// a directory that is neither a vindex nor a Hugging Face model; Error{Unsupported} for a vindex
  /// below level inference (naming its level, what it holds and opt.verb) or an architecture this
  /// build does not run; Model::load's Format errors naming the tensor or key.
  /// With opt.ffn remote: connect_ffn_shards's errors too (a shard of another model, a layer no
  /// shard holds, a shard that does not answer); with opt.pipeline, connect_pipeline_shards's.
  static std::shared_ptr<LoadedModel> open(const std::string& path, const OpenOptions& opt = {});
  /// A model already loaded (an LQL session's, a test's), with a pool of `threads`.
  static std::shared_ptr<LoadedModel> wrap(std::shared_ptr<const Model> model, int threads);
  /// ... on an existing pool (the server's).
  static std::shared_ptr<LoadedModel> wrap(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool);

  const std::string& path() const { return model_->path(); }
  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& model_ptr() const { return model_; }
  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer& tokenizer() const { return *tok_; }
  const std::shared_ptr<const Tokenizer>& tokenizer_ptr() const { return tok_; }
  const std::shared_ptr<ThreadPool>& pool() const { return pool_; }
  int threads() const { return pool_->size(); }

  /// A forward pass of its own (its own Workspace) over the weights and the pool: one per thread
  /// of use. Its FFNs are the shards' when the model was opened with a remote FFN.
  std::shared_ptr<Forward> forward() const;
  /// The shards running the FFN, one per layer (empty: the FFN runs here).
  const shard::ShardMap& ffn_shards() const { return ffn_shards_; }
  /// The pipeline the layers run on (OpenOptions::pipeline), or null.
  const std::shared_ptr<shard::PipelineModel>& pipeline() const { return pipeline_; }
  /// The shards this model uses, one part per layer (the FFN shards, or the pipeline's stages);
  /// empty when it uses none. What /health asks.
  const shard::ShardMap& shards() const { return ffn_shards_.empty() ? pipeline_shards_ : ffn_shards_; }
  /// The GPU backend the model's forwards run on (OpenOptions::device), or null for the CPU.
  const std::shared_ptr<DeviceModel>& device() const { return device_; }

  /// Token ids of `text`: BOS first when `add_bos` and the vocabulary wants one; special-token
  /// text ("<start_of_turn>") parsed to its id when `parse_special`.
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = true, bool parse_special = false) const;
  /// Text of `ids`. Error{InvalidArgument} naming an id outside [0, vocab).
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special = false) const;

  /// The logits of every position of `ids` ([ids.size(), vocab] f32, row-major, into `out`), from
  /// one batched forward pass in chunks of Forward::chunk() over a plain K/V cache: what `larql
  /// perplexity --logits-out` writes, bit for bit. `observer` (may be null) sees every layer of
  /// every position (inference/forward.h LayerObserver). Over a pipeline the rows come from the
  /// shards (one sequence, ended afterwards) and an observer is refused (Error{BackendUnavailable}:
  /// the layers do not run here). Errors: Error{EmptyPrompt} for no ids,
  /// Error{ContextOverflow} past the model's context, Error{InvalidArgument} for an id outside the
  /// vocabulary; Error{Cancelled} when `cancel` is set (checked before every layer and every 32
  /// rows of the output matrix).
  void logits(const std::vector<int32_t>& ids, float* out, LayerObserver* observer = nullptr,
              const std::atomic<bool>* cancel = nullptr) const;
  /// The same pass handing the logits to `on_rows` 32 rows at a time ([rows, vocab] from row
  /// row0), so a long text's [n, vocab] never has to be held. Errors: as logits().
  void logit_rows(const std::vector<int32_t>& ids,
                  const std::function<void(int64_t row0, int64_t rows, const float* logits)>& on_rows,
                  LayerObserver* observer = nullptr, const std::atomic<bool>* cancel = nullptr) const;
  /// The checks logits() makes before it runs (its errors), for a caller that allocates `out`;
  /// `what` names the call in the messages ("logits", "trace").
  void check_ids(const std::vector<int32_t>& ids, const std::string& what = "logits") const;

  /// Mean negative log-likelihood (nats) of ids[1..] given the ones before them, from logits().
  /// Error{InvalidArgument} for fewer than 2 ids; logits()'s errors.
  double mean_nll(const std::vector<int32_t>& ids, const std::atomic<bool>* cancel = nullptr) const;

 private:
  LoadedModel() = default;
  /// logit_rows over the pipeline (pipeline_ set).
  void pipeline_logit_rows(const std::vector<int32_t>& ids,
                           const std::function<void(int64_t row0, int64_t rows, const float* logits)>& on_rows,
                           LayerObserver* observer, const std::atomic<bool>* cancel) const;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<ThreadPool> pool_;
  shard::ShardMap ffn_shards_;
  shard::ShardMap pipeline_shards_;
  std::shared_ptr<shard::PipelineModel> pipeline_;
  std::shared_ptr<DeviceModel> device_;
};

/// For a directory: nothing when it is a Hugging Face model or a vindex that can run `verb`;
/// Error{NotFound} when it is neither (is_vindex_model_dir), Error{Unsupported} for a vindex
/// below level inference (naming its level and `verb`). For a file: nothing.
void check_model_dir(const std::string& path, const std::string& verb);

/// One sequence on one engine over a LoadedModel, owning the model, the tokenizer and its own
/// Forward: kv/session.h's request logic (BOS only on a new sequence, save / resume) with nothing
/// borrowed. One thread at a time per session; sessions of one model run concurrently.
class Generator {
 public:
  /// Errors: parse / make_engine errors for the spec, kv::Session's (context range, resume file).
  Generator(std::shared_ptr<const LoadedModel> model, const EngineSpec& spec, const SessionOptions& opt = {});

  const LoadedModel& model() const { return *model_; }
  Session& session() { return *session_; }
  Engine& engine() { return session_->engine(); }
  /// A generate() on it is running (another one would be refused as "busy").
  bool busy() const { return busy_.load(); }

  /// Generate from `prompt` text (encoded as Session::encode: BOS on a new sequence) or from ids;
  /// `on_text` receives UTF-8 pieces as they are produced. kv::Session::generate's errors, and
  /// Error{InvalidArgument} "the session is busy" while another generate() on it runs (from
  /// another thread, or a stream not yet finished): one sequence, one generation at a time.
  GenerateResult generate(const std::string& prompt, const GenerateOptions& opt,
                          const std::function<void(std::string_view)>& on_text = nullptr);
  GenerateResult generate_ids(const std::vector<int32_t>& ids, const GenerateOptions& opt,
                              const std::function<void(std::string_view)>& on_text = nullptr);

 private:
  GenerateResult run_guarded(const std::vector<int32_t>& ids, const GenerateOptions& opt,
                             const std::function<void(std::string_view)>& on_text);
  std::shared_ptr<const LoadedModel> model_;
  std::shared_ptr<Forward> fwd_;
  std::unique_ptr<Session> session_;
  std::atomic<bool> busy_{false};  ///< a generate() is running: a second one is refused
};

/// An LQL session on a vindex (lql/session.h) that runs statement text: `USE` of `vindex` first
/// when not empty. Errors: lql::Session::use's.
std::unique_ptr<lql::Session> open_lql(const std::string& vindex, int threads = 0);

/// Run every statement of `text` (';'-separated, the last ';' optional) on `session` and return
/// each result as the JSON document `larql lql --json` prints for it (lql/printer.h render_json).
/// Stops at the first failing statement with its error (naming line:column of `text`).
std::vector<std::string> run_lql_json(lql::Session& session, std::string_view text);
/// The same, appending each result to `out` as its statement finishes: when a statement fails,
/// `out` holds the results of the statements before it (the error is thrown as above).
void run_lql_json(lql::Session& session, std::string_view text, std::vector<std::string>& out);

}  // namespace larql::api
