// `larql build` (docs/vindexfile.md): the steps, the cache and the output.
#include "vindexfile/build.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "extract/extract.h"
#include "lql/executor.h"
#include "lql/labeler.h"
#include "lql/session.h"
#include "model/model.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text_file.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"
#include "vindex/labels.h"
#include "vindex/sha256.h"
#include "vindexfile/files.h"

namespace larql::vindexfile {

namespace {

namespace fs = std::filesystem;
using detail::key_of;

/// A step: its key, the cache directory of its vindex, and how to make that directory from the
/// previous step's vindex.
struct Step {
  std::string name, key;
  fs::path entry;
  std::function<void(const fs::path& input, const fs::path& entry)> run;
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool inside(const fs::path& p, const fs::path& dir) {
  const fs::path rel = p.lexically_relative(dir);
  return p == dir || (!rel.empty() && *rel.begin() != "..");
}

/// A path of the Vindexfile: relative ones are the Vindexfile directory's. Symbolic links are
/// kept (a source's name is what the Vindexfile calls it, not what a link points at).
fs::path resolve(const fs::path& dir, const std::string& p) {
  const fs::path q(p);
  return (q.is_absolute() ? q : dir / q).lexically_normal();
}

class Builder {
 public:
  Builder(const Vindexfile& vf, const BuildOptions& opt) : vf_(vf), opt_(opt) {}

  BuildResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    dir_ = fs::weakly_canonical(fs::absolute(opt_.dir.empty() ? "." : opt_.dir));
    if (opt_.output.empty()) throw Error(ErrorKind::InvalidArgument, "the output directory is empty");
    target_ = fs::weakly_canonical(fs::absolute(opt_.output));
    if (target_.filename().empty()) throw Error(ErrorKind::InvalidArgument, "output \"" + opt_.output + "\" names no directory");
    from_ = locate_from();
    from_vindex_ = fs::is_directory(from_) && fs::exists(from_ / "index.json");
    check_output();
    cache_ = opt_.use_cache ? (opt_.cache_dir.empty() ? dir_ / ".larql-cache" : fs::weakly_canonical(fs::absolute(opt_.cache_dir)))
                            : target_.parent_path() / ("." + target_.filename().string() + ".work-" + std::to_string(::getpid()));
    if (inside(target_, cache_)) throw Error(ErrorKind::InvalidArgument, "output " + target_.string() + " is inside the cache " + cache_.string());
    if (inside(cache_, fs::weakly_canonical(from_))) throw Error(ErrorKind::InvalidArgument, "the cache " + cache_.string() + " is inside FROM " + from_.string());
    std::error_code ec;
    fs::create_directories(cache_, ec);
    if (ec) throw Error(ErrorKind::Io, "cannot create the cache " + cache_.string() + ": " + ec.message());
    std::optional<detail::DirLock> lock;
    if (opt_.use_cache) lock.emplace(cache_);
    remove_litter();
    struct Scratch {  // --no-cache: the steps' directory goes at the end, whatever happens
      fs::path p;
      bool on;
      ~Scratch() {
        std::error_code e;
        if (on) fs::remove_all(p, e);
      }
    } scratch{cache_, !opt_.use_cache};

