// The `larql._larql` extension (nanobind): Python over the C++ API facade (src/api/api.h).
// docs/python.md is the user's guide; python/larql/__init__.py the package around this module,
// which checks every argument's type and range (naming the Python parameter) before it gets here.
//
// Threads: every call that computes (logits, trace, perplexity, generation, LQL, sessions) is a
// job (jobs.h): it runs on a worker thread with the GIL released while the caller waits, watching
// for Ctrl-C (KeyboardInterrupt within one layer). A Generation streams through its own worker
// thread and a queue: __next__ waits for the next piece with the GIL released. close() of a
// model, session or vindex stops the jobs running on it and waits until they have left.
// Memory: arrays handed to Python are views of buffers this module owns (a Capture's, a logits
// result's), kept alive by their owner object: no copy (docs/python.md "Arrays").
// Errors: larql::Error becomes the larql exception of its kind (larql.InvalidArgument, ...).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/api.h"
#include "inference/sampler.h"
#include "jobs.h"
#include "util/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace larql::py {

namespace {

// --- exceptions ------------------------------------------------------------------------------

std::map<ErrorKind, PyObject*>& exception_types() {
  static auto* m = new std::map<ErrorKind, PyObject*>();
  return *m;
}
PyObject* base_error = nullptr;

PyObject* exception_type(ErrorKind kind) {
  auto it = exception_types().find(kind);
  return it != exception_types().end() ? it->second : base_error;
}

// A message as a str (a message holding a path that is not UTF-8 still reads, with U+FFFD).
nb::object message_str(const char* what) {
  return nb::steal(PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "replace"));
}

void make_exceptions(nb::module_& m) {
  base_error = PyErr_NewExceptionWithDoc("larql.Error", "Base of every larql error; str() is the message.", PyExc_RuntimeError,
                                         nullptr);
  m.attr("Error") = nb::handle(base_error);
  struct K {
    ErrorKind kind;
    const char* name;
    PyObject* also;  // a builtin the kind is also (ValueError, FileNotFoundError, ...), or null
  };
  const K kinds[] = {
      {ErrorKind::InvalidArgument, "InvalidArgument", PyExc_ValueError},
      {ErrorKind::Usage, "InvalidArgument", nullptr},
      {ErrorKind::NotFound, "NotFound", PyExc_FileNotFoundError},
      {ErrorKind::Io, "IoError", PyExc_OSError},
      {ErrorKind::Format, "FormatError", PyExc_ValueError},
      {ErrorKind::Unsupported, "Unsupported", nullptr},
      {ErrorKind::ContextOverflow, "ContextOverflow", PyExc_ValueError},
      {ErrorKind::EmptyPrompt, "EmptyPrompt", PyExc_ValueError},
      {ErrorKind::BackendUnavailable, "BackendUnavailable", nullptr},
      {ErrorKind::RetrievalMiss, "RetrievalMiss", nullptr},
      {ErrorKind::InvariantViolation, "InvariantViolation", nullptr},
      {ErrorKind::BackendFailure, "BackendFailure", nullptr},
      {ErrorKind::Cancelled, "Cancelled", nullptr},
  };
  std::map<std::string, PyObject*> made;
  for (const K& k : kinds) {
    PyObject*& t = made[k.name];
    if (!t) {
      const std::string qual = std::string("larql.") + k.name;
      PyObject* bases = k.also ? PyTuple_Pack(2, base_error, k.also) : PyTuple_Pack(1, base_error);
      t = PyErr_NewException(qual.c_str(), bases, nullptr);
      Py_DECREF(bases);
      m.attr(k.name) = nb::handle(t);
    }
    exception_types()[k.kind] = t;
  }
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetObject(exception_type(e.kind()), message_str(e.what()).ptr());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });
}

[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorKind::InvalidArgument, msg); }

// Raise `e` as its larql exception with the JSON results of the statements before the failing
// one in its `_lql_docs` attribute (the package makes them Tables: docs/python.md "LQL").
[[noreturn]] void raise_with_results(const Error& e, const std::vector<std::string>& docs) {
  PyObject* type = exception_type(e.kind());
  nb::object exc = nb::steal(PyObject_CallOneArg(type, message_str(e.what()).ptr()));
  if (!exc.is_valid()) throw nb::python_error();
  nb::setattr(exc, "_lql_docs", nb::cast(docs));
  PyErr_SetObject(type, exc.ptr());
  throw nb::python_error();
}

