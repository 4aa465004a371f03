// The local model cache: `larql list`, `larql link PATH NAME`, `larql rm NAME` (docs/cli.md).
// The cache is model_dirs() (cli/common.h): GGUF files NAME.gguf and vindex directories
// NAME.vindex, or links to them, found by short name as every verb resolves models.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>
#include <algorithm>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/common.h"
#include "util/error.h"
#include "vindex/index.h"

namespace larql::cli {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string name, kind, path, link_target, level;
  uint64_t bytes = 0;
};

bool is_vindex_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / "index.json", ec);
}

uint64_t tree_bytes(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

// What a cache entry is, or nullopt for anything else in the directory.
std::optional<Entry> entry_of(const fs::path& p) {
  std::error_code ec;
  const std::string ext = p.extension().string();
  Entry e;
  e.name = p.stem().string();
  e.path = p.string();
  if (fs::is_symlink(p, ec)) e.link_target = fs::read_symlink(p, ec).string();
  if (ext == ".gguf" && fs::is_regular_file(p, ec)) {
    e.kind = "gguf";
  } else if (ext == ".vindex" && is_vindex_dir(p)) {
    e.kind = "vindex";
    try {
      e.level = vindex::extract_level_name(vindex::read_index(p.string()).extract_level);
    } catch (const Error&) {
      e.level = "unreadable";
    }
  } else if (ext == ".gguf" || ext == ".vindex") {
    e.kind = "broken";  // e.g. a link whose target is gone
  } else {
    return std::nullopt;
  }
  e.bytes = e.kind == "broken" ? 0 : tree_bytes(p);
  return e;
}

std::vector<Entry> list_cache() {
  std::vector<Entry> out;
  std::vector<fs::path> seen;
  std::error_code ec;
  for (const fs::path d : model_dirs()) {
    if (!fs::is_directory(d, ec)) continue;
    const fs::path canon = fs::canonical(d, ec);
    bool dup = false;
    for (const auto& s : seen) dup = dup || fs::equivalent(s, canon, ec);
    if (dup) continue;
    seen.push_back(canon);
    std::vector<fs::path> names;
    for (const auto& e : fs::directory_iterator(d, ec)) names.push_back(e.path());
    std::sort(names.begin(), names.end());
    for (const auto& p : names)
      if (auto e = entry_of(p)) out.push_back(*e);
  }
  return out;
}

void check_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name[0] == '.' ||
      name.find('\0') != std::string::npos)
    throw Error(ErrorKind::InvalidArgument, "cache name \"" + name + "\" must be a plain name (no '/', not starting with '.')");
}

// The entry NAME names in the cache (NAME, NAME.gguf or NAME.vindex in one of model_dirs()).
std::optional<fs::path> find_entry(const std::string& name) {
  std::error_code ec;
  for (const fs::path d : model_dirs())
    for (const std::string& cand : {name, name + ".gguf", name + ".vindex"}) {
      const fs::path p = d / cand;
      if (fs::is_symlink(p, ec) || fs::exists(p, ec)) {
        if (entry_of(p) || fs::is_symlink(p, ec)) return p;
      }
    }
  return std::nullopt;
}

void run_list(bool json) {
  const auto entries = list_cache();
  if (json) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : entries)
      a.push_back({{"name", e.name}, {"kind", e.kind}, {"path", e.path}, {"link", e.link_target}, {"level", e.level},
                   {"bytes", e.bytes}});
    std::printf("%s\n", a.dump().c_str());
    return;
  }
  if (entries.empty()) {
    std::string dirs;
    for (const auto& d : model_dirs()) dirs += (dirs.empty() ? "" : ", ") + d;
    std::printf("no models or vindexes in %s\n", dirs.c_str());
    return;
  }
  for (const auto& e : entries) {
    const std::string kind = e.kind == "vindex" ? "vindex (" + e.level + ")" : e.kind;
    std::printf("%-32s %-20s %10.1f MiB  %s%s\n", e.name.c_str(), kind.c_str(), e.bytes / 1048576.0, e.path.c_str(),
                e.link_target.empty() ? "" : (" -> " + e.link_target).c_str());
  }
}