    plan();
    // The last step whose vindex is in the cache and intact: everything before it is in it.
    size_t first = 0;
    if (opt_.use_cache) {
      for (size_t i = steps_.size(); i-- > 0;) {
        if (!fs::exists(steps_[i].entry / "index.json")) continue;
        const auto rep = vindex::verify(steps_[i].entry.string());
        if (rep.problems.empty()) {
          first = i + 1;
          break;
        }
        say("cache entry " + steps_[i].entry.filename().string() + " is damaged (" + rep.problems.front() + "); redoing it");
      }
    }
    BuildResult r;
    fs::path input = from_;
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& s = steps_[i];
      StepReport rep{s.name, s.key, i < first, 0, s.entry.string()};
      if (i < first) {
        say("step " + s.name + ": cached (" + s.entry.filename().string() + ")");
      } else {
        say("step " + s.name + ": running (" + s.entry.filename().string() + ")");
        fs::remove_all(s.entry, ec);
        const auto ts = std::chrono::steady_clock::now();
        s.run(input, s.entry);
        rep.seconds = since(ts);
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.2f", rep.seconds);
        say("step " + s.name + ": done in " + secs + " s");
      }
      r.steps.push_back(rep);
      input = s.entry;
    }
    publish(input);
    if (opt_.use_cache) prune();
    r.output = target_.string();
    const auto ix = vindex::read_index(target_.string());
    r.files = ix.checksums;
    r.index_sha256 = vindex::sha256_file((target_ / "index.json").string());
    for (const auto& e : fs::directory_iterator(target_)) r.bytes += e.file_size();
    r.seconds = since(t0);
    return r;
  }

 private:
  std::string at(Pos p) const { return vf_.name + ":" + p.str() + ": "; }
  void say(const std::string& line) const {
    if (opt_.log) opt_.log(line);
  }

  fs::path locate_from() {
    const std::string& f = *vf_.from.value;
    const fs::path p = resolve(dir_, f);
    std::error_code ec;
    if (fs::exists(p, ec)) return p;
    if (opt_.resolve_name && f.find('/') == std::string::npos) {
      try {
        return fs::absolute(opt_.resolve_name(f)).lexically_normal();
      } catch (const Error& e) {
        throw Error(e.kind(), at(vf_.from.pos) + "FROM " + f + ": " + e.what());
      }
    }
    throw Error(ErrorKind::NotFound, at(vf_.from.pos) + "FROM " + f + ": " + p.string() + " does not exist");
  }

  void check_output() {
    const fs::path from = fs::weakly_canonical(from_);
    if (inside(target_, from) || inside(from, target_))
      throw Error(ErrorKind::InvalidArgument, "output " + target_.string() + " is FROM " + from_.string() + ", inside it or holds it");
    std::error_code ec;
    if (!fs::is_directory(target_.parent_path(), ec))  // as compile and slice: no directory is made but the output
      throw Error(ErrorKind::NotFound,
                  "output " + target_.string() + ": directory " + target_.parent_path().string() + " does not exist");
    if (fs::exists(target_, ec)) {
      const bool vindex_dir = fs::is_directory(target_, ec) && fs::exists(target_ / "index.json", ec);
      const bool empty_dir = fs::is_directory(target_, ec) && fs::is_empty(target_, ec);
      if (!vindex_dir && !empty_dir)
        throw Error(ErrorKind::InvalidArgument, "output " + target_.string() +
                                                    " exists and is not a vindex; remove it or choose another -o");
    }
  }

  /// What builds that died left: staging directories in the cache (the lock says no build is
  /// running there; without the cache, those named after a dead process) and beside the output.
  void remove_litter() {
    std::error_code ec;
    if (opt_.use_cache) {
      for (const auto& e : fs::directory_iterator(cache_, ec)) {
        const std::string n = e.path().filename().string();
        if (!n.empty() && n[0] == '.' && n != ".lock") fs::remove_all(e.path(), ec);
      }
    }
    const std::string mine = target_.filename().string();
    for (const auto& e : fs::directory_iterator(target_.parent_path(), ec)) {
      const std::string n = e.path().filename().string();
      const bool staging = n.rfind(mine + ".partial-", 0) == 0 || n.rfind("." + mine + ".work-", 0) == 0;
      if (staging && detail::process_gone(detail::trailing_pid(n, '-'))) fs::remove_all(e.path(), ec);
    }
  }

