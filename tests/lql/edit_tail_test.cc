// EditTail (src/lql/edit_tail.h) on the synthetic Gemma 3 model: its forward against the engine's
// logits from the same residual rows, and its gradient against central finite differences of its
// own forward.
#include "lql/edit_tail.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql::lql {
namespace {

const std::vector<int32_t> kTokens = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200};  // 10 > window 4

// Records residual_in of one layer at every position.
struct Capture : LayerObserver {
  int64_t layer = 0;
  std::vector<float> rows;
  void on_layer(const LayerTrace& t) override {
    if (t.layer == layer) rows.insert(rows.end(), t.residual_in, t.residual_in + t.hidden);
  }
};

struct Fixture {
  std::unique_ptr<testing::SyntheticModel> sm = testing::make_synthetic_model();
  std::shared_ptr<const Model> model = Model::load(sm->path);
  ThreadPool pool{1};
  // The residual rows entering `layer` and the engine's last-position logits.
  std::pair<std::vector<float>, std::vector<float>> engine(int64_t layer) {
    Forward f(model, 1);
    Capture cap;
    cap.layer = layer;
    f.set_observer(&cap);
    const auto& c = model->config();
    KvCache cache(c);
    const int64_t n = static_cast<int64_t>(kTokens.size());
    std::vector<float> x(static_cast<size_t>(n * c.hidden)), lg(static_cast<size_t>(n * c.vocab));
    f.forward(kTokens.data(), n, cache, x.data());
    f.logits(x.data(), n, lg.data());
    return {cap.rows, std::vector<float>(lg.end() - c.vocab, lg.end())};
  }
};

