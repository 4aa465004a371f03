#include "lql/edits.h"

#include <algorithm>
#include <cmath>

#include "model/overlay_source.h"
#include "util/error.h"

namespace larql::lql {

void EditState::apply(const std::shared_ptr<const WeightSource>& base, const PatchOp& op) {
  switch (op.kind) {
    case PatchOp::Kind::Insert:
    case PatchOp::Kind::Update:
    case PatchOp::Kind::Delete: {
      // Copy-on-write: the new overlay shares every tensor buffer with the one the running model
      // holds, and copies a tensor only when this op writes it.
      auto next = overlay ? std::make_shared<OverlaySource>(*overlay) : std::make_shared<OverlaySource>(base);
      std::vector<float> zero;
      const float *g = nullptr, *u = nullptr, *d = nullptr;
      if (op.kind == PatchOp::Kind::Delete) {
        zero.assign(static_cast<size_t>(base->config().hidden), 0.0f);
        g = u = d = zero.data();
      } else {
        g = op.gate.empty() ? nullptr : op.gate.data();
        u = op.up.empty() ? nullptr : op.up.data();
        d = op.down.empty() ? nullptr : op.down.data();
      }
      // A feature past the model's width was appended (MODE SUBJECT): widen every layer's FFN
      // to hold it, in whole blocks (OverlaySource::widen_ffn; REMOVE PATCH rebuilds without).
      if (const int64_t w = next->config().ffn; op.feature >= w && next->config().n_experts == 0)
        next->widen_ffn((op.feature + 1 - w + kFfnAppendBlock - 1) / kFfnAppendBlock * kFfnAppendBlock);
      const FeatureEditReport rep = next->set_ffn_feature(op.layer, op.feature, g, u, d);
      clamped += rep.clamped;
      down_changed[op.layer].insert(rep.changed_columns.begin(), rep.changed_columns.end());
      for (int64_t f : rep.changed_columns) down_records.erase({op.layer, f});
      touched.insert({op.layer, op.feature});
      if (g) {
        std::vector<float> row;
        next->ffn_feature(op.layer, op.feature, &row, nullptr, nullptr);
        gate_rows[{op.layer, op.feature}] = std::move(row);
      }
      overlay = std::move(next);
      break;
    }
    case PatchOp::Kind::InsertKnn: {
      KnnFact f;
      f.layer = op.layer;
      f.key = op.key;
      double n = 0;
      for (float x : f.key) n += static_cast<double>(x) * x;
      n = std::sqrt(n);
      if (n > 0)
        for (float& x : f.key) x = static_cast<float>(x / n);
      f.target_id = op.target_id;
      f.entity = op.entity;
      f.relation = op.relation;
      f.target = op.target;
      f.confidence = op.confidence;
      knn.push_back(std::move(f));
      break;
    }
    case PatchOp::Kind::DeleteKnn:
      std::erase_if(knn, [&](const KnnFact& f) { return f.entity == op.entity; });
      break;
  }
}

void EditState::rebuild(const std::shared_ptr<const WeightSource>& base) {
  overlay.reset();
  gate_rows.clear();
  touched.clear();
  down_changed.clear();
  down_records.clear();
  knn.clear();
  clamped = 0;
  for (const auto& p : applied)
    for (const auto& op : p.patch.ops) apply(base, op);
  if (recording)
    for (const auto& op : recording->patch.ops) apply(base, op);
}

size_t EditState::op_count() const {
  size_t n = recording ? recording->patch.ops.size() : 0;
  for (const auto& p : applied) n += p.patch.ops.size();
  return n;
}

}  // namespace larql::lql
