// Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, repetition penalty.
// Order of the chain follows llama.cpp's default sampler: penalties -> top-k -> top-p -> min-p
// -> temperature -> draw. top-p: Holtzman et al. 2019; min-p: Nguyen et al. 2024;
// repetition penalty: Keskar et al. 2019 (CTRL): positive logits divided, negative multiplied.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compute/logits.h"

namespace larql {

struct SamplerParams {
  float temperature = 0.8f;   ///< 0 = greedy (argmax)
  int top_k = 40;             ///< 0 = off
  float top_p = 0.95f;        ///< 1 = off; must be in (0, 1]
  float min_p = 0.05f;        ///< 0 = off; in [0, 1]
  float repeat_penalty = 1.0f;  ///< 1 = off; > 0
  int repeat_last_n = 64;     ///< tokens of history the penalty looks at
  uint64_t seed = 0;          ///< same seed, same text

  /// Every parameter but the seed, e.g. "temperature=0.8,top_k=40,top_p=0.95,min_p=0.05,
  /// repeat_penalty=1,repeat_last_n=64" (each float as the shortest decimal that reads back as
  /// the same f32).
  /// Two samplers with the same string and the same random state draw the same tokens.
  std::string config_string() const;
};

/// Throws Error{InvalidArgument} naming the parameter and its accepted range.
void validate(const SamplerParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  /// Pick the next token from logits [vocab]. `history` is the sequence so far (prompt included),
  /// used by the repetition penalty.
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history);
  /// The random-number generator's state as text (to continue a sequence in another process).
  std::string rng_state() const;
  /// Restore a state from rng_state(). Error{Format} if the text is not such a state.
  void set_rng_state(const std::string& state);

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  /// Candidates without top-k, filtered and ordered as the filters need (sampler.cc); `mx` is
  /// the largest of x[0, vocab). Returns the temperature-1 mass top-p divides by (0 when top-p is off).
  double candidates_without_top_k(const float* x, int64_t vocab, double mx);

  std::vector<compute::Scored> cand_;  ///< candidates (best first whenever top-p or min-p is on)
  std::vector<float> penalised_;       ///< the logits after the repetition penalty
};

}  // namespace larql