void run_link(const std::string& path, const std::string& name) {
  check_name(name);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(ErrorKind::NotFound, path + " does not exist");
  const bool vx = fs::is_directory(path, ec);
  if (vx && !is_vindex_dir(path)) throw Error(ErrorKind::InvalidArgument, path + " is a directory without index.json, not a vindex");
  if (!vx && !fs::is_regular_file(path, ec)) throw Error(ErrorKind::InvalidArgument, path + " is neither a GGUF file nor a vindex");
  if (!vx) {
    // A GGUF file starts with the magic "GGUF" (the format's specification); look no further.
    char magic[4] = {};
    std::ifstream in(path, std::ios::binary);
    if (!in.read(magic, 4) || std::string_view(magic, 4) != "GGUF")
      throw Error(ErrorKind::InvalidArgument, path + " does not start with the GGUF magic: neither a GGUF file nor a vindex");
  }
  const std::string ext = vx ? ".vindex" : ".gguf";
  const std::string base = fs::path(name).extension() == ext ? fs::path(name).stem().string() : name;
  if (find_entry(base)) throw Error(ErrorKind::InvalidArgument, "name \"" + base + "\" is already in the cache (`larql list`)");
  const fs::path dir = model_dirs().front();
  fs::create_directories(dir, ec);
  const fs::path link = dir / (base + ext);
  fs::create_symlink(fs::absolute(path), link, ec);
  if (ec) throw Error(ErrorKind::Io, "cannot create the link " + link.string() + ": " + ec.message());
  std::printf("%s -> %s\n", link.string().c_str(), fs::absolute(path).string().c_str());
}

void run_rm(const std::string& name, bool yes) {
  check_name(name);
  const auto p = find_entry(name);
  if (!p) throw Error(ErrorKind::NotFound, "\"" + name + "\" is not in the cache (`larql list` shows what is)");
  std::error_code ec;
  if (fs::is_symlink(*p, ec)) {  // a link: only the link goes
    fs::remove(*p, ec);
    if (ec) throw Error(ErrorKind::Io, "cannot remove " + p->string() + ": " + ec.message());
    std::printf("removed the link %s\n", p->string().c_str());
    return;
  }
  const auto e = entry_of(*p);
  if (!e || e->kind == "broken")
    throw Error(ErrorKind::InvalidArgument, p->string() + " is neither a GGUF file nor a vindex; larql leaves it alone");
  if (!yes) {
    if (!::isatty(STDIN_FILENO))
      throw Error(ErrorKind::InvalidArgument, "removing " + p->string() + " deletes it; pass --yes (stdin is not a terminal to ask)");
    std::fprintf(stderr, "delete %s (%.1f MiB)? [y/N] ", p->string().c_str(), e->bytes / 1048576.0);
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::printf("kept %s\n", p->string().c_str());
      return;
    }
  }
  fs::remove_all(*p, ec);
  if (ec) throw Error(ErrorKind::Io, "cannot remove " + p->string() + ": " + ec.message());
  std::printf("removed %s\n", p->string().c_str());
}

}  // namespace

void register_cache(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* list = app.add_subcommand("list", "list the models and vindexes found by short name (models/, $LARQL_MODELS)");
  list->add_flag("--json", *json, "print one JSON array");
  list->callback([json] { run_list(*json); });

  auto path = std::make_shared<std::string>(), name = std::make_shared<std::string>();
  CLI::App* link = app.add_subcommand("link", "make a GGUF file or a vindex known by a short name (a link in the cache)");
  link->add_option("path", *path, "a GGUF file or a vindex directory")->required();
  link->add_option("name", *name, "the short name")->required();
  link->callback([path, name] { run_link(*path, *name); });

  auto rm_name = std::make_shared<std::string>();
  auto yes = std::make_shared<bool>(false);
  CLI::App* rm = app.add_subcommand("rm", "remove a model or vindex from the cache (a link: only the link)");
  rm->add_option("name", *rm_name, "the short name (`larql list`)")->required();
  rm->add_flag("-y,--yes", *yes, "do not ask");
  rm->callback([rm_name, yes] { run_rm(*rm_name, *yes); });
}

}  // namespace larql::cli
