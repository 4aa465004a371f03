// The backend seam (docs/backends.md): where a model's forward pass runs. A DeviceModel is a model
// bound to a backend (the CPU, or a GPU with the weights uploaded once); a DeviceSequence is one
// sequence on it, owning what the backend allocates for it — the K/V cache and the workspace —
// so the residual, K/V and logits stay where the backend keeps them until a caller asks for them.
//
// The CPU backend is the CPU code itself (Forward + KvCache, bit for bit: every CPU contract
// stands); the CUDA backend (src/cuda/, -DLARQL_CUDA=ON) implements the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace larql {

class Forward;

/// Where a forward pass runs.
enum class Device { Cpu, Cuda };

/// "cpu" or "cuda". Errors: Error{InvalidArgument} for anything else (the message lists both).
Device parse_device(std::string_view s);
std::string_view device_name(Device d);

/// What a backend can do beyond the interface (DeviceModel::supports).
enum class DeviceFeature {
  HostKv,         ///< K/V rows live in host memory as LayerKv (every KV engine can run on it)
  DeviceLogits,   ///< logits and argmax computed where the residual is (no hidden-state copy)
  BatchedDecode,  ///< decode_batch advances many sequences in one pass over the weights
};

struct DeviceInfo {
  std::string backend;        ///< "cpu" or "cuda"
  std::string name;           ///< e.g. "2 threads" or "NVIDIA H200 (sm_90, 139.8 GiB)"
  size_t weight_bytes = 0;    ///< bytes of weights the backend holds (0 for the CPU: mapped)
};

/// One sequence on a backend: its K/V cache and workspace. Positions are absolute; a sequence
/// holds at most capacity() tokens. Used by one thread at a time.
class DeviceSequence {
 public:
  virtual ~DeviceSequence() = default;
  /// Run n tokens at positions n_past() .. n_past() + n - 1 (a prompt, or one decode step when
  /// n == 1); afterwards hidden()/logits()/argmax() describe the last of them.
  /// Errors: Error{InvalidArgument} for a token id outside the vocabulary (nothing is run);
  /// Error{ContextOverflow} when n_past() + n > capacity(); Error{BackendFailure} for a device
  /// error (the message names the backend's call).
  virtual void append(const int32_t* tokens, int64_t n) = 0;
  /// Tokens consumed so far (the next position).
  virtual int64_t n_past() const = 0;
  /// Positions this sequence can hold.
  virtual int64_t capacity() const = 0;
  /// out [hidden]: the last position's residual before the final norm (host memory).
  virtual void hidden(float* out) = 0;
  /// out [vocab]: the last position's logits (final norm, lm_head, final softcap).
  virtual void logits(float* out) = 0;
  /// The lowest-index largest logit of the last position (greedy decoding without a copy of the
  /// logits where the backend supports DeviceFeature::DeviceLogits).
  virtual int32_t argmax() = 0;
  /// Drop every position >= pos (0 clears). Errors: Error{InvalidArgument} for pos > n_past(), or
  /// (CPU backend) when a sliding layer has already dropped rows a query at pos would see.
  virtual void truncate(int64_t pos) = 0;
  /// Bytes of K/V held for the positions so far (logical rows, as EngineMemory counts them).
  virtual size_t kv_bytes() const = 0;
};

/// A model bound to a backend. Thread-safe to make sequences from; a sequence is used by one
/// thread at a time; decode_batch is not concurrent with other calls on the same sequences.
class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual DeviceInfo info() const = 0;
  virtual bool supports(DeviceFeature f) const = 0;
  /// A new empty sequence of `capacity` positions (1 .. the model's context length).
  /// Errors: Error{InvalidArgument} for a capacity out of range; Error{BackendFailure} when the
  /// device cannot allocate it (the message names the bytes asked for).
  virtual std::unique_ptr<DeviceSequence> new_sequence(int64_t capacity) = 0;
  /// One decode step for many sequences of this model: seqs[i] takes tokens[i]; argmax_out[i]
  /// (when not null) receives each one's greedy next token. Each sequence ends exactly as
  /// seqs[i]->append(&tokens[i], 1) alone would leave it (batch invariance).
  /// Errors: as append, checked for every sequence before any runs; Error{InvalidArgument} for a
  /// sequence that appears twice or belongs to another DeviceModel.
  virtual void decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) = 0;
};

/// The CPU backend over a Forward (its model, threads and FFNs; the Forward is used for
/// new_sequence's siblings, never run itself). append == Forward::forward over a KvCache,
/// decode_batch == Forward::decode_batch: bit-identical to the `standard` engine.
std::shared_ptr<DeviceModel> cpu_device_model(std::shared_ptr<Forward> forward);

}  // namespace larql
