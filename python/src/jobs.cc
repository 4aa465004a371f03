#include "jobs.h"

#include <pythread.h>

namespace larql::py {

namespace nb = nanobind;

std::string stopped_message(StopWhy why, const std::string& what) {
  switch (why) {
    case StopWhy::ModelClosed:
      return what + " stopped: the model was closed (Model.close()) while it ran";
    case StopWhy::SessionClosed:
      return what + " stopped: the session was closed (Session.close()) while it ran";
    case StopWhy::VindexClosed:
      return what + " stopped: the vindex was closed (Vindex.close()) while it ran";
    case StopWhy::Interrupted:
      return what + " stopped: interrupted";
    default:
      return what + " stopped: cancelled";
  }
}

void Jobs::enter(Job* job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw Error(ErrorKind::InvalidArgument, closed_message());
  jobs_.insert(job);
}

void Jobs::leave(Job* job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.erase(job);
  left_.notify_all();
}

bool Jobs::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string Jobs::closed_message() const {
  const std::string cls = what_ == "model" ? "Model" : "Vindex";
  return "the " + what_ + " is closed (" + cls + ".close() was called): open it again with larql." + cls + "(path)";
}

void Jobs::refuse_new() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

void Jobs::stop_and_wait(StopWhy why, const void* owner) {
  std::unique_lock<std::mutex> lock(mu_);
  auto mine = [&](const Job* j) { return owner == nullptr || j->owner == owner; };
  for (Job* j : jobs_)
    if (mine(j)) j->stop(why);
  left_.wait(lock, [&] {
    for (const Job* j : jobs_)
      if (mine(j)) return false;
    return true;
  });
}

namespace {
unsigned long g_main_thread = 0;
}

void init_signal_watch() {
  g_main_thread = nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
}

bool SignalWatch::check() {
  if (raised()) return true;
  if (PyThread_get_thread_ident() != g_main_thread) return false;  // only the main thread runs handlers
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  PyErr_Fetch(&type_, &value_, &trace_);
  return true;
}

void SignalWatch::rethrow() {
  PyErr_Restore(type_, value_, trace_);
  type_ = value_ = trace_ = nullptr;
  throw nb::python_error();
}

SignalWatch::~SignalWatch() {
  Py_XDECREF(type_);
  Py_XDECREF(value_);
  Py_XDECREF(trace_);
}

}  // namespace larql::py