// The UTF-8 bytes of a str argument: a str holding a lone surrogate ("\ud800") has none, and is
// refused naming the parameter (nanobind's own conversion would say "std::bad_cast").
std::string utf8(nb::handle h, const char* name) {
  if (!nb::isinstance<nb::str>(h)) throw nb::type_error((std::string(name) + " must be a str").c_str());
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
  if (!p) {
    PyErr_Clear();
    invalid(std::string(name) + " is not valid Unicode text: it holds a lone surrogate (such as '\\ud800'), which has no "
                                "UTF-8 encoding");
  }
  return std::string(p, static_cast<size_t>(n));
}

// --- arrays ----------------------------------------------------------------------------------

using F32Array = nb::ndarray<nb::numpy, float, nb::c_contig>;

// An allocator whose resize() leaves floats uninitialised. A [n, vocab] logits buffer is hundreds
// of MB (600 positions x 262,144 = 629 MB): zero-filling it before the job starts took 0.7-1.8 s
// on 2 cores, with the GIL held and no Ctrl-C watched. Unfilled, its pages are touched as the
// job writes each row, inside the job, where Ctrl-C stops it.
template <class T>
struct DefaultInit : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInit<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using RowBuffer = std::vector<float, DefaultInit<float>>;  // every element written before it is read

// A numpy array that owns `v` (moved into a capsule): one allocation, no copy.
template <class Vec>
F32Array owned_array(Vec&& v, std::vector<size_t> shape) {
  using V = std::remove_reference_t<Vec>;
  auto* heap = new V(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<V*>(p); });
  return F32Array(heap->data(), shape.size(), shape.data(), owner);
}

// --- sampling options ------------------------------------------------------------------------

// Sampler errors name the CLI's flags ("--top-k"); the package's parameters are these.
std::string python_names(std::string msg) {
  static const std::pair<const char*, const char*> names[] = {
      {"--temperature", "temperature"}, {"--top-k", "top_k"}, {"--top-p", "top_p"},
      {"--min-p", "min_p"}, {"--repeat-penalty", "repeat_penalty"}, {"--repeat-last-n", "repeat_last_n"}};
  for (const auto& [flag, name] : names)
    for (size_t at = msg.find(flag); at != std::string::npos; at = msg.find(flag, at))
      msg.replace(at, std::strlen(flag), name);
  return msg;
}

GenerateOptions generate_options(int64_t max_tokens, float temperature, int top_k, float top_p, float min_p,
                                 float repeat_penalty, std::optional<uint64_t> seed, const std::vector<std::string>& stop,
                                 bool ignore_eos) {
  if (max_tokens < 0) invalid("max_tokens must be >= 0, got " + std::to_string(max_tokens));
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampler.temperature = temperature;
  o.sampler.top_k = top_k;
  o.sampler.top_p = top_p;
  o.sampler.min_p = min_p;
  o.sampler.repeat_penalty = repeat_penalty;
  o.sampler.seed = seed ? *seed : std::random_device{}();
  try {
    validate(o.sampler);
  } catch (const Error& e) {
    throw Error(e.kind(), python_names(e.what()));
  }
  o.stop_strings = stop;
  o.stop_at_eog = !ignore_eos;
  return o;
}

nb::dict result_dict(const GenerateResult& r) {
  nb::dict d;
  d["text"] = r.text;
  d["ids"] = r.ids;
  d["prompt_ids"] = r.prompt_ids;
  d["stop_reason"] = r.stop_reason;
  d["notes"] = r.notes;
  d["prefill_tok_s"] = r.prefill_tok_s();
  d["decode_tok_s"] = r.decode_tok_s();
  return d;
}

// --- the model -------------------------------------------------------------------------------

// What a Session runs on: its generator, until Session.close() or Model.close() (GIL-guarded).
struct SessionSlot {
  std::shared_ptr<api::Generator> gen;
  bool closed = false;
};

