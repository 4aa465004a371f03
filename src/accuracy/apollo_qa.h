// Apollo's task-level contract: answer accuracy on a QA set over a document, against the
// standard engine with the whole document in context (`larql apollo eval`).
//
// Protocol per question q with answer a (first-token scoring as in accuracy.h):
//   standard: [BOS] document "\n\n" "Question: q\nAnswer:" — the document is prefilled once and
//             each question continues from a copy of that state;
//   apollo:   [BOS] "Question: q\nAnswer:" through the apollo engine (which retrieves a passage).
// A question is answered when the argmax of the next-token distribution is the answer's first
// token. Retrieval is a hit when apollo retrieved a window (its router did not refuse the
// question) and the question's `evidence` text lies in it; a refused question is never a hit.
// Questions marked "miss" must raise RetrievalMiss.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/apollo/engine.h"
#include "tokenizer/tokenizer.h"

namespace larql::accuracy {

struct QaItem {
  std::string question, answer, evidence;
  bool miss = false;  ///< a question the document cannot answer: RetrievalMiss expected
};

/// One JSON object per line: {"question", "answer", ["evidence"], ["miss": true]}. Errors:
/// Error{Format} naming the line (bad JSON, a missing or empty question, a field of the wrong
/// type, answer missing on a non-miss item).
std::vector<QaItem> parse_qa_jsonl(const std::string& text);

/// "Question: <q>\nAnswer:".
std::string qa_prompt(const std::string& question);

struct QaResult {
  std::string question;
  bool miss = false;
  // apollo
  std::string apollo_error;  ///< error kind + message when apollo threw (expected for misses)
  bool apollo_miss = false;  ///< apollo raised RetrievalMiss
  int64_t window = -1;         ///< the window apollo retrieved; -1 when it refused (ApolloRoute::window)
  int64_t best_window = -1;    ///< the router's best window, retrieved or not (ApolloRoute::best)
  double coverage = 0;         ///< best_window's share of the question's content weight
  bool has_evidence = false;   ///< the item gave an "evidence" text
  bool retrieval_hit = false;  ///< a window was retrieved and holds the evidence (never with apollo_miss)
  bool apollo_correct = false;
  double apollo_bits = 0;      ///< -log2 p(answer token)
  double apollo_ms = 0;        ///< prefill wall time
  // standard with the whole document
  bool standard_correct = false;
  double standard_bits = 0;
  double standard_ms = 0;      ///< the question's own tokens after the shared document prefill
};

struct QaReport {
  std::vector<QaResult> items;
  int64_t document_tokens = 0;          ///< the store's document (no BOS, no separator)
  double standard_prefill_seconds = 0;  ///< the document, once
  size_t standard_state_bytes = 0;      ///< K/V after the document
  size_t apollo_store_bytes = 0;
  size_t apollo_state_bytes = 0;        ///< K/V of the largest retrieved context
  bool with_standard = true;
  // Summaries over answerable (non-miss) questions.
  int64_t answerable = 0, apollo_correct = 0, standard_correct = 0;
  int64_t with_evidence = 0, retrieval_hits = 0;  ///< answerable questions with "evidence" / found
  int64_t misses = 0, misses_refused = 0;  ///< miss questions / of those, RetrievalMiss raised
  int64_t false_misses = 0;                ///< answerable questions apollo refused
};

/// Run the protocol. `document` must be the text the store was built from (Error{InvalidArgument}
/// otherwise). with_standard = false skips the full-document baseline. progress(done, total).
QaReport run_apollo_qa(std::shared_ptr<Forward> forward, const Tokenizer& tok, ApolloEngine& apollo,
                       const std::string& document, const std::vector<QaItem>& items, bool with_standard,
                       const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace larql::accuracy
