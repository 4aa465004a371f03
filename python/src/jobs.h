// How the `larql` module's long calls stop (docs/python.md "Stopping work"). Every call that
// computes (logits, trace, perplexity, a generation, LQL, saving or resuming a session) is a Job:
// it runs on a worker thread with the GIL released, and its cancel flag is read by the forward
// pass before every layer (inference/forward.h Forward::set_cancel, kv/generate.h
// GenerateOptions::cancel, lql/session.h Session::set_cancel). The calling thread waits for it
// and, every kPoll, re-acquires the GIL to run Python's signal handlers (PyErr_CheckSignals): a
// Ctrl-C stops the job within one layer and raises KeyboardInterrupt, the model still usable.
// Model.close() (Vindex.close(), Session.close()) stops every job of it and waits until they have
// left, so no computation runs on it once close() returns.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "util/error.h"

namespace larql::py {

/// How often a waiting call checks for a Python signal (Ctrl-C).
constexpr std::chrono::milliseconds kPoll{20};

/// Why a job was asked to stop.
enum class StopWhy : int { None = 0, User, Interrupted, ModelClosed, SessionClosed, VindexClosed };

/// One piece of work running with the GIL released.
struct Job {
  std::atomic<bool> cancel{false};
  std::atomic<int> why{0};
  const void* owner = nullptr;  ///< the session it runs on, or null
  /// Ask the job to stop; the first reason given is kept.
  void stop(StopWhy w) {
    int none = 0;
    why.compare_exchange_strong(none, static_cast<int>(w));
    cancel.store(true);
  }
  StopWhy reason() const { return static_cast<StopWhy>(why.load()); }
};

/// What a stopped job tells its caller: "the model was closed while <what> ran", ...
std::string stopped_message(StopWhy why, const std::string& what);

/// The jobs running on one model or vindex. `what` names it in messages ("model", "vindex").
class Jobs {
 public:
  explicit Jobs(std::string what) : what_(std::move(what)) {}
  /// Register a job (with the GIL held). Error{InvalidArgument} "the model is closed" once
  /// refuse_new() was called.
  void enter(Job* job);
  void leave(Job* job);
  bool closed() const;
  /// "the model is closed (...)": the message of every use after close().
  std::string closed_message() const;
  /// From now on enter() refuses (called with the GIL held, so no Python thread is entering).
  void refuse_new();
  /// Stop every job of `owner` (every job when null) with `why` and wait until they have left.
  /// Call with the GIL released (a stopping generation never needs it).
  void stop_and_wait(StopWhy why, const void* owner);

 private:
  std::string what_;
  mutable std::mutex mu_;
  std::condition_variable left_;
  std::set<Job*> jobs_;
  bool closed_ = false;
};

/// Record the main thread (module init): only it runs Python's signal handlers.
void init_signal_watch();

/// Ctrl-C while waiting for a job. check() (GIL released) re-acquires the GIL on the main thread
/// and runs Python's signal handlers; when one raised (KeyboardInterrupt), its exception is kept
/// and rethrow() (GIL held) raises it. Must be destroyed with the GIL held.
class SignalWatch {
 public:
  SignalWatch() = default;
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch();
  /// True once a handler raised (then no more checks are made).
  bool check();
  bool raised() const { return type_ != nullptr; }
  [[noreturn]] void rethrow();

 private:
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* trace_ = nullptr;
};

/// Run `work(cancel)` (cancel: the job's flag, to hand to the forward pass) on a worker thread,
/// registered in `jobs` under `owner`, while the calling thread (GIL released) waits and watches
/// for Ctrl-C. Call with the GIL held; returns work's result. A Ctrl-C stops the job and raises
/// KeyboardInterrupt once it has stopped (whatever it returned); a close() of the model or
/// session raises Error{Cancelled} naming `what` ("logits()") and the close; work's own errors
/// propagate. `work` must return a value (not void) and must not touch Python objects.
template <class F>
auto run_job(Jobs& jobs, const void* owner, const std::string& what, F&& work)
    -> std::invoke_result_t<F&, const std::atomic<bool>*> {
  using R = std::invoke_result_t<F&, const std::atomic<bool>*>;
  Job job;
  job.owner = owner;
  jobs.enter(&job);
  std::optional<R> result;
  std::exception_ptr err;
  SignalWatch watch;
  {
    nanobind::gil_scoped_release nogil;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread worker([&] {
      try {
        result.emplace(work(&job.cancel));
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, kPoll, [&] { return done; })) {
      if (watch.raised()) continue;
      lock.unlock();
      if (watch.check()) job.stop(StopWhy::Interrupted);
      lock.lock();
    }
    lock.unlock();
    worker.join();
    jobs.leave(&job);
  }
  if (watch.raised()) watch.rethrow();
  if (err) {
    const StopWhy why = job.reason();
    if (why == StopWhy::ModelClosed || why == StopWhy::SessionClosed || why == StopWhy::VindexClosed) {
      try {
        std::rethrow_exception(err);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw Error(ErrorKind::Cancelled, stopped_message(why, what));
        throw;
      }
    }
    std::rethrow_exception(err);
  }
  return std::move(*result);
}

}  // namespace larql::py
