// Pipeline mode (docs/sharding.md "Pipeline"): a client holding only the token embedding, the final
// norm and lm_head hands residual rows through shards that hold whole layers (RunLayers), stage
// after stage; each shard keeps the sequence's K/V of its layers under the sequence's id. To the
// engines the pipeline is a backend (inference/device.h DeviceModel) that keeps the K/V itself, as
// a GPU does: the `standard` engine runs over it (kv/device_engine.h), the engines that keep host
// state (residuals, windowed or quantised K/V) are refused by name.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inference/device.h"
#include "inference/forward.h"
#include "shard/shard.h"

namespace larql::shard {

/// One stage: the layers [begin, end) and the shards holding exactly those layers (replicas).
struct PipelineStage {
  int64_t begin = 0, end = 0;
  Replicas replicas;
  /// The replica a new sequence tries first (moved on when one fails).
  std::shared_ptr<std::atomic<size_t>> first = std::make_shared<std::atomic<size_t>>(0);
  /// "127.0.0.1:7001 (layers 0-8)" (the first replica) for messages.
  std::string describe() const;
};
using Pipeline = std::vector<PipelineStage>;

/// Dial the shards of a comma-separated "HOST:PORT" list for a pipeline over `local` and check the
/// set: dial_shards's checks (the same model file), then each shard holds whole layers (attention
/// and FFN, and every expert of a mixture of experts), and the layer ranges cover the model's
/// layers exactly once, in order; shards of the same range are replicas of a stage.
/// Errors: Error{InvalidArgument} naming the shard and what it lacks (an --ffn-only shard, an
/// expert range), the layers no shard holds, or two ranges that overlap; dial_shards's.
Pipeline connect_pipeline_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                                 std::chrono::milliseconds timeout);

/// The stages as a ShardMap (each layer: one part, its stage's replicas): what /health asks.
ShardMap pipeline_shard_map(const Pipeline& p, int64_t n_layers);

class PipelineModel;

/// One sequence over the pipeline. Its id (unique to this process and run) names its K/V on every
/// shard; position 0 starts it afresh there, truncate() makes the next call rewind it there.
/// At the start of a sequence each stage takes the first replica that answers; a replica that
/// fails in transport later is left, and the whole sequence is run again from position 0 on the
/// stage's other replicas (the client keeps the sequence's token ids for that); a stage with no
/// replica left fails with Error{BackendUnavailable} naming each shard. On destruction the sequence
/// is ended on its shards (EndSequence, at most 1 s each; a shard that failed is skipped).
class PipelineSequence final : public DeviceSequence {
 public:
  PipelineSequence(std::shared_ptr<const PipelineModel> owner, std::shared_ptr<Forward> f, int64_t capacity,
                   std::string id);
  ~PipelineSequence() override;

  void append(const int32_t* tokens, int64_t n) override { append_rows(tokens, n, nullptr); }
  /// append, and x [n, hidden] (when not null) receives every row's final residual (before the
  /// final norm): what `perplexity` needs. Errors: as append.
  void append_rows(const int32_t* tokens, int64_t n, float* x);
  int64_t n_past() const override { return n_past_; }
  int64_t capacity() const override { return capacity_; }
  void hidden(float* out) override;
  void logits(float* out) override;
  int32_t argmax() override;
  void truncate(int64_t pos) override;
  /// 0: the K/V are held on the shards, not here.
  size_t kv_bytes() const override { return 0; }

  const std::string& id() const { return id_; }
  const PipelineModel* owner() const { return owner_.get(); }

 private:
  void check(const int32_t* tokens, int64_t n) const;
  /// Rows through every stage from position n_past_, embedding chunk by chunk.
  void advance(const int32_t* tokens, int64_t n, float* all);
  /// x [m, hidden] through stage s at position pos on this sequence's replica (chosen at pos 0).
  void stage_run(size_t s, int64_t pos, float* x, int64_t m);

  std::shared_ptr<const PipelineModel> owner_;
  std::shared_ptr<Forward> f_;
  int64_t capacity_;
  std::string id_;
  int64_t n_past_ = 0;
  std::vector<int32_t> history_;  ///< the token ids so far (to run the sequence again on a replica)
  std::vector<int> chosen_;       ///< per stage: the replica holding this sequence (-1: none yet)
  int failed_stage_ = -1;         ///< the stage whose replica failed during the last call
  std::vector<float> last_, x_, in_, logits_;
  bool ran_ = false;
};

/// The pipeline as a backend over `forward` (the local part: embedding, final norm, lm_head; its
/// threads embed and compute logits). Supports no DeviceFeature: the K/V are on the shards, the
/// logits come from the residual (Forward::logits, bit-identical to one process), decode_batch
/// steps the sequences one after another.
class PipelineModel final : public DeviceModel, public std::enable_shared_from_this<PipelineModel> {
 public:
  PipelineModel(std::shared_ptr<Forward> forward, Pipeline pipeline);
  DeviceInfo info() const override;
  bool supports(DeviceFeature) const override { return false; }
  std::unique_ptr<DeviceSequence> new_sequence(int64_t capacity) override { return open(capacity); }
  /// new_sequence with its type: a PipelineSequence. Errors: Error{InvalidArgument} for a
  /// capacity outside [1, the model's context].
  std::unique_ptr<PipelineSequence> open(int64_t capacity) const;
  void decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) override;

  const Pipeline& stages() const { return pipeline_; }

 private:
  std::shared_ptr<Forward> f_;
  Pipeline pipeline_;
  std::string prefix_;  ///< this model's random part of every sequence id
  mutable std::atomic<uint64_t> next_{0};
};

/// "remote:HOST:PORT[,...]" -> "HOST:PORT[,...]" (remote_ffn_addresses), for --pipeline.
inline std::string remote_pipeline_addresses(const std::string& spec) { return remote_ffn_addresses(spec); }

}  // namespace larql::shard
