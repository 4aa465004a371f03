// Teacher-forced text scoring shared by `larql perplexity` and `larql shannon`: the summed NLL of
// every token after the first under a model, through one batched forward pass or token by token
// through an engine; and the .npy writer of `--logits-out` / `--residuals-out`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/common.h"
#include "util/atomic_file.h"

namespace larql::cli {

/// Minimal .npy v1.0 writer (format: numpy.lib.format) of f32 rows, streamed through an
/// AtomicWriter: nothing replaces the target until close(). Errors: AtomicWriter's.
class NpyWriter {
 public:
  NpyWriter(const std::string& path, std::vector<int64_t> shape, const std::string& flag = "--logits-out");
  void rows(const float* p, size_t n) { out_.write(p, n * 4); }
  void close() { out_.commit(); }

 private:
  AtomicWriter out_;
};

/// Adds -log p(target) (nats) under logits lg [vocab] to nll (log-softmax in double).
void add_nll(const float* lg, int64_t vocab, int32_t target, double& nll);

/// An engine's K/V cost measured while scoring: per_token = the growth of its hot bytes per token
/// between positions k and 2k, k = min(64, (n − 1) / 2) (the cost of one more token once a window
/// of exact recent rows is full, before the model's sliding layers evict); fixed = hot bytes at
/// position k less (k + 1) × per_token (what the engine holds beyond that).
struct KvBytes {
  int64_t per_token = 0, fixed = 0;
};

/// Teacher-forced through an engine: BOS (ids[0]) alone, then one decode step per token. Returns
/// the summed NLL in nats of tokens 1..n-1; writes every position's logits to npy when given; a
/// progress bar labelled "scoring SPEC" unless !progress. Errors: the engine's.
double score_engine(Loaded& l, const EngineSpec& spec, const std::vector<int32_t>& ids, NpyWriter* npy, KvBytes& kv,
                    bool progress = true);

/// The same through one batched forward pass (api::LoadedModel::logit_rows: chunks of
/// Forward::chunk() over a plain KvCache), `observer` (may be null) seeing every layer. The
/// forward pass is batch-invariant, so the standard engine through score_engine gives the same
/// logits bit for bit.
double score_batched(Loaded& l, const std::vector<int32_t>& ids, NpyWriter* npy, LayerObserver* observer,
                     bool progress = true);

}  // namespace larql::cli
