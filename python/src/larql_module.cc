// The `larql._larql` extension (nanobind): Python over the C++ API facade (src/api/api.h).
// docs/python.md is the user's guide; python/larql/__init__.py the package around this module.
//
// Threads: every call that computes (open, logits, generation, LQL) releases the GIL, so Python
// threads on different sessions of one model run at once. A Generation streams through a worker
// thread and a queue: __next__ waits for the next piece with the GIL released.
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
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "inference/sampler.h"
#include "kv/state_file.h"
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
      auto it = exception_types().find(e.kind());
      PyErr_SetString(it != exception_types().end() ? it->second : base_error, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });
}

[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorKind::InvalidArgument, msg); }

// --- arrays ----------------------------------------------------------------------------------

using F32Array = nb::ndarray<nb::numpy, float, nb::c_contig>;

// A numpy array that owns `v` (moved into a capsule): one allocation, no copy.
F32Array owned_array(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* heap = new std::vector<float>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return F32Array(heap->data(), shape.size(), shape.data(), owner);
}

// --- sampling options ------------------------------------------------------------------------

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
  validate(o.sampler);
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

class PyModel {
 public:
  PyModel(const std::string& path, int threads, std::string engine) : engine_(std::move(engine)) {
    if (threads < 0 || threads > 1024) invalid("threads must be in [0, 1024] (0: one per core), got " + std::to_string(threads));
    parse_engine_spec(engine_);  // a bad spec fails here, before the model loads
    nb::gil_scoped_release nogil;
    m_ = api::LoadedModel::open(path, api::OpenOptions{threads, "larql.Model"});
  }
  const std::shared_ptr<api::LoadedModel>& handle() const {
    if (!m_) invalid("the model is closed");
    return m_;
  }
  void close() { m_.reset(); }
  bool closed() const { return !m_; }
  const std::string& engine() const { return engine_; }

  std::vector<int32_t> ids_of(const nb::handle& text_or_ids, bool add_bos) const {
    if (nb::isinstance<nb::str>(text_or_ids)) return handle()->tokenize(nb::cast<std::string>(text_or_ids), add_bos, false);
    try {
      return nb::cast<std::vector<int32_t>>(text_or_ids);
    } catch (const nb::cast_error&) {
      throw nb::type_error("expected a str or a sequence of int token ids");
    }
  }

  std::shared_ptr<api::LoadedModel> m_;
  std::string engine_;
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
  std::vector<float> logits;
  std::unique_ptr<CaptureObserver> obs;

  static F32Array view(nb::handle owner, std::vector<float>& v, std::vector<size_t> shape) {
    return F32Array(v.data(), shape.size(), shape.data(), owner);
  }
};

// A streaming generation: a worker thread runs the session's generate() and queues each piece
// of text; Python pulls them with __next__ (GIL released while waiting). close() (or dropping
// the object) cancels and joins.
class Generation {
 public:
  Generation(std::shared_ptr<api::Generator> gen, std::vector<int32_t> ids, GenerateOptions opt)
      : gen_(std::move(gen)), ids_(std::move(ids)), opt_(std::move(opt)) {
    opt_.cancel = &cancel_;
    worker_ = std::thread([this] { run(); });
  }
  ~Generation() { close(); }

  std::optional<std::string> next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || done_; });
    if (!queue_.empty()) {
      std::string s = std::move(queue_.front());
      queue_.pop_front();
      return s;
    }
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    return std::nullopt;
  }
  void close() {
    cancel_.store(true);
    if (worker_.joinable()) worker_.join();
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ && queue_.empty();
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
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  std::shared_ptr<api::Generator> gen_;
  std::vector<int32_t> ids_;
  GenerateOptions opt_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool done_ = false;
  std::exception_ptr error_;
  std::optional<GenerateResult> result_;
  std::thread worker_;
};

