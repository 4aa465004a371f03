#include "kv/residual_tiers.h"

#include <cmath>
#include <cstring>

#include "inference/forward.h"
#include "model/config.h"
#include "util/error.h"
#include "util/half.h"

namespace larql {

const char* cold_codec_name(ColdCodec codec) {
  switch (codec) {
    case ColdCodec::F32: return "f32";
    case ColdCodec::Bf16: return "bf16";
    case ColdCodec::Int8: return "int8";
  }
  return "?";
}


int64_t cold_codec_words(ColdCodec codec, int64_t hidden) {
  switch (codec) {
    case ColdCodec::F32: return hidden;
    case ColdCodec::Bf16: return (hidden + 1) / 2;
    case ColdCodec::Int8: return 1 + (hidden + 3) / 4;
  }
  return hidden;
}

void encode_cold_row(ColdCodec codec, int64_t H, const float* x, uint32_t* out) {
  const int64_t words_per_row_ = cold_codec_words(codec, H);
  switch (codec) {
    case ColdCodec::F32: std::memcpy(out, x, static_cast<size_t>(H) * 4); break;
    case ColdCodec::Bf16: {
      std::fill(out, out + words_per_row_, 0u);
      for (int64_t i = 0; i < H; ++i)
        out[i / 2] |= static_cast<uint32_t>(f32_to_bf16(x[i])) << (16 * (i % 2));
      break;
    }
    case ColdCodec::Int8: {
      float amax = 0;
      for (int64_t i = 0; i < H; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 127.0f;
      std::memcpy(out, &scale, 4);
      uint32_t* q = out + 1;
      std::fill(q, q + (words_per_row_ - 1), 0u);
      for (int64_t i = 0; i < H; ++i) {
        float r = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;
        r = std::clamp(r, -127.0f, 127.0f);
        const auto b = static_cast<uint8_t>(static_cast<int8_t>(r));
        q[i / 4] |= static_cast<uint32_t>(b) << (8 * (i % 4));
      }
      break;
    }
  }
}

void decode_cold_row(ColdCodec codec, int64_t H, const uint32_t* in, float* x) {
  switch (codec) {
    case ColdCodec::F32: std::memcpy(x, in, static_cast<size_t>(H) * 4); break;
    case ColdCodec::Bf16:
      for (int64_t i = 0; i < H; ++i) x[i] = bf16_to_f32(static_cast<uint16_t>(in[i / 2] >> (16 * (i % 2))));
      break;
    case ColdCodec::Int8: {
      float scale;
      std::memcpy(&scale, in, 4);
      const uint32_t* q = in + 1;
      for (int64_t i = 0; i < H; ++i)
        x[i] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q[i / 4] >> (8 * (i % 4))))) * scale;
      break;
    }
  }
}

ResidualTierLimits::ResidualTierLimits(const ModelConfig& c, int64_t window) {
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
    // Sliding: the next query at position n sees [n - window + 1, n], so window - 1 old rows.
    const int64_t r = lc.sliding ? std::max<int64_t>(1, lc.window - 1) : 0;
    int64_t keep = window;
    if (r > 0) keep = keep > 0 ? std::min(keep, r) : r;
    kv_keep.push_back(keep);
    retain.push_back(r);
  }
}

int64_t ResidualTierLimits::retain_lo(int64_t li, int64_t n) const {
  const int64_t r = retain[static_cast<size_t>(li)];
  return r > 0 ? std::max<int64_t>(0, n - r) : 0;
}

int64_t ResidualTierLimits::hot_lo(int64_t li, int64_t n) const {
  const int64_t keep = kv_keep[static_cast<size_t>(li)];
  return keep > 0 ? std::max<int64_t>(0, n - keep) : 0;
}

void roundtrip_kv(Forward& f, int64_t li, ColdCodec codec, const RowStore<float>& hot, int64_t a, int64_t b,
                  std::vector<float>& k, std::vector<float>& v) {
  const ModelConfig& c = f.config();
  const int64_t n = std::max<int64_t>(0, b - a);
  k.resize(static_cast<size_t>(n * c.kv_dim()));
  v.resize(k.size());
  std::vector<uint32_t> enc(static_cast<size_t>(cold_codec_words(codec, c.hidden)));
  std::vector<float> x;
  for (int64_t off = 0; off < n; off += f.chunk()) {
    const int64_t m = std::min(f.chunk(), n - off);
    x.resize(static_cast<size_t>(m * c.hidden));
    for (int64_t j = 0; j < m; ++j) {
      encode_cold_row(codec, c.hidden, hot.at(a + off + j), enc.data());
      decode_cold_row(codec, c.hidden, enc.data(), x.data() + j * c.hidden);
    }
    f.kv_from_residual(li, x.data(), m, a + off, k.data() + off * c.kv_dim(), v.data() + off * c.kv_dim());
  }
}