  void plan() {
    say("hashing FROM " + from_.string());
    const std::string src = content_digest(from_.string());
    std::string prev = key_of({"vindexfile/from/1", src});
    auto add = [&](const std::string& name, std::vector<std::string> parts, decltype(Step::run) run) {
      parts.insert(parts.begin(), {"vindexfile/" + name + "/1", opt_.tool_id, prev});
      const std::string key = key_of(parts);
      steps_.push_back(Step{name, key, cache_ / (name + "-" + key.substr(0, 32)), std::move(run)});
      prev = key;
    };
    if (!from_vindex_ || vf_.extract_settings()) {
      extract::ExtractOptions eo;
      std::optional<vindex::VindexIndex> src_ix;
      if (from_vindex_) src_ix = vindex::read_index(from_.string());
      const std::string level = vf_.level.value.value_or(src_ix ? vindex::extract_level_name(src_ix->extract_level) : "inference");
      eo.level = *vindex::extract_level_from_name(level);
      eo.dtype = vf_.dtype.value.value_or(src_ix ? src_ix->dtype : "f16");
      eo.quant = vf_.quant.value.value_or("keep");
      eo.down_top_k = vf_.down_top_k.value.value_or(src_ix ? static_cast<int>(src_ix->down_top_k) : 10);
      eo.threads = opt_.threads;
      eo.extracted_at = opt_.extracted_at;
      eo.progress = opt_.progress;
      add("extract", {level, eo.dtype, eo.quant, std::to_string(eo.down_top_k), eo.extracted_at},
          [this, eo](const fs::path& input, const fs::path& entry) mutable {
            try {
              auto model = Model::load(input.string());
              if (from_vindex_) eo.edited_slots = vindex::read_edited_slots(input.string());
              extract::extract_vindex(*model, entry.string(), eo);
            } catch (const Error& e) {
              throw Error(e.kind(), at(vf_.from.pos) + "FROM " + *vf_.from.value + ": " + e.what());
            }
          });
    }
    if (!vf_.edits.empty()) {
      std::vector<std::string> parts;
      for (const Edit& e : vf_.edits) {
        parts.push_back(canonical(e));
        if (e.kind == Edit::Kind::Patch) {
          const fs::path p = resolve(dir_, e.path);
          if (!fs::is_regular_file(p)) throw Error(ErrorKind::NotFound, at(e.pos) + "PATCH " + e.path + ": " + p.string() + " is not a file");
          parts.push_back(vindex::sha256_file(p.string()));
        }
      }
      add("edits", parts, [this](const fs::path& input, const fs::path& entry) { run_edits(input, entry); });
    }
    if (vf_.labels) {
      const Labels& lb = *vf_.labels;
      std::string text_digest;
      if (lb.builtin) {
        text_digest = vindex::sha256_hex(opt_.builtin_relations.data(), opt_.builtin_relations.size());
      } else {
        const fs::path p = resolve(dir_, lb.path);
        if (!fs::is_regular_file(p)) throw Error(ErrorKind::NotFound, at(lb.pos) + "LABELS " + lb.path + ": " + p.string() + " is not a file");
        text_digest = vindex::sha256_file(p.string());
      }
      add("labels", {lb.builtin ? "DEFAULT" : "file", text_digest},
          [this](const fs::path& input, const fs::path& entry) { run_labels(input, entry); });
    }
  }

  /// The edits in file order on one LQL session over `input`, then COMPILE into `entry`.
  void run_edits(const fs::path& input, const fs::path& entry) {
    lql::Session s(lql::SessionOptions{opt_.threads, dir_.string()});
    s.use(input.string());
    lql::Executor ex(s);
    for (const Edit& e : vf_.edits) {
      try {
        std::vector<lql::Table> out;
        if (e.kind == Edit::Kind::Patch) {
          lql::Statement st;
          st.body = lql::PatchStmt{lql::PatchStmt::Op::Apply, resolve(dir_, e.path).string()};
          st.pos = e.pos;
          out.push_back(ex.run(st));
        } else {
          out = ex.run(e.pipeline);
        }
        for (const auto& t : out) say(at(e.pos) + e.keyword + ": " + t.title);
      } catch (const Error& x) {
        throw Error(x.kind(), at(e.pos) + e.keyword + ": " + x.what());
      }
    }
    lql::CompileStmt c;
    c.source.current = true;
    c.path = entry.string();
    lql::Statement st;
    st.body = c;
    ex.run(st);
  }

