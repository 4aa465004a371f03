#include "boundary/archive.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/error.h"

namespace larql::boundary {
namespace {

struct Bytes {
  std::vector<uint8_t> b;
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  template <class T>
  void put(T v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
};

void write_bytes(const std::string& path, const Bytes& b, std::ios::openmode mode) {
  std::ofstream out(path, std::ios::binary | mode);
  if (!out) throw Error(ErrorKind::Io, path + ": cannot open boundary archive for writing");
  out.write(reinterpret_cast<const char*>(b.b.data()), static_cast<std::streamsize>(b.b.size()));
  out.flush();
  if (!out) throw Error(ErrorKind::Io, path + ": boundary archive write failed (disk full?)");
}

class Reader {
 public:
  Reader(std::string path, std::vector<uint8_t> d) : path_(std::move(path)), d_(std::move(d)) {}
  void raw(void* p, size_t n, const char* what) {
    if (n > d_.size() - pos_)
      throw Error(ErrorKind::Format, path_ + ": boundary archive truncated at byte " + std::to_string(pos_) + " reading " +
                                         what + " (needed " + std::to_string(n) + " bytes, " +
                                         std::to_string(d_.size() - pos_) + " left)");
    std::memcpy(p, d_.data() + pos_, n);
    pos_ += n;
  }
  template <class T>
  T get(const char* what) {
    T v;
    raw(&v, sizeof v, what);
    return v;
  }
  std::string str(const char* what) {
    const size_t at = pos_;
    const uint32_t n = get<uint32_t>(what);
    if (n > 4096) throw Error(ErrorKind::Format, path_ + ": " + what + " at byte " + std::to_string(at) + " is too long");
    std::string s(n, '\0');
    raw(s.data(), n, what);
    return s;
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == d_.size(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<uint8_t> d_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<int32_t> Archive::tokens() const {
  std::vector<int32_t> out;
  for (const auto& f : frames) out.insert(out.end(), f.tokens.begin(), f.tokens.end());
  return out;
}

void archive_create(const std::string& path, const ArchiveHeader& h) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw Error(ErrorKind::Io, parent.string() + ": cannot create archive directory: " + ec.message());
  Bytes b;
  b.raw(kArchiveMagic, 8);
  b.put(kArchiveVersion);
  b.str(h.fingerprint);
  b.str(h.sequence_id);
  b.put(h.hidden);
  write_bytes(path, b, std::ios::trunc);
}

void archive_append(const std::string& path, const Frame& f) {
  if (f.tokens.empty() || f.token_start + f.tokens.size() - 1 != f.position)
    throw Error(ErrorKind::InvalidArgument, "boundary frame at position " + std::to_string(f.position) + ": " +
                                                std::to_string(f.tokens.size()) + " tokens from " +
                                                std::to_string(f.token_start) + " do not end at its position");
  Bytes b;
  b.put(kFrameTag);
  b.put(static_cast<uint8_t>(f.kind));
  b.put(static_cast<uint8_t>(f.codec));
  b.put(static_cast<uint16_t>(0));
  b.put(f.position);
  b.put(f.token_start);
  b.put(f.log_prob_margin);
  b.put(f.top1_prob);
  b.put(f.top1_token);
  b.put(static_cast<uint32_t>(f.tokens.size()));
  b.raw(f.tokens.data(), f.tokens.size() * sizeof(int32_t));
  b.put(static_cast<uint32_t>(f.payload.size()));
  b.raw(f.payload.data(), f.payload.size());
  write_bytes(path, b, std::ios::app);
}

Archive archive_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, path + ": no boundary archive");
  Reader r(path, std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  char magic[8];
  r.raw(magic, 8, "magic");
  if (std::memcmp(magic, kArchiveMagic, 8) != 0)
    throw Error(ErrorKind::Format, path + ": not a larql boundary archive (bad magic at byte 0)");
  const uint32_t version = r.get<uint32_t>("version");
  if (version != kArchiveVersion)
    throw Error(ErrorKind::Format, path + ": boundary archive version " + std::to_string(version) + " at byte 8 (this build reads " +
                                       std::to_string(kArchiveVersion) + ")");
  Archive a;
  a.header.fingerprint = r.str("model fingerprint");
  a.header.sequence_id = r.str("sequence id");
  a.header.hidden = r.get<uint32_t>("hidden size");
  uint64_t next = 0;
  while (!r.done()) {
    const size_t at = r.pos();
    const std::string where = path + ": frame " + std::to_string(a.frames.size()) + " at byte " + std::to_string(at);
    if (r.get<uint32_t>("frame tag") != kFrameTag) throw Error(ErrorKind::Format, where + ": bad frame tag");
    Frame f;
    const uint8_t kind = r.get<uint8_t>("frame kind"), codec = r.get<uint8_t>("codec");
    r.get<uint16_t>("reserved");
    if (kind != 1 && kind != 2) throw Error(ErrorKind::Format, where + ": unknown frame kind " + std::to_string(kind));
    if (codec != 1 && codec != 2) throw Error(ErrorKind::Format, where + ": unknown codec " + std::to_string(codec));
    f.kind = static_cast<FrameKind>(kind);
    f.codec = static_cast<Codec>(codec);
    f.position = r.get<uint64_t>("position");
    f.token_start = r.get<uint64_t>("token start");
    f.log_prob_margin = r.get<float>("log-prob margin");
    f.top1_prob = r.get<float>("top-1 probability");
    f.top1_token = r.get<int32_t>("top-1 token");
    const uint32_t n = r.get<uint32_t>("token count");
    if (n == 0 || n > (1u << 24)) throw Error(ErrorKind::Format, where + ": token count " + std::to_string(n) + " out of range");
    if (f.token_start != next || f.token_start + n - 1 != f.position)
      throw Error(ErrorKind::Format, where + ": tokens " + std::to_string(f.token_start) + ".." +
                                         std::to_string(f.token_start + n - 1) + " / position " + std::to_string(f.position) +
                                         " do not continue the sequence at " + std::to_string(next));
    f.tokens.resize(n);
    r.raw(f.tokens.data(), n * sizeof(int32_t), "frame tokens");
    const uint32_t pb = r.get<uint32_t>("payload length");
    if (pb != payload_bytes(f.codec, a.header.hidden))
      throw Error(ErrorKind::Format, where + ": payload of " + std::to_string(pb) + " bytes, " + codec_name(f.codec) +
                                         " at hidden " + std::to_string(a.header.hidden) + " needs " +
                                         std::to_string(payload_bytes(f.codec, a.header.hidden)));
    f.payload.resize(pb);
    r.raw(f.payload.data(), pb, "frame payload");
    next = f.position + 1;
    a.frames.push_back(std::move(f));
  }
  return a;
}

}  // namespace larql::boundary
