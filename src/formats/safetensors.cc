#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/half.h"

namespace larql {

namespace {

using nlohmann::json;

struct DTypeRow {
  StDType type;
  const char* name;
  size_t size;
};

constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},     {StDType::I8, "I8", 1},
    {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1}, {StDType::I16, "I16", 2},
    {StDType::U16, "U16", 2},   {StDType::F16, "F16", 2},   {StDType::BF16, "BF16", 2},
    {StDType::I32, "I32", 4},   {StDType::U32, "U32", 4},   {StDType::F32, "F32", 4},
    {StDType::I64, "I64", 8},   {StDType::U64, "U64", 8},   {StDType::F64, "F64", 8},
};

// Types the spec defines that larql does not read (sub-byte and scale formats).
constexpr const char* kKnownUnread[] = {"F4", "F6_E2M3", "F6_E3M2", "E8M0", "F8_E8M0"};

// The reference reader refuses headers above 100 MB; so do we (a hostile size field must not
// make us allocate or scan gigabytes).
constexpr uint64_t kMaxHeader = 100'000'000;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw Error(ErrorKind::Format, file + ": " + what);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer JSON value, or fail naming `what`.
uint64_t as_index(const json& v, const std::string& file, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  fail(file, what + " must be a non-negative integer, found " + v.dump());
}

}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r.name;
  return "?";
}

size_t st_dtype_size(StDType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r.size;
  return 0;
}

std::optional<StDType> st_dtype_from_name(std::string_view name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.type;
  return std::nullopt;
}

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->name_ = path;
  f->map_ = MappedFile::open(path);
  f->data_ = f->map_.data();
  f->size_ = f->map_.size();
  f->parse_header();
  return f;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->name_ = name;
  f->data_ = data;
  f->size_ = size;
  f->parse_header();
  return f;
}