// A session: one sequence that later generate() calls continue (chat), with state files.
class PySession {
 public:
  PySession(std::shared_ptr<api::LoadedModel> m, const std::string& engine, int64_t context, const std::string& resume,
            const std::string& save_state) {
    SessionOptions so;
    so.context = context;
    so.resume = resume;
    so.save_state = save_state;
    const EngineSpec spec = parse_engine_spec(engine);
    nb::gil_scoped_release nogil;
    gen_ = std::make_shared<api::Generator>(std::move(m), spec, so);
  }
  std::shared_ptr<api::Generator> gen_;
};

// --- the vindex (LQL) ------------------------------------------------------------------------

class PyVindex {
 public:
  PyVindex(const std::string& path, int threads) {
    if (threads < 0 || threads > 1024) invalid("threads must be in [0, 1024] (0: one per core), got " + std::to_string(threads));
    nb::gil_scoped_release nogil;
    s_ = api::open_lql(path, threads);
  }
  std::vector<std::string> lql(const std::string& text) {
    if (!s_) invalid("the vindex is closed");
    nb::gil_scoped_release nogil;
    return api::run_lql_json(*s_, text);
  }
  void close() { s_.reset(); }
  std::unique_ptr<lql::Session> s_;
};

}  // namespace

}  // namespace larql::py

