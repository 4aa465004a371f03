#include "model/overlay_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ffn_features.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/half.h"
#include "util/hash.h"

namespace larql {

namespace {

size_t row_size(const SourceTensor& t) {
  const auto rb = row_bytes(t.type, t.dims.at(0));
  if (!rb) throw Error(ErrorKind::Format, t.name + ": a row of " + std::to_string(t.dims.at(0)) + " is not whole blocks of " +
                                              dtype_name(t.type));
  return *rb;
}

// Q6_K: set value j (0..255) of one block to `want`, keeping the super-block scale d, the 16
// sub-block scales and every other value bit for bit. Returns the indices (0..255) whose value
// changed (j or none); sets *clamped when `want` is beyond what j's sub-block scale holds.
std::vector<int> q6k_set(quant::detail::BlockQ6K& b, int j, float want, bool* clamped) {
  const float d = f16_to_f32(b.d);
  auto get_q = [&](int k) {  // the 6-bit quant of element k, -32..31 (dequantize_q6_K's layout)
    const int h = k / 128, r = k % 128, g = r / 32, l = r % 32;
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int lo = g == 0 ? (ql[l] & 0xF) : g == 1 ? (ql[l + 32] & 0xF) : g == 2 ? (ql[l] >> 4) : (ql[l + 32] >> 4);
    const int hi = (qh[l] >> (2 * g)) & 3;
    return (lo | (hi << 4)) - 32;
  };
  auto set_q = [&](int k, int q) {
    const int h = k / 128, r = k % 128, g = r / 32, l = r % 32;
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    const int u = q + 32;
    uint8_t& lo = (g == 0 || g == 2) ? ql[l] : ql[l + 32];
    if (g < 2) lo = static_cast<uint8_t>((lo & 0xF0) | (u & 0xF));
    else lo = static_cast<uint8_t>((lo & 0x0F) | ((u & 0xF) << 4));
    qh[l] = static_cast<uint8_t>((qh[l] & ~(3 << (2 * g))) | (((u >> 4) & 3) << (2 * g)));
  };
  auto scale_of = [&](int k) { return (k / 128) * 8 + (k % 128) / 16 % 2 + 2 * ((k % 128) / 32); };
  const int si = scale_of(j);
  // The 16 elements sharing scale si: consecutive, starting at j rounded down to 16.
  std::vector<int> changed;
  if (d == 0.0f) {
    *clamped = want != 0.0f;
    return changed;
  }
  // The sub-block's scale stays, so its other 15 values (other features) keep every bit; a value
  // beyond what the scale holds is clamped to the nearest it does.
  const int sc = b.scales[si];
  if (sc == 0) {
    *clamped = want != 0.0f;
    return changed;
  }
  float q = std::nearbyint(want / (d * static_cast<float>(sc)));
  if (q < -32 || q > 31) {
    *clamped = true;
    q = std::clamp(q, -32.0f, 31.0f);
  }
  if (static_cast<int>(q) != get_q(j)) {
    set_q(j, static_cast<int>(q));
    changed.push_back(j);
  }
  return changed;
}

// The quant code of element j of one block, for the block types whose element value is a function
// of its own code and the block's scales alone (ggml-common.h layouts; quant/blocks.h): Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0 (32 values), Q4_K, Q5_K (256). Range of codes in *lo, *hi. false for
// any other type.
bool code_range(DType t, int* lo, int* hi) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q4_K: *lo = 0, *hi = 15; return true;
    case DType::Q5_0: case DType::Q5_1: case DType::Q5_K: *lo = 0, *hi = 31; return true;
    case DType::Q8_0: *lo = -128, *hi = 127; return true;
    default: return false;
  }
}

// Byte and shift of element j's 4 low bits: Q4_0/Q5_0 family (qs[j % 16], high nibble for j >= 16)
// or the K family (qs[32 p + l], p = j / 64, l = j % 32, high nibble for the second 32 of the 64).
uint8_t* nibble_of(uint8_t* qs, int j, bool k_family, int* shift) {
  if (k_family) {
    *shift = (j % 64) >= 32 ? 4 : 0;
    return qs + 32 * (j / 64) + j % 32;
  }
  *shift = j >= 16 ? 4 : 0;
  return qs + j % 16;
}

