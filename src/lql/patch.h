// Knowledge-edit patches: the `.vlp` file (docs/lql.md "The .vlp patch file"). A patch is a list
// of operations on one base model: JSON, "version": 1, the base model's name and fingerprint, ops
// tagged by "op" (insert / update / delete / insert_knn / delete_knn), f32 vectors as standard
// base64 of their little-endian bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace larql::lql {

struct PatchOp {
  enum class Kind { Insert, Update, Delete, InsertKnn, DeleteKnn } kind = Kind::Insert;
  int64_t layer = -1;             ///< insert / update / delete / insert_knn
  int64_t feature = -1;           ///< insert / update / delete
  std::string entity, relation, target;  ///< insert / insert_knn (entity also delete_knn)
  int64_t target_id = -1;         ///< insert / insert_knn: the target's first token
  double confidence = 1.0;
  std::vector<float> gate, up, down;  ///< insert / update: [hidden] each (update: any may be empty)
  std::vector<float> key;         ///< insert_knn: the FFN-input residual [hidden]
  std::string reason;             ///< delete, optional
};

struct Patch {
  int64_t version = 1;
  std::string base_model;        ///< index.json's model name
  std::string base_fingerprint;  ///< the base weight source's fingerprint
  std::string description;
  std::string created_at;        ///< ISO 8601 UTC
  std::vector<PatchOp> ops;
};

/// The limits a patch is checked against when loaded.
struct PatchLimits {
  int64_t num_layers = 0, num_features = 0, hidden = 0, vocab = 0;
  /// Features an insert, update or delete may name past num_features: those MODE SUBJECT appends
  /// (OverlaySource::widen_ffn; not its range columns). 0 for a mixture-of-experts model.
  int64_t appended = 0;
};

const char* op_name(PatchOp::Kind k);

/// Standard base64 (RFC 4648 §4, '=' padding) of the little-endian bytes of `v`.
std::string encode_floats(const std::vector<float>& v);
/// The inverse. Errors: InvalidArgument "bad base64 ..." (a character outside the alphabet, a
/// length not a multiple of 4, misplaced padding) or a byte count not a multiple of 4.
std::vector<float> decode_floats(std::string_view b64);

/// The largest magnitude an edit's vector may hold: f16's largest finite value, the vindex's
/// default storage (a larger gate value is inf there, and the forward pass turns it into NaN).
constexpr float kMaxEditValue = 65504.0f;
/// The index of the first value of `v` beyond +-kMaxEditValue (or not finite), or -1.
int64_t out_of_range_value(const std::vector<float>& v);

/// The patch as pretty-printed JSON.
std::string patch_to_json(const Patch& p);
/// Parse and check a patch. `name` names it in errors, always as "FILE: FIELD: problem" ("d.vlp:
/// operations[3].gate_vector_b64: 639 floats, the model's hidden size is 640", "d.vlp: version:
/// 2 is not ..."): not JSON (the parser's excerpt of what it read cut to a few characters), version other than 1, an unknown op, a missing or mistyped
/// field, bad base64, a vector of the wrong length, a non-finite value or one beyond
/// +-kMaxEditValue, a layer, feature or token id out of range, a second insert on a slot an
/// earlier op of the file inserted (with no delete between).
Patch patch_from_json(std::string_view text, const PatchLimits& lim, const std::string& name = "patch");
/// Write atomically (util/atomic_file.h); with replace = false never over an existing file
/// (Error{InvalidArgument} "<path> already exists", checked atomically). Errors: AtomicWriter's.
void save_patch(const std::string& path, const Patch& p, bool replace = true);
/// Read and check a file. Errors: NotFound / Io, and patch_from_json's.
Patch load_patch(const std::string& path, const PatchLimits& lim);

}  // namespace larql::lql
