#include "server/sessions.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "util/error.h"

namespace larql::server {

namespace fs = std::filesystem;

SessionLease::SessionLease(std::shared_ptr<SessionStore> store, std::string id, std::string engine)
    : store_(std::move(store)), id_(std::move(id)), engine_(std::move(engine)) {}

SessionLease::~SessionLease() {
  if (!released_) store_->release(id_);
}

std::string SessionLease::path() const { return store_->path_of(id_); }

void SessionLease::saved(const std::vector<int32_t>& history, int64_t n_past) {
  if (released_) return;
  store_->store(id_, engine_, history, n_past);
  released_ = true;
}

SessionStore::SessionStore(std::string dir, int max_sessions, uint64_t max_bytes)
    : dir_(std::move(dir)), max_sessions_(max_sessions), max_bytes_(max_bytes) {
  if (max_sessions_ < 1 || max_bytes_ == 0)
    throw Error(ErrorKind::InvalidArgument, "sessions: the count and byte bounds must be positive");
  std::error_code ec;
  if (dir_.empty()) {
    std::string tmpl = (fs::temp_directory_path(ec) / "larql-sessions-XXXXXX").string();
    if (ec || !::mkdtemp(tmpl.data()))
      throw Error(ErrorKind::Io, "sessions: cannot make a temporary directory " + tmpl);
    dir_ = tmpl;
    owns_dir_ = true;
  } else {
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_))
      throw Error(ErrorKind::Io, "sessions: --session-dir " + dir_ + " is not a directory it can create or use" +
                                     (ec ? ": " + ec.message() : ""));
  }
}

SessionStore::~SessionStore() {
  std::error_code ec;
  if (owns_dir_) fs::remove_all(dir_, ec);
}

bool SessionStore::valid_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string SessionStore::path_of(const std::string& id) const { return (fs::path(dir_) / (id + ".state")).string(); }

std::shared_ptr<SessionLease> SessionStore::acquire(const std::string& id, const std::string& engine,
                                                    const std::vector<int32_t>& prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  int64_t resume = 0;
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (e.busy) return nullptr;
    const auto n = static_cast<size_t>(e.info.n_past);
    // The engine consumed history[0, n_past); the rest of history (the last generated token, not
    // fed yet) is fed again from the new prompt, which must hold it too.
    if (e.info.engine == engine && prompt.size() > n && n <= e.history.size() && n > 0 &&
        std::equal(e.history.begin(), e.history.begin() + static_cast<std::ptrdiff_t>(n), prompt.begin()))
      resume = e.info.n_past;
    e.busy = true;
    e.last_used = ++clock_;
  } else {
    Entry e;
    e.info.id = id;
    e.busy = true;
    e.last_used = ++clock_;
    entries_.emplace(id, std::move(e));
  }
  auto lease = std::make_shared<SessionLease>(shared_from_this(), id, engine);
  lease->resume_from = resume;
  return lease;
}

void SessionStore::release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.busy = false;
  if (it->second.info.bytes == 0) entries_.erase(it);  // never saved: nothing to keep
}

void SessionStore::store(const std::string& id, const std::string& engine, const std::vector<int32_t>& history,
                         int64_t n_past) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path_of(id), ec);
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[id];
  e.busy = false;
  e.info.id = id;
  if (ec || bytes == 0 || bytes > max_bytes_) {
    fs::remove(path_of(id), ec);
    entries_.erase(id);
    return;
  }
  e.info.engine = engine;
  e.info.tokens = static_cast<int64_t>(history.size());
  e.info.n_past = n_past;
  e.info.bytes = bytes;
  e.history = history;
  e.last_used = ++clock_;
  // Evict the least recently used idle sessions while over a bound.
  for (;;) {
    uint64_t total = 0;
    int count = 0;
    for (const auto& [k, v] : entries_)
      if (v.info.bytes > 0) total += v.info.bytes, ++count;
    if (count <= max_sessions_ && total <= max_bytes_) break;
    auto victim = entries_.end();
    for (auto i = entries_.begin(); i != entries_.end(); ++i)
      if (!i->second.busy && i->second.info.bytes > 0 && i->first != id &&
          (victim == entries_.end() || i->second.last_used < victim->second.last_used))
        victim = i;
    if (victim == entries_.end()) break;
    fs::remove(path_of(victim->first), ec);
    entries_.erase(victim);
  }
}

std::vector<SessionInfo> SessionStore::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SessionInfo> out;
  for (const auto& [k, v] : entries_)
    if (v.info.bytes > 0) out.push_back(v.info);
  return out;
}

SessionStore::Removed SessionStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.info.bytes == 0) return it != entries_.end() && it->second.busy ? Removed::Busy : Removed::NotFound;
  if (it->second.busy) return Removed::Busy;
  std::error_code ec;
  fs::remove(path_of(id), ec);
  entries_.erase(it);
  return Removed::Ok;
}

}  // namespace larql::server
