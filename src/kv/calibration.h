// Calibration for `boundary-per-layer`: measure each layer's KL cost of encoding its cold tier
// with each codec on a corpus, choose the cheapest per-layer policy under a KL budget, and keep
// the result as a record next to the model. Specification: docs/engines.md "boundary-per-layer".
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/markov_rs.h"

namespace larql {

/// The calibration record (`<model>.bpl.json`), format version 2:
///   {"version":2, "engine":"boundary-per-layer", "model_fingerprint":..., "window":W,
///    "corpus_id":"fnv1a64:<hex>", "corpus_tokens":T, "budget":B, "bound":S, "samples":N,
///    "joint_cost":J, "noise":E, "layers":[{"layer":i, "codec":"bf16",
///    "cost":{"f32":0,"bf16":..,"int8":..}, "cost_se":{...}, "cold_rows":R}, ...],
///    "checksum":"xxh3:<16 hex>"}
/// checksum = XXH3-64 of the compact JSON dump of the record without "checksum" (keys sorted).
/// Every number is finite.
/// cost = mean per-step KL(f32 markov-rs || markov-rs with only this layer's cold tier encoded)
/// in nats over `samples` teacher-forced decode steps; joint_cost = the same for the whole chosen
/// policy; bound = max(sum over layers of the chosen codec's cost, joint_cost) (<= budget).
struct BplRecord {
  int version = 2;
  std::string fingerprint;
  int64_t window = 0;
  std::string corpus_id;
  int64_t corpus_tokens = 0;
  double budget = 0;
  double bound = 0;
  int64_t samples = 0;
  double joint = 0;  ///< measured mean KL of the whole chosen policy on the calibration steps
  double noise = 0;  ///< median standard error of the per-layer costs (nats): differences below it are noise
  std::vector<ColdCodec> policy;                ///< per layer
  std::vector<std::array<double, 3>> cost;      ///< per layer: f32, bf16, int8 (nats)
  std::vector<std::array<double, 3>> cost_se;   ///< per layer: standard error of each cost over the steps
  std::vector<int64_t> cold_rows;               ///< per layer, at the end of the calibration context
};

/// The default record path, "<model path>.bpl.json" (the spec key `record` overrides it; the CLI
/// sets that key from $LARQL_BPL_RECORD).
std::string bpl_record_path(const std::string& model_path);
/// Error{BackendUnavailable} (with how to make one) when absent; Error{Format} when malformed,
/// damaged (checksum), of another version, or holding a non-finite number. Registers the file as
/// an input of this process (util/atomic_file.h).
BplRecord read_bpl_record(const std::string& path);
/// Written atomically (util/atomic_file.h). Error{Format} for a non-finite budget or bound;
/// Error{Io}; Error{InvalidArgument} when `path` is an input of this process.
void write_bpl_record(const std::string& path, const BplRecord& r);

/// "fnv1a64:<16 hex>" of the token ids (little-endian i32).
std::string corpus_id(const std::vector<int32_t>& tokens);

/// Greedy policy: start from f32 everywhere; repeatedly take the move to a cheaper codec on one
/// layer with the most cold bytes saved per nat of added cost that keeps the summed cost within
/// `budget`. Returns the policy; *bound receives its summed cost.
std::vector<ColdCodec> choose_policy(const std::vector<std::array<double, 3>>& cost, const std::vector<int64_t>& cold_rows,
                                     int64_t hidden, double budget, double* bound);

struct CalibrationOptions {
  int64_t window = 64;
  double budget = 0.01;
  int64_t decode_steps = 12;  ///< teacher-forced steps after the prefill (samples per measurement)
};

/// Measure and choose. corpus: token ids (BOS first); the first size - decode_steps tokens are
/// the prompt (must exceed window so a cold tier exists), the rest are fed one per step.
/// progress(done, total) is called after each measurement when set.
BplRecord calibrate_boundary_per_layer(std::shared_ptr<Forward> fwd, const std::vector<int32_t>& corpus,
                                       const CalibrationOptions& opt,
                                       const std::function<void(int, int)>& progress = {});

/// Hot window of an uncalibrated boundary-per-layer engine (the calibration default).
inline constexpr int64_t kUncalibratedWindow = 64;

/// The engine from a record. window/layers: 0 = the record's / the model's (a different value
/// is Error{InvalidArgument}); budget < 0 = not checked, else the
/// record's bound must be <= budget. Without a record at `record_path` the engine runs bf16 on
/// every layer (window: `window` or kUncalibratedWindow; config note "uncalibrated") and its
/// EngineInfo::note says how to calibrate. Errors: InvalidArgument (record for another model
/// fingerprint, window or layer count, or over `budget`), Format (a damaged record).
std::unique_ptr<Engine> make_boundary_per_layer(std::shared_ptr<Forward> fwd, const std::string& record_path,
                                                int64_t window, int64_t layers, double budget);

}  // namespace larql