class PyModel {
 public:
  PyModel(const std::string& path, int threads, std::string engine) : engine_(std::move(engine)) {
    if (threads < 0 || threads > 1024) invalid("threads must be in [0, 1024] (0: one per core), got " + std::to_string(threads));
    parse_engine_spec(engine_);  // a bad spec fails here, before the model loads
    nb::gil_scoped_release nogil;
    m_ = api::LoadedModel::open(path, api::OpenOptions{threads, "larql.Model"});
  }
  const std::shared_ptr<api::LoadedModel>& handle() const {
    if (!m_) invalid(jobs_->closed_message());
    return m_;
  }
  // Refuse new work, stop what runs (generations in any thread end, a logits() call raises
  // larql.Cancelled) and wait for it, then release the weights and every session's engine.
  void close() {
    if (!m_) return;
    jobs_->refuse_new();
    {
      nb::gil_scoped_release nogil;
      jobs_->stop_and_wait(StopWhy::ModelClosed, nullptr);
    }
    for (auto& w : slots_)
      if (auto slot = w.lock()) {
        slot->gen.reset();
        slot->closed = true;
      }
    slots_.clear();
    m_.reset();
  }
  bool closed() const { return !m_; }
  const std::string& engine() const { return engine_; }

  std::vector<int32_t> ids_of(const nb::handle& text_or_ids, bool add_bos, const char* name) const {
    if (nb::isinstance<nb::str>(text_or_ids)) return handle()->tokenize(utf8(text_or_ids, name), add_bos, false);
    try {
      return nb::cast<std::vector<int32_t>>(text_or_ids);
    } catch (const nb::cast_error&) {
      throw nb::type_error((std::string(name) + " must be a str or a sequence of int token ids").c_str());
    }
  }

  std::shared_ptr<Jobs> jobs_ = std::make_shared<Jobs>("model");
  std::shared_ptr<api::LoadedModel> m_;
  std::string engine_;
  std::vector<std::weak_ptr<SessionSlot>> slots_;
};

// What a capture records: per wanted layer, [positions, hidden] of each kind.
class CaptureObserver final : public LayerObserver {
 public:
  CaptureObserver(std::vector<int64_t> layers, int64_t positions, int64_t hidden)
      : layers_(std::move(layers)), n_(positions), hidden_(hidden) {
    for (size_t i = 0; i < layers_.size(); ++i) slot_[layers_[i]] = i;
    for (auto* v : {&residual, &attn, &ffn_in, &ffn}) v->assign(layers_.size() * static_cast<size_t>(n_ * hidden_), 0.0f);
  }
  void on_layer(const LayerTrace& t) override {
    auto it = slot_.find(t.layer);
    if (it == slot_.end() || t.pos < 0 || t.pos >= n_) return;
    const size_t at = (it->second * static_cast<size_t>(n_) + static_cast<size_t>(t.pos)) * static_cast<size_t>(hidden_);
    std::copy(t.residual_out, t.residual_out + hidden_, residual.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(t.attn_out, t.attn_out + hidden_, attn.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(t.ffn_in, t.ffn_in + hidden_, ffn_in.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(t.ffn_out, t.ffn_out + hidden_, ffn.begin() + static_cast<std::ptrdiff_t>(at));
  }
  std::vector<int64_t> layers_;
  std::map<int64_t, size_t> slot_;
  int64_t n_, hidden_;
  std::vector<float> residual, attn, ffn_in, ffn;
};

// The result of Model.trace: token ids, logits and the captured rows, owned here; the arrays
// are views of these buffers with this object as their owner (zero copy; the same address on
// every read).
class Capture {
 public:
  std::vector<int32_t> ids;
  std::vector<int64_t> layers;
  int64_t positions = 0, hidden = 0, vocab = 0;
  RowBuffer logits;
  std::unique_ptr<CaptureObserver> obs;

  template <class Vec>
  static F32Array view(nb::handle owner, Vec& v, std::vector<size_t> shape) {
    return F32Array(v.data(), shape.size(), shape.data(), owner);
  }
};

// A streaming generation: a worker thread runs the generator's generate() and queues each piece
// of text; Python pulls them with __next__ (GIL released while waiting, Ctrl-C watched). It is a
// job of its model (jobs.h): Model.close() or its Session's close() stops it. close() (or
// dropping the object) cancels and joins.
class Generation {
 public:
  Generation(std::shared_ptr<Jobs> jobs, const void* owner, std::shared_ptr<api::Generator> gen, std::vector<int32_t> ids,
             GenerateOptions opt)
      : jobs_(std::move(jobs)), gen_(std::move(gen)), ids_(std::move(ids)), opt_(std::move(opt)) {
    job_.owner = owner;
    jobs_->enter(&job_);
    opt_.cancel = &job_.cancel;
    try {
      worker_ = std::thread([this] { run(); });
    } catch (...) {
      jobs_->leave(&job_);
      throw;
    }
  }
  ~Generation() { close(); }

  // The next piece, or nullopt at the end. With the GIL released; when `watch` sees a Ctrl-C the
  // generation is stopped, waited for, and nullopt returned (the caller raises the interrupt).
  // A generation stopped by Model.close() / Session.close() raises larql.Cancelled after its
  // last piece.
  std::optional<std::string> next(SignalWatch& watch) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (watch.raised()) {
        cv_.wait(lock, [&] { return done_; });
        return std::nullopt;
      }
      if (!queue_.empty()) {
        std::string s = std::move(queue_.front());
        queue_.pop_front();
        return s;
      }
      if (done_) break;
      if (!cv_.wait_for(lock, kPoll, [&] { return !queue_.empty() || done_; })) {
        lock.unlock();
        if (watch.check()) job_.stop(StopWhy::Interrupted);
        lock.lock();
      }
    }
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    const StopWhy why = job_.reason();
    if ((why == StopWhy::ModelClosed || why == StopWhy::SessionClosed) && result_ && result_->stop_reason == "cancelled" &&
        !told_closed_) {
      told_closed_ = true;
      throw Error(ErrorKind::Cancelled, stopped_message(why, "the generation") + " (after " +
                                            std::to_string(result_->ids.size()) + " tokens; .result holds them)");
    }
    return std::nullopt;
  }
  void close() {
    job_.stop(StopWhy::User);
    if (worker_.joinable()) worker_.join();
  }
  std::optional<GenerateResult> result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }

