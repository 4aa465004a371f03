#include "kv/device_engine.h"

#include "util/error.h"

namespace larql {

namespace {
/// How the user chose the backend, and what runs the other engines: for messages.
std::pair<std::string, std::string> chosen_by(const DeviceInfo& d) {
  if (d.backend == "pipeline")
    return {"over a pipeline of shards (--pipeline; the shards keep the K/V of their layers)",
            "use --ffn remote:... (attention and the K/V here, the FFN on the shards)"};
  return {"on --device " + d.backend, "use --device cpu"};
}
}  // namespace

DeviceEngine::DeviceEngine(std::shared_ptr<Forward> forward, std::shared_ptr<DeviceModel> device)
    : fwd_(std::move(forward)), device_(std::move(device)) {
  if (!fwd_ || !device_) throw Error(ErrorKind::InvalidArgument, "DeviceEngine: no forward or device");
}

std::vector<float> DeviceEngine::hidden() {
  std::vector<float> h(static_cast<size_t>(fwd_->config().hidden));
  seq_->hidden(h.data());
  return h;
}

std::vector<float> DeviceEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  check_context(static_cast<int64_t>(tokens.size()), fwd_->config());
  started_ = false;
  if (!seq_) seq_ = device_->new_sequence(fwd_->config().context_length);
  seq_->truncate(0);
  seq_->append(tokens.data(), static_cast<int64_t>(tokens.size()));
  started_ = true;
  return hidden();
}

std::vector<float> DeviceEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  check_context(seq_->n_past() + 1, fwd_->config());
  seq_->append(&token, 1);
  return hidden();
}

EngineInfo DeviceEngine::info() const {
  const DeviceInfo d = device_->info();
  return EngineInfo{"standard", d.backend, "", "runs on " + d.name};
}

EngineMemory DeviceEngine::memory() const { return EngineMemory{seq_ ? seq_->kv_bytes() : 0, 0, 0}; }

void DeviceEngine::save_state(const std::string& path) const {
  const auto [where, instead] = chosen_by(device_->info());
  throw Error(ErrorKind::BackendUnavailable, "saving a sequence's state (" + path + ") is not supported " + where +
                                                 " yet: " + instead);
}

void DeviceEngine::load_state(const std::string& path) {
  const auto [where, instead] = chosen_by(device_->info());
  throw Error(ErrorKind::BackendUnavailable, "resuming a sequence's state (" + path + ") is not supported " + where +
                                                 " yet: " + instead);
}

bool DeviceEngine::device_logits(float* out) {
  if (!started_ || !device_->supports(DeviceFeature::DeviceLogits)) return false;
  seq_->logits(out);
  return true;
}

int32_t DeviceEngine::device_argmax() {
  if (!started_ || !device_->supports(DeviceFeature::DeviceLogits)) return -1;
  return seq_->argmax();
}


void refuse_on_device(const std::string& engine, const DeviceModel& device) {
  const DeviceInfo d = device.info();
  const auto [where, instead] = chosen_by(d);
  throw Error(ErrorKind::BackendUnavailable,
              "engine '" + engine + "' keeps its state (residuals, windowed or quantised K/V) in host memory, which the " +
                  d.backend + " backend (" + d.name + ") does not hold; " + where +
                  " only 'standard' (no parameters) runs — " + instead + " for " + engine);
}

}  // namespace larql
