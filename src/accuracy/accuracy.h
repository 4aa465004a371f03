// The accuracy suite behind `larql accuracy`: corpora (parametric facts, needle-in-a-haystack,
// context-vs-fact conflict), first-token scoring, and distribution distances vs the standard
// engine. Spec: docs/engines.md "Measurement", docs/cli.md "accuracy".
//
// Scoring protocol (per case): the prompt + answer text is tokenized as one string (BOS first);
// the scored token is the first answer token, skipping whitespace-only pieces (Gemma splits
// " 7421" into "▁" "7" "4" "2" "1", so the bare "▁" joins the prompt and "7" is scored). Each
// engine prefills the prompt ids; logits = Forward::logits of the last residual. A standard
// engine (the reference) prefills the same ids once per case.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/registry.h"
#include "tokenizer/tokenizer.h"

namespace larql::accuracy {

// ---- distributions (pure) ----------------------------------------------------------------------

// Log-softmax, argmax and KL itself: compute/logits.h.

/// compute::kl_nats (KL(P || Q) in nats) of log-probabilities of equal length; Error{InvalidArgument}
/// when the lengths differ or are 0.
double kl_nats(const std::vector<double>& logp, const std::vector<double>& logq);
/// Jensen–Shannon divergence in nats: (KL(P||M) + KL(Q||M)) / 2, M = (P+Q)/2; in [0, ln 2].
double js_nats(const std::vector<double>& logp, const std::vector<double>& logq);
/// Cosine similarity of the probability vectors exp(logp), exp(logq) (not of the logits).
double cosine_probs(const std::vector<double>& logp, const std::vector<double>& logq);
/// Shannon surprisal of token `id`: -log2 p(id).
double surprisal_bits(const std::vector<double>& logp, int32_t id);

// ---- corpora -----------------------------------------------------------------------------------

struct Case {
  std::string corpus;      ///< "parametric", "in-context-512", ..., "conflict"
  std::string label;       ///< short id for error messages
  std::string prompt;      ///< completion-style text (no trailing space needed)
  std::string answer;      ///< expected continuation, e.g. " Paris"
  std::string parametric;  ///< conflict only: the known-fact answer the context contradicts
};

/// One JSON object per line: {"prompt": ..., "answer": ..., ["parametric": ...]}. Blank lines
/// are skipped. Errors: Error{Format} naming the line for bad JSON or a missing field.
std::vector<Case> parse_jsonl(std::string_view text, const std::string& corpus);
/// Read a file and parse_jsonl it. Errors: Error{NotFound} / Error{Io}, Error{Format}.
std::vector<Case> load_jsonl(const std::string& path, const std::string& corpus);

/// Directory holding parametric.jsonl and conflict.jsonl: `override_dir` if not empty (and it
/// must hold them), else the first of `first_choice` (if not empty; the CLI passes
/// $LARQL_ACCURACY_DATA), ./data/accuracy, the source tree's data/accuracy that does.
/// Error{NotFound} listing the places tried.
std::string find_data_dir(const std::string& override_dir, const std::string& first_choice = "");

inline const char* kNeedle = "The secret code of the blue door is 7421.";
inline const char* kNeedleQuestion = "The secret code of the blue door is";
inline const char* kNeedleAnswer = " 7421";

/// A haystack prompt of about `target_tokens` tokens (BOS included): neutral filler sentences,
/// `needle` inserted at a sentence boundary at `depth` in [0,1] of the filler, `question` last.
/// count_tokens(s) gives the token count of s as it appears mid-text (leading space included).
struct Haystack {
  std::string text;
  int64_t tokens = 0;            ///< estimated total: 1 (BOS) + sum of the pieces' counts
  int64_t needle_token_pos = 0;  ///< estimated index of the needle's first token
};
Haystack build_haystack(const std::function<int64_t(std::string_view)>& count_tokens, int64_t target_tokens,
                        double depth, const std::string& needle = kNeedle,
                        const std::string& question = kNeedleQuestion);

/// "512", "1k", "2k", ... for a needle length.
std::string length_label(int64_t tokens);

// ---- scoring -----------------------------------------------------------------------------------

struct Target {
  std::vector<int32_t> prompt_ids;  ///< BOS + prompt (+ whitespace-only answer pieces)
  int32_t answer_id = -1;
  int32_t parametric_id = -1;  ///< -1 unless the case has a parametric answer
};
/// See the protocol above. Errors: Error{InvalidArgument} when the answer adds no token.
Target make_target(const Tokenizer& tok, const Case& c);

/// One engine's scores on one corpus. skipped non-empty: the engine (or the reference) threw
/// on a case and the other numbers are meaningless.
struct Score {
  std::string engine, corpus, skipped;
  int64_t cases = 0;
  double top1 = 0;             ///< fraction with argmax == answer token
  double mean_bits = 0;        ///< mean -log2 p(answer token)
  double mean_kl = 0;          ///< mean KL(standard || engine), nats
  double mean_js = 0;          ///< mean JS(standard, engine), nats
  double mean_cosine = 0;      ///< mean cosine of the probability vectors
  double parametric_rate = -1; ///< conflict: fraction with argmax == parametric token; else -1
};

/// Runs every engine over every case (cases grouped by corpus, in the given order) and returns
/// one Score per (corpus, engine) in that order. Engine errors never escape: the first one on a
/// corpus turns that (corpus, engine) into a skipped row. progress(done, total) after each run.
std::vector<Score> run_suite(std::shared_ptr<Forward> forward, const Tokenizer& tok,
                             const std::vector<EngineSpec>& engines, const std::vector<Case>& cases,
                             const std::function<void(int64_t, int64_t)>& progress = {});

/// The needle haystack lengths (tokens) of the in-context corpus: 512 and 1k when quick, else
/// 512..8k. build_cases keeps only those that fit the context.
std::vector<int64_t> needle_lengths(bool quick);

/// The standard set of cases: corpora from {"parametric", "in-context", "conflict"};
/// quick = every 4th parametric / conflict item and needles at 512 and 1k (depth 0.5);
/// full = all items and needles at 512..8k at depths 0.1, 0.5, 0.9 (only lengths that fit
/// `context_length`).
std::vector<Case> build_cases(const Tokenizer& tok, const std::vector<std::string>& corpora, bool quick,
                              const std::string& data_dir, int64_t context_length);

}  // namespace larql::accuracy
