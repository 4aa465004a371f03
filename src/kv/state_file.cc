#include "kv/state_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {
namespace {

constexpr size_t kMaxStr = 4096;          // engine, config, fingerprint, sampler
constexpr size_t kMaxRngState = 1 << 16;  // std::mt19937_64's text state is ~6 KiB

}  // namespace

StateWriter::StateWriter(const std::string& path, const StateHeader& h)
    : out_(std::make_unique<AtomicWriter>(path, "state file")) {
  raw(kStateMagic, sizeof kStateMagic);
  const uint32_t v = kStateVersion;
  raw(&v, 4);
  auto str = [this](const std::string& s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    raw(&n, 4);
    raw(s.data(), s.size());
  };
  str(h.engine);
  str(h.config);
  str(h.fingerprint);
  u64(h.n_past);
  u64(h.session.history.size());
  raw(h.session.history.data(), h.session.history.size() * sizeof(int32_t));
  str(h.session.sampler);
  str(h.session.rng);
}

StateWriter::~StateWriter() = default;

void StateWriter::raw(const void* p, size_t n) {
  hash_.update(p, n);
  out_->write(p, n);
}
void StateWriter::u64(uint64_t v) { raw(&v, 8); }
void StateWriter::floats(const float* p, size_t n) { raw(p, n * sizeof(float)); }
void StateWriter::u32s(const uint32_t* p, size_t n) { raw(p, n * sizeof(uint32_t)); }
void StateWriter::bytes(const void* p, size_t n) { raw(p, n); }
void StateWriter::close() {
  const uint64_t sum = hash_.digest();
  out_->write(&sum, 8);
  out_->commit();
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
  if (data_.size() < sizeof kStateMagic + 4 + 8 || std::memcmp(data_.data(), kStateMagic, 8) != 0)
    throw Error(ErrorKind::Format, path + ": not a larql state file (bad magic at byte 0, or too short)");
  uint32_t v = 0;
  std::memcpy(&v, data_.data() + 8, 4);
  if (v != kStateVersion)
    throw Error(ErrorKind::Format, path + ": state file version " + std::to_string(v) + " (this build reads " +
                                       std::to_string(kStateVersion) + "; save the state again with this build)");
  end_ = data_.size() - 8;
  uint64_t want = 0;
  std::memcpy(&want, data_.data() + end_, 8);
  const uint64_t got = xxh3_64(data_.data(), end_);
  if (got != want)
    throw Error(ErrorKind::Format, path + ": checksum mismatch (stored " + hex64(want) + ", contents " + hex64(got) +
                                       "): the file is damaged or was modified");
}

void StateReader::raw(void* p, size_t n) {
  if (n == 0) return;  // p may be the data() of an empty vector
  if (n > end_ - pos_)
    throw Error(ErrorKind::Format, path_ + ": state file truncated at byte " + std::to_string(pos_) + " (needed " +
                                       std::to_string(n) + " more bytes)");
  std::memcpy(p, data_.data() + pos_, n);
  pos_ += n;
}

std::string StateReader::str(size_t max_len) {
  uint32_t n = 0;
  raw(&n, 4);
  if (n > max_len) throw Error(ErrorKind::Format, path_ + ": string at byte " + std::to_string(pos_ - 4) + " is too long");
  std::string s(n, '\0');
  raw(s.data(), n);
  return s;
}

StateHeader StateReader::header(const std::string& engine, const std::string& fingerprint) {
  pos_ = 12;  // magic and version were checked by the constructor
  StateHeader h;
  h.engine = str(kMaxStr);
  h.config = str(kMaxStr);
  h.fingerprint = str(kMaxStr);
  h.n_past = u64();
  const uint64_t n = u64();
  if (n > remaining() / sizeof(int32_t))
    throw Error(ErrorKind::Format, path_ + ": session history of " + std::to_string(n) + " tokens at byte " +
                                       std::to_string(pos_ - 8) + " is longer than the file");
  h.session.history.resize(static_cast<size_t>(n));
  raw(h.session.history.data(), h.session.history.size() * sizeof(int32_t));
  h.session.sampler = str(kMaxStr);
  h.session.rng = str(kMaxRngState);
  if (h.engine != engine)
    throw Error(ErrorKind::InvalidArgument, path_ + ": state was saved by engine '" + h.engine + "', not '" + engine + "'");
  if (h.fingerprint != fingerprint)
    throw Error(ErrorKind::InvalidArgument, path_ + ": state was saved with another model (fingerprint " +
                                                h.fingerprint + ", this model " + fingerprint + ")");
  if (!h.session.history.empty() && h.session.history.size() < h.n_past)
    throw Error(ErrorKind::Format, path_ + ": session history of " + std::to_string(h.session.history.size()) +
                                       " tokens is shorter than the engine's " + std::to_string(h.n_past) + " positions");
  return h;
}

StateHeader StateReader::header(const std::string& engine, const std::string& fingerprint,
                                const std::string& config) {
  StateHeader h = header(engine, fingerprint);
  if (h.config != config)
    throw Error(ErrorKind::InvalidArgument, path_ + ": state has config '" + h.config + "', engine has '" + config + "'");
  return h;
}

uint64_t StateReader::u64() {
  uint64_t v = 0;
  raw(&v, 8);
  return v;
}

void StateReader::floats(float* p, size_t n) {
  if (n > (end_ - pos_) / sizeof(float))
    throw Error(ErrorKind::Format, path_ + ": state file truncated at byte " + std::to_string(pos_));
  const size_t at = pos_;
  raw(p, n * sizeof(float));
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i]))
      throw Error(ErrorKind::Format, path_ + ": non-finite value (" + std::to_string(p[i]) + ") at byte " +
                                         std::to_string(at + i * sizeof(float)));
}

void StateReader::u32s(uint32_t* p, size_t n) {
  if (n > (end_ - pos_) / sizeof(uint32_t))
    throw Error(ErrorKind::Format, path_ + ": file truncated at byte " + std::to_string(pos_));
  raw(p, n * sizeof(uint32_t));
}

void StateReader::bytes(void* p, size_t n) { raw(p, n); }

void StateReader::expect_end() {
  if (pos_ != end_)
    throw Error(ErrorKind::Format, path_ + ": " + std::to_string(end_ - pos_) + " unexpected bytes after the state");
}

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
