// The session's view of down_meta (docs/lql.md "Knowledge edits"): for a feature whose stored down
// column an edit changed, the record is recomputed from the edited column — the same search
// COMPILE INTO VINDEX writes into the compiled down_meta.bin — so FEATURES, EDGES, DESCRIBE, WALK
// and DIFF show what the edited feature writes, not what the base's did.
#include <algorithm>
#include <cctype>

#include "compute/top_k_rows.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

bool decodes_to_nothing(const Tokenizer& tok, int32_t id) {
  for (unsigned char c : tok.decode({id}, true))
    if (!std::isspace(c)) return false;
  return true;
}

}  // namespace

std::vector<std::vector<vindex::TokenScore>> down_records_of(Session& s, const OverlaySource& src, int64_t layer,
                                                             const std::vector<int64_t>& features) {
  const auto* dm = s.down_meta();
  if (!dm || features.empty()) return {};
  EditState& ed = s.edits();
  auto model = s.model("down_meta");
  const TensorView& emb = model->weights().lm_head;  // down_meta's matrix (docs/vindex-format.md)
  if (!ed.down_skip) {
    const Tokenizer& tok = s.tokenizer();
    auto skip = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(emb.rows), 0);
    for (int64_t t = 0; t < emb.rows && t < tok.vocab_size(); ++t)
      (*skip)[static_cast<size_t>(t)] = decodes_to_nothing(tok, static_cast<int32_t>(t)) ? 1 : 0;
    ed.down_skip = std::move(skip);
  }
  const uint32_t k = dm->top_k();
  std::vector<std::vector<vindex::TokenScore>> out(features.size(), std::vector<vindex::TokenScore>(k));
  // A column of zeros writes nothing: no record ({0, 0} entries, as down_meta.bin's padding).
  std::vector<float> cols, col;
  std::vector<size_t> live;
  for (size_t i = 0; i < features.size(); ++i) {
    src.ffn_feature(layer, features[i], nullptr, nullptr, &col);
    if (std::all_of(col.begin(), col.end(), [](float v) { return v == 0.0f; })) continue;
    cols.insert(cols.end(), col.begin(), col.end());
    live.push_back(i);
  }
  if (live.empty()) return out;
  compute::TopKOptions topt;
  topt.top_k = static_cast<int>(k);
  topt.skip = ed.down_skip.get();
  const auto top = compute::top_k_rows(s.pool(), emb, cols.data(), static_cast<int64_t>(live.size()), topt);
  for (size_t j = 0; j < live.size(); ++j)
    for (uint32_t e = 0; e < k; ++e) {
      const auto& r = top[j * k + e];
      out[live[j]][e] = {static_cast<uint32_t>(r.row), r.score};
    }
  return out;
}

const std::vector<vindex::TokenScore>* edited_down_record(Session& s, int64_t layer, int64_t feature) {
  if (!s.has_vindex()) return nullptr;
  EditState& ed = s.edits();
  if (!ed.overlay || !s.down_meta()) return nullptr;
  auto it = ed.down_changed.find(layer);
  if (it == ed.down_changed.end() || !it->second.count(feature)) return nullptr;
  if (auto r = ed.down_records.find({layer, feature}); r != ed.down_records.end()) return &r->second;
  // Every changed column of the layer without a record, in one search over the embedding.
  std::vector<int64_t> missing;
  for (int64_t f : it->second)
    if (!ed.down_records.count({layer, f}) && f < s.down_meta()->num_features(static_cast<uint32_t>(layer)))
      missing.push_back(f);
  const auto recs = down_records_of(s, *ed.overlay, layer, missing);
  for (size_t i = 0; i < recs.size(); ++i) ed.down_records[{layer, missing[i]}] = recs[i];
  auto r = ed.down_records.find({layer, feature});
  return r == ed.down_records.end() ? nullptr : &r->second;
}

}  // namespace larql::lql::detail
