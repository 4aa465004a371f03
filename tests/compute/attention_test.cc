// compute::attend_group: against softmax(q k^T * scale) v in double, and bit-identical to the
// composition compute/attention.h promises — per chunk of kAttnChunk keys dot_f32 / exp / axpy,
// then the chunks combined in order — whatever the number of heads per call and whichever thread
// computes which chunk (a prompt runs a query's chunks in one task, a decode step spreads them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/attention.h"
#include "compute/ops.h"

namespace larql {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Case {
  int64_t n_q, m, hd, stride;
  float cap;
};

// The composition attend_group promises, written out with the public pieces one head at a time:
// per chunk, dot_f32 * scale (+ cap), max, exp(s - max) and its double sum (exp_shifted_sum), an
// axpy chain; then M = max of the chunk maxima, w_c = exp(max_c - M), L = fma chain of w_c sum_c,
// O = axpy chain of w_c out_c, O * (1 / L).
void by_parts(const float* q, int64_t n_q, const float* k, const float* v, const Case& c, float scale, float* out) {
  const int64_t nc = (c.m + compute::kAttnChunk - 1) / compute::kAttnChunk;
  for (int64_t h = 0; h < n_q; ++h) {
    std::vector<float> mx(nc), z(nc), o(static_cast<size_t>(nc * c.hd), 0.0f);
    for (int64_t ch = 0; ch < nc; ++ch) {
      const int64_t j0 = ch * compute::kAttnChunk, mc = std::min(compute::kAttnChunk, c.m - j0);
      std::vector<float> s(static_cast<size_t>(mc));
      for (int64_t j = 0; j < mc; ++j) {
        float x = compute::dot_f32(q + h * c.hd, k + (j0 + j) * c.stride, c.hd) * scale;
        if (c.cap > 0) x = c.cap * std::tanh(x / c.cap);
        s[j] = x;
      }
      const compute::ExpSum es = compute::exp_shifted_sum(s.data(), mc);
      mx[ch] = es.max;
      z[ch] = es.sum;
      for (int64_t j = 0; j < mc; ++j) compute::axpy(s[j], v + (j0 + j) * c.stride, o.data() + ch * c.hd, c.hd);
    }
    const float M = *std::max_element(mx.begin(), mx.end());
    float L = 0.0f;
    float* res = out + h * c.hd;
    std::fill(res, res + c.hd, 0.0f);
    for (int64_t ch = 0; ch < nc; ++ch) {
      const float w = std::exp(mx[ch] - M);
      L = std::fma(w, z[ch], L);
      compute::axpy(w, o.data() + ch * c.hd, res, c.hd);
    }
    for (int64_t i = 0; i < c.hd; ++i) res[i] *= 1.0f / L;
  }
}

// The chunks computed one per call in reverse order, as decode's threads may, then combined.
void chunk_by_chunk(const float* q, int64_t n_q, const float* k, const float* v, const Case& c, float scale,
                    float* out) {
  const int64_t nc = compute::attn_chunks(c.m);
  std::vector<float> po(static_cast<size_t>(nc * n_q * c.hd)), pm(static_cast<size_t>(nc * n_q)), ps(pm.size());
  std::vector<float> scores(static_cast<size_t>(n_q * compute::kAttnChunk));
  for (int64_t ch = nc - 1; ch >= 0; --ch) {
    const int64_t j0 = ch * compute::kAttnChunk, mc = std::min(compute::kAttnChunk, c.m - j0);
    compute::attend_chunk(q, n_q, k + j0 * c.stride, v + j0 * c.stride, mc, c.stride, c.hd, scale, c.cap,
                          scores.data(), {po.data() + ch * n_q * c.hd, pm.data() + ch * n_q, ps.data() + ch * n_q});
  }
  compute::attend_combine(n_q, c.hd, nc, po.data(), pm.data(), ps.data(), out);
}

TEST(Attention, GroupMatchesPartsBitForBitAndDoubleReference) {
  for (bool avx512 : {true, false}) {
  compute::attention_allow_avx512(avx512);
  for (const Case c : {Case{4, 1, 256, 256, 0}, Case{4, 37, 256, 256, 0}, Case{4, 300, 256, 512, 0},
                       Case{3, 70, 64, 64, 0}, Case{2, 33, 32, 48, 0}, Case{1, 5, 16, 16, 0}, Case{4, 20, 40, 40, 0},
                       Case{5, 9, 256, 256, 0}, Case{4, 65, 64, 64, 50.0f}}) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const auto q = randn(static_cast<size_t>(c.n_q * c.hd), 1, 2.0f);
    const auto k = randn(static_cast<size_t>(c.m * c.stride), 2, 2.0f);
    const auto v = randn(static_cast<size_t>(c.m * c.stride), 3);
    std::vector<float> got(static_cast<size_t>(c.n_q * c.hd)), want(got.size()), one(got.size()), split(got.size());
    std::vector<float> scores(static_cast<size_t>(c.n_q * c.m));
    compute::attend_group(q.data(), c.n_q, k.data(), v.data(), c.m, c.stride, c.hd, scale, c.cap, scores.data(),
                          got.data());
    by_parts(q.data(), c.n_q, k.data(), v.data(), c, scale, want.data());
    // One head per call, as decode splits them.
    for (int64_t h = 0; h < c.n_q; ++h)
      compute::attend_group(q.data() + h * c.hd, 1, k.data(), v.data(), c.m, c.stride, c.hd, scale, c.cap,
                            scores.data(), one.data() + h * c.hd);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "n_q=" << c.n_q << " m=" << c.m << " hd=" << c.hd;
    ASSERT_EQ(std::memcmp(got.data(), one.data(), got.size() * sizeof(float)), 0)
        << "n_q=" << c.n_q << " m=" << c.m << " hd=" << c.hd;
    chunk_by_chunk(q.data(), c.n_q, k.data(), v.data(), c, scale, split.data());
    ASSERT_EQ(std::memcmp(got.data(), split.data(), got.size() * sizeof(float)), 0)
        << "n_q=" << c.n_q << " m=" << c.m << " hd=" << c.hd;
    // Independent check in double.
    for (int64_t h = 0; h < c.n_q; ++h) {
      std::vector<double> s(static_cast<size_t>(c.m));
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j < c.m; ++j) {
        double d = 0;
        for (int64_t i = 0; i < c.hd; ++i) d += double(q[h * c.hd + i]) * k[j * c.stride + i];
        d *= scale;
        if (c.cap > 0) d = c.cap * std::tanh(d / c.cap);
        s[j] = d;
        mx = std::max(mx, d);
      }
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int64_t i = 0; i < c.hd; ++i) {
        double o = 0;
        for (int64_t j = 0; j < c.m; ++j) o += s[j] / z * v[j * c.stride + i];
        ASSERT_NEAR(got[h * c.hd + i], o, 2e-5) << "n_q=" << c.n_q << " m=" << c.m << " head " << h << " i " << i;
      }
    }
  }
  }
  compute::attention_allow_avx512(true);
}

}  // namespace
}  // namespace larql
