// The evaluation set of `larql edit-eval` (docs/cli.md "edit-eval"; made by
// scripts/make_edit_eval.py, data/edit_eval/README.md): JSON Lines of made-up facts, real-fact
// prompts, fluency prompts and a held-out text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace larql::cli {

/// A prompt with the answer the base model gives (its first token, " " + answer).
struct AnsweredPrompt {
  std::string prompt, answer;
  int64_t answer_id = 0;
  int64_t line = 0;  ///< 1-based line in the file
};

/// A made-up fact: INSERT's (entity, relation, target), the canonical prompt INSERT installs it
/// on, paraphrases of it, and neighbourhood prompts (real subjects, same relation).
struct EditFact {
  std::string id, relation, entity, target, prompt;
  int64_t target_id = 0;  ///< the first token of " " + target on the model the set was made for
  std::vector<std::string> paraphrases;
  std::vector<AnsweredPrompt> neighbourhood;
  int64_t line = 0;  ///< 1-based line in the file (for messages)
};

struct EditEvalSet {
  std::string path;
  std::string model;        ///< the "meta" line's model (index.json's name), "" when absent
  std::string fingerprint;  ///< the "meta" line's fingerprint, "" when absent
  std::vector<EditFact> facts;
  std::vector<AnsweredPrompt> real;
  std::vector<std::string> fluency;
  std::string heldout;
};

/// Read and check a set file: one JSON object a line (blank lines skipped), each with "type":
/// "meta" (optional, first), "fact" (id, relation, entity, target, target_id, prompt,
/// paraphrases [>= 1 strings], neighbourhood [>= 1 {prompt, answer, answer_id}]), "real"
/// (prompt, answer, answer_id), "fluency" (prompt), "heldout" (text; at most one). Errors:
/// Error{NotFound} / Error{Io} for the file; Error{Format} "FILE:LINE: ..." naming the field for
/// a line that is not a JSON object, an unknown type, a missing or mistyped field, an empty
/// string, a repeated fact id or heldout; Error{Format} for a file with no fact.
EditEvalSet read_edit_eval_set(const std::string& path);

/// The fluency measure of edit-eval: ROME's generation entropy over token ids — for n = 2 and 3,
/// H_n = -sum f log2 f over the frequencies f of the sequence's n-grams, combined as
/// (2/3 H_2 + 4/3 H_3) / 2. 0 for a sequence too short to hold an n-gram of either length.
double ngram_entropy(const std::vector<int32_t>& ids);

}  // namespace larql::cli
