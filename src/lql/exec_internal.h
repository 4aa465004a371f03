// Internal to the executor: one function per statement family, and the table operations WHERE,
// ORDER BY, LIMIT and field lists share. Not part of the library's interface.
#pragma once

#include <cmath>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lql/ast.h"
#include "lql/patch.h"
#include "lql/session.h"
#include "lql/table.h"

namespace larql {
class OverlaySource;
}

namespace larql::lql::detail {

/// Error{Unsupported}: "<what> is not built yet (LINE:COL)[: why]".
[[noreturn]] void not_built(const std::string& what, Pos pos, const std::string& why = "");

/// Keep the rows for which `c` holds. Errors: InvalidArgument for a field the table lacks
/// (listing its columns) or a number field compared with a text (and back), with c's position.
void filter_rows(Table& t, const Cond& c);
/// Stable sort by `field`; nulls last. Errors: InvalidArgument for an unknown field.
void order_rows(Table& t, const std::string& field, bool descending, Pos pos);
/// Keep the first `limit` rows; adds a note "showing L of N rows" when rows were dropped.
void limit_rows(Table& t, int64_t limit);
/// Keep only `fields`, in that order (empty: all); pos[i]: where fields[i] was written. Errors:
/// InvalidArgument for an unknown field, at its position.
void project(Table& t, const std::vector<std::string>& fields, const std::vector<Pos>& pos);

/// Layers of a range clause, checked against the vindex (InvalidArgument naming the bound out of
/// range at its position); all layers when absent.
std::vector<int64_t> layers_of(Session& s, const std::optional<LayerRange>& r, Pos pos);
/// Layers of a band (SYNTAX / KNOWLEDGE / OUTPUT; All: every layer).
std::vector<int64_t> layers_of_band(Session& s, Band b, Pos pos);
/// Check a single layer. Errors: InvalidArgument naming the layer, the range and `pos`.
void check_layer(Session& s, int64_t layer, Pos pos);

/// The tokens a feature writes (down_meta, or the session's edited record), top first, up to n, after the first `skip` entries;
/// a text already listed (or skipped) is not repeated. Empty when the vindex has no down_meta.
std::vector<std::string> feature_tokens(Session& s, int64_t layer, int64_t feature, size_t skip, size_t n);
/// The down_meta records (top_k entries, best first) of `features` of `layer` as `src` stores their
/// down columns: the top tokens of lm_head · column (tokens that decode to nothing skipped),
/// exactly what COMPILE writes; an all-zero column gets no record ({0, 0} entries). Empty without
/// down_meta. Errors: the model's.
std::vector<std::vector<vindex::TokenScore>> down_records_of(Session& s, const OverlaySource& src, int64_t layer,
                                                             const std::vector<int64_t>& features);
/// The session's record of a feature whose down column its edits changed (computed on first use
/// for every changed column of the layer, kept until an op changes it again); nullptr when the
/// edits left the feature's down column as stored (down_meta.bin's record stands).
const std::vector<vindex::TokenScore>* edited_down_record(Session& s, int64_t layer, int64_t feature);
/// Top token id and c_score of a feature (the session's edited record when its down column
/// changed); nullopt without down_meta or for an empty record.
std::optional<std::pair<int64_t, double>> feature_top(Session& s, int64_t layer, int64_t feature);

/// Per layer, the top k gate-KNN hits of that layer's query (queries[i] for layers[i]): rows
/// layer, feature, [expert,] gate, token, token_id, c_score, also. `skips` (optional, one per
/// layer, each empty or [num_features]): features never returned (Session::gate_knn).
Table hits_table(Session& s, const std::vector<int64_t>& layers, const std::vector<std::vector<float>>& queries, int k,
                 const std::vector<std::vector<uint8_t>>* skips = nullptr);
/// A mixture-of-experts vindex (index.json layers with num_experts): insert an "expert" column
/// after "feature" into a table with "layer" and "feature" columns, each cell the feature's
/// expert as model/ffn_features.h labels it ("E3", "shared"); a no-op for a dense vindex.
void add_expert_column(Session& s, Table& t);

/// The vindex's relation labels. Errors: Unsupported "<what> at LINE:COL needs relation labels:
/// ... (run `larql label ...` first)" when it has no feature_labels.json.
const vindex::FeatureLabels& require_labels(Session& s, const std::string& what, Pos pos);
/// The label of (layer, feature): its relation, or null when unlabelled or without labels.
Cell relation_cell(Session& s, int64_t layer, int64_t feature);
/// With labels loaded, insert a "relation" column (after "token", else last) into a table with
/// "layer" and "feature" columns; a no-op otherwise.
void add_relation_column(Session& s, Table& t);
/// Drop the rows whose "relation" cell is null (RELATIONS ONLY).
void keep_labelled_rows(Table& t);

Table exec_show_relations(Session& s, const ShowStmt& st, Pos pos);
Table exec_describe(Session& s, const DescribeStmt& st, Pos pos);
Table exec_walk(Session& s, const WalkStmt& st, Pos pos);
Table exec_explain(Session& s, const ExplainStmt& st, Pos pos);
Table exec_select(Session& s, const SelectStmt& st, Pos pos);
Table exec_show_features(Session& s, const ShowStmt& st, Pos pos);
Table exec_show_entities(Session& s, const ShowStmt& st, Pos pos);
Table exec_infer(Session& s, const InferStmt& st, Pos pos);
Table exec_trace(Session& s, const TraceStmt& st, Pos pos);
/// EXPLAIN INFER ... WITH ATTENTION over `layers`: per layer and query head, the top k positions
/// the prompt's last token attends to, by softmax weight (ties to the earlier position): rows
/// layer, head, rank, pos, token, weight. Recomputed from the forward pass's per-layer residuals
/// with Forward::qkv and the attention formula (scale, soft cap, sliding window). Errors: the
/// model's; InvalidArgument for RELATIONS ONLY (it filters features).
Table explain_attention(Session& s, const ExplainStmt& st, const std::vector<int64_t>& layers, int k, Pos pos);
/// DIFF a b: the features whose gate row, up row, down column (when both sides hold model
/// weights) or down_meta top token differ. Errors: InvalidArgument for vindexes of different
/// shapes; Unsupported for RELATION and INTO PATCH (not built yet).
Table exec_diff(Session& s, const DiffStmt& st, Pos pos);
/// COMPILE vref INTO MODEL path: the vindex exported as a GGUF (extract::export_gguf).
Table exec_compile_model(Session& s, const CompileStmt& st, Pos pos);

/// The residual rows a forward pass produced at one position, per layer.
struct LayerRows {
  int64_t layer = 0, pos = 0;
  std::vector<float> residual_in, attn_out, ffn_in, ffn_out, residual_out;
};
struct ForwardRun {
  std::vector<int32_t> tokens;
  std::vector<LayerRows> rows;   ///< layer-major per position: every layer of each wanted position
  std::vector<float> last_logits;  ///< [vocab] at the last position
};
/// Tokenise `prompt` (with BOS) and run the model, keeping the rows of the last position (or of
/// every position with all_positions). `model`: the one to run (nullptr: the session's, with its
/// edits). Errors: the model's; InvalidArgument for an empty prompt.
ForwardRun run_forward(Session& s, const std::string& prompt, bool all_positions, const std::string& what,
                       std::shared_ptr<const Model> model = nullptr);

// Knowledge edits (exec_edit.cc, exec_compile.cc; docs/lql.md "Knowledge edits").
/// "The {relation, '-' and '_' as blanks} of {entity} is": the prompt a fact is installed on.
std::string canonical_prompt(const std::string& relation, const std::string& entity);
/// Whether a statement's string value (a target, entity, path) holds only blanks: an empty value
/// is an error wherever one is given, never a token or a file name.
inline bool blank_value(const std::string& v) { return v.find_first_not_of(" \t\n\r") == std::string::npos; }
/// The first token of " " + target; `n_tokens` (if given) receives how many tokens the target has.
/// Errors: InvalidArgument when it has no tokens or its first token is only a blank.
int64_t target_token(Session& s, const std::string& target, Pos pos, const char* what, size_t* n_tokens = nullptr);
/// Edits rewrite the model's weights: Error{Unsupported} "<what> at LINE:COL needs a vindex with
/// model weights ..." when the vindex has none.
void need_weights(Session& s, const std::string& what, Pos pos);
/// Apply `ops` on top of the session's edits and append them to the recording (starting an
/// anonymous one, with a note, when none runs); the model is rebuilt once, after the last op.
/// All or nothing: on an error the edits are as they were. Errors: EditState::apply's.
void record_edits(Session& s, std::vector<PatchOp> ops, std::vector<std::string>* notes);
/// Every feature of the given layers as SELECT FROM FEATURES's rows: layer, feature, token,
/// token_id, score (c_score), also [, relation with labels].
Table feature_rows(Session& s, const std::vector<int64_t>& layers);
/// The most features one UPDATE or DELETE may change (docs/lql.md "Knowledge edits").
inline constexpr size_t kMaxEditRows = 256;
/// The (layer, feature) slots an UPDATE / DELETE WHERE selects, in (layer, feature) order: the
/// rows of feature_rows over every layer that the WHERE keeps (`layer = N AND feature = F`: that
/// slot, without reading down_meta). `what` ("UPDATE" / "DELETE") names the statement in errors.
/// Errors: InvalidArgument for a layer or feature out of range (direct form), an unknown field or
/// a mistyped value (filter_rows's), more than `cap` matches (naming the count); Unsupported for
/// `entity` (a feature has none) and for `relation` without labels.
std::vector<std::pair<int64_t, int64_t>> select_slots(Session& s, const Cond& where, const std::string& what, Pos pos,
                                                      size_t cap = kMaxEditRows);
Table exec_insert(Session& s, const InsertStmt& st, Pos pos);
/// MODE ROBUST (exec_insert_robust.cc): `op` carries the fact (entity, relation, target,
/// target_id, layer) checked by exec_insert; `t` its columns; `t0` when the statement started.
Table exec_insert_robust(Session& s, const InsertStmt& st, PatchOp op, Table t, std::chrono::steady_clock::time_point t0);
// COMPOSE's parts that MODE ROBUST reuses (exec_edit.cc; docs/lql.md "Knowledge edits").
int64_t insert_default_layer(Session& s);
/// The FFN input at `layer`, last position, of `prompt` under the session's (edited) model.
std::vector<float> insert_ffn_in(Session& s, const std::string& prompt, int64_t layer);
/// P(target) at the last position of `prompt` under the session's model; *top1: it is the argmax.
double insert_target_prob(Session& s, const std::string& prompt, int64_t target, bool* top1);
/// The least-used feature of `layer` over the FFN inputs `xs` that no edit has written.
int64_t insert_pick_slot(Session& s, int64_t layer, const std::vector<std::vector<float>>& xs, const std::vector<float>& x0);
/// COMPOSE's down column for `target` in that feature's slot (docs/lql.md step 4): the target's
/// lm_head row scaled to what the stored blocks hold; [hidden] floats.
std::vector<float> insert_down_column(Session& s, int64_t layer, int64_t feature, int64_t target);
/// The index of the coordinate steadiest over `xs` that a gate can use as its bias (docs/lql.md
/// COMPOSE step 2), or -1 when none varies less than 5%.
int64_t insert_steady_coordinate(const std::vector<const std::vector<float>*>& xs, const std::vector<float>& x0);
/// An orthonormal basis grown by modified Gram-Schmidt (ROBUST's and SUBJECT's projection off the
/// decoys' span): add() keeps the part of a vector outside the span, normalised (dropped when it
/// is under 1e-6 of the vector's norm); project_out() removes the span from a vector in place.
struct SpanBasis {
  std::vector<std::vector<double>> rows;
  void project_out(std::vector<double>& v) const {
    for (const auto& b : rows) {
      double p = 0;
      for (size_t i = 0; i < v.size(); ++i) p += v[i] * b[i];
      for (size_t i = 0; i < v.size(); ++i) v[i] -= p * b[i];
    }
  }
  void add(std::vector<double> q) {
    double n0 = 0, n = 0;
    for (double x : q) n0 += x * x;
    project_out(q);
    for (double x : q) n += x * x;
    n0 = std::sqrt(n0), n = std::sqrt(n);
    if (n < 1e-6 * (1.0 + n0)) return;
    for (double& x : q) x /= n;
    rows.push_back(std::move(q));
  }
};
// ROBUST's parts that MODE SUBJECT reuses (exec_insert_robust.cc).
/// The FFN inputs at `layer` of every position but BOS of ordinary text and the decoy prompts,
/// on the base model (memoised): [rows][hidden].
const std::vector<std::vector<float>>& insert_background(Session& s, int64_t layer);
/// The base model's FFN input at `layer` at BOS (position 0, the same row in every prompt: the
/// attention sink), memoised with insert_background. [hidden]
const std::vector<float>& insert_bos_row(Session& s, int64_t layer);
/// (C + lambda I)^-1 v, C the second moment of insert_background's rows (lambda = 0.05 x its
/// mean eigenvalue; the factor memoised per layer).
std::vector<double> insert_whiten(Session& s, int64_t layer, const std::vector<double>& v);
/// ROBUST's 8 invented decoy names (none is an entity of data/edit_eval).
std::vector<std::string> insert_invented_entities();
/// ROBUST's templates of a (relation, entity) statement ("The {r} of {e} is", ...; the first is
/// the canonical prompt), with {r} and {e} unfilled.
std::vector<std::string> insert_templates();
/// A template ("The {r} of {e} is") filled with `relation` (its '-' and '_' as spaces) and
/// `entity`; `entity_end` (non-null) receives the byte where the entity ends (npos without {e}).
std::string insert_fill(const std::string& tmpl, const std::string& relation, const std::string& entity, size_t* entity_end = nullptr);
/// sum_i a[i] b[i], accumulated in double over a.size() values.
double insert_dot(const std::vector<double>& a, const std::vector<float>& b);
/// MODE SUBJECT (exec_insert_subject.cc): as exec_insert_robust; `op.layer` is replaced by the
/// mode's own default unless the statement has AT LAYER (and by the layer before the default when
/// the default refuses).
Table exec_insert_subject(Session& s, const InsertStmt& st, PatchOp op, Table t, std::chrono::steady_clock::time_point t0);
std::vector<std::string> insert_decoy_prompts();
/// ASCII lower case: how edits compare entity and relation names.
std::string insert_lower(std::string s);
/// The element-wise mean of `rows` ([n][hidden] -> [hidden]).
std::vector<double> insert_mean_rows(const std::vector<std::vector<float>>& rows, int64_t hidden);
std::vector<std::string> insert_decoy_entities();
std::string insert_expert_suffix(Session& s, int64_t layer, int64_t feature);
Table exec_update(Session& s, const UpdateStmt& st, Pos pos);
Table exec_delete(Session& s, const DeleteStmt& st, Pos pos);
Table exec_patch(Session& s, const PatchStmt& st, Pos pos);
Table exec_show_patches(Session& s);
Table exec_compile(Session& s, const CompileStmt& st, Pos pos);
/// A KNN fact's key matches when the cosine of the prompt's FFN input at the fact's layer and
/// the key is at least this.
inline constexpr double kKnnThreshold = 0.9;
struct KnnMatch {
  size_t fact = 0;       ///< index into EditState::knn
  double cosine = 0;
  bool refused = false;  ///< matched, but the prompt does not mention the fact's entity (VERIFY ON)
};
/// The best KNN fact for a forward run of `prompt`; nullopt when none matches.
std::optional<KnnMatch> knn_lookup(Session& s, const ForwardRun& run, const std::string& prompt, bool verify);

}  // namespace larql::lql::detail
