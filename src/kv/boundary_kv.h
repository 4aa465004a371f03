// The `boundary-kv` engine: the standard engine's K/V for compute (logits identical to standard),
// plus a boundary frame at the end of every `chunk_tokens` chunk, appended to an on-disk archive,
// and Resume: a new process rebuilds the sequence from the archive alone.
//
// Archive location: `<dir>/<sequence_id>`, one append-only file per sequence (format:
// src/boundary/archive.h). `dir` is BoundaryKvOptions::archive_dir (spec key `archive_dir`),
// else `./larql-archive`. The engine reads no environment variable: the CLI turns
// $LARQL_ARCHIVE_DIR into the spec key (docs/engines.md "Spec strings").
//
// A frame holds the final-layer residual (before the final norm; the engine's output hidden
// state) of the chunk's last position, encoded by the codec the confidence gate picks from that
// position's logits (int8 with 3-sigma clip when confident, else bf16), the chunk's token ids and
// metadata (position, codec, log-prob margin in nats, top-1 probability). Every boundary a
// prefill crosses gets its frame. flush() writes a partial-chunk frame so the archive covers
// every token consumed so far.
#pragma once

#include <memory>
#include <string>

#include "boundary/archive.h"
#include "boundary/codec.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"

namespace larql {

struct BoundaryKvOptions {
  int64_t window = 0;          ///< as standard:window=N, with the sink (0 = unbounded)
  int64_t chunk_tokens = 512;  ///< tokens per chunk; a frame at every multiple (> 0)
  /// The archive's file name: [A-Za-z0-9._-], not "." / "..". "" (the default): a fresh id per
  /// sequence ("seq-<16 hex>", made at prefill; a saved state remembers it), so two sequences
  /// never share an archive.
  std::string sequence_id;
  std::string archive_dir;     ///< "" = ./larql-archive
  boundary::GateConfig gate;
};

/// Statistics of the frames this engine object has written.
struct BoundaryKvStats {
  int64_t frames = 0;
  int64_t int8_frames = 0;
  int64_t bf16_frames = 0;
  size_t payload_bytes = 0;
};

class BoundaryKvEngine : public Engine {
 public:
  /// Error{InvalidArgument} for chunk_tokens <= 0, an unsafe sequence_id, or 0 < window < the
  /// model's sliding window.
  BoundaryKvEngine(std::shared_ptr<Forward> forward, BoundaryKvOptions opts);

  /// Resume a sequence from its archive alone (`<dir>/<sequence_id>` for `opts`): replays every
  /// archived token through the forward pass (exact: the forward pass is batch-invariant), checks
  /// that each frame's residual re-encodes to the archived payload bytes, and returns an engine
  /// ready to decode the next token; last_hidden() is the last archived position's output.
  /// (Windowed too: standard:window=N masks prefill like decode.) Errors: Error{NotFound} (no archive), Error{Format} (corrupt/truncated),
  /// Error{InvalidArgument} (another model's archive, hidden size differs, no frames),
  /// Error{InvariantViolation} (the replay does not reproduce an archived residual),
  /// Error{ContextOverflow}.
  static std::unique_ptr<BoundaryKvEngine> resume(std::shared_ptr<Forward> forward, BoundaryKvOptions opts);

  /// Starts a new sequence: truncates the archive and writes its header.
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  /// hot = K/V rows (as standard) + 4 B per token not yet archived; cold = 0 (the archive is on
  /// disk, not engine-held).
  EngineMemory memory() const override;
  int64_t n_past() const override { return cache_.n_past(); }
  /// K/V (as standard) + the tokens since the last frame + the archive's sequence id and uid.
  /// The archive is not copied into it.
  void save_state(const std::string& path) const override;
  /// Also checks that the archive is the very one the state was saved with (its uid), and that it
  /// ends where the saved state's pending tokens begin (Error{InvalidArgument} otherwise).
  /// Without a sequence_id key the engine takes the saved one.
  void load_state(const std::string& path) override;

  /// Write a Flush frame for the tokens since the last frame (no-op if there are none).
  /// Error{InvariantViolation} before prefill; Error{Io}.
  void flush();
  const std::string& archive_path() const { return archive_path_; }
  /// Output of the last position consumed (prefill, decode_step or resume).
  const std::vector<float>& last_hidden() const { return last_hidden_; }
  const BoundaryKvStats& stats() const { return stats_; }

 private:
  std::vector<float> run(const int32_t* tokens, int64_t n);
  void set_sequence(const std::string& id);
  void emit(boundary::FrameKind kind, const float* residual);
  std::shared_ptr<Forward> fwd_;
  BoundaryKvOptions opts_;
  std::string seq_id_;        ///< opts_.sequence_id, or the fresh id of the current sequence
  uint64_t archive_uid_ = 0;  ///< the uid written into the current sequence's archive
  std::string archive_path_;
  KvCache cache_;
  bool started_ = false;
  std::vector<int32_t> pending_;  ///< tokens since the last frame
  int64_t pending_start_ = 0;     ///< absolute position of pending_[0]
  std::vector<float> last_hidden_;
  BoundaryKvStats stats_;
};

}  // namespace larql
