#include "server/model_pool.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "api/api.h"
#include "formats/gguf.h"
#include "model/hf_source.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::server {

namespace fs = std::filesystem;

namespace {

/// A file name for a message: its bytes, each one that is not printable UTF-8 text as \xNN.
std::string printable_name(const std::string& name) {
  std::string out;
  std::string_view rest = name;
  while (!rest.empty()) {
    const size_t bad = first_non_text_byte(rest);
    out += rest.substr(0, bad == std::string_view::npos ? rest.size() : bad);
    if (bad == std::string_view::npos) break;
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02X", static_cast<unsigned char>(rest[bad]));
    out += b;
    rest.remove_prefix(bad + 1);
  }
  return out;
}

/// Why the Hugging Face directory `p` cannot load ("" when it has what loading reads: config.json
/// and model.safetensors or model.safetensors.index.json).
std::string hf_dir_problem(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p / "config.json", ec)) return "a Hugging Face directory without config.json";
  if (!fs::is_regular_file(p / "model.safetensors", ec) && !fs::is_regular_file(p / "model.safetensors.index.json", ec))
    return "config.json but no model.safetensors or model.safetensors.index.json";
  return "";
}

}  // namespace

std::vector<ModelEntry> scan_model_dir(const std::string& dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(ErrorKind::NotFound, dir + " is not a directory");
  const fs::path root = fs::absolute(dir).lexically_normal();
  std::vector<fs::path> names;
  for (const auto& e : fs::directory_iterator(root, ec)) names.push_back(e.path());
  if (ec) throw Error(ErrorKind::Io, "cannot list " + root.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  std::vector<std::string> own_skipped;
  std::vector<std::string>* skipped_lines = skipped ? skipped : &own_skipped;
  std::vector<ModelEntry> out;
  for (const fs::path& p : names) {
    const std::string name = p.filename().string();
    if (name.empty() || name[0] == '.') continue;
    auto skip = [&](const std::string& why) {
      skipped_lines->push_back(printable_name(name) + ": " + why);
    };
    const bool gguf = p.extension() == ".gguf" && fs::is_regular_file(p, ec);
    const bool model_dir = !gguf && fs::is_directory(p, ec) && (fs::exists(p / "index.json", ec) || is_hf_model_dir(p.string()));
    if (!gguf && !model_dir) continue;
    // A request's "model" is JSON text (UTF-8): a name that is not could never be asked for.
    if (first_non_text_byte(name) != std::string_view::npos) {
      skip("the name is not UTF-8 text, so no request can name it (rename it)");
      continue;
    }
    ModelEntry m;
    m.path = p.string();
    if (gguf) {
      m.format = "gguf";
      try {  // the header and tensor table parse (the data is mapped, not read)
        GgufFile::open(m.path);
      } catch (const Error& e) {
        skip(std::string("not a GGUF model: ") + e.what());
        continue;
      }
      m.bytes = fs::file_size(p, ec);
    } else {
      m.format = fs::exists(p / "index.json", ec) ? "vindex" : "hugging-face";
      try {
        if (m.format == "hugging-face") {
          const std::string why = hf_dir_problem(p);
          if (!why.empty()) throw Error(ErrorKind::NotFound, why);
        }
        api::check_model_dir(p.string(), "serve");
      } catch (const Error& e) {
        skip(e.what());
        continue;
      }
      for (const auto& f : fs::directory_iterator(p, ec))
        if (f.is_regular_file(ec)) m.bytes += f.file_size(ec);
    }
    m.id = (m.format == "hugging-face") ? name : p.stem().string();
    out.push_back(std::move(m));
  }
  // Two entries with one id ("gemma.gguf" and "gemma.vindex"): both go by their whole names.
  std::map<std::string, int> count;
  for (const auto& m : out) ++count[m.id];
  for (auto& m : out)
    if (count[m.id] > 1) m.id = fs::path(m.path).filename().string();
  // Whole names can still meet a stem ("a.vindex.gguf" and the vindex "a.vindex" met by "a.gguf").
  std::map<std::string, const ModelEntry*> by_id;
  for (const auto& m : out) {
    const auto [it, fresh] = by_id.emplace(m.id, &m);
    if (!fresh)
      throw Error(ErrorKind::InvalidArgument, "two models named " + m.id + ": " + it->second->path + " and " + m.path +
                                                  " (rename one)");
  }
  if (out.empty()) {  // the caller never sees `skipped` then: the reasons go in the error
    std::string why;
    for (const auto& line : *skipped_lines) why += "\n  skipped " + line;
    throw Error(ErrorKind::InvalidArgument, root.string() + " holds no model to serve (GGUF files, vindexes at level inference, "
                                                            "Hugging Face directories)" + why);
  }
  return out;
}

ModelPool::ModelPool(std::vector<ModelEntry> entries, uint64_t max_resident_bytes, Factory make)
    : budget_(max_resident_bytes), make_(std::move(make)) {
  for (auto& e : entries) {
    if (const auto [it, fresh] = by_id_.emplace(e.id, slots_.size()); !fresh)
      throw Error(ErrorKind::InvalidArgument,
                  "two models named " + e.id + ": " + slots_[it->second].entry.path + " and " + e.path);
    slots_.push_back(Slot{std::move(e), nullptr, false, 0, 0});
  }
}

ModelPool::~ModelPool() { stop_all(true); }

ModelPool::Lease::~Lease() {
  if (pool_) pool_->release(slot_);
}

Resident& ModelPool::Lease::operator*() const { return *pool_->slots_[slot_].resident; }

uint64_t ModelPool::resident_bytes_locked() const {
  uint64_t b = 0;
  for (const auto& s : slots_)
    if (s.resident || s.loading) b += s.entry.bytes;
  return b;
}

std::vector<std::unique_ptr<Resident>> ModelPool::evict_locked(size_t keep) {
  std::vector<std::unique_ptr<Resident>> gone;
  if (budget_ == 0) return gone;
  while (resident_bytes_locked() > budget_) {
    Slot* lru = nullptr;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (i == keep || !s.resident || s.in_flight > 0) continue;
      if (!lru || s.last_used < lru->last_used) lru = &s;
    }
    if (!lru) break;  // the rest are busy (or the one kept): over budget until they finish
    gone.push_back(std::move(lru->resident));
    ++unloads_;
  }
  return gone;
}