int get_code(DType t, uint8_t* b, int j) {
  namespace d = quant::detail;
  int sh = 0;
  switch (t) {
    case DType::Q8_0: return reinterpret_cast<d::BlockQ8_0*>(b)->qs[j];
    case DType::Q4_0: return (*nibble_of(reinterpret_cast<d::BlockQ4_0*>(b)->qs, j, false, &sh) >> sh) & 0xF;
    case DType::Q4_1: return (*nibble_of(reinterpret_cast<d::BlockQ4_1*>(b)->qs, j, false, &sh) >> sh) & 0xF;
    case DType::Q4_K: return (*nibble_of(reinterpret_cast<d::BlockQ4K*>(b)->qs, j, true, &sh) >> sh) & 0xF;
    case DType::Q5_0: case DType::Q5_1: {
      uint8_t* qh = t == DType::Q5_0 ? reinterpret_cast<d::BlockQ5_0*>(b)->qh : reinterpret_cast<d::BlockQ5_1*>(b)->qh;
      uint8_t* qs = t == DType::Q5_0 ? reinterpret_cast<d::BlockQ5_0*>(b)->qs : reinterpret_cast<d::BlockQ5_1*>(b)->qs;
      const int lo4 = (*nibble_of(qs, j, false, &sh) >> sh) & 0xF;
      return lo4 | (((qh[j / 8] >> (j % 8)) & 1) << 4);  // bit j of the little-endian uint32 qh
    }
    case DType::Q5_K: {
      auto* q = reinterpret_cast<d::BlockQ5K*>(b);
      const int lo4 = (*nibble_of(q->qs, j, true, &sh) >> sh) & 0xF;
      const int bit = 2 * (j / 64) + ((j % 64) >= 32 ? 1 : 0);  // bit (2p) or (2p+1) of qh[l]
      return lo4 | (((q->qh[j % 32] >> bit) & 1) << 4);
    }
    default: return 0;
  }
}

void set_code(DType t, uint8_t* b, int j, int c) {
  namespace d = quant::detail;
  int sh = 0;
  auto put4 = [&](uint8_t* byte) { *byte = static_cast<uint8_t>((*byte & ~(0xF << sh)) | ((c & 0xF) << sh)); };
  switch (t) {
    case DType::Q8_0: reinterpret_cast<d::BlockQ8_0*>(b)->qs[j] = static_cast<int8_t>(c); return;
    case DType::Q4_0: put4(nibble_of(reinterpret_cast<d::BlockQ4_0*>(b)->qs, j, false, &sh)); return;
    case DType::Q4_1: put4(nibble_of(reinterpret_cast<d::BlockQ4_1*>(b)->qs, j, false, &sh)); return;
    case DType::Q4_K: put4(nibble_of(reinterpret_cast<d::BlockQ4K*>(b)->qs, j, true, &sh)); return;
    case DType::Q5_0: case DType::Q5_1: {
      uint8_t* qh = t == DType::Q5_0 ? reinterpret_cast<d::BlockQ5_0*>(b)->qh : reinterpret_cast<d::BlockQ5_1*>(b)->qh;
      uint8_t* qs = t == DType::Q5_0 ? reinterpret_cast<d::BlockQ5_0*>(b)->qs : reinterpret_cast<d::BlockQ5_1*>(b)->qs;
      put4(nibble_of(qs, j, false, &sh));
      qh[j / 8] = static_cast<uint8_t>((qh[j / 8] & ~(1 << (j % 8))) | (((c >> 4) & 1) << (j % 8)));
      return;
    }
    case DType::Q5_K: {
      auto* q = reinterpret_cast<d::BlockQ5K*>(b);
      put4(nibble_of(q->qs, j, true, &sh));
      const int bit = 2 * (j / 64) + ((j % 64) >= 32 ? 1 : 0);
      q->qh[j % 32] = static_cast<uint8_t>((q->qh[j % 32] & ~(1 << bit)) | (((c >> 4) & 1) << bit));
      return;
    }
    default: return;
  }
}

