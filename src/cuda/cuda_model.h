// The CUDA backend (docs/backends.md): a model's weights uploaded once to an NVIDIA GPU, its
// sequences' K/V and workspace allocated there; decode steps replayed as CUDA graphs.
// Built only with -DLARQL_CUDA=ON.
#pragma once

#include <memory>

#include "inference/device.h"
#include "model/model.h"

namespace larql::cuda {

/// Upload `model` to CUDA device `ordinal` (weights repacked once into the layouts of
/// cuda/blocks.h). The model must be whole (no ModelPart) and dense.
/// Errors: Error{BackendUnavailable} when no CUDA device is usable (the driver's message), for a
/// mixture-of-experts model, a head_dim other than 64/128/256, more than 8 query heads per K/V
/// head, or a weight type the backend does not hold (naming the tensor and its type);
/// Error{BackendFailure} when the device runs out of memory (naming the bytes asked for and
/// what for) or a CUDA call fails.
std::shared_ptr<DeviceModel> open_model(std::shared_ptr<const Model> model, int ordinal = 0);

}  // namespace larql::cuda
