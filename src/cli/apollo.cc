// `larql apollo build DOCUMENT -o STORE`: cut a document into token windows and write the
// retrieval store the `apollo` engine serves (`--engine apollo:store=STORE`).
// `larql apollo eval DOCUMENT QUESTIONS [--store STORE]`: apollo's task-level contract — QA
// answer accuracy against the standard engine with the whole document in context.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "accuracy/apollo_qa.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "kv/apollo/engine.h"
#include "kv/apollo/store.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql::cli {
namespace {

constexpr const char* kDefaultModel = "gemma-3-270m-q4_k_m";

struct BuildArgs {
  std::string model = kDefaultModel, document, out;
  int64_t window = 256, stride = 192;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  bool json = false;
};

void build(const BuildArgs& a) {
  if (a.out.empty()) throw Error(ErrorKind::InvalidArgument, "apollo build: -o STORE is required");
  const std::string text = read_text_file(a.document, "the document", a.max_input_bytes);
  const std::string model_path = resolve_model(a.model);
  const auto model = Model::load(model_path);
  register_input(model_path, "the model");
  check_output_path(a.out, "-o");  // the store is written through an AtomicWriter, refusing inputs
  const Tokenizer tok = Tokenizer(model->source().vocabulary());
  const auto doc = tok.encode(text, false, false);
  const ApolloStore s = build_apollo_store(doc, tok, model->fingerprint(), a.window, a.stride);
  if (s.entries.empty())
    throw Error(ErrorKind::InvalidArgument, "apollo build: " + a.document +
                                                " has no content words (only punctuation, whitespace or very common words); "
                                                "no query could ever match it");
  save_apollo_store(s, a.out);
  const auto file_bytes = std::filesystem::file_size(a.out);
  if (a.json) {
    nlohmann::json j = {{"store", a.out},           {"document", a.document}, {"tokens", s.doc.size()},
                        {"windows", s.windows.size()}, {"window_tokens", s.window_tokens}, {"stride", s.stride},
                        {"entries", s.entries.size()}, {"bytes", file_bytes}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s: %zu tokens -> %zu window%s of %lld tokens (stride %lld), %zu entries, %.1f KiB\n", a.out.c_str(),
              s.doc.size(), s.windows.size(), s.windows.size() == 1 ? "" : "s", (long long)s.window_tokens,
              (long long)s.stride, s.entries.size(), file_bytes / 1024.0);
}

struct EvalArgs {
  std::string model = kDefaultModel, document, questions, store;
  int64_t window = 256, stride = 192, layer = -1, top_k = 12;
  double coef = 8.0;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  int threads = 0;
  bool json = false, no_standard = false;
};

void eval(const EvalArgs& a) {
  const std::string text = read_text_file(a.document, "the document", a.max_input_bytes);
  const auto items = accuracy::parse_qa_jsonl(read_text_file(a.questions, "the questions file", a.max_input_bytes));
  Loaded l = load(a.model, a.threads, "apollo");
  // Without --store: a temporary store (a fresh, exclusively created file), removed however
  // this function ends.
  struct TempFile {
    std::string path;
    ~TempFile() {
      if (!path.empty()) std::remove(path.c_str());
    }
  } temp;
  std::string store = a.store;
  if (store.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "larql-apollo-XXXXXX").string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0) throw Error(ErrorKind::Io, "apollo eval: cannot create a temporary store in " + tmpl);
    ::close(fd);
    temp.path = store = tmpl;
    save_apollo_store(build_apollo_store(l.tokenizer.encode(text, false, false), l.tokenizer, l.model->fingerprint(),
                                         a.window, a.stride),
                      store);
  }
  ApolloOptions o;
  o.store = store;
  o.layer = a.layer;
  o.coef = a.coef;
  o.top_k = a.top_k;
  ApolloEngine apollo(l.forward, o);  // reads the whole store into memory
  if (!temp.path.empty()) {  // so the temporary file can go now (not left behind by a Ctrl-C)
    std::remove(temp.path.c_str());
    temp.path.clear();
  }
  Progress bar("apollo eval", static_cast<int64_t>(items.size()));
  const accuracy::QaReport r =
      accuracy::run_apollo_qa(l.forward, l.tokenizer, apollo, text, items, !a.no_standard,
                              [&](int64_t d, int64_t) { bar.update(d); });
  auto pct = [](int64_t k, int64_t n) { return n > 0 ? 100.0 * static_cast<double>(k) / static_cast<double>(n) : 0.0; };
  double apollo_ms = 0, standard_ms = 0;
  int64_t n_apollo = 0, n_standard = 0;
  for (const auto& it : r.items) {
    if (it.apollo_error.empty()) apollo_ms += it.apollo_ms, ++n_apollo;
    if (!it.miss && r.with_standard) standard_ms += it.standard_ms, ++n_standard;
  }
  if (a.json) {
    nlohmann::json j = {{"engine", apollo.info().config},
                        {"document_tokens", r.document_tokens},
                        {"answerable", r.answerable},
                        {"apollo_accuracy", pct(r.apollo_correct, r.answerable) / 100},
                        {"retrieval_hit_rate", pct(r.retrieval_hits, r.with_evidence) / 100},
                        {"questions_with_evidence", r.with_evidence},
                        {"false_misses", r.false_misses},
                        {"misses", r.misses},
                        {"misses_refused", r.misses_refused},
                        {"apollo_ms_per_question", n_apollo ? apollo_ms / n_apollo : 0},
                        {"apollo_store_bytes", r.apollo_store_bytes},
                        {"apollo_state_bytes", r.apollo_state_bytes}};
    if (r.with_standard)
      j.update({{"standard_accuracy", pct(r.standard_correct, r.answerable) / 100},
                {"standard_prefill_seconds", r.standard_prefill_seconds},
                {"standard_ms_per_question", n_standard ? standard_ms / n_standard : 0},
                {"standard_state_bytes", r.standard_state_bytes}});
    j["items"] = nlohmann::json::array();
    for (const auto& it : r.items) {
      nlohmann::json q = {{"question", it.question}, {"miss", it.miss}, {"window", it.window}, {"best_window", it.best_window},
                          {"coverage", it.coverage}};
      if (it.has_evidence) q["retrieval_hit"] = it.retrieval_hit;
      if (it.apollo_error.empty())
        q.update({{"apollo_correct", it.apollo_correct}, {"apollo_bits", it.apollo_bits}});
      else
        q["apollo_error"] = it.apollo_error;
      if (r.with_standard && !it.miss) q.update({{"standard_correct", it.standard_correct}, {"standard_bits", it.standard_bits}});
      j["items"].push_back(q);
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%-60s %6s %5s %4s %7s %9s\n", "question", "window", "cover", "hit", "apollo", "standard");
  for (const auto& it : r.items) {
    std::string q = it.question.size() > 58 ? it.question.substr(0, 57) + "~" : it.question;
    std::printf("%-60s %6lld %4.0f%% %4s %7s %9s\n", q.c_str(), (long long)it.window, 100 * it.coverage,
                it.miss || !it.has_evidence ? "-" : it.retrieval_hit ? "yes" : "no",
                it.apollo_miss ? "miss" : !it.apollo_error.empty() ? "error" : it.miss ? "ANSWER" : it.apollo_correct ? "ok" : "wrong",
                it.miss || !r.with_standard ? "-" : it.standard_correct ? "ok" : "wrong");
  }
  std::printf("\n%lld answerable question%s over a %lld-token document:\n", (long long)r.answerable,
              r.answerable == 1 ? "" : "s", (long long)r.document_tokens);
  std::printf("  apollo   %5.1f%% correct (retrieval hits %lld/%lld with evidence, %lld refused), %.0f ms/question, store %.1f KiB + K/V %.1f MiB\n",
              pct(r.apollo_correct, r.answerable), (long long)r.retrieval_hits, (long long)r.with_evidence,
              (long long)r.false_misses,
              n_apollo ? apollo_ms / n_apollo : 0.0, r.apollo_store_bytes / 1024.0, r.apollo_state_bytes / 1048576.0);
  if (r.with_standard)
    std::printf("  standard %5.1f%% correct, document prefill %.1f s + %.0f ms/question, K/V %.1f MiB\n",
                pct(r.standard_correct, r.answerable), r.standard_prefill_seconds, n_standard ? standard_ms / n_standard : 0.0,
                r.standard_state_bytes / 1048576.0);
  std::printf("%lld unanswerable questions: %lld refused with RetrievalMiss\n", (long long)r.misses, (long long)r.misses_refused);
  for (const auto& it : r.items)
    if (!it.apollo_error.empty() && !it.apollo_miss) std::fprintf(stderr, "error: %s\n", it.apollo_error.c_str());
}

}  // namespace

void register_apollo(CLI::App& app) {
  CLI::App* ap = app.add_subcommand("apollo", "retrieval stores for the `apollo` engine: build, eval");
  ap->require_subcommand(1);
  auto b = std::make_shared<BuildArgs>();
  CLI::App* s = ap->add_subcommand("build", "cut a document into token windows and write an apollo store");
  s->add_option("document", b->document, "text file")->required();
  s->add_option("-o,--out", b->out, "store file to write")->required();
  s->add_option("-m,--model", b->model, std::string(kModelHelp) + " (its tokenizer; the store is bound to it)")
      ->capture_default_str();
  add_int_flag(s, "--window", b->window, 16, 8192, "tokens per window,");
  add_int_flag(s, "--stride", b->stride, 1, 8192, "tokens between window starts (window - stride overlap),");
  add_max_input_flag(s, b->max_input_bytes);
  s->add_flag("--json", b->json, "one JSON object");
  s->callback([b] { build(*b); });

  auto e = std::make_shared<EvalArgs>();
  CLI::App* v = ap->add_subcommand("eval", "QA accuracy of apollo vs standard with the whole document in context");
  v->add_option("document", e->document, "the text file the store was built from")->required();
  v->add_option("questions", e->questions,
                "JSONL: {\"question\", \"answer\", \"evidence\"} or {\"question\", \"miss\": true} per line")->required();
  v->add_option("--store", e->store, "store from `apollo build` (default: build one in memory)");
  v->add_option("-m,--model", e->model, kModelHelp)->capture_default_str();
  add_int_flag(v, "--window", e->window, 16, 8192, "window tokens when building in memory,");
  add_int_flag(v, "--stride", e->stride, 1, 8192, "stride when building in memory,");
  add_int_flag(v, "--layer", e->layer, 0, 4096, "injection layer, below the model's layer count,")
      ->default_str("7/8 of the layers");
  add_float_flag(v, "--coef", e->coef, {0, 1e6}, "injection scale (0 = none),");
  add_int_flag(v, "--top-k", e->top_k, 1, 1 << 20, "entry tokens injected at most,");
  add_max_input_flag(v, e->max_input_bytes);
  v->add_flag("--no-standard", e->no_standard, "skip the whole-document standard baseline");
  add_threads_flag(v, e->threads);
  v->add_flag("--json", e->json, "one JSON object");
  v->callback([e] { eval(*e); });
}

}  // namespace larql::cli