 private:
  void run() {
    try {
      GenerateResult r = gen_->generate_ids(ids_, opt_, [this](std::string_view piece) {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.emplace_back(piece);
        cv_.notify_one();
      });
      std::lock_guard<std::mutex> lock(mu_);
      result_ = std::move(r);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.kind() == ErrorKind::Cancelled && job_.reason() != StopWhy::None) {
        // Stopped while reading the prompt: a generation of no tokens, like one stopped later.
        GenerateResult r;
        r.prompt_ids = ids_;
        r.stop_reason = "cancelled";
        result_ = std::move(r);
      } else {
        error_ = std::current_exception();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    gen_.reset();  // done with the generator (and so with the model)
    jobs_->leave(&job_);
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  std::shared_ptr<Jobs> jobs_;
  std::shared_ptr<api::Generator> gen_;
  std::vector<int32_t> ids_;
  GenerateOptions opt_;
  Job job_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool done_ = false;
  bool told_closed_ = false;
  std::exception_ptr error_;
  std::optional<GenerateResult> result_;
  std::thread worker_;
};

// A session: one sequence that later generate() calls continue (chat), with state files.
class PySession {
 public:
  PySession(std::shared_ptr<Jobs> jobs, std::shared_ptr<SessionSlot> slot) : jobs_(std::move(jobs)), slot_(std::move(slot)) {}
  const std::shared_ptr<api::Generator>& gen() const {
    if (jobs_->closed()) invalid(jobs_->closed_message());
    if (slot_->closed || !slot_->gen) invalid("the session is closed (Session.close() was called): make a new one with Model.session()");
    return slot_->gen;
  }
  // Stop a generation running on it (it raises larql.Cancelled) and release its engine.
  void close() {
    if (slot_->closed) return;
    slot_->closed = true;
    {
      nb::gil_scoped_release nogil;
      jobs_->stop_and_wait(StopWhy::SessionClosed, slot_.get());
    }
    slot_->gen.reset();
  }
  bool closed() const { return slot_->closed || jobs_->closed(); }
  std::shared_ptr<Jobs> jobs_;
  std::shared_ptr<SessionSlot> slot_;
};

// --- the vindex (LQL) ------------------------------------------------------------------------

class PyVindex {
 public:
  PyVindex(const std::string& path, int threads) {
    if (threads < 0 || threads > 1024) invalid("threads must be in [0, 1024] (0: one per core), got " + std::to_string(threads));
    nb::gil_scoped_release nogil;
    s_ = api::open_lql(path, threads);
  }
  lql::Session& session() const {
    if (!s_) invalid(jobs_->closed_message());
    return *s_;
  }
  // Every statement's JSON result; on an error, the results before it ride on the exception.
  std::vector<std::string> lql(const std::string& text) {
    lql::Session& s = session();
    if (busy_) invalid("the vindex is busy: another thread's lql() on it has not finished (a Vindex is used by one thread at a time)");
    busy_ = true;
    struct Unbusy {
      bool& b;
      ~Unbusy() { b = false; }
    } unbusy{busy_};
    struct Out {
      std::vector<std::string> docs;
      std::optional<Error> error;
    };
    Out out = run_job(*jobs_, nullptr, "lql()", [&](const std::atomic<bool>* cancel) {
      struct Flag {
        lql::Session& s;
        ~Flag() { s.set_cancel(nullptr); }
      } flag{s};
      s.set_cancel(cancel);
      Out o;
      try {
        api::run_lql_json(s, text, o.docs);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        o.error = e;
      }
      return o;
    });
    if (out.error) raise_with_results(*out.error, out.docs);
    return out.docs;
  }
  void close() {
    if (!s_) return;
    jobs_->refuse_new();
    {
      nb::gil_scoped_release nogil;
      jobs_->stop_and_wait(StopWhy::VindexClosed, nullptr);
    }
    s_.reset();
  }
  std::shared_ptr<Jobs> jobs_ = std::make_shared<Jobs>("vindex");
  std::unique_ptr<lql::Session> s_;
  bool busy_ = false;
};

}  // namespace

}  // namespace larql::py