  /// `input` with relation labels: a relation set run through the labeller, or a
  /// feature_labels.json checked against the vindex.
  void run_labels(const fs::path& input, const fs::path& entry) {
    const Labels& lb = *vf_.labels;
    const std::string name = lb.builtin ? std::string("the built-in data/relations.json") : lb.path;
    const std::string text = lb.builtin ? opt_.builtin_relations
                                        : read_text_file(resolve(dir_, lb.path).string(), "LABELS " + lb.path);
    const fs::path staging = cache_ / (".labels-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(staging, ec);
    try {
      detail::link_tree(input, staging, {"index.json"});
      bool relation_set = false;
      try {
        const auto j = nlohmann::json::parse(text);
        relation_set = j.is_object() && j.contains("relations") && !j.contains("features");
      } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorKind::Format, name + " is not JSON: " + e.what());
      }
      vindex::FeatureLabels labels;
      if (relation_set) {
        const auto rels = lql::parse_relations(text, name);
        lql::Session s(lql::SessionOptions{opt_.threads, dir_.string()});
        s.use(staging.string());
        labels = lql::label_features(s, rels, lql::LabelOptions{});
        say(at(lb.pos) + "LABELS: " + std::to_string(labels.features.size()) + " labelled features from " +
            std::to_string(rels.size()) + " relations");
      } else {
        labels = vindex::parse_feature_labels(text, name);
      }
      lql::write_feature_labels(staging.string(), labels);
      const auto rep = vindex::verify(staging.string());
      if (!rep.problems.empty()) throw Error(ErrorKind::Format, name + " does not fit the vindex: " + rep.problems.front());
      fsync_directory(staging.string());
      fs::rename(staging, entry, ec);
      if (ec) throw Error(ErrorKind::Io, "cannot rename " + staging.string() + " to " + entry.string() + ": " + ec.message());
      fsync_directory(cache_.string());
    } catch (const Error& x) {
      fs::remove_all(staging, ec);
      throw Error(x.kind(), at(lb.pos) + "LABELS: " + x.what());
    }
  }

  /// The last step's vindex at the output: hard links in a staging directory beside it, then one
  /// rename (an atomic exchange with the old one where the OS has it).
  void publish(const fs::path& last) {
    const fs::path staging = target_.string() + ".partial-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(staging, ec);
    try {
      // Links also without the cache: the scratch directory goes at the end, and a link keeps
      // the data.
      detail::link_tree(last, staging);
      if (fs::exists(target_, ec) && fs::is_empty(target_, ec)) fs::remove(target_, ec);
      replace_directory(staging.string(), target_.string());
    } catch (...) {
      fs::remove_all(staging, ec);
      throw;
    }
  }

  /// Keep only this build's steps in the cache.
  void prune() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_, ec)) {
      const std::string n = e.path().filename().string();
      if (n == ".lock") continue;
      bool mine = false;
      for (const auto& s : steps_) mine = mine || e.path() == s.entry;
      if (!mine) {
        say("cache: removing " + n + " (not a step of this build)");
        fs::remove_all(e.path(), ec);
      }
    }
  }

  const Vindexfile& vf_;
  const BuildOptions& opt_;
  fs::path dir_, target_, from_, cache_;
  bool from_vindex_ = false;
  std::vector<Step> steps_;
};

}  // namespace

BuildResult build(const Vindexfile& vf, const BuildOptions& opt) {
  if (!vf.from.given()) throw Error(ErrorKind::InvalidArgument, vf.name + ": no FROM");
  return Builder(vf, opt).run();
}

}  // namespace larql::vindexfile
