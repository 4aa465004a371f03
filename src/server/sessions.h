// Saved sessions of `larql serve` (docs/server.md "Sessions"): a request naming `"session": "ID"`
// leaves its sequence's engine state (the state file of kv/state_file.h: engine tensors, the token
// history) under the session directory; a later request with the same id whose prompt extends the
// saved tokens loads it and prefills only the new tokens.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace larql::server {

struct SessionInfo {
  std::string id;
  int64_t tokens = 0;   ///< tokens of the saved sequence (prompt + generated)
  int64_t n_past = 0;   ///< of which the engine has consumed (the rest is fed on resume)
  std::string engine;   ///< the engine spec it ran on (EngineSpec::to_string())
  uint64_t bytes = 0;   ///< the state file's size
};

class SessionStore;

/// A request's hold on one session id: while it lives, other requests with the same id are
/// refused (409) and DELETE too. The scheduler calls save() when the sequence ends normally.
class SessionLease {
 public:
  SessionLease(std::shared_ptr<SessionStore> store, std::string id, std::string engine);
  ~SessionLease();
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;

  const std::string& id() const { return id_; }
  const std::string& engine() const { return engine_; }
  /// The file the state is written to and read from.
  std::string path() const;
  /// Set when the saved sequence is resumed: tokens already in the engine (the prompt's first
  /// n_past tokens); 0 for a fresh start.
  int64_t resume_from = 0;
  /// Record the saved file (written by the caller to path()) and release the hold. Evicts the
  /// least recently used other sessions beyond the store's bounds; a state larger than the byte
  /// bound alone is deleted at once (the session is then gone).
  void saved(const std::vector<int32_t>& history, int64_t n_past);

 private:
  std::shared_ptr<SessionStore> store_;
  std::string id_, engine_;
  bool released_ = false;
};

class SessionStore : public std::enable_shared_from_this<SessionStore> {
 public:
  /// `dir` empty: a fresh directory under the system's temporary directory, removed (with its
  /// files) by the destructor. A given `dir` is created if missing and kept; state files already
  /// in it are not indexed (sessions live as long as the server). Errors: Error{Io}.
  SessionStore(std::string dir, int max_sessions, uint64_t max_bytes);
  ~SessionStore();

  /// Ids: 1 to 128 characters of [A-Za-z0-9_-].
  static bool valid_id(const std::string& id);
  /// Take the hold on `id` for a request on `engine` (EngineSpec::to_string()) with `prompt`.
  /// Returns null when the id is held by another request (the caller answers 409). The lease's
  /// resume_from is set when a saved sequence on the same engine exists, its consumed tokens are
  /// a prefix of `prompt` and at least one prompt token is new; otherwise the request starts over.
  std::shared_ptr<SessionLease> acquire(const std::string& id, const std::string& engine,
                                        const std::vector<int32_t>& prompt);
  std::vector<SessionInfo> list() const;
  enum class Removed { Ok, NotFound, Busy };
  Removed remove(const std::string& id);
  const std::string& dir() const { return dir_; }
  int max_sessions() const { return max_sessions_; }
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  friend class SessionLease;
  struct Entry {
    SessionInfo info;
    std::vector<int32_t> history;
    bool busy = false;
    uint64_t last_used = 0;
  };
  void release(const std::string& id);
  void store(const std::string& id, const std::string& engine, const std::vector<int32_t>& history, int64_t n_past);
  std::string path_of(const std::string& id) const;

  std::string dir_;
  bool owns_dir_ = false;
  int max_sessions_;
  uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace larql::server