// Set element j of one block of a code_range type to the code whose dequantised value is nearest
// `want`, keeping the block's scales and every other element bit for bit (each code is tried and
// the block dequantised: the value is what the kernels read). Returns false, changing nothing,
// when `want` lies beyond every value the element's scales can give by more than half a step
// (the caller then re-quantises the block).
bool set_in_block(DType t, uint8_t* b, int j, float want, int64_t bs, std::vector<float>& tmp, bool* changed) {
  int lo = 0, hi = 0;
  if (!code_range(t, &lo, &hi)) return false;
  const int old = get_code(t, b, j);
  int best = old;
  float best_err = INFINITY, vlo = 0, vhi = 0, step = 0, prev = NAN;
  for (int c = lo; c <= hi; ++c) {
    set_code(t, b, j, c);
    quant::dequantize_row(t, b, tmp.data(), bs);
    const float v = tmp[static_cast<size_t>(j)];
    if (c == lo) vlo = v;
    if (c == hi) vhi = v;
    if (!std::isnan(prev)) step = std::max(step, std::fabs(v - prev));
    prev = v;
    const float err = std::fabs(v - want);
    if (err < best_err) best_err = err, best = c;
  }
  const float top = std::max(vlo, vhi), bottom = std::min(vlo, vhi);
  if (!std::isfinite(want) || want > top + 0.5f * step || want < bottom - 0.5f * step || step == 0.0f) {
    set_code(t, b, j, old);
    return false;
  }
  set_code(t, b, j, best);
  *changed = best != old;
  return true;
}

}  // namespace

OverlaySource::OverlaySource(std::shared_ptr<const WeightSource> base) : base_(std::move(base)) {
  if (!base_) throw Error(ErrorKind::InvalidArgument, "OverlaySource: no base source");
  cfg_ = base_->config();
  fingerprint_ = base_->fingerprint();
}

void OverlaySource::widen_ffn(int64_t extra) {
  if (extra <= 0 || extra % kFfnAppendBlock != 0)
    throw Error(ErrorKind::InvalidArgument, "widen_ffn: " + std::to_string(extra) + " features is not a positive multiple of " +
                                                std::to_string(kFfnAppendBlock));
  if (cfg_.n_experts > 0) throw Error(ErrorKind::Unsupported, "appending FFN features to a mixture-of-experts model");
  const int64_t F = cfg_.ffn, H = cfg_.hidden, F2 = F + extra, F0 = base_->config().ffn;
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const auto bd = base_->tensor(TensorRole::FfnDown, l);
    if (!bd) continue;  // a model part without this layer's FFN
    for (TensorRole role : {TensorRole::FfnGate, TensorRole::FfnUp}) {
      const SourceTensor t = *tensor(role, l);
      const size_t rb = row_size(t);
      std::vector<uint8_t> bytes(t.data, t.data + t.nbytes), zero(rb);
      const std::vector<float> zf(static_cast<size_t>(H), 0.0f);
      quant::quantize_row(t.type, zf.data(), zero.data(), H);
      for (int64_t f = 0; f < extra; ++f) bytes.insert(bytes.end(), zero.begin(), zero.end());
      repl_[{static_cast<int>(role), l}] = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
      dims_[{static_cast<int>(role), l}] = {static_cast<uint64_t>(H), static_cast<uint64_t>(F2)};
    }
    // R: the base down matrix's largest |value| at this layer.
    float R = 0;
    {
      const size_t rb0 = row_size(*bd);
      std::vector<float> row(static_cast<size_t>(F0));
      for (int64_t r = 0; r < H; ++r) {
        quant::dequantize_row(bd->type, bd->data + static_cast<size_t>(r) * rb0, row.data(), F0);
        for (float v : row) R = std::max(R, std::fabs(v));
      }
    }
    const SourceTensor t = *tensor(TensorRole::FfnDown, l);
    const size_t rb = row_size(t), rb2 = *row_bytes(t.type, static_cast<uint64_t>(F2));
    const size_t tail = rb2 - rb;
    std::vector<float> add(static_cast<size_t>(extra), 0.0f);
    for (int64_t f = F; f < F2; ++f)
      if (ffn_append_range_column(f, F0)) add[static_cast<size_t>(f - F)] = (f - F0) % 16 == 0 ? R : -R;
    std::vector<uint8_t> tail_bytes(tail);
    quant::quantize_row(t.type, add.data(), tail_bytes.data(), extra);
    std::vector<uint8_t> bytes;
    bytes.reserve(rb2 * static_cast<size_t>(H));
    for (int64_t r = 0; r < H; ++r) {
      const uint8_t* src = t.data + static_cast<size_t>(r) * rb;
      bytes.insert(bytes.end(), src, src + rb);
      bytes.insert(bytes.end(), tail_bytes.begin(), tail_bytes.end());
    }
    repl_[{static_cast<int>(TensorRole::FfnDown), l}] = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    dims_[{static_cast<int>(TensorRole::FfnDown), l}] = {static_cast<uint64_t>(F2), static_cast<uint64_t>(H)};
  }
  cfg_.ffn = F2;
  refresh_fingerprint();
}

