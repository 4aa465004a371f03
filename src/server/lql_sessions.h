// The LQL sessions of `larql serve` (docs/server.md "LQL over HTTP"): one lql::Session per
// `X-Session-Id`, bounded in number, idle ones expiring, the least recently used evicted first.
// A request leases its session: the lease holds the session's mutex, so the statements of one
// session run one at a time while different sessions run in parallel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "lql/session.h"

namespace larql::server {

class LqlSessionTable {
 public:
  using Clock = std::chrono::steady_clock;
  using Factory = std::function<std::unique_ptr<lql::Session>()>;

  struct Options {
    size_t max_sessions = 16;          ///< live sessions at most (>= 1)
    std::chrono::seconds ttl{600};     ///< a session idle this long is dropped
  };

  /// `make` builds a new session (called without the table's lock held, so it may be slow).
  LqlSessionTable(Options opt, Factory make);

  /// Whether `id` is a valid session id: 1 to 128 bytes of [A-Za-z0-9_-].
  static bool valid_id(std::string_view id);

  struct Entry;
  /// A session held for one request: its mutex is locked for the lease's life.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&&) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    lql::Session& session();
    bool created() const { return created_; }  ///< the session was made for this request

   private:
    friend class LqlSessionTable;
    LqlSessionTable* table_ = nullptr;
    std::shared_ptr<Entry> entry_;
    std::unique_lock<std::mutex> lock_;
    bool created_ = false;
  };

  /// The session of `id`, made when absent (expired ones are dropped first; when the table is
  /// full, the least recently used idle session is evicted). Waits while another request holds
  /// the same session. `now` is the clock's time (a parameter so tests can move it).
  /// Errors: InvalidArgument for an invalid id; Unsupported "N LQL sessions are busy" when the
  /// table is full and every session is in use; the factory's errors.
  Lease acquire(const std::string& id, Clock::time_point now = Clock::now());

  /// Drop the sessions idle for longer than the ttl at `now`. Returns how many were dropped.
  size_t expire(Clock::time_point now = Clock::now());
  size_t size() const;
  uint64_t evicted() const;  ///< sessions dropped for room (LRU), over the table's life
  uint64_t expired() const;  ///< sessions dropped for idling, over the table's life
  bool contains(const std::string& id) const;

 private:
  void release(Entry& e);
  size_t expire_locked(Clock::time_point now);

  Options opt_;
  Factory make_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> sessions_;
  uint64_t evicted_ = 0, expired_ = 0;
};

}  // namespace larql::server
