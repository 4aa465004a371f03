// Safetensors writer (formats/safetensors_writer.h).
#include "formats/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {

void SafetensorsWriter::add(const std::string& name, StDType dtype, std::vector<int64_t> shape, Producer produce) {
  if (name.empty() || name == "__metadata__")
    throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor name \"" + name + "\" is not allowed");
  for (const Entry& e : tensors_)
    if (e.name == name) throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor " + name + " added twice");
  if (dtype != StDType::F32 && dtype != StDType::F16 && dtype != StDType::BF16)
    throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor " + name + ": dtype " + st_dtype_name(dtype) +
                                                " is not written (F32, F16, BF16)");
  uint64_t n = st_dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor " + name + " has a negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  tensors_.push_back({name, dtype, std::move(shape), n, data_bytes_, std::move(produce)});
  data_bytes_ += n;
}

std::string SafetensorsWriter::header() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    j["__metadata__"] = m;
  }
  for (const Entry& e : tensors_)
    j[e.name] = {{"dtype", st_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.offset, e.offset + e.nbytes}}};
  std::string h = j.dump();
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  return h;
}

void SafetensorsWriter::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  const std::string h = header();
  const uint64_t total = 8 + h.size() + data_bytes_;
  AtomicWriter out(path, "safetensors");
  const uint64_t n = h.size();
  out.write(&n, 8);
  out.write(h);
  if (progress) progress(out.size(), total);
  for (const Entry& e : tensors_) {
    uint64_t written = 0;
    e.produce([&](const void* data, size_t bytes) {
      written += bytes;
      if (written > e.nbytes)
        throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor " + e.name + " produced more than its " +
                                                    std::to_string(e.nbytes) + " bytes");
      out.write(data, bytes);
    });
    if (written != e.nbytes)
      throw Error(ErrorKind::InvalidArgument, "SafetensorsWriter: tensor " + e.name + " produced " + std::to_string(written) +
                                                  " of its " + std::to_string(e.nbytes) + " bytes");
    if (progress) progress(out.size(), total);
  }
  out.commit();
}

}  // namespace larql
