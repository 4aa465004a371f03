// `larql serve DIR/` (docs/server.md "A directory of models"): every model of a directory — GGUF
// files, vindexes at level inference, Hugging Face directories — listed at start, each loaded on
// its first request and unloaded, least recently used first, when the loaded ones would exceed a
// memory budget; a model with a request in flight is never unloaded. The pool knows models only
// as entries and residents (what serving one takes, made by the caller's factory), so its policy
// is tested without a model.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/http.h"

namespace larql::server {

/// One model of the directory.
struct ModelEntry {
  std::string id;      ///< what requests name in "model": the file or directory name without its extension
  std::string path;    ///< absolute
  std::string format;  ///< "gguf", "vindex" or "hugging-face"
  uint64_t bytes = 0;  ///< its size on disk: what it counts against the budget once loaded
};

/// The models of `dir`, by id: each regular file `*.gguf` (symbolic links followed), each
/// directory holding index.json at a level that runs a model (inference, all) and each Hugging
/// Face directory (config.json with model.safetensors or its index). Ids are the names without
/// .gguf / .vindex; when two entries would share one, both keep their whole names. `skipped` (may
/// be null) gets one line "NAME: why" per entry left out: a .gguf whose header does not parse
/// (formats/gguf.h; the weights are mapped, not read), a vindex below level inference or with an
/// unreadable index.json, a Hugging Face directory without weights, a name that is not UTF-8 (shown
/// with \xNN for its bad bytes). Errors: Error{NotFound} when `dir` is not a directory;
/// Error{InvalidArgument} when it holds no model (naming what it looked for and every line left
/// out) or when a whole name is still taken twice (naming both paths).
std::vector<ModelEntry> scan_model_dir(const std::string& dir, std::vector<std::string>* skipped = nullptr);

/// What serving one loaded model takes: its request handler, and how to stop it (finish or
/// cancel what runs) before it is destroyed.
struct Resident {
  Handler handle;
  std::function<void(bool cancel_running)> stop;
  virtual ~Resident() = default;
};

class ModelPool {
 public:
  using Factory = std::function<std::unique_ptr<Resident>(const ModelEntry&)>;

  /// `max_resident_bytes` 0: no budget (a loaded model stays loaded).
  ModelPool(std::vector<ModelEntry> entries, uint64_t max_resident_bytes, Factory make);
  ~ModelPool();

  /// A model in use by one request: it cannot be unloaded while the lease lives.
  class Lease {
   public:
    Lease(Lease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    Resident& operator*() const;
    Resident* operator->() const { return &**this; }

   private:
    friend class ModelPool;
    Lease(ModelPool* p, size_t slot) : pool_(p), slot_(slot) {}
    ModelPool* pool_;
    size_t slot_;
  };

  /// The model `id`, loaded first when it is not (other requests for it wait for that load; other
  /// models' requests go on). Before a load, idle models are unloaded, least recently used first,
  /// until the new one fits the budget; when the busy ones alone exceed it the load goes ahead
  /// and the budget is restored as they finish. Errors: Error{NotFound} naming `id` and every
  /// known id; the factory's errors (the load failed: the next request tries again).
  Lease acquire(const std::string& id);

  /// The known ids, in order.
  std::vector<std::string> ids() const;
  struct Status {
    ModelEntry entry;
    bool loaded = false;
    int64_t in_flight = 0;
  };
  std::vector<Status> status() const;
  /// Prometheus text: models known and loaded, loads, unloads, resident bytes and the budget.
  std::string metrics() const;
  /// Stop every loaded model (SIGTERM's drain end); later acquires fail with Error{Cancelled}.
  void stop_all(bool cancel_running);
  /// Loads and unloads so far.
  int64_t loads() const;
  int64_t unloads() const;

 private:
  struct Slot {
    ModelEntry entry;
    std::unique_ptr<Resident> resident;
    bool loading = false;
    int64_t in_flight = 0;
    uint64_t last_used = 0;  ///< tick of the last acquire
  };
  void release(size_t slot);
  /// Under mu_: take idle residents out, least recently used first, while the bytes of the loaded
  /// and loading models exceed the budget; never `keep`. Returned for destruction outside the lock.
  std::vector<std::unique_ptr<Resident>> evict_locked(size_t keep);
  uint64_t resident_bytes_locked() const;
  void destroy(std::vector<std::unique_ptr<Resident>> gone);

  std::vector<Slot> slots_;
  std::map<std::string, size_t> by_id_;
  uint64_t budget_;
  Factory make_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t tick_ = 0;
  int64_t loads_ = 0, unloads_ = 0;
  bool stopped_ = false;
};

}  // namespace larql::server
