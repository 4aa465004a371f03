// top_k_rows against a brute-force search written here: every score in double, sorted by
// (score desc, row asc). For F32, F16, BF16 (searched through Q8_0 copies) and Q8_0 matrices
// (dequantised for the brute force, so the expected scores are the stored weights' exact ones),
// with skipped rows, ties and padding.
#include "compute/top_k_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"

namespace larql::compute {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<float> values;  // what the stored rows dequantise to, [rows, cols]
};

Matrix make(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(rows * cols));
  for (auto& v : src) v = nd(rng);
  Matrix m;
  const size_t rb = *row_bytes(type, static_cast<uint64_t>(cols));
  m.bytes.resize(rb * static_cast<size_t>(rows));
  m.values.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row(type, src.data() + r * cols, m.bytes.data() + static_cast<size_t>(r) * rb, cols);
    quant::dequantize_row(type, m.bytes.data() + static_cast<size_t>(r) * rb, m.values.data() + r * cols, cols);
  }
  m.view = TensorView{type, rows, cols, m.bytes.data(), rb};
  return m;
}

std::vector<ScoredRow> brute(const Matrix& m, const std::vector<float>& q, int64_t nq, int k,
                             const std::vector<uint8_t>* skip = nullptr) {
  const int64_t rows = m.view.rows, cols = m.view.cols;
  std::vector<ScoredRow> out(static_cast<size_t>(nq * k));
  for (int64_t j = 0; j < nq; ++j) {
    std::vector<std::pair<double, int32_t>> all;
    for (int64_t r = 0; r < rows; ++r) {
      if (skip && (*skip)[static_cast<size_t>(r)]) continue;
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(m.values[static_cast<size_t>(r * cols + c)]) * q[static_cast<size_t>(j * cols + c)];
      all.emplace_back(s, static_cast<int32_t>(r));
    }
    std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (int i = 0; i < k && i < static_cast<int>(all.size()); ++i)
      out[static_cast<size_t>(j * k + i)] = ScoredRow{all[static_cast<size_t>(i)].second, static_cast<float>(all[static_cast<size_t>(i)].first)};
  }
  return out;
}

std::vector<float> queries(int64_t nq, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(nq * cols));
  for (auto& v : q) v = nd(rng);
  return q;
}

void expect_same(const std::vector<ScoredRow>& got, const std::vector<ScoredRow>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].row, want[i].row) << "entry " << i;
    EXPECT_EQ(got[i].score, want[i].score) << "entry " << i;
  }
}

class TopKRowsTest : public ::testing::TestWithParam<DType> {};

TEST_P(TopKRowsTest, MatchesBruteForceAcrossPasses) {
  ThreadPool pool(2);
  const Matrix m = make(GetParam(), 1000, 64, 1);
  const auto q = queries(37, 64, 2);
  TopKOptions opt;
  opt.top_k = 10;
  opt.rows_per_pass = 128;  // several passes, the last one short
  expect_same(top_k_rows(pool, m.view, q.data(), 37, opt), brute(m, q, 37, 10));
  opt.rows_per_pass = 5000;  // one pass
  expect_same(top_k_rows(pool, m.view, q.data(), 37, opt), brute(m, q, 37, 10));
}

TEST_P(TopKRowsTest, SkipsRowsAndPadsShortResults) {
  ThreadPool pool(2);
  const Matrix m = make(GetParam(), 12, 32, 3);
  const auto q = queries(3, 32, 4);
  std::vector<uint8_t> skip(12, 1);
  skip[2] = skip[7] = skip[11] = 0;  // three eligible rows for top-5
  TopKOptions opt;
  opt.top_k = 5;
  opt.skip = &skip;
  const auto got = top_k_rows(pool, m.view, q.data(), 3, opt);
  expect_same(got, brute(m, q, 3, 5, &skip));
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(got[static_cast<size_t>(j * 5 + 3)].row, 0);
    EXPECT_EQ(got[static_cast<size_t>(j * 5 + 4)].score, 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TopKRowsTest, ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(TopKRowsTest, TiesGoToTheLowerRow) {
  ThreadPool pool(1);
  // Rows 0..5 of [1, 0]: rows 1, 3 and 4 score 2, the rest 1.
  std::vector<float> w = {1, 0, 2, 0, 1, 0, 2, 0, 2, 0, 1, 0};
  const TensorView v{DType::F32, 6, 2, reinterpret_cast<const uint8_t*>(w.data()), 8};
  const std::vector<float> q = {1, 0};
  TopKOptions opt;
  opt.top_k = 4;
  const auto got = top_k_rows(pool, v, q.data(), 1, opt);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].row, 1);
  EXPECT_EQ(got[1].row, 3);
  EXPECT_EQ(got[2].row, 4);
  EXPECT_EQ(got[3].row, 0);
  EXPECT_EQ(got[3].score, 1.0f);
}

TEST(TopKRowsTest, RejectsBadOptions) {
  ThreadPool pool(1);
  std::vector<float> w(4, 1.0f);
  const TensorView v{DType::F32, 2, 2, reinterpret_cast<const uint8_t*>(w.data()), 8};
  const std::vector<float> q = {1, 0};
  TopKOptions opt;
  opt.top_k = 0;
  EXPECT_THROW(top_k_rows(pool, v, q.data(), 1, opt), Error);
  opt.top_k = 3;
  opt.candidates = 2;
  EXPECT_THROW(top_k_rows(pool, v, q.data(), 1, opt), Error);
  opt.candidates = 0;
  std::vector<uint8_t> skip(3, 0);
  opt.skip = &skip;
  EXPECT_THROW(top_k_rows(pool, v, q.data(), 1, opt), Error);
}

}  // namespace
}  // namespace larql::compute
