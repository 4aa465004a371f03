// The boundary codec: how one final-layer residual row (f32, [hidden]) is stored in a boundary
// frame, the confidence metadata that goes with it, and the gate that chooses the codec.
// Model-agnostic: takes f32 slices only. Design: docs/engines.md "Boundary archive (boundary-kv)".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace larql::boundary {

/// Payload encodings (values are the on-disk codes; never renumber).
enum class Codec : uint8_t {
  /// bfloat16, round-to-nearest-even (util/half.h): 2 bytes per element, relative error
  /// <= 2^-9 per element (finite, normal values).
  Bf16 = 1,
  /// int8 with a 3-sigma clip and a per-row scale: sigma = population std of the row (f64, about
  /// the mean); clip = 3*sigma (1.0 when sigma is 0 or not finite); scale = clip / 127;
  /// q = round(clamp(x, -clip, clip) / scale) in [-127, 127]. Wire: f32 scale (LE), then n
  /// signed bytes. Per element |x - decode| <= scale / 2 (+ f32 rounding) for |x| <= clip, and
  /// |x| - clip for clipped elements.
  Int8Clip3Sigma = 2,
};

/// "bf16" / "int8".
const char* codec_name(Codec c);
/// Bytes of an encoded row of n elements. Error{InvalidArgument} for an unknown codec.
size_t payload_bytes(Codec c, int64_t n);
/// Encode x [n]. Error{InvalidArgument} for an unknown codec.
std::vector<uint8_t> encode(Codec c, const float* x, int64_t n);
/// Decode a payload of payload_bytes(c, n) bytes into out [n].
/// Error{Format} when `bytes` is not payload_bytes(c, n).
void decode(Codec c, const uint8_t* payload, size_t bytes, int64_t n, float* out);

/// The int8 codec's clip (3 sigma) for a row, exposed for tests and error bounds.
float int8_clip(const float* x, int64_t n);

/// How sure the model is of its next token at a position, from that position's logits.
struct Confidence {
  int32_t top1_token = -1;
  /// log p(top1) - log p(top2), nats (>= 0). Equal to the logit difference.
  float log_prob_margin = 0;
  /// p(top1) under the softmax of the logits, in [0, 1].
  float top1_prob = 0;
};

/// Confidence of logits [vocab] (vocab >= 2; Error{InvalidArgument} otherwise).
Confidence confidence_of(const float* logits, int64_t vocab);

/// The gate: int8 only when the prediction is confident, else bf16. Defaults: top-1 probability
/// >= 0.9 AND log-prob margin >= 2.0 nats (about the reference's calibrated 2.16 for Gemma 3 4B),
/// and, when `require_agreement`, the argmax of the logits recomputed from the int8 round-tripped
/// residual must equal the raw argmax (a caller that cannot check passes agreement = false).
struct GateConfig {
  float min_top1_prob = 0.9f;
  float min_log_prob_margin = 2.0f;
  bool require_agreement = true;
};

/// Codec chosen for a frame. `int8_agrees`: the int8 round trip kept the argmax (ignored unless
/// cfg.require_agreement).
Codec choose_codec(const Confidence& c, const GateConfig& cfg, bool int8_agrees);

}  // namespace larql::boundary
