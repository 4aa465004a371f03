#include "server/lql_sessions.h"

#include <algorithm>

#include "util/error.h"

namespace larql::server {

struct LqlSessionTable::Entry {
  std::mutex mu;                           ///< held by the lease of the request using it
  std::unique_ptr<lql::Session> session;   ///< made by the first lease (under mu)
  Clock::time_point last_used;             ///< guarded by the table's mutex
  int users = 0;                           ///< leases held or waiting; guarded by the table's mutex
  bool ready = false;                      ///< `session` is made; guarded by the table's mutex
};

LqlSessionTable::LqlSessionTable(Options opt, Factory make) : opt_(opt), make_(std::move(make)) {
  if (opt_.max_sessions < 1) opt_.max_sessions = 1;
}

bool LqlSessionTable::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

LqlSessionTable::Lease::Lease(Lease&& o) noexcept
    : table_(o.table_), entry_(std::move(o.entry_)), lock_(std::move(o.lock_)), created_(o.created_) {
  o.table_ = nullptr;
}

LqlSessionTable::Lease::~Lease() {
  if (lock_.owns_lock()) lock_.unlock();
  if (table_ && entry_) table_->release(*entry_);
  table_ = nullptr;
  entry_.reset();
}

lql::Session& LqlSessionTable::Lease::session() { return *entry_->session; }

size_t LqlSessionTable::expire_locked(Clock::time_point now) {
  size_t n = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->users == 0 && now - it->second->last_used > opt_.ttl) {
      it = sessions_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  expired_ += n;
  return n;
}

size_t LqlSessionTable::expire(Clock::time_point now) {
  std::lock_guard<std::mutex> g(mu_);
  return expire_locked(now);
}

LqlSessionTable::Lease LqlSessionTable::acquire(const std::string& id, Clock::time_point now) {
  if (!valid_id(id))
    throw Error(ErrorKind::InvalidArgument,
                "X-Session-Id must be 1 to 128 characters of A-Z a-z 0-9 _ - (got " + std::to_string(id.size()) +
                    " bytes)");
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> g(mu_);
    expire_locked(now);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      e = it->second;
    } else {
      if (sessions_.size() >= opt_.max_sessions) {
        auto lru = sessions_.end();
        for (auto j = sessions_.begin(); j != sessions_.end(); ++j)
          if (j->second->users == 0 && (lru == sessions_.end() || j->second->last_used < lru->second->last_used)) lru = j;
        if (lru == sessions_.end())
          throw Error(ErrorKind::Unsupported, std::to_string(sessions_.size()) +
                                                  " LQL sessions are live and all busy (--max-lql-sessions); retry later");
        sessions_.erase(lru);
        ++evicted_;
      }
      e = std::make_shared<Entry>();
      sessions_.emplace(id, e);
    }
    ++e->users;
    e->last_used = std::max(e->last_used, now);
  }
  Lease l;
  l.table_ = this;
  l.entry_ = e;
  l.lock_ = std::unique_lock<std::mutex>(e->mu);
  if (!e->session) {  // new, or an earlier request's factory failed
    e->session = make_();  // on an error the lease's destructor releases the entry
    l.created_ = true;
    std::lock_guard<std::mutex> g(mu_);
    e->ready = true;
  }
  return l;
}

void LqlSessionTable::release(Entry& e) {
  std::lock_guard<std::mutex> g(mu_);
  --e.users;
  if (e.users == 0 && !e.ready) {  // its factory failed: forget the id
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
      if (it->second.get() == &e) {
        sessions_.erase(it);
        break;
      }
  }
}

size_t LqlSessionTable::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return sessions_.size();
}

uint64_t LqlSessionTable::evicted() const {
  std::lock_guard<std::mutex> g(mu_);
  return evicted_;
}

uint64_t LqlSessionTable::expired() const {
  std::lock_guard<std::mutex> g(mu_);
  return expired_;
}

bool LqlSessionTable::contains(const std::string& id) const {
  std::lock_guard<std::mutex> g(mu_);
  return sessions_.count(id) != 0;
}

}  // namespace larql::server
