// `larql shannon MODEL --engines standard,markov-rs,... [--corpus NAME|FILE]`: correctness in bits
// per token (docs/cli.md "shannon"): the cross-entropy of every token after BOS, in bits, per engine
// and corpus — the accuracy corpora (src/accuracy/accuracy.h: parametric facts, needle haystacks,
// conflicts; each case's prompt + answer one sequence) or a text file — and each engine's delta to
// the standard engine on the same tokens. The scoring is perplexity's (cli/scoring.h): the
// standard engine through the batched forward pass, the others teacher-forced token by token.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "accuracy/accuracy.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "cli/scoring.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ShannonArgs {
  std::string model, engines = "standard", corpus = "all", data;
  int64_t max_tokens = 0;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  int threads = 0;
  bool quick = false, json = false;
};

/// One corpus: its name and its sequences (token ids, BOS first).
struct Corpus {
  std::string name;
  std::vector<std::vector<int32_t>> seqs;
  int64_t scored = 0;  ///< tokens predicted: sum of (length - 1)
};

/// One engine on one corpus.
struct Row {
  double nll = 0;  ///< nats, summed
  std::string skipped;
};

constexpr double kLn2 = 0.69314718055994530942;

/// The corpora to score. `dropped` gets one {corpus, reason} per needle haystack too long for the
/// model's context (reported, never silent); --corpus in-context with none that fits is an error.
std::vector<Corpus> build_corpora(const ShannonArgs& a, const Loaded& l, nlohmann::json& dropped) {
  const ModelConfig& c = l.model->config();
  const Tokenizer& tok = l.tokenizer;
  std::vector<std::pair<std::string, std::string>> texts;  // corpus name, text
  const bool named = a.corpus == "parametric" || a.corpus == "in-context" || a.corpus == "conflict" || a.corpus == "all";
  if (named) {
    const char* env_data = std::getenv("LARQL_ACCURACY_DATA");  // the library reads no environment
    const std::string dir = accuracy::find_data_dir(a.data, env_data != nullptr ? env_data : "");
    if (a.corpus == "in-context" || a.corpus == "all") {
      const auto lengths = accuracy::needle_lengths(a.quick);
      for (int64_t n : lengths)
        if (n > c.context_length)
          dropped.push_back({{"corpus", "in-context-" + accuracy::length_label(n)},
                             {"reason", "its haystack of " + std::to_string(n) + " tokens exceeds the model's context of " +
                                            std::to_string(c.context_length)}});
      if (a.corpus == "in-context" && dropped.size() == lengths.size())
        throw Error(ErrorKind::ContextOverflow, "--corpus in-context: no needle haystack fits the model's context of " +
                                                    std::to_string(c.context_length) + " tokens (the shortest is " +
                                                    std::to_string(lengths.front()) + ")");
    }
    for (const auto& k : accuracy::build_cases(tok, {a.corpus}, a.quick, dir, c.context_length))
      texts.emplace_back(k.corpus, k.prompt + k.answer);
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(a.corpus, ec))
      throw Error(ErrorKind::NotFound, "--corpus " + a.corpus + ": neither a corpus (parametric, in-context, conflict, all) nor a file");
    texts.emplace_back(std::filesystem::path(a.corpus).filename().string(), read_text_file(a.corpus, "the corpus", a.max_input_bytes));
  }
  std::vector<Corpus> out;
  for (const auto& [name, text] : texts) {
    auto ids = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
    if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n > c.context_length)
      throw Error(ErrorKind::ContextOverflow, name + ": " + std::to_string(n) + " tokens exceed the context of " +
                                                  std::to_string(c.context_length) + " (use --max-tokens)");
    if (n < 2) continue;  // nothing after BOS to predict
    if (out.empty() || out.back().name != name) out.push_back({name, {}, 0});
    out.back().scored += n - 1;
    out.back().seqs.push_back(std::move(ids));
  }
  if (out.empty()) throw Error(ErrorKind::InvalidArgument, "--corpus " + a.corpus + ": no text with a token after BOS to score");
  return out;
}

