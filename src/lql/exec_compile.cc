// COMPILE CURRENT | "path" INTO VINDEX "out": the vindex in use with the session's edits baked in
// (docs/lql.md "Knowledge edits"). Built in a staging directory beside the output, fsynced and renamed
// into place; unchanged files are hard-linked (copied where links fail); only the files an edit
// changes are rewritten: ffn_weights.bin (the tensors the overlay replaced), gate_vectors.bin
// (the edited rows), down_meta.bin (the records of the features whose down column changed), the
// KNN facts as knn_facts.vlp, and index.json's checksums.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <map>
#include <unistd.h>

#include "compute/top_k_rows.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "model/vindex_source.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/mmap.h"
#include "vindex/edited_slots.h"
#include "vindex/sha256.h"

namespace larql::lql::detail {

namespace {

namespace fs = std::filesystem;

// A file of `size` bytes: the source's bytes with the given ranges replaced.
struct Splice {
  uint64_t offset = 0;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

void write_spliced(const std::string& src, const std::string& dst, std::vector<Splice> splices) {
  MappedFile in = MappedFile::open(src);
  std::sort(splices.begin(), splices.end(), [](const Splice& a, const Splice& b) { return a.offset < b.offset; });
  AtomicWriter out(dst, "COMPILE");
  uint64_t at = 0;
  for (const auto& s : splices) {
    if (s.offset < at || s.offset + s.size > in.size())
      throw Error(ErrorKind::Format, src + ": an edited range [" + std::to_string(s.offset) + ", " +
                                         std::to_string(s.offset + s.size) + ") is outside the file or overlaps another");
    out.write(in.data() + at, s.offset - at);
    out.write(s.data, s.size);
    at = s.offset + s.size;
  }
  out.write(in.data() + at, in.size() - at);
  out.commit();
}

void link_or_copy(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (!ec) return;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(ErrorKind::Io, "COMPILE: copying " + from.string() + " to " + to.string() + ": " + ec.message());
  std::ifstream probe(to);  // the copy is fsynced with the directory below
}

}  // namespace

Table exec_compile(Session& s, const CompileStmt& st, Pos pos) {
  const fs::path src = fs::path(s.path());
  if (!st.source.current) {
    std::error_code ec;
    if (!fs::equivalent(st.source.path, src, ec))
      not_built("COMPILE \"" + st.source.path + "\" INTO VINDEX", pos,
                "COMPILE bakes the session's edits into the vindex in use (" + src.string() + "); USE the other one first");
  }
  if (st.path.empty()) throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": the output path is empty");
  const fs::path out = fs::weakly_canonical(fs::absolute(st.path));
  const fs::path csrc = fs::weakly_canonical(fs::absolute(src));
  {
    std::error_code ec;
    if (out == csrc || fs::equivalent(out, csrc, ec))
      throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": the output " + st.path + " is the source vindex");
    const auto rel = out.lexically_relative(csrc);
    if (!rel.empty() && *rel.begin() != "..")
      throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": the output " + st.path + " is inside the source vindex");
    // Never replace what is there: a directory that is not a vindex, or one holding the source,
    // would be lost (LQL has no --force; remove the old output first).
    if (fs::exists(out, ec))
      throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": " + st.path +
                                                  " already exists; remove it first or choose another path");
    if (!fs::is_directory(out.parent_path(), ec))
      throw Error(ErrorKind::NotFound, "COMPILE at " + pos.str() + ": no directory " + out.parent_path().string());
  }
  EditState& ed = s.edits();
  if (ed.overlay && ed.overlay->appended_ffn() > 0)
    throw Error(ErrorKind::Unsupported,
                "COMPILE at " + pos.str() + ": the session's MODE SUBJECT edits appended " + std::to_string(ed.overlay->appended_ffn()) +
                    " features to every layer's FFN, and a vindex's files keep the model's width; COMPILE CURRENT INTO MODEL "
                    "\"x.gguf\" writes them (then larql extract x.gguf for a vindex)");
  vindex::VindexIndex ix = s.index();
  const fs::path staging = out.parent_path() / ("." + out.filename().string() + ".tmp." + std::to_string(::getpid()));
  struct Cleanup {
    fs::path p;
    bool keep = false;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(p, ec);
    }
  } cleanup{staging};
  {
    // The staging directory beside the output: where the OS refuses it (/proc, a read-only or
    // full file system), an I/O error naming the output, not the library's exception.
    std::error_code ec;
    fs::remove_all(staging, ec);
    if (!ec) fs::create_directories(staging, ec);
    if (ec)
      throw Error(ErrorKind::Io, "COMPILE at " + pos.str() + ": cannot write " + st.path + ": creating " + staging.string() +
                                     ": " + ec.message());
  }
  std::set<std::string> rewritten;
  int64_t tensors = 0, rows = 0, records = 0, edited_slots = 0;
  // ffn_weights.bin (and any file holding a replaced tensor): splice the overlay's bytes in at
  // the manifest's offsets.
  if (ed.overlay && !ed.overlay->replaced().empty()) {
    const std::string manifest_text = [&] {
      std::ifstream f(src / "weight_manifest.json");
      return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    const auto manifest = nlohmann::json::parse(manifest_text);
    std::map<std::string, std::vector<Splice>> by_file;
    for (const auto& [role, layer] : ed.overlay->replaced()) {
      const auto t = ed.overlay->tensor(role, layer);
      bool found = false;
      for (const auto& e : manifest)
        if (e.value("role", "") == tensor_role_name(role) && e.value("layer", int64_t{-2}) == layer) {
          by_file[e.at("file").get<std::string>()].push_back({e.at("offset").get<uint64_t>(), t->data, t->nbytes});
          found = true;
        }
      if (!found) throw Error(ErrorKind::Format, src.string() + "/weight_manifest.json: no entry for " + t->name);
      ++tensors;
    }
    for (auto& [file, sp] : by_file) {
      write_spliced((src / file).string(), (staging / file).string(), sp);
      rewritten.insert(file);
    }
  }
  // gate_vectors.bin: the layers with edited rows, as Session::gate shows them.
  if (!ed.gate_rows.empty()) {
    std::set<int64_t> layers;
    for (const auto& [k, v] : ed.gate_rows) layers.insert(k.first), ++rows;
    std::vector<Splice> sp;
    for (int64_t l : layers) {
      const TensorView g = s.gate(l);
      const auto& slot = ix.layers[static_cast<size_t>(l)];
      sp.push_back({slot.offset, g.data, slot.length});
    }
    write_spliced((src / "gate_vectors.bin").string(), (staging / "gate_vectors.bin").string(), sp);
    rewritten.insert("gate_vectors.bin");
  }
  // down_meta.bin: recompute the records of the features whose down column changed.
  const auto* dm = s.down_meta();
  bool any_down = false;
  for (const auto& [l, fs_] : ed.down_changed) any_down |= !fs_.empty();
  if (dm && any_down) {
    const uint64_t rec = 8 + 8ull * dm->top_k();
    std::vector<uint64_t> layer_off(dm->num_layers());
    uint64_t off = 16;
    for (uint32_t l = 0; l < dm->num_layers(); ++l) {
      layer_off[l] = off + 4;
      off += 4 + rec * dm->num_features(l);
    }
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<Splice> sp;
    for (const auto& [l, feats] : ed.down_changed) {
      if (feats.empty() || l >= dm->num_layers()) continue;
      // The records the session shows (lql/down_view.cc): COMPILE writes exactly those.
      for (int64_t f : feats) {
        const auto* r = edited_down_record(s, l, f);
        if (!r) continue;
        std::vector<uint8_t> b(rec, 0);
        auto put = [&](size_t at, uint32_t tokid, float score) {
          std::memcpy(b.data() + at, &tokid, 4);
          std::memcpy(b.data() + at + 4, &score, 4);
        };
        put(0, (*r)[0].token, (*r)[0].logit);
        for (uint32_t k = 0; k < dm->top_k(); ++k) put(8 + 8 * k, (*r)[k].token, (*r)[k].logit);
        bufs.push_back(std::move(b));
        sp.push_back({layer_off[static_cast<size_t>(l)] + rec * static_cast<uint64_t>(f), nullptr, rec});
        ++records;
      }
    }
    for (size_t i = 0; i < sp.size(); ++i) sp[i].data = bufs[i].data();
    write_spliced((src / "down_meta.bin").string(), (staging / "down_meta.bin").string(), sp);
    rewritten.insert("down_meta.bin");
  }
  // The KNN facts travel as a patch of insert_knn ops, loaded by USE.
  if (!ed.knn.empty()) {
    Patch p;
    p.base_model = ix.model;
    // The vindex's name, not its path: the bytes do not depend on where it lies (`larql build`).
    const fs::path name = csrc.filename().empty() ? csrc.parent_path().filename() : csrc.filename();
    p.description = "KNN facts compiled from " + name.string();
    for (const auto& f : ed.knn) {
      PatchOp o;
      o.kind = PatchOp::Kind::InsertKnn;
      o.layer = f.layer;
      o.entity = f.entity;
      o.relation = f.relation;
      o.target = f.target;
      o.target_id = f.target_id;
      o.confidence = f.confidence;
      o.key = f.key;
      p.ops.push_back(std::move(o));
    }
    save_patch((staging / "knn_facts.vlp").string(), p);
    rewritten.insert("knn_facts.vlp");
  }
  // edits.json: the slots every edit baked in so far wrote (the source's record, then this
  // session's ops in order), so a COMPOSE INSERT on the output never reuses one.
  {
    std::vector<vindex::EditedSlot> mine;
    auto add = [&](const PatchOp& o) {
      if (o.kind != PatchOp::Kind::Insert && o.kind != PatchOp::Kind::Update && o.kind != PatchOp::Kind::Delete) return;
      vindex::EditedSlot e{o.layer, o.feature, op_name(o.kind), "", "", ""};
      if (o.kind == PatchOp::Kind::Insert) e.entity = o.entity, e.relation = o.relation, e.target = o.target;
      mine = vindex::merge_edited_slots(std::move(mine), {e});
    };
    for (const auto& p : ed.applied)
      for (const auto& o : p.patch.ops) add(o);
    if (ed.recording)
      for (const auto& o : ed.recording->patch.ops) add(o);
    const auto slots = vindex::merge_edited_slots(s.compiled_edits(), mine);
    if (!slots.empty()) {
      write_file_atomic((staging / "edits.json").string(), vindex::serialize_edited_slots(slots));
      rewritten.insert("edits.json");
      edited_slots = static_cast<int64_t>(slots.size());
    }
  }
  // Everything else: hard links.
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "index.json" || rewritten.count(name)) continue;
    link_or_copy(e.path(), staging / name);
  }
  for (const auto& name : rewritten) ix.checksums[name] = vindex::sha256_file((staging / name).string());
  vindex::write_index(staging.string(), ix);
  fsync_directory(staging.string());
  replace_directory(staging.string(), out.string());
  cleanup.keep = true;
  Table t;
  t.statement = "COMPILE";
  t.title = "Compiled " + src.string() + " -> " + out.string();
  t.columns = {{"key"}, {"value"}};
  t.rows.push_back({std::string("operations"), std::to_string(ed.op_count())});
  t.rows.push_back({std::string("tensors rewritten"), std::to_string(tensors)});
  t.rows.push_back({std::string("gate rows rewritten"), std::to_string(rows)});
  t.rows.push_back({std::string("down_meta records recomputed"), std::to_string(records)});
  t.rows.push_back({std::string("knn facts"), std::to_string(ed.knn.size())});
  t.rows.push_back({std::string("edited slots recorded"), std::to_string(edited_slots)});
  std::string files;
  for (const auto& n : rewritten) files += (files.empty() ? "" : ", ") + n;
  t.rows.push_back({std::string("files rewritten"), files.empty() ? std::string("(none: a copy)") : files});
  return t;
}

}  // namespace larql::lql::detail