TEST(EditTail, ForwardMatchesTheEngine) {
  Fixture fx;
  const auto& c = fx.model->config();
  for (int64_t first : {1, 3, 6}) {
    auto [rows, logits] = fx.engine(first);
    ASSERT_EQ(rows.size(), kTokens.size() * static_cast<size_t>(c.hidden));
    EditTail tail(*fx.model, first, fx.pool);
    double mx = -1e300, z = 0;
    for (float v : logits) mx = std::max(mx, static_cast<double>(v));
    for (float v : logits) z += std::exp(v - mx);
    for (int64_t target : {0, 5, 270}) {
      const double want = logits[static_cast<size_t>(target)] - mx - std::log(z);
      int64_t top1 = -1;
      const double got = tail.logprob(rows, static_cast<int64_t>(kTokens.size()), target, nullptr, 0, &top1);
      EXPECT_NEAR(got, want, 2e-3 * (1 + std::fabs(want))) << "first " << first << " target " << target;
      EXPECT_EQ(top1, std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
  }
}

TEST(EditTail, GradientMatchesFiniteDifferences) {
  Fixture fx;
  const auto& c = fx.model->config();
  const int64_t first = 2, n = static_cast<int64_t>(kTokens.size()), H = c.hidden, target = 270;
  auto [rows, logits] = fx.engine(first);
  EditTail tail(*fx.model, first, fx.pool);
  std::vector<float> grad;
  tail.logprob(rows, n, target, &grad, 0);
  ASSERT_EQ(grad.size(), rows.size());
  // Positions: the first (seen through attention only), one inside the last sliding window, the last.
  double worst = 0, scale = 0;
  for (int64_t t : {int64_t{0}, int64_t{5}, n - 1})
    for (int64_t i : {int64_t{0}, int64_t{7}, H / 2, H - 1}) {
      const size_t k = static_cast<size_t>(t * H + i);
      const float h = 1e-2f * std::max(1.0f, std::fabs(rows[k]));
      auto xp = rows, xm = rows;
      xp[k] += h;
      xm[k] -= h;
      const double fd = (tail.logprob(xp, n, target) - tail.logprob(xm, n, target)) / (2.0 * h);
      worst = std::max(worst, std::fabs(fd - grad[k]));
      scale = std::max(scale, std::fabs(fd));
      EXPECT_NEAR(grad[k], fd, 2e-2 * std::max(1e-2, std::fabs(fd)) + 1e-3) << "position " << t << " dim " << i;
    }
  EXPECT_GT(scale, 1e-3);  // the probe moved the output at all
  // from_pos: rows before it get no gradient; rows from it the same as without.
  std::vector<float> part;
  tail.logprob(rows, n, target, &part, 5);
  for (int64_t i = 0; i < H; ++i) {
    EXPECT_EQ(part[static_cast<size_t>(4 * H + i)], 0.0f);
    EXPECT_NEAR(part[static_cast<size_t>(6 * H + i)], grad[static_cast<size_t>(6 * H + i)], 1e-5 + 1e-4 * std::fabs(grad[static_cast<size_t>(6 * H + i)]));
  }
}

TEST(EditTail, ABatchGivesEachSequenceItsOwnResult) {
  Fixture fx;
  const auto& c = fx.model->config();
  const int64_t H = c.hidden, n = static_cast<int64_t>(kTokens.size());
  auto [rows, logits] = fx.engine(2);
  EditTail tail(*fx.model, 2, fx.pool);
  // A second sequence: the first 6 rows (a prefix is a sequence of its own: causal attention).
  const std::vector<float> short_rows(rows.begin(), rows.begin() + 6 * H);
  std::vector<float> g_long, g_short;
  const double lp_long = tail.logprob(rows, n, 270, &g_long, 3);
  const double lp_short = tail.logprob(short_rows, 6, 5, &g_short, 1);
  std::vector<std::vector<float>> grads;
  std::vector<int64_t> tops;
  const auto lps = tail.logprobs({{&short_rows, 6, 5, 1}, {&rows, n, 270, 3}}, &grads, &tops);
  ASSERT_EQ(lps.size(), 2u);
  EXPECT_NEAR(lps[0], lp_short, 1e-5);
  EXPECT_NEAR(lps[1], lp_long, 1e-5);
  EXPECT_NE(lp_short, lp_long);
  for (size_t i = 0; i < g_short.size(); ++i) EXPECT_NEAR(grads[0][i], g_short[i], 1e-5 + 1e-4 * std::fabs(g_short[i])) << i;
  for (size_t i = 0; i < g_long.size(); ++i) EXPECT_NEAR(grads[1][i], g_long[i], 1e-5 + 1e-4 * std::fabs(g_long[i])) << i;
}

TEST(EditTail, APrefixGivesTheSameResultFromItsPosition) {
  Fixture fx;
  const auto& c = fx.model->config();
  const int64_t H = c.hidden, n = static_cast<int64_t>(kTokens.size());
  auto [rows, logits] = fx.engine(2);
  EditTail tail(*fx.model, 2, fx.pool);
  const std::vector<float> short_rows(rows.begin(), rows.begin() + 7 * H);
  const std::vector<EditTail::TailSeq> seqs = {{&rows, n, 270, 5}, {&short_rows, 7, 5, 2}};
  const auto prefix = tail.prefixes(seqs);
  ASSERT_EQ(prefix.size(), 2u);
  EXPECT_EQ(prefix[0].k.size(), static_cast<size_t>(c.n_layers - 2));
  EXPECT_EQ(prefix[0].k[0].size(), static_cast<size_t>(5 * c.kv_dim()));
  // Rows from from_pos on varied (as MODE SUBJECT varies them): the same log-probabilities and
  // gradients as the full pass.
  auto vary = [&](std::vector<float> x, int64_t from, int64_t count) {
    for (int64_t t = from; t < count; ++t)
      for (int64_t i = 0; i < H; ++i) x[static_cast<size_t>(t * H + i)] += 0.3f * std::sin(static_cast<float>(t * H + i));
    return x;
  };
  const std::vector<float> a = vary(rows, 5, n), b = vary(short_rows, 2, 7);
  const std::vector<EditTail::TailSeq> varied = {{&a, n, 270, 5}, {&b, 7, 5, 2}};
  std::vector<std::vector<float>> g_full, g_pre;
  std::vector<int64_t> top_full, top_pre;
  const auto lp_full = tail.logprobs(varied, &g_full, &top_full);
  const auto lp_pre = tail.logprobs(varied, &g_pre, &top_pre, &prefix);
  for (size_t q = 0; q < 2; ++q) {
    EXPECT_NEAR(lp_pre[q], lp_full[q], 1e-5 * (1 + std::fabs(lp_full[q]))) << q;
    EXPECT_EQ(top_pre[q], top_full[q]);
    ASSERT_EQ(g_pre[q].size(), g_full[q].size());
    for (size_t i = 0; i < g_full[q].size(); ++i) EXPECT_NEAR(g_pre[q][i], g_full[q][i], 1e-5 + 1e-4 * std::fabs(g_full[q][i])) << q << " " << i;
  }
  EXPECT_NE(lp_full[0], tail.logprob(rows, n, 270));  // the variation moved the output
  // The rows before from_pos come from the prefix, not from x: a prefix of other rows differs.
  const std::vector<float> other = vary(rows, 0, n);
  const auto other_prefix = tail.prefixes({{&other, n, 270, 5}, {&b, 7, 5, 2}});
  const auto lp_other = tail.logprobs(varied, nullptr, nullptr, &other_prefix);
  EXPECT_GT(std::fabs(lp_other[0] - lp_full[0]), 1e-4);
  // A prefix made for another from_pos is refused.
  const auto wrong = tail.prefixes({{&rows, n, 270, 4}, {&short_rows, 7, 5, 2}});
  try {
    tail.logprobs(varied, nullptr, nullptr, &wrong);
    FAIL() << "a prefix for from_pos 4 was accepted for from_pos 5";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
}

TEST(EditTail, RmsnormBackwardMatchesFiniteDifferences) {
  const std::vector<float> x = {0.3f, -1.2f, 2.0f, 0.05f}, w = {1.0f, 0.5f, 2.0f, -1.0f}, dy = {0.7f, -0.2f, 0.1f, 1.5f};
  std::vector<float> dx(4);
  rmsnorm_backward(x.data(), w.data(), dy.data(), dx.data(), 4, 1e-6f);
  auto f = [&](std::vector<float> v) {
    double ss = 0;
    for (float a : v) ss += static_cast<double>(a) * a;
    const double r = 1.0 / std::sqrt(ss / 4 + 1e-6);
    double s = 0;
    for (int i = 0; i < 4; ++i) s += dy[i] * w[i] * v[i] * r;
    return s;
  };
  for (int i = 0; i < 4; ++i) {
    auto p = x, m = x;
    p[i] += 1e-3f;
    m[i] -= 1e-3f;
    EXPECT_NEAR(dx[i], (f(p) - f(m)) / 2e-3, 1e-3) << i;
  }
}

TEST(EditTail, RefusesALayerOutsideTheModel) {
  Fixture fx;
  EXPECT_THROW(EditTail(*fx.model, 0, fx.pool), Error);
  EXPECT_THROW(EditTail(*fx.model, 99, fx.pool), Error);
}

}  // namespace
}  // namespace larql::lql