void SafetensorsFile::parse_header() {
  const std::string& file = name_;
  if (size_ < 8) fail(file, "file of " + std::to_string(size_) + " bytes is too short for the 8-byte header size");
  const uint64_t n = read_u64_le(data_);
  if (n > kMaxHeader) fail(file, "header size " + std::to_string(n) + " exceeds the limit of 100,000,000 bytes");
  if (n > size_ - 8)
    fail(file, "header size " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size_) + " bytes)");
  if (n < 2 || data_[8] != '{') fail(file, "header does not start with '{'");
  const char* text = reinterpret_cast<const char*>(data_ + 8);

  // Duplicate keys are an error (nlohmann would keep one silently): track the keys of each open
  // object by depth.
  std::vector<std::set<std::string>> seen(2);
  std::string duplicate;
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    const auto d = static_cast<size_t>(depth);
    if (ev == json::parse_event_t::object_start) {
      if (seen.size() < d + 2) seen.resize(d + 2);
      seen[d + 1].clear();
    } else if (ev == json::parse_event_t::key && duplicate.empty()) {
      if (seen.size() < d + 1) seen.resize(d + 1);
      if (!seen[d].insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, text + n, cb);
  } catch (const json::exception& e) {
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(file, "header names \"" + duplicate + "\" twice");
  if (!header.is_object()) fail(file, "header is not a JSON object");

  const size_t buffer_start = 8 + static_cast<size_t>(n);
  const size_t buffer_size = size_ - buffer_start;
  struct Entry {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(file, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(file, "__metadata__[\"" + mk + "\"] is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + key + "\"";
    if (!value.is_object()) fail(file, where + " is not an object");
    for (const auto& [field, _] : value.items())
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        fail(file, where + " has an unknown field \"" + field + "\"");
    if (!value.contains("dtype") || !value["dtype"].is_string()) fail(file, where + " has no dtype string");
    const std::string dname = value["dtype"].get<std::string>();
    const auto dtype = st_dtype_from_name(dname);
    if (!dtype) {
      for (const char* k : kKnownUnread)
        if (dname == k) throw Error(ErrorKind::Unsupported, file + ": " + where + " has dtype " + dname + ", which larql does not read");
      fail(file, where + " has an unknown dtype \"" + dname + "\"");
    }
    if (!value.contains("shape") || !value["shape"].is_array()) fail(file, where + " has no shape array");
    SafetensorsTensor t;
    t.name = key;
    t.dtype = *dtype;
    uint64_t elements = 1;
    for (const auto& d : value["shape"]) {
      const uint64_t dim = as_index(d, file, where + " shape entry");
      if (dim > static_cast<uint64_t>(INT64_MAX) || (dim != 0 && elements > UINT64_MAX / dim))
        fail(file, where + " shape overflows");
      elements *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& offs = value.contains("data_offsets") ? value["data_offsets"] : json();
    if (!offs.is_array() || offs.size() != 2) fail(file, where + " has no data_offsets [begin, end]");
    const uint64_t begin = as_index(offs[0], file, where + " data_offsets[0]");
    const uint64_t end = as_index(offs[1], file, where + " data_offsets[1]");
    if (begin > end) fail(file, where + " data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
    if (end > buffer_size)
      fail(file, where + " data_offsets end " + std::to_string(end) + " is past the end of the data (" +
                     std::to_string(buffer_size) + " bytes)");
    const size_t esize = st_dtype_size(*dtype);
    if (elements > UINT64_MAX / esize || elements * esize != end - begin)
      fail(file, where + " holds " + std::to_string(end - begin) + " bytes but its shape and dtype need " +
                     (elements > UINT64_MAX / esize ? std::string("more") : std::to_string(elements * esize)));
    t.nbytes = static_cast<size_t>(end - begin);
    t.offset = buffer_start + static_cast<size_t>(begin);
    t.data = data_ + t.offset;
    entries.push_back({begin, end, tensors_.size()});
    tensors_.push_back(std::move(t));
  }

  // The buffer is indexed entirely: sorted by offset, each tensor starts where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    const std::string& nm = tensors_[e.index].name;
    if (e.begin < at) fail(file, "tensor \"" + nm + "\" overlaps the tensor before it (starts at " + std::to_string(e.begin) + ", previous ends at " + std::to_string(at) + ")");
    if (e.begin > at) fail(file, "a hole in the data before tensor \"" + nm + "\" (bytes " + std::to_string(at) + ".." + std::to_string(e.begin) + " belong to no tensor)");
    at = e.end;
  }
  if (at != buffer_size)
    fail(file, "the data holds " + std::to_string(buffer_size) + " bytes but the tensors cover " + std::to_string(at));

  std::vector<SafetensorsTensor> ordered;
  ordered.reserve(tensors_.size());
  for (const Entry& e : entries) ordered.push_back(std::move(tensors_[e.index]));
  tensors_ = std::move(ordered);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view tensor) const {
  const auto it = index_.find(tensor);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint c;
  const fs::path root(dir);
  const fs::path single = root / "model.safetensors";
  const fs::path index = root / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    const std::string ipath = index.string();
    const MappedFile m = MappedFile::open(ipath);
    json j;
    try {
      j = json::parse(m.data(), m.data() + m.size());
    } catch (const json::exception& e) {
      fail(ipath, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ipath, "has no \"weight_map\" object");
    std::map<std::string, std::shared_ptr<const SafetensorsFile>> by_file;
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail(ipath, "weight_map[\"" + tensor + "\"] is not a file name");
      const std::string s = shard.get<std::string>();
      if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\\') != std::string::npos ||
          s.find('\0') != std::string::npos)
        fail(ipath, "weight_map[\"" + tensor + "\"] names \"" + s + "\", which is not a file in " + dir);
      auto& f = by_file[s];
      if (!f) {
        f = SafetensorsFile::open((root / s).string());
        c.shards_.push_back(f);
      }
      const SafetensorsTensor* t = f->find(tensor);
      if (t == nullptr) fail(ipath, "weight_map names \"" + tensor + "\" in " + s + ", which does not hold it");
      c.by_name_[tensor] = t;
    }
    // A tensor may sit in one shard only.
    for (const auto& sh : c.shards_)
      for (const auto& t : sh->tensors()) {
        const auto it = c.by_name_.find(t.name);
        if (it == c.by_name_.end()) fail(ipath, "shard " + sh->name() + " holds \"" + t.name + "\", which weight_map does not name");
        if (it->second != &t) fail(ipath, "\"" + t.name + "\" is in more than one shard");
      }
    return c;
  }
  if (!fs::exists(single, ec))
    throw Error(ErrorKind::NotFound, dir + ": neither model.safetensors nor model.safetensors.index.json is there");
  c.shards_.push_back(SafetensorsFile::open(single.string()));
  for (const auto& t : c.shards_[0]->tensors()) c.by_name_[t.name] = &t;
  return c;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view tensor) const {
  const auto it = by_name_.find(tensor);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsCheckpoint::tensors() const {
  std::vector<const SafetensorsTensor*> out;
  for (const auto& sh : shards_)
    for (const auto& t : sh->tensors()) out.push_back(&t);
  return out;
}

void to_f32(const SafetensorsTensor& t, float* out) {
  const int64_t n = t.n_elements();
  if (n == 0 && (t.dtype == StDType::F32 || t.dtype == StDType::F16 || t.dtype == StDType::BF16)) return;
  switch (t.dtype) {
    case StDType::F32:
      std::memcpy(out, t.data, static_cast<size_t>(n) * 4);
      return;
    case StDType::F16:
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default:
      throw Error(ErrorKind::Unsupported, "tensor \"" + t.name + "\" has dtype " + st_dtype_name(t.dtype) +
                                              "; only F32, F16 and BF16 convert to f32");
  }
}

}  // namespace larql
