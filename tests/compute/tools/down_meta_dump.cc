// larql_down_meta_dump MODEL.gguf LAYER [TOP_K=10] [THREADS=2]
// The down_meta of one layer (issue 10): for each FFN feature f, the top-k token ids of
// token_embd · ffn_down[:, f] (raw, unscaled embedding) by compute::top_k_rows, one line per
// feature: "<f>\t<id>:<score>,<id>:<score>,...\n" (scores "%.9g"); the seconds taken go to
// stderr. For tests/python/test_top_k_rows.py, which recomputes a sample with numpy, and for
// timing the search. Errors: the message on stderr, exit status 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "compute/top_k_rows.h"
#include "formats/gguf.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace {

larql::TensorView view_of(const larql::GgufTensor& t) {
  const auto rb = larql::row_bytes(t.type, t.row_length());
  if (!rb) throw larql::Error(larql::ErrorKind::Format, t.name + ": row length is not a whole number of blocks");
  return larql::TensorView{t.type, static_cast<int64_t>(t.n_rows()), static_cast<int64_t>(t.row_length()), t.data, *rb};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf LAYER [TOP_K=10] [THREADS=2]\n", argv[0]);
    return 2;
  }
  try {
    const auto file = larql::GgufFile::open(argv[1]);
    const std::string layer = argv[2];
    const int top_k = argc > 3 ? std::atoi(argv[3]) : 10;
    const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
    const auto* e = file->find_tensor("token_embd.weight");
    const auto* d = file->find_tensor("blk." + layer + ".ffn_down.weight");
    if (e == nullptr || d == nullptr) throw larql::Error(larql::ErrorKind::NotFound, "token_embd.weight or blk." + layer + ".ffn_down.weight missing");
    const larql::TensorView embed = view_of(*e), down = view_of(*d);  // down: [hidden, ffn]
    const auto t0 = std::chrono::steady_clock::now();
    // Columns of ffn_down as query rows: [ffn, hidden].
    std::vector<float> row(static_cast<size_t>(down.cols)), cols(static_cast<size_t>(down.cols * down.rows));
    for (int64_t r = 0; r < down.rows; ++r) {
      larql::quant::dequantize_row(down.type, down.row(r), row.data(), down.cols);
      for (int64_t f = 0; f < down.cols; ++f) cols[static_cast<size_t>(f * down.rows + r)] = row[static_cast<size_t>(f)];
    }
    larql::ThreadPool pool(threads);
    larql::compute::TopKOptions opt;
    opt.top_k = top_k;
    const auto res = larql::compute::top_k_rows(pool, embed, cols.data(), down.cols, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int64_t f = 0; f < down.cols; ++f) {
      std::printf("%lld\t", static_cast<long long>(f));
      for (int i = 0; i < top_k; ++i) {
        const auto& s = res[static_cast<size_t>(f * top_k + i)];
        std::printf("%s%d:%.9g", i ? "," : "", s.row, static_cast<double>(s.score));
      }
      std::printf("\n");
    }
    std::fprintf(stderr, "layer %s: %lld features x %lld tokens in %.3f s (%d threads)\n", layer.c_str(),
                 static_cast<long long>(down.cols), static_cast<long long>(embed.rows), secs, threads);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s\n", ex.what());
    return 1;
  }
  return 0;
}
