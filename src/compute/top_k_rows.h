// Top-k rows of a stored matrix by dot product with query vectors: the search behind a vindex's
// down_meta (per FFN feature, the tokens whose embedding the feature's down-projection column
// points at: embed · W_down[:, f]) and, later, gate KNN (W_gate · residual).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/tensor.h"
#include "util/thread_pool.h"

namespace larql::compute {

/// One result: a row index of the matrix and its exact score.
struct ScoredRow {
  int32_t row = 0;
  float score = 0.0f;
};

struct TopKOptions {
  int top_k = 10;          ///< results per query, >= 1
  /// Candidates kept per query by the quantised pass before exact rescoring; 0: 4 * top_k + 16.
  int candidates = 0;
  /// Matrix rows per pass of the GEMM (bounds the score buffer: n_queries x rows_per_pass f32).
  int64_t rows_per_pass = 4096;
  /// Optional, [w.rows]: rows with skip[i] != 0 are never returned (e.g. tokens that decode to
  /// nothing). nullptr: none skipped.
  const std::vector<uint8_t>* skip = nullptr;
};

/// For each query j of queries [n_queries, w.cols] (f32), the top_k rows i of w [w.rows, w.cols]
/// (any stored type matmul supports) by score s(i, j) = w[i] · queries[j], best first; ties go to
/// the lower row index. Result: [n_queries * top_k], query-major; a query with fewer than top_k
/// eligible rows is padded with {row 0, score 0}.
///
/// Method: the rows stream through compute::matmul in passes (each weight byte read once for all
/// queries; activations quantised once, as in prefill; a float matrix — F32, F16, BF16 with cols
/// a multiple of 32 — quantised to Q8_0 pass by pass, so it runs the integer kernels too),
/// keeping per query the best `candidates` by that approximate score; then each candidate is rescored exactly (the dequantised row dotted
/// with the f32 query in double, rounded to float). The returned scores are therefore exact for
/// the stored weights, and the returned rows are the exact top-k unless a true top-k row ranked
/// below `candidates` in the quantised pass (the 8-bit activation error is ~1% of a score; the
/// default keeps 4 * top_k + 16 candidates).
/// Errors: Error{InvalidArgument} for top_k < 1, candidates < top_k (when set), rows_per_pass < 1
/// or a skip vector of the wrong length; Error{Unsupported} if w.type has no kernel.
std::vector<ScoredRow> top_k_rows(ThreadPool& pool, const TensorView& w, const float* queries, int64_t n_queries,
                                  const TopKOptions& opt);

}  // namespace larql::compute
