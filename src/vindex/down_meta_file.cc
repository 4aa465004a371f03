#include "vindex/down_meta_file.h"

#include <cstring>

#include "util/error.h"

namespace larql::vindex {

namespace {

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_f32(std::vector<uint8_t>& b, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  put_u32(b, v);
}
uint32_t get_u32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
float get_f32(const uint8_t* p) {
  const uint32_t v = get_u32(p);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

[[noreturn]] void bad(const std::string& name, size_t at, const std::string& what) {
  throw Error(ErrorKind::Format, name + ": " + what + " (byte " + std::to_string(at) + ")");
}

// Limits that keep a hostile header from asking for absurd work before the size check.
constexpr uint32_t kMaxTopK = 4096;
constexpr uint32_t kMaxLayers = 1u << 16;

}  // namespace

DownMetaWriter::DownMetaWriter(const std::string& path, uint32_t num_layers, uint32_t top_k)
    : out_(path, "down_meta.bin"), num_layers_(num_layers), top_k_(top_k) {
  if (top_k < 1 || top_k > kMaxTopK) throw Error(ErrorKind::InvalidArgument, "down_meta: top_k must be in [1, 4096], got " + std::to_string(top_k));
  std::vector<uint8_t> h;
  put_u32(h, kDownMetaMagic);
  put_u32(h, kDownMetaVersion);
  put_u32(h, num_layers);
  put_u32(h, top_k);
  out_.write(h.data(), h.size());
}

void DownMetaWriter::add_layer(uint32_t layer, uint32_t num_features, const std::vector<TokenScore>& entries) {
  if (layer != next_ || layer >= num_layers_)
    throw Error(ErrorKind::InvalidArgument, "down_meta: layer " + std::to_string(layer) + " added, expected " + std::to_string(next_));
  if (entries.size() != static_cast<size_t>(num_features) * top_k_)
    throw Error(ErrorKind::InvalidArgument, "down_meta: layer " + std::to_string(layer) + " has " + std::to_string(entries.size()) +
                                                " entries for " + std::to_string(num_features) + " features x top_k " + std::to_string(top_k_));
  std::vector<uint8_t> b;
  b.reserve(4 + static_cast<size_t>(num_features) * (8 + 8 * top_k_));
  put_u32(b, num_features);
  for (uint32_t f = 0; f < num_features; ++f) {
    const TokenScore* e = entries.data() + static_cast<size_t>(f) * top_k_;
    put_u32(b, e[0].token);
    put_f32(b, e[0].logit);
    for (uint32_t i = 0; i < top_k_; ++i) {
      put_u32(b, e[i].token);
      put_f32(b, e[i].logit);
    }
  }
  out_.write(b.data(), b.size());
  ++next_;
}

void DownMetaWriter::commit() {
  if (next_ != num_layers_)
    throw Error(ErrorKind::InvalidArgument, "down_meta: " + std::to_string(next_) + " of " + std::to_string(num_layers_) + " layers written");
  out_.commit();
}

DownMetaFile DownMetaFile::open(const std::string& path) {
  MappedFile m = MappedFile::open(path);
  const uint8_t* d = m.data();
  const size_t n = m.size();
  DownMetaFile f = parse(d, n, path);
  f.map_ = std::move(m);
  return f;
}

DownMetaFile DownMetaFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  DownMetaFile f;
  f.data_ = data;
  f.size_ = size;
  f.name_ = name;
  if (size < 16) bad(name, 0, "file of " + std::to_string(size) + " bytes is shorter than the 16-byte header");
  if (get_u32(data) != kDownMetaMagic) bad(name, 0, "bad magic (expected the bytes \"TEMD\")");
  if (get_u32(data + 4) != kDownMetaVersion) bad(name, 4, "version " + std::to_string(get_u32(data + 4)) + " (expected 1)");
  f.num_layers_ = get_u32(data + 8);
  f.top_k_ = get_u32(data + 12);
  if (f.num_layers_ > kMaxLayers) bad(name, 8, "num_layers " + std::to_string(f.num_layers_) + " exceeds 65536");
  if (f.top_k_ < 1 || f.top_k_ > kMaxTopK) bad(name, 12, "top_k " + std::to_string(f.top_k_) + " is outside [1, 4096]");
  const size_t rec = 8 + 8 * static_cast<size_t>(f.top_k_);
  size_t at = 16;
  for (uint32_t l = 0; l < f.num_layers_; ++l) {
    if (size - at < 4) bad(name, at, "the file ends before layer " + std::to_string(l) + "'s feature count");
    const uint32_t count = get_u32(data + at);
    at += 4;
    if (count > (size - at) / rec)
      bad(name, at - 4, "layer " + std::to_string(l) + " claims " + std::to_string(count) + " features; only " +
                            std::to_string((size - at) / rec) + " records fit in the rest of the file");
    f.layer_offset_.push_back(at);
    f.layer_count_.push_back(count);
    at += static_cast<size_t>(count) * rec;
  }
  if (at != size) bad(name, at, std::to_string(size - at) + " bytes follow the last layer");
  return f;
}

uint32_t DownMetaFile::num_features(uint32_t layer) const {
  if (layer >= num_layers_)
    throw Error(ErrorKind::InvalidArgument, name_ + ": layer " + std::to_string(layer) + " of " + std::to_string(num_layers_));
  return layer_count_[layer];
}

const uint8_t* DownMetaFile::record(uint32_t layer, uint32_t feature) const {
  if (feature >= num_features(layer))
    throw Error(ErrorKind::InvalidArgument, name_ + ": feature " + std::to_string(feature) + " of layer " + std::to_string(layer) +
                                                " (it has " + std::to_string(layer_count_[layer]) + ")");
  return data_ + layer_offset_[layer] + static_cast<size_t>(feature) * (8 + 8 * static_cast<size_t>(top_k_));
}

TokenScore DownMetaFile::entry(uint32_t layer, uint32_t feature, uint32_t i) const {
  const uint8_t* r = record(layer, feature);
  if (i >= top_k_) throw Error(ErrorKind::InvalidArgument, name_ + ": entry " + std::to_string(i) + " of top_k " + std::to_string(top_k_));
  const uint8_t* e = r + 8 + 8 * static_cast<size_t>(i);
  return TokenScore{get_u32(e), get_f32(e + 4)};
}

}  // namespace larql::vindex
