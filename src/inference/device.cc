#include "inference/device.h"

#include <algorithm>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "util/error.h"

namespace larql {

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::Cpu;
  if (s == "cuda") return Device::Cuda;
  throw Error(ErrorKind::InvalidArgument, "unknown device '" + std::string(s) + "' (expected cpu or cuda)");
}

std::string_view device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

namespace {

class CpuSequence final : public DeviceSequence {
 public:
  CpuSequence(const void* owner, std::shared_ptr<Forward> f, int64_t capacity)
      : owner_(owner), f_(std::move(f)), cache_(f_->config()), capacity_(capacity),
        last_(static_cast<size_t>(f_->config().hidden)) {}

  void check(const int32_t* tokens, int64_t n) const {
    const int64_t vocab = f_->config().vocab;
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= vocab)
        throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(tokens[i]) +
                                                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (n_past() + n > capacity_)
      throw Error(ErrorKind::ContextOverflow, std::to_string(n) + " tokens after " + std::to_string(n_past()) +
                                                  " do not fit the sequence's " + std::to_string(capacity_) + " positions");
  }

  void append(const int32_t* tokens, int64_t n) override {
    if (n <= 0) return;
    check(tokens, n);
    const int64_t H = f_->config().hidden;
    x_.resize(static_cast<size_t>(n * H));
    f_->forward(tokens, n, cache_, x_.data());
    std::copy(x_.end() - H, x_.end(), last_.begin());
    ran_ = true;
  }
  int64_t n_past() const override { return cache_.n_past(); }
  int64_t capacity() const override { return capacity_; }
  void hidden(float* out) override {
    require_ran();
    std::copy(last_.begin(), last_.end(), out);
  }
  void logits(float* out) override {
    require_ran();
    f_->logits(last_.data(), 1, out);
  }
  int32_t argmax() override {
    logits_.resize(static_cast<size_t>(f_->config().vocab));
    logits(logits_.data());
    return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
  }
  void truncate(int64_t pos) override {
    if (pos < 0 || pos > n_past())
      throw Error(ErrorKind::InvalidArgument, "truncate: position " + std::to_string(pos) + " is outside [0, " +
                                                  std::to_string(n_past()) + "]");
    if (pos == 0) {
      cache_.clear();
      ran_ = false;
      return;
    }
    // Sliding layers have dropped rows older than their window: a query at `pos` needs the keys
    // pos - window + 1 .. pos - 1, which must still be held.
    for (int64_t li = 0; li < cache_.n_layers(); ++li) {
      const LayerKv& l = cache_.layer(li);
      const int64_t need = l.span() > 0 ? std::max<int64_t>(0, pos - l.span() + 1) : 0;
      if (l.first_pos() > need)
        throw Error(ErrorKind::InvalidArgument, "truncate: layer " + std::to_string(li) + " no longer holds position " +
                                                    std::to_string(need) + " (its window dropped it); rewind at most to " +
                                                    std::to_string(l.first_pos() + (l.span() > 0 ? l.span() - 1 : 0)));
    }
    for (int64_t li = 0; li < cache_.n_layers(); ++li) cache_.layer(li).truncate(pos);
    ran_ = false;  // the last position's residual is no longer held
  }
  size_t kv_bytes() const override { return cache_.bytes(); }

  const void* owner_;
  std::shared_ptr<Forward> f_;
  KvCache cache_;
  int64_t capacity_;
  std::vector<float> last_, x_, logits_;
  bool ran_ = false;

 private:
  void require_ran() const {
    if (!ran_) throw Error(ErrorKind::InvariantViolation, "the sequence has no last position to read (append first)");
  }
};

class CpuDeviceModel final : public DeviceModel {
 public:
  explicit CpuDeviceModel(std::shared_ptr<Forward> f) : f_(std::move(f)) {
    if (!f_) throw Error(ErrorKind::InvalidArgument, "cpu_device_model: no forward");
  }
  DeviceInfo info() const override {
    return DeviceInfo{"cpu", std::to_string(f_->pool_ptr()->size()) + " threads", 0};
  }
  bool supports(DeviceFeature f) const override { return f == DeviceFeature::HostKv || f == DeviceFeature::BatchedDecode; }
  std::unique_ptr<DeviceSequence> new_sequence(int64_t capacity) override {
    const int64_t ctx = f_->config().context_length;
    if (capacity < 1 || capacity > ctx)
      throw Error(ErrorKind::InvalidArgument, "a sequence of " + std::to_string(capacity) +
                                                  " positions: must be in [1, " + std::to_string(ctx) + "]");
    return std::make_unique<CpuSequence>(this, f_->sibling(), capacity);
  }
  void decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) override {
    std::vector<CpuSequence*> cs;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto* s = dynamic_cast<CpuSequence*>(seqs[i]);
      if (s == nullptr || s->owner_ != this)
        throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " belongs to another model");
      if (std::find(cs.begin(), cs.end(), s) != cs.end())
        throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " appears twice");
      s->check(&tokens[i], 1);
      cs.push_back(s);
    }
    std::vector<Forward::BatchItem> items(cs.size());
    for (size_t i = 0; i < cs.size(); ++i) items[i] = Forward::BatchItem{tokens[i], &cs[i]->cache_, cs[i]->last_.data()};
    if (items.empty()) return;
    if (!batch_) batch_ = f_->sibling();
    batch_->decode_batch(items);
    for (size_t i = 0; i < cs.size(); ++i) {
      cs[i]->ran_ = true;
      if (argmax_out != nullptr) argmax_out[i] = cs[i]->argmax();
    }
  }

 private:
  std::shared_ptr<Forward> f_;
  std::shared_ptr<Forward> batch_;  ///< decode_batch's own scratch (made on first use)
};

}  // namespace

std::shared_ptr<DeviceModel> cpu_device_model(std::shared_ptr<Forward> forward) {
  return std::make_shared<CpuDeviceModel>(std::move(forward));
}

}  // namespace larql
