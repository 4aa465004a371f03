// The state LQL statements run against (docs/lql.md "What runs"): the vindex in use, memory-mapped
// (gate_vectors.bin, embeddings.bin, down_meta.bin), its tokenizer read on first use, and the
// model loaded on first use by a statement that needs the forward pass (INFER, TRACE, WALK on a
// vindex with weights).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/top_k_rows.h"
#include "compute/tensor.h"
#include "tokenizer/tokenizer.h"
#include "util/mmap.h"
#include "util/thread_pool.h"
#include "vindex/down_meta_file.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"
#include "vindex/labels.h"

namespace larql {
class Model;
class WeightSource;
}

namespace larql::lql {

class EditState;

struct SessionOptions {
  SessionOptions() = default;
  explicit SessionOptions(int threads_, std::string models_dir_ = ".", std::vector<std::string> model_dirs_ = {})
      : threads(threads_), models_dir(std::move(models_dir_)), model_dirs(std::move(model_dirs_)) {}
  int threads = 0;                 ///< the compute pool's threads; 0: one per core
  std::string models_dir = ".";    ///< where SHOW MODELS looks for vindex directories
  /// Where USE looks up a short name (NAME or NAME.vindex; the CLI's model cache, README
  /// "Using it"), in order; empty: USE takes only paths.
  std::vector<std::string> model_dirs;
};

/// The vindex directory `name` means: a path to a vindex directory as is, else (a name without
/// '/') NAME or NAME.vindex holding index.json in one of `model_dirs`, in order. Errors:
/// Unsupported "LQL needs a vindex ..." with the `larql extract` command when the path (or the
/// name found) is a file such as a GGUF model, or a directory without index.json; NotFound when
/// nothing is there (naming the directories searched).
std::string resolve_vindex(const std::string& name, const std::vector<std::string>& model_dirs);

/// One gate-KNN hit: a feature of a layer and its signed score w_gate[f] · q.
struct GateHit {
  int64_t layer = 0;
  int64_t feature = 0;
  float score = 0.0f;
};

class Session {
 public:
  explicit Session(SessionOptions opt = {});
  /// A session computing on `pool` (shared with other sessions or a server's scheduler: its
  /// dispatch is serialised, so sharing is safe; opt.threads is then unused); nullptr: a new pool.
  Session(SessionOptions opt, std::shared_ptr<ThreadPool> pool);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Open a vindex directory (USE): a path or a short name (resolve_vindex over
  /// options().model_dirs). The previous one stays in use when this fails.
  /// Errors: resolve_vindex's, read_index's (NotFound / Format), NotFound for a declared file that is missing,
  /// Format for a gate_vectors.bin / embeddings.bin shorter than index.json says, DownMetaFile's.
  void use(const std::string& dir);
  /// USE of `base`'s vindex, sharing its read-only parts — the memory maps' files are mapped
  /// again (the page cache holds one copy), the tokenizer and the base model are the same
  /// objects — so many sessions over one vindex hold one copy of the weights. Edits are not
  /// shared: this session starts with the vindex's own (knn_facts.vlp) and records its own.
  /// `base` must not be edited (its model is the vindex's); it loads its tokenizer and model here
  /// if it has not yet (so `base` must not be in use on another thread). Errors: use()'s;
  /// InvalidArgument when `base` has no vindex or has edits of its weights.
  void use_shared(Session& base);
  bool has_vindex() const { return open_ != nullptr; }
  /// Errors: InvalidArgument "no vindex in use (USE "NAME.vindex" first)".
  const vindex::VindexIndex& index() const;
  const std::string& path() const;
  const SessionOptions& options() const { return opt_; }
  /// A flag that, once set, stops the running statement with Error{Cancelled}: it is checked
  /// before every layer of the forward pass and of each gate-KNN scan (Ctrl-C in the REPL).
  /// nullptr: none. The flag must outlive the session's use of it.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }
  const std::atomic<bool>* cancel_flag() const { return cancel_; }
  /// Error{Cancelled} when the flag is set.
  void check_cancel() const;
  ThreadPool& pool() { return *pool_; }

  /// Layer bands: index.json's layer_bands, else vindex::default_layer_bands.
  std::map<std::string, vindex::Band> bands() const;
  /// The band a layer falls in ("syntax", "knowledge", "output"; "all" when in none).
  std::string band_of(int64_t layer) const;

  /// Layer `layer`'s gate rows [num_features, hidden]. Errors: InvalidArgument naming the layer
  /// and the range when out of range.
  TensorView gate(int64_t layer) const;
  /// embeddings.bin [vocab, hidden], unscaled.
  TensorView embeddings() const;
  /// down_meta.bin; nullptr when the vindex has none.
  const vindex::DownMetaFile* down_meta() const;
  /// feature_labels.json (read at USE; `larql label` writes it); nullptr when the vindex has none.
  const vindex::FeatureLabels* labels() const;
  /// edits.json (read at USE): the feature slots that edits compiled into this vindex wrote; a
  /// COMPOSE INSERT never picks one. Empty when the vindex has none.
  const std::vector<vindex::EditedSlot>& compiled_edits() const;
  /// The tokenizer (tokenizer.json + tokenizer_config.json), read on first use.
  const Tokenizer& tokenizer();

  /// The top k features of `layer` by |w_gate[f] · q| (q: hidden floats), signed scores kept,
  /// sorted by |score| descending, ties to the lower feature (the original's gate_knn, §gate KNN
  /// in docs/lql.md). Runs compute::top_k_rows on q and -q: exact scores for the stored dtype.
  /// `skip` (optional, [num_features]): features with skip[f] != 0 are never returned (WALK on a
  /// mixture of experts: the experts the router did not choose).
  std::vector<GateHit> gate_knn(int64_t layer, const float* q, int k, const std::vector<uint8_t>* skip = nullptr);

  /// DESCRIBE's / NEAREST's query: the mean over the entity's tokens (encoded without BOS) of
  /// embedding rows × embed_scale. nullopt when the text has no tokens.
  std::optional<std::vector<float>> entity_query(const std::string& entity);
  /// A token's text for display: its piece with surrounding blanks trimmed.
  std::string token_text(int64_t id);
  /// A token's piece as the vocabulary has it (" Paris"): the cell of a token column (table.h
  /// Column::token), which text output shows visibly.
  std::string token_piece(int64_t id);
  /// The model, loaded on first use. Errors: Unsupported "<what> needs a vindex with model
  /// weights (larql extract MODEL -o X.vindex --level inference)"; Model::load's errors.
  std::shared_ptr<const Model> model(const std::string& what);
  /// Whether the vindex runs a model (level inference or above, with weights): what WALK's
  /// choice of query and every forward-pass statement depend on.
  bool runs_model() const;

  /// The vindex's own weights (VindexSource), opened on first use. Errors: as model().
  std::shared_ptr<const WeightSource> base_source(const std::string& what);
  /// The model on the vindex's own weights, without the session's edits (INFER ... COMPARE's
  /// base side); loaded on first use, zero-copy over base_source(). Errors: as model().
  std::shared_ptr<const Model> base_model(const std::string& what);
  /// Run the model on `source` from now on (an OverlaySource carrying edits; nullptr: the base),
  /// and show `gate_rows` ((layer, feature) -> [hidden] floats) in gate() in place of the stored
  /// rows, so gate-KNN scans see edited features. Errors: Model::load's.
  void set_weights(std::shared_ptr<const WeightSource> source,
                   const std::map<std::pair<int64_t, int64_t>, std::vector<float>>& gate_rows);
  /// The knowledge edits of the vindex in use (lql/edits.h); reset by USE.
  EditState& edits();

 private:
  struct Open;
  SessionOptions opt_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Open> open_;
  const std::atomic<bool>* cancel_ = nullptr;
};

}  // namespace larql::lql
