#include "boundary/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "util/error.h"
#include "util/half.h"
#include "util/profile.h"

namespace larql::boundary {

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::Bf16: return "bf16";
    case Codec::Int8Clip3Sigma: return "int8";
  }
  return "unknown";
}

size_t payload_bytes(Codec c, int64_t n) {
  switch (c) {
    case Codec::Bf16: return static_cast<size_t>(n) * 2;
    case Codec::Int8Clip3Sigma: return 4 + static_cast<size_t>(n);
  }
  throw Error(ErrorKind::InvalidArgument, "boundary codec: unknown codec code " + std::to_string(static_cast<int>(c)));
}

float int8_clip(const float* x, int64_t n) {
  if (n <= 0) return 1.0f;
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double sigma = std::sqrt(var / static_cast<double>(n));
  const float clip = static_cast<float>(3.0 * sigma);
  return (std::isfinite(clip) && clip > 0) ? clip : 1.0f;
}

std::vector<uint8_t> encode(Codec c, const float* x, int64_t n) {
  const profile::Scope prof(profile::Stage::Codec);
  std::vector<uint8_t> out(payload_bytes(c, n));
  if (c == Codec::Bf16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = f32_to_bf16(x[i]);
      out[2 * i] = static_cast<uint8_t>(b & 0xff);
      out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
    return out;
  }
  const float clip = int8_clip(x, n);
  const float scale = clip / 127.0f;
  std::memcpy(out.data(), &scale, 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::isnan(x[i]) ? 0.0f : std::clamp(x[i], -clip, clip);
    const long q = std::clamp(std::lround(v / scale), -127L, 127L);
    out[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
  return out;
}

void decode(Codec c, const uint8_t* p, size_t bytes, int64_t n, float* out) {
  const profile::Scope prof(profile::Stage::Codec);
  if (bytes != payload_bytes(c, n))
    throw Error(ErrorKind::Format, std::string("boundary codec ") + codec_name(c) + ": payload of " + std::to_string(bytes) +
                                       " bytes for " + std::to_string(n) + " elements (expected " +
                                       std::to_string(payload_bytes(c, n)) + ")");
  if (c == Codec::Bf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
    return;
  }
  float scale;
  std::memcpy(&scale, p, 4);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[4 + i])) * scale;
}

Confidence confidence_of(const float* logits, int64_t vocab) {
  if (vocab < 2) throw Error(ErrorKind::InvalidArgument, "confidence_of: need at least 2 logits, got " + std::to_string(vocab));
  int64_t i1 = -1, i2 = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (i1 < 0 || logits[i] > logits[i1]) {
      i2 = i1;
      i1 = i;
    } else if (i2 < 0 || logits[i] > logits[i2]) {
      i2 = i;
    }
  }
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - logits[i1]);
  Confidence c;
  c.top1_token = static_cast<int32_t>(i1);
  c.log_prob_margin = logits[i1] - logits[i2];  // log-softmax differences = logit differences
  c.top1_prob = static_cast<float>(1.0 / sum);
  return c;
}

Codec choose_codec(const Confidence& c, const GateConfig& cfg, bool int8_agrees) {
  const bool confident = c.top1_prob >= cfg.min_top1_prob && c.log_prob_margin >= cfg.min_log_prob_margin;
  if (!confident) return Codec::Bf16;
  if (cfg.require_agreement && !int8_agrees) return Codec::Bf16;
  return Codec::Int8Clip3Sigma;
}

}  // namespace larql::boundary
