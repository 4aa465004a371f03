// `standard` on a backend other than the CPU code itself (docs/backends.md): full K/V kept by the
// backend (DeviceSequence), logits and greedy argmax computed there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/device.h"
#include "inference/forward.h"
#include "kv/engine.h"

namespace larql {

/// The `standard` engine over a DeviceModel: prefill/decode_step run on the device; the returned
/// residual [hidden] is copied back (10 KiB for a 2560-wide model), the logits only when asked
/// (device_logits) and greedy decoding reads the argmax alone (device_argmax).
/// Errors: as Engine; save_state/load_state: Error{BackendUnavailable} (the device's K/V is not
/// written to state files yet).
class DeviceEngine : public Engine {
 public:
  /// `forward` gives the model's config (context checks); `device` runs the sequence.
  DeviceEngine(std::shared_ptr<Forward> forward, std::shared_ptr<DeviceModel> device);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return seq_ ? seq_->n_past() : 0; }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;
  bool device_logits(float* out) override;
  int32_t device_argmax() override;

 private:
  std::vector<float> hidden();
  std::shared_ptr<Forward> fwd_;
  std::shared_ptr<DeviceModel> device_;
  std::unique_ptr<DeviceSequence> seq_;
  bool started_ = false;
};

/// Error{BackendUnavailable} naming `engine` and the device: the engines other than `standard`
/// keep host state (residuals, quantised or windowed K/V) that a GPU backend does not hold.
[[noreturn]] void refuse_on_device(const std::string& engine, const DeviceModel& device);

}  // namespace larql
