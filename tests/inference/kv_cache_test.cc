// LayerKv / KvCache bookkeeping: absolute positions, lazy eviction, truncation, byte counts.
#include <gtest/gtest.h>

#include <vector>

#include "inference/kv_cache.h"
#include "model/config.h"

namespace larql {
namespace {

// Rows whose K values are (pos, pos) and V values (-pos, -pos), kv_dim 2.
void append_positions(LayerKv& l, int64_t from, int64_t n) {
  std::vector<float> k, v;
  for (int64_t p = from; p < from + n; ++p) {
    k.insert(k.end(), {float(p), float(p)});
    v.insert(v.end(), {float(-p), float(-p)});
  }
  l.append(k.data(), v.data(), n);
}

TEST(LayerKv, AppendEvictTruncate) {
  LayerKv l(2, 3);
  append_positions(l, 0, 5);
  EXPECT_EQ(l.rows(), 5);  // nothing evicted before evict()
  l.evict();
  EXPECT_EQ(l.first_pos(), 2);
  EXPECT_EQ(l.end_pos(), 5);
  EXPECT_EQ(l.rows(), 3);
  EXPECT_EQ(l.bytes(), 3u * 2 * 2 * sizeof(float));
  EXPECT_EQ(l.k_at(2)[0], 2.0f);
  EXPECT_EQ(l.v_at(4)[1], -4.0f);
  for (int64_t p = 5; p < 40; ++p) {
    append_positions(l, p, 1);
    l.evict();
    ASSERT_EQ(l.rows(), 3);
    ASSERT_EQ(l.first_pos(), p - 2);
    ASSERT_EQ(l.k_at(p - 2)[0], float(p - 2));
    ASSERT_EQ(l.k_at(p)[1], float(p));
  }
  l.truncate(38);
  EXPECT_EQ(l.end_pos(), 38);
  EXPECT_EQ(l.rows(), 1);
  EXPECT_EQ(l.k_at(37)[0], 37.0f);
  l.truncate(100);  // no-op
  EXPECT_EQ(l.end_pos(), 38);
  l.clear();
  EXPECT_EQ(l.rows(), 0);
  EXPECT_EQ(l.first_pos(), 0);
  l.reset_to(10);
  EXPECT_EQ(l.end_pos(), 10);
  append_positions(l, 10, 2);
  EXPECT_EQ(l.first_pos(), 10);
  EXPECT_EQ(l.k_at(11)[0], 11.0f);
}

TEST(LayerKv, KeepZeroKeepsEverything) {
  LayerKv l(2, 0);
  append_positions(l, 0, 100);
  l.evict();
  EXPECT_EQ(l.rows(), 100);
  EXPECT_EQ(l.first_pos(), 0);
}

TEST(KvCache, PerLayerKeep) {
  ModelConfig c;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 2;
  c.layers = {LayerConfig{true, 4, 10000, 1}, LayerConfig{false, 0, 1e6, 1}};
  auto fill = [](KvCache& kv) {
    for (int64_t i = 0; i < kv.n_layers(); ++i) {
      append_positions(kv.layer(i), 0, 10);
      kv.layer(i).evict();
    }
  };
  KvCache unbounded(c);
  fill(unbounded);
  EXPECT_EQ(unbounded.layer(0).rows(), 4);
  EXPECT_EQ(unbounded.layer(1).rows(), 10);
  EXPECT_EQ(unbounded.n_past(), 10);
  EXPECT_EQ(unbounded.bytes(), (4u + 10u) * 2 * 2 * sizeof(float));
  KvCache w3(c, 3);
  fill(w3);
  EXPECT_EQ(w3.layer(0).rows(), 3);
  EXPECT_EQ(w3.layer(1).rows(), 3);
  KvCache w6(c, 6);
  fill(w6);
  EXPECT_EQ(w6.layer(0).rows(), 4);
  EXPECT_EQ(w6.layer(1).rows(), 6);
  w6.clear();
  EXPECT_EQ(w6.n_past(), 0);
  EXPECT_EQ(w6.bytes(), 0u);
}

}  // namespace
}  // namespace larql
