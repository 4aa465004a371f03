// Teacher-forced text scoring (cli/scoring.h), shared by perplexity and shannon.
#include "cli/scoring.h"

#include <algorithm>
#include <cmath>

#include "cli/progress.h"

namespace larql::cli {

NpyWriter::NpyWriter(const std::string& path, std::vector<int64_t> shape, const std::string& flag) : out_(path, flag) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  const uint16_t hlen = static_cast<uint16_t>(dict.size());
  out_.write("\x93NUMPY\x01\x00", 8);
  out_.write(&hlen, 2);
  out_.write(dict);
}

void add_nll(const float* lg, int64_t vocab, int32_t target, double& nll) {
  double mx = lg[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(lg[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(lg[v] - mx);
  nll -= lg[target] - mx - std::log(sum);
}

double score_engine(Loaded& l, const EngineSpec& spec, const std::vector<int32_t>& ids, NpyWriter* npy, KvBytes& kv,
                    bool progress) {
  const ModelConfig& c = l.model->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  auto engine = make_engine(spec, l.forward);
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  double nll = 0;
  Progress bar("scoring " + spec.to_string(), progress ? n : 0);
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(64, (n - 1) / 2));
  int64_t at_k = 0, at_2k = 0;
  for (int64_t pos = 0; pos < n; ++pos) {
    const auto h = pos == 0 ? engine->prefill({ids[0]}) : engine->decode_step(ids[static_cast<size_t>(pos)]);
    if (pos == k) at_k = static_cast<int64_t>(engine->memory().hot_bytes);
    if (pos == 2 * k) at_2k = static_cast<int64_t>(engine->memory().hot_bytes);
    l.forward->logits(h.data(), 1, logits.data());
    if (pos + 1 < n) add_nll(logits.data(), c.vocab, ids[static_cast<size_t>(pos + 1)], nll);
    if (npy) npy->rows(logits.data(), static_cast<size_t>(c.vocab));
    bar.update(pos + 1);
  }
  kv.per_token = (at_2k - at_k) / k;
  kv.fixed = at_k - (k + 1) * kv.per_token;
  return nll;
}

double score_batched(Loaded& l, const std::vector<int32_t>& ids, NpyWriter* npy, LayerObserver* observer, bool progress) {
  const int64_t vocab = l.model->config().vocab, n = static_cast<int64_t>(ids.size());
  double nll = 0;
  Progress bar("scoring", progress ? n : 0);
  l.handle->logit_rows(ids, [&](int64_t row0, int64_t rows, const float* logits) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = row0 + r;
      if (pos + 1 >= n) break;
      add_nll(logits + r * vocab, vocab, ids[static_cast<size_t>(pos + 1)], nll);
    }
    if (npy) npy->rows(logits, static_cast<size_t>(rows * vocab));
    bar.update(row0 + rows);
  }, observer);
  return nll;
}

}  // namespace larql::cli
