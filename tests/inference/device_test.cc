// The backend seam (inference/device.h) with the CPU backend: a DeviceSequence gives, bit for bit,
// what Forward::forward over a KvCache gives (prompt, decode steps, after a truncate), decode_batch
// gives each sequence what it gets alone, and bad input is refused before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "inference/device.h"
#include "inference/forward.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

struct Fixture {
  std::unique_ptr<testing::SyntheticModel> syn = testing::make_synthetic_model();
  std::shared_ptr<const Model> model = Model::load(syn->path);
  std::shared_ptr<Forward> fwd = std::make_shared<Forward>(model, 2);
  std::shared_ptr<DeviceModel> dev = cpu_device_model(fwd);
  int64_t H = model->config().hidden, V = model->config().vocab;

  // The reference: Forward::forward over a fresh KvCache, the last row and its logits.
  std::pair<std::vector<float>, std::vector<float>> reference(const std::vector<int32_t>& toks) {
    KvCache cache(model->config());
    std::vector<float> x(toks.size() * static_cast<size_t>(H)), lg(static_cast<size_t>(V));
    Forward f(model, 2);
    f.forward(toks.data(), static_cast<int64_t>(toks.size()), cache, x.data());
    std::vector<float> last(x.end() - H, x.end());
    f.logits(last.data(), 1, lg.data());
    return {last, lg};
  }
};

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Device, ParsesDeviceNames) {
  EXPECT_EQ(parse_device("cpu"), Device::Cpu);
  EXPECT_EQ(parse_device("cuda"), Device::Cuda);
  EXPECT_EQ(device_name(Device::Cuda), "cuda");
  for (const char* bad : {"", "gpu", "CUDA", "cuda:0"}) EXPECT_THROW(parse_device(bad), Error) << bad;
}

TEST(Device, CpuSequenceEqualsForward) {
  Fixture fx;
  const std::vector<int32_t> toks = {2, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  auto seq = fx.dev->new_sequence(32);
  seq->append(toks.data(), 6);  // a prompt, then decode steps
  for (size_t i = 6; i < toks.size(); ++i) seq->append(&toks[i], 1);
  EXPECT_EQ(seq->n_past(), 10);
  auto [h_ref, lg_ref] = fx.reference(toks);
  std::vector<float> h(static_cast<size_t>(fx.H)), lg(static_cast<size_t>(fx.V));
  seq->hidden(h.data());
  seq->logits(lg.data());
  EXPECT_TRUE(same(h, h_ref));
  EXPECT_TRUE(same(lg, lg_ref));
  EXPECT_EQ(seq->argmax(), std::max_element(lg_ref.begin(), lg_ref.end()) - lg_ref.begin());
  EXPECT_GT(seq->kv_bytes(), 0u);

  // Rewind one position and continue differently: as if the first 9 were all there was. (The
  // synthetic model's sliding window is 4: rewinding to 4 would need rows its layers dropped.)
  EXPECT_THROW(seq->truncate(4), Error);
  seq->truncate(9);
  EXPECT_THROW(seq->hidden(h.data()), Error);  // no last position until the next append
  std::vector<int32_t> other(toks.begin(), toks.begin() + 9);
  other.push_back(40);
  seq->append(&other[9], 1);
  auto [h2, lg2] = fx.reference(other);
  seq->hidden(h.data());
  EXPECT_TRUE(same(h, h2));
  seq->truncate(0);
  EXPECT_EQ(seq->n_past(), 0);
}

TEST(Device, CpuBatchEqualsAlone) {
  Fixture fx;
  std::vector<std::unique_ptr<DeviceSequence>> a, b;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = {2};
    for (int j = 0; j <= i * 2; ++j) p.push_back(10 + i + j);
    a.push_back(fx.dev->new_sequence(32));
    b.push_back(fx.dev->new_sequence(32));
    a.back()->append(p.data(), static_cast<int64_t>(p.size()));
    b.back()->append(p.data(), static_cast<int64_t>(p.size()));
  }
  const std::vector<int32_t> tok = {20, 21, 22};
  std::vector<int32_t> am(3);
  std::vector<DeviceSequence*> ptrs = {a[0].get(), a[1].get(), a[2].get()};
  fx.dev->decode_batch(ptrs, tok.data(), am.data());
  std::vector<float> la(static_cast<size_t>(fx.V)), lb(static_cast<size_t>(fx.V));
  for (size_t i = 0; i < 3; ++i) {
    b[i]->append(&tok[i], 1);
    a[i]->logits(la.data());
    b[i]->logits(lb.data());
    EXPECT_TRUE(same(la, lb)) << i;
    EXPECT_EQ(am[i], b[i]->argmax()) << i;
    EXPECT_EQ(a[i]->n_past(), b[i]->n_past());
  }
}

TEST(Device, BadInputIsRefusedBeforeRunning) {
  Fixture fx;
  EXPECT_THROW(fx.dev->new_sequence(0), Error);
  EXPECT_THROW(fx.dev->new_sequence(fx.model->config().context_length + 1), Error);
  auto seq = fx.dev->new_sequence(4);
  const std::vector<int32_t> bad = {2, static_cast<int32_t>(fx.V)};
  try {
    seq->append(bad.data(), 2);
    FAIL() << "a token outside the vocabulary ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  EXPECT_EQ(seq->n_past(), 0);
  const std::vector<int32_t> five = {2, 10, 11, 12, 13};
  try {
    seq->append(five.data(), 5);
    FAIL() << "5 tokens ran in a sequence of 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ContextOverflow);
  }
  EXPECT_THROW(seq->truncate(1), Error);  // beyond n_past()
  // decode_batch: a sequence twice, and one of another model.
  seq->append(five.data(), 2);
  std::vector<DeviceSequence*> twice = {seq.get(), seq.get()};
  const std::vector<int32_t> t2 = {10, 11};
  EXPECT_THROW(fx.dev->decode_batch(twice, t2.data(), nullptr), Error);
  Fixture other;
  auto foreign = other.dev->new_sequence(4);
  foreign->append(five.data(), 1);
  std::vector<DeviceSequence*> mixed = {seq.get(), foreign.get()};
  EXPECT_THROW(fx.dev->decode_batch(mixed, t2.data(), nullptr), Error);
  EXPECT_EQ(seq->n_past(), 2);
  EXPECT_FALSE(fx.dev->supports(DeviceFeature::DeviceLogits));
  EXPECT_TRUE(fx.dev->supports(DeviceFeature::HostKv));
}

}  // namespace
}  // namespace larql
