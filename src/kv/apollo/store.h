// The Apollo retrieval store: a long document cut into overlapping token windows, with the
// entry records (content tokens) the engine injects. The router's word statistics are derived
// from the document's tokens when a store is served (kv/apollo/router.h). Built once by `larql
// apollo build`, then served by the `apollo` engine (kv/apollo/engine.h). Specification:
// docs/engines.md ("apollo").
//
// File layout — the engine state-file container (kv/state_file.h), little-endian:
//   header: engine "apollo-store", config "window=W,stride=S", model fingerprint,
//           n_past = document tokens
//   u64 n_sep,  u32 sep[n_sep]          tokens placed between a passage and the question
//   u64 n_doc,  u32 doc[n_doc]          the document's token ids (no BOS)
//   u64 n_win,  u64 (start, len)[n_win] windows: doc[start, start + len)
//   u64 n_ent,  (u32 token, f32 coefficient, u32 window, u32 position)[n_ent]
// A store is bound to the model it was built with (token ids mean nothing elsewhere): loading it
// for another model is Error{InvalidArgument}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace larql {

class Tokenizer;

/// One entry record: a content token of a window with its routing weight.
struct ApolloEntry {
  int32_t token = 0;
  float coefficient = 0;  ///< content_weight(token) x idf(token) over windows
  int32_t window = 0;
  int32_t position = 0;   ///< index within the window
};

struct ApolloWindow {
  int64_t start = 0;  ///< first document token
  int64_t len = 0;    ///< tokens
};

struct ApolloStore {
  std::string fingerprint;         ///< model fingerprint (Model::fingerprint)
  int64_t window_tokens = 0;       ///< W: tokens per window
  int64_t stride = 0;              ///< S: tokens between window starts (S <= W; W - S overlap)
  std::vector<int32_t> separator;  ///< tokens between passage and question ("\n\n")
  std::vector<int32_t> doc;        ///< document ids, no BOS
  std::vector<ApolloWindow> windows;
  std::vector<ApolloEntry> entries;

  /// The tokens of window w: doc[start, start + len).
  std::vector<int32_t> window_tokens_of(int64_t w) const;
  /// Bytes of the store as held (tokens, windows, entries).
  size_t bytes() const;
};

/// Per-token routing weight: 0 for control / byte / unused tokens and pieces without a letter or
/// digit; otherwise max(0, ln(rank / 300)) where rank is the token's 1-based position in the
/// vocabulary sorted by score, descending. SPM scores are unigram log-probabilities (or, as in
/// Gemma 3's vocabulary, a frequency rank), so by Zipf's law ln(rank) tracks a token's surprisal
/// in nats up to a constant; the 300 most frequent pieces ("the", "of", "is") weigh nothing.
/// Returns one weight per token id.
std::vector<float> content_weights(const Tokenizer& tok);

/// Inverse document frequency over windows: ln(1 + (n - df + 0.5) / (df + 0.5)) (BM25's idf,
/// Robertson & Zaragoza 2009), df = windows containing the token, n = windows.
double window_idf(int64_t df, int64_t n_windows);

/// Cut `doc` (ids without BOS) into windows of `window_tokens` every `stride` tokens (the last
/// window ends at the document's end) and write an entry for every position whose token has a
/// content weight > 0. Errors: Error{InvalidArgument} for an empty document, window < 16, or a
/// stride outside [1, window].
ApolloStore build_apollo_store(const std::vector<int32_t>& doc, const Tokenizer& tok, const std::string& fingerprint,
                               int64_t window_tokens, int64_t stride);

/// Write / read a store. Errors: Error{Io} (write), Error{NotFound} (missing file), Error{Format}
/// (truncated or inconsistent: windows outside the document, entries outside their window,
/// token ids >= vocab_size), Error{InvalidArgument} (built for another model).
void save_apollo_store(const ApolloStore& store, const std::string& path);
ApolloStore load_apollo_store(const std::string& path, const std::string& expect_fingerprint, int64_t vocab_size);

}  // namespace larql