int64_t settle_layer_tiers(const ResidualTierLimits& tiers, int64_t li, int64_t n, ColdCodec codec, int64_t hidden,
                           RowStore<uint32_t>& cold, RowStore<float>& hot) {
  const int64_t keep_lo = tiers.retain_lo(li, n), lo = tiers.hot_lo(li, n);
  cold.drop_before(keep_lo);  // first, so rows moved below land right after what is left
  int64_t first = lo;
  if (hot.first_pos() < lo) {
    first = std::max(hot.first_pos(), keep_lo);
    std::vector<uint32_t> enc(static_cast<size_t>(cold.width()));
    for (int64_t pos = first; pos < lo; ++pos) {
      if (cold.rows() == 0 || cold.end_pos() != pos) cold.reset_to(pos);
      encode_cold_row(codec, hidden, hot.at(pos), enc.data());
      cold.append(enc.data(), 1);
    }
    hot.drop_before(lo);
  }
  if (cold.rows() == 0) cold.reset_to(hot.first_pos());
  return std::min(first, lo);
}

AttendMask prefill_roundtrip_mask(Forward& f, int64_t li, ColdCodec codec, int64_t keep, const RowStore<float>& hot,
                                  int64_t lo, int64_t end, std::vector<float>& ak, std::vector<float>& av) {
  AttendMask mask;
  if (keep <= 0 || codec == ColdCodec::F32) return mask;
  const int64_t a = std::max(hot.first_pos(), lo), b = end - 1 - keep;  // hot rows older than keep for a later query
  if (b > a) {
    roundtrip_kv(f, li, codec, hot, a, b, ak, av);
    mask.alt = {ak.data(), av.data(), a, b - a};
    mask.alt_recent = keep + 1;
  }
  return mask;
}

void write_residual_tiers(StateWriter& w, const RowStore<uint32_t>& cold, const RowStore<float>& hot) {
  w.u64(static_cast<uint64_t>(cold.first_pos()));
  w.u64(static_cast<uint64_t>(cold.rows()));
  if (cold.rows() > 0) w.u32s(cold.at(cold.first_pos()), static_cast<size_t>(cold.rows() * cold.width()));
  w.u64(static_cast<uint64_t>(hot.first_pos()));
  w.u64(static_cast<uint64_t>(hot.rows()));
  if (hot.rows() > 0) w.floats(hot.at(hot.first_pos()), static_cast<size_t>(hot.rows() * hot.width()));
}

void read_residual_tiers(StateReader& r, int64_t li, int64_t want_cold, int64_t want_hot, int64_t n_past,
                         RowStore<uint32_t>& cold, RowStore<float>& hot) {
  const std::string where = r.path() + ": layer " + std::to_string(li);
  const uint64_t cold_first = r.u64(), cold_rows = r.u64();
  if (cold_first != static_cast<uint64_t>(want_cold) || cold_rows != static_cast<uint64_t>(want_hot - want_cold))
    throw Error(ErrorKind::Format, where + " cold rows [" + std::to_string(cold_first) + ", +" + std::to_string(cold_rows) +
                                       ") do not match the tiers at n_past " + std::to_string(n_past));
  std::vector<uint32_t> words(static_cast<size_t>(cold_rows) * static_cast<size_t>(cold.width()));
  r.u32s(words.data(), words.size());
  cold.reset_to(want_cold);
  cold.append(words.data(), static_cast<int64_t>(cold_rows));
  const uint64_t hot_first = r.u64(), hot_rows = r.u64();
  if (hot_first != static_cast<uint64_t>(want_hot) || hot_rows != static_cast<uint64_t>(n_past - want_hot))
    throw Error(ErrorKind::Format, where + " hot rows do not end at n_past " + std::to_string(n_past));
  std::vector<float> res(static_cast<size_t>(hot_rows) * static_cast<size_t>(hot.width()));
  r.floats(res.data(), res.size());
  hot.reset_to(want_hot);
  hot.append(res.data(), static_cast<int64_t>(hot_rows));
}

}  // namespace larql
