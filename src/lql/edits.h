// The knowledge edits of an LQL session (docs/lql.md "Knowledge edits"): the patches applied, in
// order, and the one being recorded; from them, the weight overlay the model runs (COMPOSE
// inserts, updates, deletes: FFN features rewritten, model/overlay_source.h) and the KNN store
// (KNN inserts, consulted by INFER). Removing a patch rebuilds both from the base and the
// remaining patches, so the result is bit for bit what it was before that patch.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lql/patch.h"
#include "vindex/down_meta_file.h"

namespace larql {
class WeightSource;
class OverlaySource;
class Model;
}

namespace larql::lql {

class EditTail;

/// One fact of the KNN store.
struct KnnFact {
  int64_t layer = 0;
  std::vector<float> key;  ///< the FFN-input residual, L2-normalised [hidden]
  int64_t target_id = 0;
  std::string entity, relation, target;
  double confidence = 1.0;
};

/// MODE ROBUST's memo (exec_insert_robust.cc): FFN inputs of its fixed prompts on the base model
/// (they depend only on the vindex's own weights) and each robust fact's key, so that an INSERT
/// runs a fixed number of forward passes however many facts came before. Shared by copies of the
/// EditState and kept across rebuilds; USE starts a new one with the new EditState.
struct InsertMemo {
  std::map<std::string, std::vector<float>> base_ffn_in;  ///< "LAYER|prompt" -> [hidden]
  std::map<std::string, std::vector<float>> fact_keys;    ///< "LAYER|entity|relation" (lower case) -> [hidden]
  std::map<std::string, double> scale;                    ///< "LAYER|relation" -> the last up-row scale balanced
  std::map<int64_t, std::vector<std::vector<float>>> background;  ///< layer -> ordinary text's inputs, every position but BOS
  std::map<int64_t, std::vector<float>> bos;  ///< layer -> the FFN input at BOS (position 0: the same in every prompt) [hidden]
  std::map<std::pair<int64_t, double>, std::vector<double>> whitener;  ///< (layer, ridge) -> Cholesky factor of their second moment + ridge [hidden^2]
  /// MODE SUBJECT's EditTail of the base model from layer `tail->first()` (the f32 copies of the
  /// layers after its install layer, ~300 MB for the default model: kept rather than
  /// dequantised again by every INSERT), and the model it reads. Used only while no edit touches
  /// those layers; the last one built is kept.
  std::shared_ptr<const Model> tail_model;
  std::shared_ptr<const EditTail> tail;
  /// MODE SUBJECT: (layer, target token) -> the down column the last INSERT of that target at
  /// that layer learned, before ALPHA and the scale [hidden]; the next one starts from it.
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> subject_value;
};

/// A patch in the stack: its name (the file it came from, or BEGIN PATCH's name) and its ops.
struct NamedPatch {
  std::string name;
  Patch patch;
};

class EditState {
 public:
  std::vector<NamedPatch> applied;       ///< APPLY PATCH order
  std::optional<NamedPatch> recording;   ///< BEGIN PATCH (or the first edit): live, applied last
  bool anonymous = false;                ///< the recording was started by an edit, not BEGIN PATCH

  /// The overlay that carries every applied op (nullptr: none touches the weights).
  std::shared_ptr<OverlaySource> overlay;
  /// Edited gate rows (layer, feature) -> [hidden], as the overlay stores them (dequantised).
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> gate_rows;
  /// (layer, feature) slots written by a COMPOSE insert, update or delete.
  std::set<std::pair<int64_t, int64_t>> touched;
  /// Per layer, the down columns whose stored values changed (down_meta must be recomputed).
  std::map<int64_t, std::set<int64_t>> down_changed;
  std::vector<KnnFact> knn;
  /// MODE ROBUST's memo (not part of the edits: rebuild keeps it).
  std::shared_ptr<InsertMemo> memo = std::make_shared<InsertMemo>();
  /// down_meta records (top_k entries each) of features in down_changed, recomputed from the
  /// overlay's down columns on first use (detail::edited_down_record): what COMPILE writes and
  /// what the session's tables show. An op drops the records of the columns it changed.
  std::map<std::pair<int64_t, int64_t>, std::vector<vindex::TokenScore>> down_records;
  /// [vocab]: tokens that decode to nothing, never listed in a record (kept across rebuilds).
  std::shared_ptr<const std::vector<uint8_t>> down_skip;
  /// Rows clamped while writing down columns, over all ops (FeatureEditReport::clamped).
  int64_t clamped = 0;

  /// Apply one op on top of the current state. Errors: OverlaySource's.
  void apply(const std::shared_ptr<const WeightSource>& base, const PatchOp& op);
  /// Clear everything derived and re-apply every applied patch and the recording, in order.
  void rebuild(const std::shared_ptr<const WeightSource>& base);
  /// Every op of the stack, in order.
  size_t op_count() const;
  bool empty() const { return applied.empty() && (!recording || recording->patch.ops.empty()); }
};

}  // namespace larql::lql