NB_MODULE(_larql, m) {
  using namespace larql;
  using namespace larql::py;
  m.doc() = "larql's native module: the C++ engine behind the `larql` package (docs/python.md).";
  make_exceptions(m);

  nb::class_<PyModel>(m, "Model",
                      "A model opened from a GGUF file, a vindex directory (level inference) or a Hugging Face directory.\n\n"
                      "Model(path, threads=0, engine='standard'): threads 0 = one per core; engine = the default engine spec "
                      "for generate() (see `larql engines`).")
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
                   },
                   "The model's configuration: arch, n_layers, hidden, vocab, context_length, ...")
      .def("close", &PyModel::close, "Release the weights; any later call raises larql.InvalidArgument.")
      .def("tokenize",
           [](const PyModel& s, const std::string& text, bool add_bos, bool special) {
             return s.handle()->tokenize(text, add_bos, special);
           },
           "text"_a, "add_bos"_a = true, "special"_a = false,
           "Token ids of text: BOS first when add_bos (and the vocabulary wants one); special-token text parsed when special.")
      .def("detokenize",
           [](const PyModel& s, const std::vector<int32_t>& ids, bool skip_special) {
             // A byte-fallback token alone is not valid UTF-8: shown as U+FFFD, as a stream shows it.
             const std::string t = s.handle()->detokenize(ids, skip_special);
             return nb::steal<nb::str>(PyUnicode_DecodeUTF8(t.data(), static_cast<Py_ssize_t>(t.size()), "replace"));
           },
           "ids"_a, "skip_special"_a = false, "The text of token ids.")
      .def("_logits",
           [](const PyModel& s, nb::handle tokens, bool add_bos) {
             const auto m = s.handle();
             const std::vector<int32_t> ids = s.ids_of(tokens, add_bos);
             m->check_ids(ids);  // before allocating [n, vocab]
             const int64_t vocab = m->config().vocab;
             std::vector<float> out(ids.size() * static_cast<size_t>(vocab));
             {
               nb::gil_scoped_release nogil;
               m->logits(ids, out.data());
             }
             return owned_array(std::move(out), {ids.size(), static_cast<size_t>(vocab)});
           },
           "tokens"_a, "add_bos"_a = true)
      .def("_trace",
           [](const PyModel& s, nb::handle tokens, std::vector<int64_t> layers, bool add_bos) {
             const auto m = s.handle();
             const ModelConfig& c = m->config();
             for (int64_t l : layers)
               if (l < 0 || l >= c.n_layers)
                 invalid("layer " + std::to_string(l) + " is outside 0-" + std::to_string(c.n_layers - 1));
             if (std::set<int64_t>(layers.begin(), layers.end()).size() != layers.size()) invalid("a layer is listed twice");
             auto cap = std::make_unique<Capture>();
             cap->ids = s.ids_of(tokens, add_bos);
             m->check_ids(cap->ids);  // before allocating [n, vocab] and the captures
             cap->layers = layers;
             cap->positions = static_cast<int64_t>(cap->ids.size());
             cap->hidden = c.hidden;
             cap->vocab = c.vocab;
             cap->logits.resize(cap->ids.size() * static_cast<size_t>(c.vocab));
             cap->obs = std::make_unique<CaptureObserver>(layers, cap->positions, c.hidden);
             {
               nb::gil_scoped_release nogil;
               m->logits(cap->ids, cap->logits.data(), layers.empty() ? nullptr : cap->obs.get());
             }
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
             std::vector<float> out(static_cast<size_t>(n * vocab));
             {
               nb::gil_scoped_release nogil;
               if (n > 0) m->forward()->logits(rows.data(), n, out.data());
             }
             return owned_array(std::move(out), {static_cast<size_t>(n), static_cast<size_t>(vocab)});
           },
           "rows"_a, "logits [n, vocab] = lm_head . output_norm(rows) for rows [n, hidden] (the logit lens)")
      .def("_perplexity",
           [](const PyModel& s, nb::handle tokens, bool add_bos) {
             const auto m = s.handle();
             const std::vector<int32_t> ids = s.ids_of(tokens, add_bos);
             nb::gil_scoped_release nogil;
             return std::exp(m->mean_nll(ids));
           },
           "tokens"_a, "add_bos"_a = true)
      .def("_stream",
           [](const PyModel& s, nb::handle prompt, const std::string& engine, int64_t max_tokens, float temperature, int top_k,
              float top_p, float min_p, float repeat_penalty, std::optional<uint64_t> seed, const std::vector<std::string>& stop,
              bool ignore_eos, PySession* session) {
             const auto m = s.handle();
             GenerateOptions opt = generate_options(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, ignore_eos);
             std::shared_ptr<api::Generator> gen;
             if (session) {
               gen = session->gen_;
             } else {
               const EngineSpec spec = parse_engine_spec(engine.empty() ? s.engine() : engine);
               nb::gil_scoped_release nogil;
               gen = std::make_shared<api::Generator>(m, spec);
             }
             std::vector<int32_t> ids;
             if (nb::isinstance<nb::str>(prompt)) ids = gen->session().encode(nb::cast<std::string>(prompt));
             else ids = s.ids_of(prompt, false);
             gen->session().check_prompt(ids);
             return new Generation(gen, std::move(ids), std::move(opt));
           },
           "prompt"_a, "engine"_a, "max_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a, "min_p"_a, "repeat_penalty"_a,
           "seed"_a.none(), "stop"_a, "ignore_eos"_a, "session"_a.none(), nb::rv_policy::take_ownership)
      .def("_session",
           [](const PyModel& s, const std::string& engine, int64_t context, const std::string& resume, const std::string& save_state) {
             return new PySession(s.handle(), engine.empty() ? s.engine() : engine, context, resume, save_state);
           },
           "engine"_a, "context"_a, "resume"_a, "save_state"_a, nb::rv_policy::take_ownership);

  nb::class_<Capture>(m, "Capture", "What Model.trace recorded; arrays are views of its buffers (zero copy).")
      .def_prop_ro("ids", [](const Capture& c) { return c.ids; })
      .def_prop_ro("layers", [](const Capture& c) { return c.layers; })
      .def_prop_ro("logits",
                   [](nb::handle self) {
                     Capture& c = nb::cast<Capture&>(self);
                     return Capture::view(self, c.logits, {static_cast<size_t>(c.positions), static_cast<size_t>(c.vocab)});
                   },
                   "[positions, vocab] float32 logits")
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
             std::optional<std::string> s;
             {
               nb::gil_scoped_release nogil;
               s = g.next();
             }
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
      .def("_restart", [](PySession& s) { s.gen_->session().restart(); })
      .def("_context", [](const PySession& s) { return s.gen_->session().context(); })
      .def("_save_state", [](PySession& s, const std::string& path) {
        nb::gil_scoped_release nogil;
        s.gen_->engine().save_state(path);
      });

  nb::class_<PyVindex>(m, "Vindex")
      .def(nb::init<const std::string&, int>(), "path"_a, "threads"_a = 0)
      .def("_lql", &PyVindex::lql, "text"_a)
      .def("close", &PyVindex::close);
}
