#include "model/ffn_features.h"

#include "model/model.h"
#include "util/error.h"

namespace larql {

int64_t ffn_feature_count(const ModelConfig& c) {
  if (c.n_experts > 0) return c.n_experts * c.expert_ffn + c.shared_expert_ffn;
  return c.ffn;
}

FfnFeatureRef ffn_feature_ref(const ModelConfig& c, int64_t feature) {
  const int64_t n = ffn_feature_count(c);
  if (feature < 0 || feature >= n)
    throw Error(ErrorKind::InvalidArgument, "feature " + std::to_string(feature) + " is out of range 0-" + std::to_string(n - 1));
  FfnFeatureRef r;
  if (c.n_experts == 0) {
    r.index = r.gate_row = r.down_col = feature;
    return r;
  }
  const int64_t routed = c.n_experts * c.expert_ffn;
  if (feature < routed) {
    r.expert = feature / c.expert_ffn;
    r.index = feature % c.expert_ffn;
    r.gate = TensorRole::FfnGateExps;
    r.up = TensorRole::FfnUpExps;
    r.down = TensorRole::FfnDownExps;
    r.gate_row = feature;
    r.down_row0 = r.expert * c.hidden;
    r.down_col = r.index;
    return r;
  }
  r.expert = FfnFeatureRef::kSharedExpert;
  r.index = feature - routed;
  r.gate = TensorRole::FfnGateShexp;
  r.up = TensorRole::FfnUpShexp;
  r.down = TensorRole::FfnDownShexp;
  r.gate_row = r.down_col = r.index;
  return r;
}

FfnFeatureViews ffn_feature_views(const ModelConfig& c, const LayerWeights& w, int64_t feature) {
  const FfnFeatureRef r = ffn_feature_ref(c, feature);
  FfnFeatureViews v;
  v.row = v.col = r.index;
  if (r.expert == -1) {
    v.gate = &w.w_gate, v.up = &w.w_up, v.down = &w.w_down;
  } else if (r.expert == FfnFeatureRef::kSharedExpert) {
    v.gate = &w.shexp_gate, v.up = &w.shexp_up, v.down = &w.shexp_down;
  } else {
    const auto e = static_cast<size_t>(r.expert);
    if (e >= w.exp_gate.size() || e >= w.exp_up.size() || e >= w.exp_down.size())
      throw Error(ErrorKind::InvalidArgument, "feature " + std::to_string(feature) + ": the layer has no expert " + std::to_string(r.expert));
    v.gate = &w.exp_gate[e], v.up = &w.exp_up[e], v.down = &w.exp_down[e];
  }
  return v;
}

namespace {

// The dense matrix, or each expert's then the shared expert's.
std::vector<const TensorView*> in_feature_order(const ModelConfig& c, const TensorView& dense,
                                                const std::vector<TensorView>& experts, const TensorView& shared) {
  if (c.n_experts == 0) return {&dense};
  std::vector<const TensorView*> out;
  for (const TensorView& m : experts) out.push_back(&m);
  if (c.shared_expert_ffn > 0) out.push_back(&shared);
  return out;
}

}  // namespace

std::vector<const TensorView*> ffn_gate_matrices(const ModelConfig& c, const LayerWeights& w) {
  return in_feature_order(c, w.w_gate, w.exp_gate, w.shexp_gate);
}

std::vector<const TensorView*> ffn_down_matrices(const ModelConfig& c, const LayerWeights& w) {
  return in_feature_order(c, w.w_down, w.exp_down, w.shexp_down);
}

std::string ffn_feature_expert_label(int64_t expert) {
  if (expert == -1) return "";
  if (expert == FfnFeatureRef::kSharedExpert) return "shared";
  return "E" + std::to_string(expert);
}

}  // namespace larql