void OverlaySource::replace(TensorRole role, int64_t layer, std::vector<uint8_t> bytes) {
  const auto t = base_->tensor(role, layer);
  if (!t) throw Error(ErrorKind::NotFound, base_->path() + ": no tensor '" + base_->tensor_name(role, layer) + "' to replace");
  if (bytes.size() != t->nbytes)
    throw Error(ErrorKind::InvalidArgument, "replacing '" + t->name + "': " + std::to_string(bytes.size()) +
                                                " bytes, the tensor has " + std::to_string(t->nbytes));
  repl_[{static_cast<int>(role), layer}] = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  refresh_fingerprint();
}

std::vector<uint8_t>& OverlaySource::writable(TensorRole role, int64_t layer) {
  auto& slot = repl_[{static_cast<int>(role), layer}];
  if (!slot) {
    const auto t = base_->tensor(role, layer);
    if (!t) throw Error(ErrorKind::NotFound, base_->path() + ": no tensor '" + base_->tensor_name(role, layer) + "'");
    slot = std::make_shared<std::vector<uint8_t>>(t->data, t->data + t->nbytes);
  } else if (slot.use_count() > 1) {
    slot = std::make_shared<std::vector<uint8_t>>(*slot);
  }
  return *slot;
}

FeatureEditReport OverlaySource::set_ffn_feature(int64_t layer, int64_t feature, const float* gate, const float* up,
                                                 const float* down) {
  const ModelConfig& c = config();
  if (layer < 0 || layer >= c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "layer " + std::to_string(layer) + " is out of range 0-" + std::to_string(c.n_layers - 1));
  const FfnFeatureRef ref = ffn_feature_ref(c, feature);
  FeatureEditReport rep;
  for (auto [role, v] : {std::pair{ref.gate, gate}, std::pair{ref.up, up}}) {
    if (!v) continue;
    const SourceTensor t = *tensor(role, layer);
    const size_t rb = row_size(t);
    std::vector<uint8_t>& bytes = writable(role, layer);
    quant::quantize_row(t.type, v, bytes.data() + static_cast<size_t>(ref.gate_row) * rb, c.hidden);
  }
  if (down) {
    const SourceTensor t = *tensor(ref.down, layer);  // [hidden rows (per expert), cols]
    const size_t rb = row_size(t);
    const DTypeInfo& info = dtype_info(t.type);
    const int64_t bs = info.block_size;
    const int64_t col = ref.down_col, blk = col / bs;
    // changed_columns are feature numbers: the column's feature minus its index, plus the index.
    const int64_t base = feature - col;
    std::vector<uint8_t>& bytes = writable(ref.down, layer);
    std::vector<float> vals(static_cast<size_t>(bs)), after(static_cast<size_t>(bs));
    for (int64_t r = 0; r < c.hidden; ++r) {
      uint8_t* b = bytes.data() + static_cast<size_t>(ref.down_row0 + r) * rb + static_cast<size_t>(blk) * info.type_size;
      if (t.type == DType::Q6_K) {
        bool clamped = false;
        quant::detail::BlockQ6K q;
        std::memcpy(&q, b, sizeof q);
        for (int k : q6k_set(q, static_cast<int>(col - blk * bs), down[r], &clamped)) rep.changed_columns.insert(base + blk * bs + k);
        std::memcpy(b, &q, sizeof q);
        rep.clamped += clamped;
        continue;
      }
      // Where the block's scales can hold the value, only the column's code changes (no other
      // feature's value moves: a re-quantised block re-rounds all 32 or 256, and after hundreds of
      // edits at a layer that drift costs more than the edits' own slots).
      bool code_changed = false;
      if (set_in_block(t.type, b, static_cast<int>(col - blk * bs), down[r], bs, vals, &code_changed)) {
        if (code_changed) rep.changed_columns.insert(feature);
        continue;
      }
      quant::dequantize_row(t.type, b, vals.data(), bs);
      std::vector<float> before = vals;
      vals[static_cast<size_t>(col - blk * bs)] = down[r];
      quant::quantize_row(t.type, vals.data(), b, bs);
      quant::dequantize_row(t.type, b, after.data(), bs);
      for (int64_t k = 0; k < bs; ++k)
        if (after[static_cast<size_t>(k)] != before[static_cast<size_t>(k)]) rep.changed_columns.insert(base + blk * bs + k);
    }
  }
  refresh_fingerprint();
  return rep;
}

