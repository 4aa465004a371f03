#include "boundary/archive.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/hash.h"

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

void check_frame(const Frame& f, uint64_t next) {
  if (f.tokens.empty() || f.token_start + f.tokens.size() - 1 != f.position || f.token_start != next)
    throw Error(ErrorKind::InvalidArgument, "boundary frame at position " + std::to_string(f.position) + ": " +
                                                std::to_string(f.tokens.size()) + " tokens from " +
                                                std::to_string(f.token_start) + " do not continue the sequence at " +
                                                std::to_string(next));
}

void put_frame(Bytes& b, const Frame& f) {
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

void archive_write(const std::string& path, const Archive& a) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw Error(ErrorKind::Io, parent.string() + ": cannot create archive directory: " + ec.message());
  Bytes b;
  b.raw(kArchiveMagic, 8);
  b.put(kArchiveVersion);
  b.str(a.header.fingerprint);
  b.str(a.header.sequence_id);
  b.put(a.header.uid);
  b.put(a.header.hidden);
  uint64_t next = 0;
  for (const Frame& f : a.frames) {
    check_frame(f, next);
    put_frame(b, f);
    next = f.position + 1;
  }
  b.put(kEndTag);
  b.put(xxh3_64(b.b.data(), b.b.size()));
  AtomicWriter w(path, "boundary archive");
  w.write(b.b.data(), b.b.size());
  w.commit();
}

void archive_create(const std::string& path, const ArchiveHeader& h) { archive_write(path, Archive{h, {}}); }

bool same_frame(const Frame& a, const Frame& b) {
  return a.kind == b.kind && a.position == b.position && a.token_start == b.token_start && a.tokens == b.tokens &&
         a.codec == b.codec && a.log_prob_margin == b.log_prob_margin && a.top1_prob == b.top1_prob &&
         a.top1_token == b.top1_token && a.payload == b.payload;
}

void archive_append(const std::string& path, const Frame& f) {
  Archive a = archive_read(path);
  const uint64_t covered = a.frames.empty() ? 0 : a.frames.back().position + 1;
  if (f.token_start < covered) {  // a second writer of the same sequence (e.g. a resumed copy)
    for (const Frame& held : a.frames)
      if (held.token_start == f.token_start && same_frame(held, f)) return;  // already there, byte for byte
    throw Error(ErrorKind::InvariantViolation,
                path + ": the archive already covers position " + std::to_string(f.token_start) +
                    " with a different frame (another run continued this sequence differently)");
  }
  a.frames.push_back(f);
  archive_write(path, a);
}

Archive archive_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, path + ": no boundary archive");
  std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  // The end tag and checksum first: damage anywhere is reported as such, before any field is used.
  if (bytes.size() >= 8 + 4 + 12 && std::memcmp(bytes.data(), kArchiveMagic, 8) == 0) {
    uint32_t version = 0;
    std::memcpy(&version, bytes.data() + 8, 4);
    if (version == kArchiveVersion) {
      uint32_t tag = 0;
      uint64_t want = 0;
      std::memcpy(&tag, bytes.data() + bytes.size() - 12, 4);
      std::memcpy(&want, bytes.data() + bytes.size() - 8, 8);
      const uint64_t got = xxh3_64(bytes.data(), bytes.size() - 8);
      if (tag != kEndTag || got != want)
        throw Error(ErrorKind::Format, path + ": boundary archive checksum mismatch (stored " + hex64(want) + ", contents " +
                                           hex64(got) + "): the file is damaged, truncated or was modified");
      bytes.resize(bytes.size() - 12);
    }
  }
  Reader r(path, std::move(bytes));
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
  a.header.uid = r.get<uint64_t>("archive uid");
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