void run(const ShannonArgs& a) {
  std::vector<EngineSpec> specs = parse_cli_engine_list(a.engines);  // fail before loading
  // The reference: standard with its defaults, scored first (added when not listed).
  size_t ref = specs.size();
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].to_string() == "standard") ref = i;
  bool ref_added = false;
  if (ref == specs.size()) {
    specs.insert(specs.begin(), parse_cli_engine_spec("standard"));
    ref = 0;
    ref_added = true;
  }
  Loaded l = load(a.model, a.threads, "shannon");
  nlohmann::json dropped = nlohmann::json::array();
  const std::vector<Corpus> corpora = build_corpora(a, l, dropped);
  for (const auto& d : dropped)
    std::fprintf(stderr, "shannon: %s skipped: %s\n", d["corpus"].get<std::string>().c_str(), d["reason"].get<std::string>().c_str());
  int64_t all_tokens = 0;
  for (const auto& k : corpora)
    for (const auto& s : k.seqs) all_tokens += static_cast<int64_t>(s.size());
  Progress bar("shannon", all_tokens * static_cast<int64_t>(specs.size()));
  int64_t done = 0;
  // rows[corpus][engine]
  std::vector<std::vector<Row>> rows(corpora.size(), std::vector<Row>(specs.size()));
  for (size_t ci = 0; ci < corpora.size(); ++ci)
    for (size_t e = 0; e < specs.size(); ++e) {
      Row& r = rows[ci][e];
      for (const auto& ids : corpora[ci].seqs) {
        if (r.skipped.empty()) {
          try {
            KvBytes kv;
            r.nll += specs[e].to_string() == "standard" ? score_batched(l, ids, nullptr, nullptr, false)
                                                         : score_engine(l, specs[e], ids, nullptr, kv, false);
          } catch (const Error& err) {
            r.skipped = std::string(error_kind_name(err.kind())) + ": " + err.what();
          }
        }
        done += static_cast<int64_t>(ids.size());
        bar.update(done);
      }
    }
  // Per corpus and over all corpora (token-weighted).
  auto bits = [](double nll, int64_t tokens) { return nll / kLn2 / static_cast<double>(tokens); };
  nlohmann::json blocks = nlohmann::json::array();
  int64_t total_scored = 0;
  for (const auto& k : corpora) total_scored += k.scored;
  std::vector<double> total_nll(specs.size(), 0.0);
  std::vector<std::string> total_skip(specs.size());
  for (size_t ci = 0; ci < corpora.size(); ++ci) {
    const Corpus& k = corpora[ci];
    const Row& rr = rows[ci][ref];
    nlohmann::json engines = nlohmann::json::array();
    for (size_t e = 0; e < specs.size(); ++e) {
      const Row& r = rows[ci][e];
      nlohmann::json row = {{"engine", specs[e].to_string()}};
      if (!r.skipped.empty()) {
        row["skipped"] = r.skipped;
        if (total_skip[e].empty()) total_skip[e] = k.name + ": " + r.skipped;
      } else {
        const double b = bits(r.nll, k.scored);
        row.update({{"bits_per_token", b}, {"nll_mean", r.nll / static_cast<double>(k.scored)},
                    {"perplexity", std::exp(r.nll / static_cast<double>(k.scored))}});
        row["delta_bits_vs_standard"] = rr.skipped.empty() ? nlohmann::json(b - bits(rr.nll, k.scored)) : nlohmann::json();
      }
      total_nll[e] += r.nll;
      engines.push_back(row);
    }
    blocks.push_back({{"corpus", k.name}, {"sequences", k.seqs.size()}, {"tokens", k.scored}, {"engines", engines}});
  }
  nlohmann::json overall = nlohmann::json::array();
  for (size_t e = 0; e < specs.size(); ++e) {
    nlohmann::json row = {{"engine", specs[e].to_string()}};
    if (!total_skip[e].empty()) {
      row["skipped"] = total_skip[e];
    } else {
      const double b = bits(total_nll[e], total_scored);
      row["bits_per_token"] = b;
      row["delta_bits_vs_standard"] =
          total_skip[ref].empty() ? nlohmann::json(b - bits(total_nll[ref], total_scored)) : nlohmann::json();
    }
    overall.push_back(row);
  }
  if (a.json) {
    const nlohmann::json j = {{"model", l.model->path()}, {"corpus", a.corpus},      {"quick", a.quick},
                              {"tokens", total_scored},   {"reference", "standard"}, {"reference_added", ref_added},
                              {"unit", "bits per token: -log2 p(token | the tokens before it), every token after the first"},
                              {"corpora", blocks},        {"skipped_corpora", dropped}, {"overall", overall}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("%s: bits per token (cross-entropy, log2) of every token after the first; delta vs standard%s\n",
              l.model->path().c_str(), ref_added ? " (added as the reference)" : "");
  auto print_rows = [](const nlohmann::json& engines) {
    std::printf("  %-30s %12s %12s %12s\n", "engine", "bits/token", "delta", "perplexity");
    for (const auto& r : engines) {
      if (r.contains("skipped")) {
        std::printf("  %-30s skipped: %s\n", r["engine"].get<std::string>().c_str(), r["skipped"].get<std::string>().c_str());
        continue;
      }
      const std::string delta = r["delta_bits_vs_standard"].is_null() ? "-" : [&] {
        char b[32];
        std::snprintf(b, sizeof b, "%+.6f", r["delta_bits_vs_standard"].get<double>());
        return std::string(b);
      }();
      std::printf("  %-30s %12.6f %12s", r["engine"].get<std::string>().c_str(), r["bits_per_token"].get<double>(), delta.c_str());
      if (r.contains("perplexity")) std::printf(" %12.4f", r["perplexity"].get<double>());
      std::printf("\n");
    }
  };
  for (const auto& b : blocks) {
    std::printf("\n== %s (%s, %s) ==\n", b["corpus"].get<std::string>().c_str(),
                count_of(b["sequences"].get<long long>(), "sequence").c_str(), count_of(b["tokens"].get<long long>(), "token").c_str());
    print_rows(b["engines"]);
  }
  if (blocks.size() > 1) {
    std::printf("\n== all (%s) ==\n", count_of(total_scored, "token").c_str());
    print_rows(overall);
  }
}

}  // namespace

