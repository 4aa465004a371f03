#include "vindex/slice.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "util/atomic_file.h"
#include "util/error.h"
#include "vindex/sha256.h"

namespace larql::vindex {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Parts, as the original's slicer names them, mapped to this layout's files.
const std::map<std::string, std::vector<std::string>>& parts() {
  static const std::map<std::string, std::vector<std::string>> p = {
      {"embed", {"embeddings.bin"}},
      {"lm_head", {"embed_weights.bin"}},  // token_embd (tied: also the LM head) and output, in source blocks
      {"norms", {"norms.bin"}},
      {"attn", {"attn_weights.bin"}},
      {"gate", {"gate_vectors.bin"}},
      {"down_meta", {"down_meta.bin"}},
      {"ffn", {"ffn_weights.bin"}},
      {"tokenizer", {"tokenizer.json", "tokenizer_config.json", "tokenizer.gguf"}},
      {"manifest", {"weight_manifest.json"}},
  };
  return p;
}

const std::map<std::string, std::vector<std::string>>& presets() {
  static const std::map<std::string, std::vector<std::string>> p = {
      {"client", {"embed", "lm_head", "norms", "attn", "tokenizer", "manifest"}},
      {"server", {"embed", "norms", "gate", "down_meta", "ffn", "tokenizer", "manifest"}},
      {"attn", {"norms", "attn", "manifest"}},
      {"embed", {"embed", "lm_head", "tokenizer"}},
      {"browse", {"embed", "gate", "down_meta", "tokenizer"}},
  };
  return p;
}

std::string read_text(const fs::path& p) {
  std::string out;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) throw Error(ErrorKind::Io, "cannot open " + p.string() + ": " + std::strerror(errno));
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

void copy_checked(const fs::path& from, const fs::path& to) {
  FILE* f = std::fopen(from.c_str(), "rb");
  if (!f) throw Error(ErrorKind::Io, "cannot open " + from.string() + ": " + std::strerror(errno));
  try {
    AtomicWriter w(to.string(), to.filename().string());
    std::vector<char> buf(1 << 20);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) w.write(buf.data(), n);
    if (std::ferror(f)) throw Error(ErrorKind::Io, "cannot read " + from.string());
    w.commit();
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
}

}  // namespace

const std::vector<std::string>& slice_preset_names() {
  static const std::vector<std::string> names = {"client", "server", "attn", "embed", "browse"};
  return names;
}

std::vector<std::string> slice_preset_files(const std::string& name) {
  const auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : slice_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::InvalidArgument, "unknown slice preset \"" + name + "\" (known: " + known + ")");
  }
  std::vector<std::string> files;
  for (const auto& part : it->second)
    for (const auto& f : parts().at(part)) files.push_back(f);
  return files;
}

SliceResult slice_vindex(const std::string& src, const std::string& preset, const std::string& out, bool dry_run, bool force) {
  const std::vector<std::string> wanted = slice_preset_files(preset);
  const VindexIndex in = read_index(src);
  const fs::path source = fs::absolute(fs::path(src)).lexically_normal();
  const fs::path target = fs::absolute(fs::path(out)).lexically_normal();
  if (target.filename().empty()) throw Error(ErrorKind::InvalidArgument, "output \"" + out + "\" names no directory");
  const auto rel = target.lexically_relative(source);
  if (target == source || (!rel.empty() && *rel.begin() != ".."))
    throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " is inside the source vindex " + source.string());
  std::error_code ec;
  if (!fs::is_directory(target.parent_path(), ec))
    throw Error(ErrorKind::NotFound, "output directory's parent " + target.parent_path().string() + " does not exist");
  if (fs::exists(target, ec) && !force)
    throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " already exists (use --force to replace it)");
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " exists and is not a directory");

  SliceResult r;
  std::set<std::string> kept;
  for (const auto& f : wanted) {
    if (!in.checksums.count(f)) continue;
    const uint64_t n = fs::file_size(source / f, ec);
    if (ec) throw Error(ErrorKind::NotFound, (source / f).string() + " is listed in index.json but cannot be read: " + ec.message());
    r.files.push_back({f, n});
    r.bytes += n;
    kept.insert(f);
  }
  auto has = [&](const char* f) { return kept.count(f) != 0; };
  VindexIndex x = in;
  ExtractLevel derived = ExtractLevel::Browse;
  if (has("attn_weights.bin") && has("norms.bin")) derived = ExtractLevel::Attention;
  if (derived == ExtractLevel::Attention && has("ffn_weights.bin") && has("embed_weights.bin")) derived = ExtractLevel::All;
  x.extract_level = std::min(in.extract_level, derived);
  x.has_model_weights = has("attn_weights.bin") || has("ffn_weights.bin");
  if (!x.has_model_weights) x.quant = "none";
  if (!has("gate_vectors.bin")) x.layers.clear();
  x.checksums.clear();
  r.index = x;
  if (dry_run) return r;

  const fs::path staging = target.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec)) throw Error(ErrorKind::Io, "cannot create " + staging.string() + ": " + ec.message());
  try {
    for (const auto& f : r.files) {
      const fs::path to = staging / f.name;
      if (f.name == "weight_manifest.json") {
        // Only the entries whose file is kept.
        json m;
        try {
          m = json::parse(read_text(source / f.name));
        } catch (const json::exception& e) {
          throw Error(ErrorKind::Format, (source / f.name).string() + ": not valid JSON: " + e.what());
        }
        if (!m.is_array()) throw Error(ErrorKind::Format, (source / f.name).string() + ": not a JSON array");
        if (sha256_hex(read_text(source / f.name).data(), fs::file_size(source / f.name)) != in.checksums.at(f.name))
          throw Error(ErrorKind::Format, (source / f.name).string() + ": its SHA-256 differs from index.json's (run `larql verify`)");
        json keep = json::array();
        for (const json& e : m)
          if (e.is_object() && e.contains("file") && e["file"].is_string() && kept.count(e["file"].get<std::string>()))
            keep.push_back(e);
        write_file_atomic(to.string(), keep.dump(1) + "\n", f.name);
      } else {
        copy_checked(source / f.name, to);
        if (sha256_file(to.string()) != in.checksums.at(f.name))
          throw Error(ErrorKind::Format, (source / f.name).string() + ": its SHA-256 differs from index.json's (run `larql verify`)");
      }
      x.checksums[f.name] = sha256_file(to.string());
    }
    write_index(staging.string(), x);
    replace_directory(staging.string(), target.string());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  r.index = x;
  return r;
}

}  // namespace larql::vindex
