#include "compute/top_k_rows.h"

#include <algorithm>
#include <string>

#include "compute/ops.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::compute {

namespace {

// Better-first order: higher score, then lower row.
bool better(const ScoredRow& a, const ScoredRow& b) { return a.score != b.score ? a.score > b.score : a.row < b.row; }

}  // namespace

std::vector<ScoredRow> top_k_rows(ThreadPool& pool, const TensorView& w, const float* queries, int64_t n_queries,
                                  const TopKOptions& opt) {
  if (opt.top_k < 1) throw Error(ErrorKind::InvalidArgument, "top_k_rows: top_k must be at least 1, got " + std::to_string(opt.top_k));
  const int cand = opt.candidates > 0 ? opt.candidates : 4 * opt.top_k + 16;
  if (cand < opt.top_k)
    throw Error(ErrorKind::InvalidArgument, "top_k_rows: candidates (" + std::to_string(cand) + ") must be at least top_k (" +
                                                std::to_string(opt.top_k) + ")");
  if (opt.skip != nullptr && static_cast<int64_t>(opt.skip->size()) != w.rows)
    throw Error(ErrorKind::InvalidArgument, "top_k_rows: skip has " + std::to_string(opt.skip->size()) + " entries for " +
                                                std::to_string(w.rows) + " rows");
  if (opt.rows_per_pass < 1) throw Error(ErrorKind::InvalidArgument, "top_k_rows: rows_per_pass must be at least 1");
  if (!quant::can_dequantize(w.type))
    throw Error(ErrorKind::Unsupported, std::string("top_k_rows: no kernel for ") + dtype_name(w.type));
  const int64_t cols = w.cols;
  const auto k = static_cast<size_t>(opt.top_k), c = static_cast<size_t>(cand);
  std::vector<ScoredRow> result(static_cast<size_t>(n_queries) * k);
  if (n_queries == 0 || w.rows == 0) return result;

  // Pass 1: approximate scores through the GEMM; per query a min-heap (worst on top) of the best
  // `cand` rows. Heaps live in one flat array: query j owns [j * c, j * c + size[j]).
  std::vector<ScoredRow> heaps(static_cast<size_t>(n_queries) * c);
  std::vector<size_t> sizes(static_cast<size_t>(n_queries), 0);
  const int64_t pass_rows = std::min(opt.rows_per_pass, w.rows);
  std::vector<float> scores(static_cast<size_t>(n_queries * pass_rows));
  Activations acts;
  acts.reset(queries, n_queries, cols);
  // A float matrix is quantised to Q8_0 pass by pass for this search (the integer kernels are
  // several times faster than float dots); pass 2 rescores from the stored rows.
  const bool to_q8 = (w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16) && cols % 32 == 0;
  const size_t q8_row = to_q8 ? *row_bytes(DType::Q8_0, static_cast<uint64_t>(cols)) : 0;
  std::vector<uint8_t> q8(to_q8 ? q8_row * static_cast<size_t>(pass_rows) : 0);
  for (int64_t r0 = 0; r0 < w.rows; r0 += pass_rows) {
    TensorView part = w;
    part.rows = std::min(pass_rows, w.rows - r0);
    part.data = w.row(r0);
    if (to_q8) {
      pool.parallel_for(part.rows, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t i = b; i < e; ++i) {
          quant::dequantize_row(w.type, w.row(r0 + i), row.data(), cols);
          quant::quantize_row(DType::Q8_0, row.data(), q8.data() + static_cast<size_t>(i) * q8_row, cols);
        }
      });
      part.type = DType::Q8_0;
      part.data = q8.data();
      part.row_bytes = q8_row;
    }
    matmul(pool, part, acts, scores.data());  // [n_queries, part.rows]
    const int64_t nr = part.rows;
    pool.parallel_for(n_queries, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        ScoredRow* h = heaps.data() + static_cast<size_t>(j) * c;
        size_t& n = sizes[static_cast<size_t>(j)];
        const float* s = scores.data() + j * nr;
        // The heap's top is its worst entry; compare with better() so ties favour lower rows.
        for (int64_t i = 0; i < nr; ++i) {
          const ScoredRow cur{static_cast<int32_t>(r0 + i), s[i]};
          if (opt.skip != nullptr && (*opt.skip)[static_cast<size_t>(r0 + i)] != 0) continue;
          if (n < c) {
            h[n++] = cur;
            std::push_heap(h, h + n, better);
          } else if (better(cur, h[0])) {
            std::pop_heap(h, h + n, better);
            h[n - 1] = cur;
            std::push_heap(h, h + n, better);
          }
        }
      }
    });
  }

  // Pass 2: exact scores for the candidates, in double; the best top_k, best first.
  pool.parallel_for(n_queries, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t j = b; j < e; ++j) {
      ScoredRow* h = heaps.data() + static_cast<size_t>(j) * c;
      const size_t n = sizes[static_cast<size_t>(j)];
      const float* q = queries + j * cols;
      for (size_t m = 0; m < n; ++m) {
        quant::dequantize_row(w.type, w.row(h[m].row), row.data(), cols);
        double acc = 0;
        for (int64_t i = 0; i < cols; ++i) acc += static_cast<double>(row[static_cast<size_t>(i)]) * q[i];
        h[m].score = static_cast<float>(acc);
      }
      std::sort(h, h + n, better);
      std::copy(h, h + std::min(n, k), result.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(j) * k));
    }
  });
  return result;
}

}  // namespace larql::compute