NB_MODULE(_larql, m) {
  using namespace larql;
  using namespace larql::py;
  m.doc() = "larql's native module: the C++ engine behind the `larql` package (docs/python.md). Its names are private: "
            "use the package's.";
  make_exceptions(m);
  init_signal_watch();

  nb::class_<PyModel>(m, "Model", "The native model behind larql.Model.")
      .def(nb::init<const std::string&, int, std::string>(), "path"_a, "threads"_a = 0, "engine"_a = "standard")
      .def_prop_ro("path", [](const PyModel& s) { return s.handle()->path(); })
      .def_prop_ro("engine", &PyModel::engine)
      .def_prop_ro("closed", &PyModel::closed)
      .def_prop_ro("threads", [](const PyModel& s) { return s.handle()->threads(); })
      .def_prop_ro("config",
                   [](const PyModel& s) {
                     const ModelConfig& c = s.handle()->config();
                     nb::dict d;
                     d["arch"] = c.arch;
                     d["name"] = c.name;
                     d["n_layers"] = c.n_layers;
                     d["hidden"] = c.hidden;
                     d["ffn"] = c.ffn;
                     d["n_heads"] = c.n_heads;
                     d["n_kv_heads"] = c.n_kv_heads;
                     d["head_dim"] = c.head_dim;
                     d["vocab"] = c.vocab;
                     d["context_length"] = c.context_length;
                     d["n_experts"] = c.n_experts;
                     d["n_experts_used"] = c.n_experts_used;
                     return d;
                   })
      .def("close", &PyModel::close)
      .def("tokenize",
           [](const PyModel& s, nb::handle text, bool add_bos, bool special) {
             return s.handle()->tokenize(utf8(text, "text"), add_bos, special);
           },
           "text"_a, "add_bos"_a = true, "special"_a = false)
      .def("detokenize",
           [](const PyModel& s, const std::vector<int32_t>& ids, bool skip_special) {
             // A byte-fallback token alone is not valid UTF-8: shown as U+FFFD, as a stream shows it.
             const std::string t = s.handle()->detokenize(ids, skip_special);
             return nb::steal<nb::str>(PyUnicode_DecodeUTF8(t.data(), static_cast<Py_ssize_t>(t.size()), "replace"));
           },
           "ids"_a, "skip_special"_a = false)
      .def("_logits",
           [](const PyModel& s, nb::handle tokens, bool add_bos) {
             const auto m = s.handle();
             const std::vector<int32_t> ids = s.ids_of(tokens, add_bos, "tokens");
             m->check_ids(ids);  // before allocating [n, vocab]
             const int64_t vocab = m->config().vocab;
             RowBuffer out(ids.size() * static_cast<size_t>(vocab));
             run_job(*s.jobs_, nullptr, "logits()", [&](const std::atomic<bool>* cancel) {
               m->logits(ids, out.data(), nullptr, cancel);
               return 0;
             });
             return owned_array(std::move(out), {ids.size(), static_cast<size_t>(vocab)});
           },
           "tokens"_a, "add_bos"_a = true)
      .def("_trace",
           [](const PyModel& s, nb::handle tokens, std::vector<int64_t> layers, bool add_bos) {
             const auto m = s.handle();
             const ModelConfig& c = m->config();
             for (int64_t l : layers)
               if (l < 0 || l >= c.n_layers)
                 invalid("layers: layer " + std::to_string(l) + " is outside 0-" + std::to_string(c.n_layers - 1));
             if (std::set<int64_t>(layers.begin(), layers.end()).size() != layers.size()) invalid("layers: a layer is listed twice");
             auto cap = std::make_unique<Capture>();
             cap->ids = s.ids_of(tokens, add_bos, "tokens");
             m->check_ids(cap->ids, "trace");  // before allocating [n, vocab] and the captures
             cap->layers = layers;
             cap->positions = static_cast<int64_t>(cap->ids.size());
             cap->hidden = c.hidden;
             cap->vocab = c.vocab;
             cap->logits.resize(cap->ids.size() * static_cast<size_t>(c.vocab));
             cap->obs = std::make_unique<CaptureObserver>(layers, cap->positions, c.hidden);
             Capture* raw = cap.get();
             run_job(*s.jobs_, nullptr, "trace()", [&](const std::atomic<bool>* cancel) {
               m->logits(raw->ids, raw->logits.data(), raw->layers.empty() ? nullptr : raw->obs.get(), cancel);
               return 0;
             });
             return cap.release();
           },
           "tokens"_a, "layers"_a, "add_bos"_a = true, nb::rv_policy::take_ownership)
      .def("_lens",
           [](const PyModel& s, nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> rows) {
             const auto m = s.handle();
             const int64_t hidden = m->config().hidden, vocab = m->config().vocab;
             if (static_cast<int64_t>(rows.shape(1)) != hidden)
               invalid("rows must be [n, hidden = " + std::to_string(hidden) + "], got width " + std::to_string(rows.shape(1)));
             const int64_t n = static_cast<int64_t>(rows.shape(0));
             RowBuffer out(static_cast<size_t>(n * vocab));
             {
               nb::gil_scoped_release nogil;
               if (n > 0) m->forward()->logits(rows.data(), n, out.data());
             }
             return owned_array(std::move(out), {static_cast<size_t>(n), static_cast<size_t>(vocab)});
           },
           "rows"_a)
      .def("_perplexity",
           [](const PyModel& s, nb::handle tokens, bool add_bos) {
             const auto m = s.handle();
             const std::vector<int32_t> ids = s.ids_of(tokens, add_bos, "tokens");
             const double nll =
                 run_job(*s.jobs_, nullptr, "perplexity()", [&](const std::atomic<bool>* cancel) { return m->mean_nll(ids, cancel); });
             return std::exp(nll);
           },
           "tokens"_a, "add_bos"_a = true)
      .def("_stream",
           [](const PyModel& s, nb::handle prompt, const std::string& engine, int64_t max_tokens, float temperature, int top_k,
              float top_p, float min_p, float repeat_penalty, std::optional<uint64_t> seed, const std::vector<std::string>& stop,
              bool ignore_eos, PySession* session) {
             const auto m = s.handle();
             GenerateOptions opt = generate_options(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, ignore_eos);
             std::shared_ptr<api::Generator> gen;
             const void* owner = nullptr;
             if (session) {
               gen = session->gen();
               owner = session->slot_.get();
             } else {
               const EngineSpec spec = parse_engine_spec(engine.empty() ? s.engine() : engine);
               nb::gil_scoped_release nogil;
               gen = std::make_shared<api::Generator>(m, spec);
             }
             std::vector<int32_t> ids;
             if (nb::isinstance<nb::str>(prompt)) ids = gen->session().encode(utf8(prompt, "prompt"));
             else ids = s.ids_of(prompt, false, "prompt");
             gen->session().check_prompt(ids);
             return new Generation(s.jobs_, owner, gen, std::move(ids), std::move(opt));
           },
           "prompt"_a, "engine"_a, "max_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a, "min_p"_a, "repeat_penalty"_a,
           "seed"_a.none(), "stop"_a, "ignore_eos"_a, "session"_a.none(), nb::rv_policy::take_ownership)
      .def("_session",
           [](PyModel& s, const std::string& engine, int64_t context, const std::string& resume, const std::string& save_state) {
             const auto m = s.handle();
             SessionOptions so;
             so.context = context;
             so.resume = resume;
             so.save_state = save_state;
             const EngineSpec spec = parse_engine_spec(engine.empty() ? s.engine() : engine);
             auto slot = std::make_shared<SessionSlot>();
             slot->gen = run_job(*s.jobs_, nullptr, "session()",
                                 [&](const std::atomic<bool>*) { return std::make_shared<api::Generator>(m, spec, so); });
             s.slots_.erase(std::remove_if(s.slots_.begin(), s.slots_.end(), [](const auto& w) { return w.expired(); }), s.slots_.end());
             s.slots_.push_back(slot);
             return new PySession(s.jobs_, std::move(slot));
           },
           "engine"_a, "context"_a, "resume"_a, "save_state"_a, nb::rv_policy::take_ownership);

  nb::class_<Capture>(m, "Capture", "What Model.trace recorded; arrays are views of its buffers (zero copy).")
      .def_prop_ro("ids", [](const Capture& c) { return c.ids; })
      .def_prop_ro("layers", [](const Capture& c) { return c.layers; })
      .def_prop_ro("logits",
                   [](nb::handle self) {
                     Capture& c = nb::cast<Capture&>(self);
                     return Capture::view(self, c.logits, {static_cast<size_t>(c.positions), static_cast<size_t>(c.vocab)});
                   })
      .def("_rows", [](nb::handle self, const std::string& kind) {
        Capture& c = nb::cast<Capture&>(self);
        std::vector<float>* v = kind == "residual" ? &c.obs->residual
                                : kind == "attn"   ? &c.obs->attn
                                : kind == "ffn_in" ? &c.obs->ffn_in
                                : kind == "ffn"    ? &c.obs->ffn
                                                   : nullptr;
        if (!v) invalid("unknown capture kind \"" + kind + "\" (residual, attn, ffn_in, ffn)");
        return Capture::view(self, *v, {c.layers.size(), static_cast<size_t>(c.positions), static_cast<size_t>(c.hidden)});
      });

  nb::class_<Generation>(m, "Generation")
      .def("_next",
           [](Generation& g) {
             SignalWatch watch;
             std::optional<std::string> s;
             {
               nb::gil_scoped_release nogil;
               s = g.next(watch);
             }
             if (watch.raised()) watch.rethrow();
             return s;
           })
      .def("_close",
           [](Generation& g) {
             nb::gil_scoped_release nogil;
             g.close();
           })
      .def("_result", [](const Generation& g) -> nb::object {
        const auto r = g.result();
        if (!r) return nb::none();
        return result_dict(*r);
      });

  nb::class_<PySession>(m, "Session")
      .def("_restart", [](PySession& s) { s.gen()->session().restart(); })
      .def("_context", [](const PySession& s) { return s.gen()->session().context(); })
      .def("_close", &PySession::close)
      .def_prop_ro("_closed", &PySession::closed)
      .def("_save_state", [](PySession& s, const std::string& path) {
        const auto gen = s.gen();
        if (gen->busy()) invalid("the session is busy: a generation on it has not finished (finish or close it first)");
        run_job(*s.jobs_, s.slot_.get(), "save_state()", [&](const std::atomic<bool>*) {
          gen->engine().save_state(path);
          return 0;
        });
      });

  nb::class_<PyVindex>(m, "Vindex")
      .def(nb::init<const std::string&, int>(), "path"_a, "threads"_a = 0)
      .def("_lql", &PyVindex::lql, "text"_a)
      .def("_info",
           [](const PyVindex& v) {
             const lql::Session& s = v.session();
             const vindex::VindexIndex& x = s.index();
             nb::dict d;
             d["path"] = s.path();
             d["model"] = x.model;
             d["num_layers"] = x.num_layers;
             d["extract_level"] = std::string(vindex::extract_level_name(x.extract_level));
             return d;
           })
      .def_prop_ro("closed", [](const PyVindex& v) { return !v.s_; })
      .def("close", &PyVindex::close);
}