void OverlaySource::ffn_feature(int64_t layer, int64_t feature, std::vector<float>* gate, std::vector<float>* up,
                                std::vector<float>* down) const {
  const ModelConfig& c = config();
  if (layer < 0 || layer >= c.n_layers || feature < 0 || feature >= ffn_feature_count(c))
    throw Error(ErrorKind::InvalidArgument, "feature " + std::to_string(feature) + " of layer " + std::to_string(layer) +
                                                " is out of range");
  const FfnFeatureRef ref = ffn_feature_ref(c, feature);
  for (auto [role, v] : {std::pair{ref.gate, gate}, std::pair{ref.up, up}}) {
    if (!v) continue;
    const SourceTensor t = *tensor(role, layer);
    v->resize(static_cast<size_t>(c.hidden));
    quant::dequantize_row(t.type, t.data + static_cast<size_t>(ref.gate_row) * row_size(t), v->data(), c.hidden);
  }
  if (down) {
    const SourceTensor t = *tensor(ref.down, layer);
    const size_t rb = row_size(t);
    const DTypeInfo& info = dtype_info(t.type);
    const int64_t bs = info.block_size, blk = ref.down_col / bs;
    std::vector<float> vals(static_cast<size_t>(bs));
    down->resize(static_cast<size_t>(c.hidden));
    for (int64_t r = 0; r < c.hidden; ++r) {
      quant::dequantize_row(t.type, t.data + static_cast<size_t>(ref.down_row0 + r) * rb + static_cast<size_t>(blk) * info.type_size,
                            vals.data(), bs);
      (*down)[static_cast<size_t>(r)] = vals[static_cast<size_t>(ref.down_col - blk * bs)];
    }
  }
}

std::vector<std::pair<TensorRole, int64_t>> OverlaySource::replaced() const {
  std::vector<std::pair<TensorRole, int64_t>> out;
  for (const auto& [k, v] : repl_) out.emplace_back(static_cast<TensorRole>(k.first), k.second);
  return out;
}

std::optional<SourceTensor> OverlaySource::tensor(TensorRole role, int64_t layer) const {
  auto t = base_->tensor(role, layer);
  if (!t) return t;
  auto it = repl_.find({static_cast<int>(role), layer});
  if (it != repl_.end()) t->data = it->second->data(), t->nbytes = it->second->size();
  auto d = dims_.find({static_cast<int>(role), layer});
  if (d != dims_.end()) t->dims = d->second;
  return t;
}

std::vector<SourceTensor> OverlaySource::tensors() const {
  std::vector<SourceTensor> all = base_->tensors();
  if (repl_.empty()) return all;
  // Match by name: the base names each (role, layer) through tensor_name.
  for (const auto& [k, v] : repl_) {
    const std::string name = base_->tensor_name(static_cast<TensorRole>(k.first), k.second);
    for (auto& t : all)
      if (t.name == name) {
        t.data = v->data();
        t.nbytes = v->size();
        if (auto d = dims_.find(k); d != dims_.end()) t.dims = d->second;
      }
  }
  return all;
}

void OverlaySource::refresh_fingerprint() {
  if (repl_.empty()) {
    fingerprint_ = base_->fingerprint();
    return;
  }
  Xxh3Stream h;
  h.update(base_->fingerprint().data(), base_->fingerprint().size());
  if (appended_ffn() > 0) {
    const int64_t w = cfg_.ffn;
    h.update(&w, sizeof w);
  }
  for (const auto& [k, v] : repl_) {
    const int64_t key[2] = {k.first, k.second};
    h.update(key, sizeof key);
    h.update(v->data(), v->size());
  }
  fingerprint_ = "overlay-xxh3-" + hex64(h.digest());
}

}  // namespace larql
