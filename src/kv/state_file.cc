#include "kv/state_file.h"

#include <cstring>
#include <filesystem>
#include <iterator>

#include "util/error.h"

namespace larql {

StateWriter::StateWriter(const std::string& path, const StateHeader& h) : path_(path), out_(path, std::ios::binary) {
  if (!out_) throw Error(ErrorKind::Io, path + ": cannot open for writing");
  raw(kStateMagic, sizeof kStateMagic);
  const uint32_t v = kStateVersion;
  raw(&v, 4);
  for (const std::string* s : {&h.engine, &h.config, &h.fingerprint}) {
    const uint32_t n = static_cast<uint32_t>(s->size());
    raw(&n, 4);
    raw(s->data(), s->size());
  }
  u64(h.n_past);
}

void StateWriter::raw(const void* p, size_t n) { out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); }
void StateWriter::u64(uint64_t v) { raw(&v, 8); }
void StateWriter::floats(const float* p, size_t n) { raw(p, n * sizeof(float)); }
void StateWriter::u32s(const uint32_t* p, size_t n) { raw(p, n * sizeof(uint32_t)); }
void StateWriter::close() {
  out_.flush();
  if (!out_) throw Error(ErrorKind::Io, path_ + ": write failed (disk full?)");
  out_.close();
}

StateReader::StateReader(const std::string& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(ErrorKind::Io, path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, path + ": cannot open (no such file, or not readable)");
  try {
    data_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Io, path + ": read failed: " + e.what());
  }
}

void StateReader::raw(void* p, size_t n) {
  if (n > data_.size() - pos_)
    throw Error(ErrorKind::Format, path_ + ": state file truncated at byte " + std::to_string(pos_) + " (needed " +
                                       std::to_string(n) + " more bytes)");
  std::memcpy(p, data_.data() + pos_, n);
  pos_ += n;
}

std::string StateReader::str() {
  uint32_t n = 0;
  raw(&n, 4);
  if (n > 4096) throw Error(ErrorKind::Format, path_ + ": string at byte " + std::to_string(pos_ - 4) + " is too long");
  std::string s(n, '\0');
  raw(s.data(), n);
  return s;
}

StateHeader StateReader::header(const std::string& engine, const std::string& fingerprint) {
  char magic[8];
  raw(magic, 8);
  if (std::memcmp(magic, kStateMagic, 8) != 0)
    throw Error(ErrorKind::Format, path_ + ": not a larql state file (bad magic at byte 0)");
  uint32_t v = 0;
  raw(&v, 4);
  if (v != kStateVersion)
    throw Error(ErrorKind::Format, path_ + ": state file version " + std::to_string(v) + " (this build reads " +
                                       std::to_string(kStateVersion) + ")");
  StateHeader h;
  h.engine = str();
  h.config = str();
  h.fingerprint = str();
  h.n_past = u64();
  if (h.engine != engine)
    throw Error(ErrorKind::InvariantViolation, path_ + ": state was saved by engine '" + h.engine + "', not '" + engine + "'");
  if (h.fingerprint != fingerprint)
    throw Error(ErrorKind::InvariantViolation, path_ + ": state was saved with another model (fingerprint " +
                                                   h.fingerprint + ", this model " + fingerprint + ")");
  return h;
}

StateHeader StateReader::header(const std::string& engine, const std::string& fingerprint,
                                const std::string& config) {
  StateHeader h = header(engine, fingerprint);
  if (h.config != config)
    throw Error(ErrorKind::InvariantViolation, path_ + ": state has config '" + h.config + "', engine has '" + config + "'");
  return h;
}

uint64_t StateReader::u64() {
  uint64_t v = 0;
  raw(&v, 8);
  return v;
}

void StateReader::floats(float* p, size_t n) {
  if (n > (data_.size() - pos_) / sizeof(float))
    throw Error(ErrorKind::Format, path_ + ": state file truncated at byte " + std::to_string(pos_));
  raw(p, n * sizeof(float));
}

void StateReader::u32s(uint32_t* p, size_t n) {
  if (n > (data_.size() - pos_) / sizeof(uint32_t))
    throw Error(ErrorKind::Format, path_ + ": file truncated at byte " + std::to_string(pos_));
  raw(p, n * sizeof(uint32_t));
}

void StateReader::expect_end() {
  if (pos_ != data_.size())
    throw Error(ErrorKind::Format, path_ + ": " + std::to_string(data_.size() - pos_) + " unexpected bytes after the state");
}

}  // namespace larql

namespace larql {

void write_layer_kv(StateWriter& w, const LayerKv& l) {
  w.u64(static_cast<uint64_t>(l.first_pos()));
  w.u64(static_cast<uint64_t>(l.rows()));
  if (l.rows() > 0) {
    w.floats(l.k_at(l.first_pos()), static_cast<size_t>(l.rows() * l.kv_dim()));
    w.floats(l.v_at(l.first_pos()), static_cast<size_t>(l.rows() * l.kv_dim()));
  }
}

void read_layer_kv(StateReader& r, LayerKv& l, int64_t end_pos, int64_t first_pos, const std::string& what) {
  const uint64_t first = r.u64(), rows = r.u64();
  if (end_pos < 0 || rows > static_cast<uint64_t>(end_pos) || first + rows != static_cast<uint64_t>(end_pos) ||
      (first_pos >= 0 && first != static_cast<uint64_t>(first_pos)))
    throw Error(ErrorKind::Format, r.path() + ": " + what + " rows [" + std::to_string(first) + ", +" +
                                       std::to_string(rows) + ") do not end at position " + std::to_string(end_pos));
  std::vector<float> k(static_cast<size_t>(rows) * static_cast<size_t>(l.kv_dim())), v(k.size());
  r.floats(k.data(), k.size());
  r.floats(v.data(), v.size());
  l.reset_to(static_cast<int64_t>(first));
  l.append(k.data(), v.data(), static_cast<int64_t>(rows));
}

}  // namespace larql
