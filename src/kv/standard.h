// The `standard` engine: K/V tensors per layer; the reference every other engine answers to.
#pragma once

#include <memory>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"

namespace larql {

/// Canonical state: post-RoPE K and V rows (f32) per layer. Sliding layers keep (and attend over)
/// their model window. `window` > 0 (standard:window=N) is an evicting engine: every other layer
/// attends to the newest N positions, its own included — the same mask in prefill as in decode,
/// so one prefill gives exactly the logits of token-by-token decoding — plus, with `sink`, position
/// 0 (the attention sink, <bos>), which is kept on those layers forever. Positions stay absolute;
/// evicted rows are gone. N smaller than the model's sliding window is refused
/// (check_engine_window): it would cut the sliding layers' own span.
///
/// State file: per layer the live rows (write_layer_kv); with a window and the sink, then per
/// cut layer u64 sink rows + their K, V.
class StateWriter;
class StateReader;

/// The sink rows of a KvCache in a state file: per layer that keeps a sink (LayerKv::
/// sink_capacity() > 0), u64 rows then K, V [rows, kv_dim] f32. read_sink_rows expects
/// min(capacity, n_past) rows per such layer; Error{Format} naming the file and layer otherwise.
void write_sink_rows(StateWriter& w, const KvCache& cache);
void read_sink_rows(StateReader& r, KvCache& cache, int64_t n_past);

class StandardEngine : public Engine {
 public:
  /// Errors: Error{InvalidArgument} for 0 < window < the model's sliding window.
  StandardEngine(std::shared_ptr<Forward> forward, int64_t window, bool sink = true);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return cache_.n_past(); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

 private:
  std::vector<float> run(const int32_t* tokens, int64_t n);
  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  bool sink_;
  KvCache cache_;
  bool started_ = false;
};

}  // namespace larql