void register_shannon(CLI::App& app) {
  auto a = std::make_shared<ShannonArgs>();
  CLI::App* s = app.add_subcommand("shannon", "bits per token (cross-entropy) per engine on the accuracy corpora or a text, "
                                              "with the delta to standard");
  s->footer(
      "Examples:\n"
      "  larql shannon gemma-3-270m-q4_k_m --engines standard,markov-rs,tq4 --quick\n"
      "  larql shannon gemma-3-270m-q4_k_m --engines \"turbo-quant:bits=3\" --corpus data/apollo/document.txt --max-tokens 1024\n"
      "  larql shannon gemma.vindex --corpus parametric --json");
  s->add_option("model", a->model, kModelHelp)->required();
  add_engine_flag(s, a->engines, true);
  s->add_option("--corpus", a->corpus, "parametric, in-context, conflict, all, or a UTF-8 text file scored as one sequence")
      ->capture_default_str();
  s->add_flag("--quick", a->quick, "every 4th parametric / conflict case, needles at 512 and 1k only (as accuracy --quick)");
  s->add_option("--data", a->data, "directory with parametric.jsonl and conflict.jsonl (default: data/accuracy)");
  add_int_flag(s, "--max-tokens", a->max_tokens, 0, INT32_MAX, "score only the first N tokens of each sequence (BOS included; 0 = all),");
  add_max_input_flag(s, a->max_input_bytes);
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "print one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