void ModelPool::destroy(std::vector<std::unique_ptr<Resident>> gone) {
  for (auto& r : gone) {
    if (r && r->stop) r->stop(false);
    r.reset();  // the weights are unmapped here
  }
}

ModelPool::Lease ModelPool::acquire(const std::string& id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    std::string known;
    for (const auto& s : slots_) known += (known.empty() ? "" : ", ") + s.entry.id;
    throw Error(ErrorKind::NotFound, "model '" + id + "' is not served here (models: " + known + ")");
  }
  const size_t i = it->second;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (stopped_) throw Error(ErrorKind::Cancelled, "the server is shutting down");
    Slot& s = slots_[i];
    if (s.resident) {
      ++s.in_flight;
      s.last_used = ++tick_;
      return Lease(this, i);
    }
    if (!s.loading) break;
    cv_.wait(lk);  // another request is loading it
  }
  Slot& s = slots_[i];
  s.loading = true;  // from here its bytes count against the budget
  auto gone = evict_locked(i);
  lk.unlock();
  destroy(std::move(gone));
  std::unique_ptr<Resident> r;
  try {
    r = make_(s.entry);
  } catch (...) {
    lk.lock();
    s.loading = false;
    cv_.notify_all();
    throw;
  }
  lk.lock();
  s.loading = false;
  s.resident = std::move(r);
  ++loads_;
  ++s.in_flight;
  s.last_used = ++tick_;
  cv_.notify_all();
  if (stopped_) {  // stop_all ran during the load: this one stops too
    auto late = std::move(s.resident);
    --s.in_flight;
    lk.unlock();
    if (late->stop) late->stop(true);
    throw Error(ErrorKind::Cancelled, "the server is shutting down");
  }
  return Lease(this, i);
}

void ModelPool::release(size_t slot) {
  std::vector<std::unique_ptr<Resident>> gone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    --slots_[slot].in_flight;
    if (stopped_) return;  // stop_all holds the residents until the pool goes
    // Loads that went over the budget while others were busy: restore it now, keeping the most
    // recently used model.
    size_t mru = slots_.size();
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].resident && (mru == slots_.size() || slots_[i].last_used > slots_[mru].last_used)) mru = i;
    gone = evict_locked(mru);
  }
  destroy(std::move(gone));
}

std::vector<std::string> ModelPool::ids() const {
  std::vector<std::string> out;
  for (const auto& s : slots_) out.push_back(s.entry.id);
  return out;
}

std::vector<ModelPool::Status> ModelPool::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Status> out;
  for (const auto& s : slots_) out.push_back(Status{s.entry, s.resident != nullptr, s.in_flight});
  return out;
}

int64_t ModelPool::loads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return loads_;
}

int64_t ModelPool::unloads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return unloads_;
}

std::string ModelPool::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t loaded = 0;
  for (const auto& s : slots_) loaded += s.resident ? 1 : 0;
  std::ostringstream o;
  o << "# HELP larql_models Models this server serves (a directory's).\n# TYPE larql_models gauge\nlarql_models "
    << slots_.size() << "\n";
  o << "# HELP larql_models_loaded Models loaded now.\n# TYPE larql_models_loaded gauge\nlarql_models_loaded " << loaded << "\n";
  o << "# HELP larql_model_loads_total Models loaded (first request, or again after an unload).\n"
       "# TYPE larql_model_loads_total counter\nlarql_model_loads_total "
    << loads_ << "\n";
  o << "# HELP larql_model_unloads_total Models unloaded to keep within --max-resident-mb.\n"
       "# TYPE larql_model_unloads_total counter\nlarql_model_unloads_total "
    << unloads_ << "\n";
  o << "# HELP larql_resident_bytes Bytes on disk of the models loaded now (what the budget counts).\n"
       "# TYPE larql_resident_bytes gauge\nlarql_resident_bytes "
    << resident_bytes_locked() << "\n";
  o << "# HELP larql_max_resident_bytes The budget (--max-resident-mb; 0: none).\n"
       "# TYPE larql_max_resident_bytes gauge\nlarql_max_resident_bytes "
    << budget_ << "\n";
  return o.str();
}

void ModelPool::stop_all(bool cancel_running) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
    cv_.notify_all();
  }
  // Stop first (a request in flight ends "cancelled"), destroy once nothing uses them.
  std::vector<Resident*> live;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : slots_)
      if (s.resident) live.push_back(s.resident.get());
  }
  for (Resident* r : live)
    if (r->stop) r->stop(cancel_running);
}

}  // namespace larql::server
