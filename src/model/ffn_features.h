// FFN features, numbered as a vindex numbers them (docs/vindex-format.md "Experts"): the unit that
// DESCRIBE / WALK / SELECT show and that INSERT / UPDATE / DELETE write. A feature is one gate
// row, one up row and one down column of a layer's FFN.
//
//   dense FFN:  feature f = row f of W_gate / W_up, column f of W_down; f in [0, ffn).
//   MoE FFN:    the routed experts first, each a contiguous run of expert_ffn features — expert e's
//               feature i is f = e * expert_ffn + i — then the shared expert's shared_expert_ffn
//               features (Qwen2-MoE), f = n_experts * expert_ffn + i. This is the original LARQL's
//               layout ("all experts' gate matrices concatenated, feature index = expert·n + i").
//
// Because the stacked expert tensors (GGUF dims [cols, rows, n_experts]) hold expert e's rows
// after expert e-1's, routed feature f is row f of the stacked gate/up tensor read as one
// [n_experts * expert_ffn, hidden] matrix, and column i of rows [e * hidden, (e+1) * hidden) of the
// stacked down tensor read as [n_experts * hidden, expert_ffn].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/tensor.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace larql {

struct LayerWeights;

/// Where feature f of a layer lives.
struct FfnFeatureRef {
  /// -1: a dense FFN's feature; 0..n_experts-1: a routed expert's; kSharedExpert: the shared
  /// expert's.
  int64_t expert = -1;
  static constexpr int64_t kSharedExpert = -2;
  int64_t index = 0;       ///< the feature's row within its (expert's) gate / up matrix
  TensorRole gate = TensorRole::FfnGate, up = TensorRole::FfnUp, down = TensorRole::FfnDown;
  int64_t gate_row = 0;    ///< row of the gate / up tensor read as a 2-D [rows, hidden] matrix
  int64_t down_row0 = 0;   ///< the first of the `hidden` rows of the down tensor (read as 2-D) holding the column
  int64_t down_col = 0;    ///< the column of those rows
};

/// FFN features a layer has: ffn for a dense model; n_experts * expert_ffn + shared_expert_ffn
/// for a mixture of experts.
int64_t ffn_feature_count(const ModelConfig& c);

/// Where feature `feature` lives. Errors: InvalidArgument naming the feature and the range.
FfnFeatureRef ffn_feature_ref(const ModelConfig& c, int64_t feature);

/// The feature's matrices in a loaded layer: its gate and up rows are row `row` of *gate / *up
/// ([rows, hidden]); its down column is column `col` of *down ([hidden, cols]).
struct FfnFeatureViews {
  const TensorView* gate = nullptr;
  const TensorView* up = nullptr;
  const TensorView* down = nullptr;
  int64_t row = 0;
  int64_t col = 0;
};
/// Errors: as ffn_feature_ref.
FfnFeatureViews ffn_feature_views(const ModelConfig& c, const LayerWeights& w, int64_t feature);

/// A layer's gate (or down) matrices in feature order: the dense FFN's one, or each routed
/// expert's then the shared expert's — side by side they hold features 0, 1, ... (gate:
/// [rows, hidden] each; down: [hidden, cols] each).
std::vector<const TensorView*> ffn_gate_matrices(const ModelConfig& c, const LayerWeights& w);
std::vector<const TensorView*> ffn_down_matrices(const ModelConfig& c, const LayerWeights& w);

/// The expert a feature belongs to, as LQL shows it: "" (dense), "E3", "shared".
std::string ffn_feature_expert_label(int64_t expert);

}  // namespace larql
