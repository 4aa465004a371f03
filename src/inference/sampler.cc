#include "inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_set>

#include "compute/logits.h"
#include "util/error.h"

namespace larql {

void validate(const SamplerParams& p) {
  auto bad = [](const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    bad("--temperature must be >= 0 (0 = greedy), got " + std::to_string(p.temperature));
  if (p.top_k < 0) bad("--top-k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("--top-p must be in (0, 1], got " + std::to_string(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("--min-p must be in [0, 1], got " + std::to_string(p.min_p));
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    bad("--repeat-penalty must be > 0 (1 = off), got " + std::to_string(p.repeat_penalty));
  if (p.repeat_last_n < 0) bad("--repeat-last-n must be >= 0");
}

namespace {

/// The shortest decimal that reads back as the same f32 (0.7f -> "0.7", not "0.699999988").
std::string float_text(float v) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

std::string SamplerParams::config_string() const {
  return "temperature=" + float_text(temperature) + ",top_k=" + std::to_string(top_k) + ",top_p=" + float_text(top_p) +
         ",min_p=" + float_text(min_p) + ",repeat_penalty=" + float_text(repeat_penalty) +
         ",repeat_last_n=" + std::to_string(repeat_last_n);
}

std::string Sampler::rng_state() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

void Sampler::set_rng_state(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 r;
  in >> r;
  std::string rest;
  if (in.fail() || (in >> rest, !rest.empty()))
    throw Error(ErrorKind::Format, "sampler state: not a random-number generator state");
  rng_ = r;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) { validate(p); }

int32_t Sampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history) {
  const float* x = logits;
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    penalised_.assign(logits, logits + vocab);
    std::unordered_set<int32_t> seen;
    const size_t from = history.size() > static_cast<size_t>(p_.repeat_last_n) ? history.size() - p_.repeat_last_n : 0;
    for (size_t i = from; i < history.size(); ++i) seen.insert(history[i]);
    for (int32_t id : seen) {
      if (id < 0 || id >= vocab) continue;
      float& l = penalised_[static_cast<size_t>(id)];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
    x = penalised_.data();
  }
  if (p_.temperature <= 0.0f) return static_cast<int32_t>(compute::argmax(x, vocab));
  double mass = 0;  // the temperature-1 mass the top-p filter divides by (0: sum the candidates)
  double mx = 0;    // the largest logit (always a candidate)
  if (p_.top_k > 0 && p_.top_k < vocab) {
    // Largest first, ties by lower id (a total order: the same candidates in the same order on
    // every platform).
    compute::top_k(x, vocab, p_.top_k, cand_);
    mx = cand_[0].value;
  } else {
    mx = x[compute::argmax(x, vocab)];
    mass = candidates_without_top_k(x, vocab, mx);
  }
  size_t n = cand_.size();
  // Probabilities at temperature 1 for the top-p / min-p filters (as llama.cpp does); the
  // candidates are sorted, best first, whenever one of the filters is on.
  if (p_.top_p < 1.0f || p_.min_p > 0.0f) {
    std::vector<double> prob(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].value) - mx);
    if (mass > 0) sum = mass;
    if (p_.top_p < 1.0f) {
      double cum = 0;
      size_t keep = n;
      for (size_t i = 0; i < n; ++i) {
        cum += prob[i] / sum;
        if (cum >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
      n = std::max<size_t>(1, keep);
    }
    if (p_.min_p > 0.0f) {
      const double floor = p_.min_p * prob[0];
      size_t keep = 1;
      while (keep < n && prob[keep] >= floor) ++keep;
      n = keep;
    }
  }
  // Locals, not members: a server holds a sampler per sequence, and 262,144 doubles kept by
  // each would add 2 MiB per sequence.
  std::vector<double> weight(n);
  for (size_t i = 0; i < n; ++i) weight[i] = std::exp((static_cast<double>(cand_[i].value) - mx) / p_.temperature);
  std::discrete_distribution<size_t> dist(weight.begin(), weight.begin() + static_cast<std::ptrdiff_t>(n));
  return cand_[dist(rng_)].index;
}

double Sampler::candidates_without_top_k(const float* x, int64_t vocab, double mx) {
  // No top-k: sorting the whole vocabulary (262,144 entries for Gemma 3) cost ~20 ms a token.
  // Only what the filters need is ordered:
  //  1. Tokens whose weight is below e^-45 (< 2^-64) of the top token's, at temperature 1 and at
  //     this temperature, are dropped: added to a sum that is at least 1 (the top token's term)
  //     they cannot change a double, so neither the filters nor the draw change.
  //  2. min-p keeps a prefix of the sorted order, exactly the tokens with exp(x - max) >= min_p
  //     (the filter's own test), so it selects before any sorting.
  //  3. top-p keeps the shortest sorted prefix whose mass reaches top_p: found by sorting the
  //     best 64, 512, 4096, ... until the prefix's mass reaches it (a peaked distribution sorts a
  //     few dozen; a flat one sorts them all, as before). Its denominator is the mass of every
  //     candidate of step 1, min-p's drops included (returned).
  //  With neither filter the candidates stay in id order: the same distribution, no sort.
  const double negligible = -45.0 * std::max(1.0, static_cast<double>(p_.temperature));
  const double floor = p_.min_p > 0.0f ? static_cast<double>(p_.min_p) : 0.0;
  const bool top_p = p_.top_p < 1.0f;
  double mass = 0;
  cand_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    const double d = static_cast<double>(x[i]) - mx;
    if (d < negligible) continue;
    if (top_p || floor > 0.0) {
      const double e = std::exp(d);
      mass += e;
      if (e < floor) continue;
    }
    cand_.push_back({x[i], static_cast<int32_t>(i)});
  }
  auto before = [](const compute::Scored& a, const compute::Scored& b) {
    return a.value > b.value || (a.value == b.value && a.index < b.index);
  };
  if (top_p) {
    for (size_t k = 64;; k *= 8) {
      if (k >= cand_.size()) {
        std::sort(cand_.begin(), cand_.end(), before);
        break;
      }
      std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), before);
      std::sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), before);
      double prefix = 0;
      for (size_t i = 0; i < k; ++i) prefix += std::exp(static_cast<double>(cand_[i].value) - mx);
      // With a margin: sample() re-adds in its own order and must stop inside the prefix.
      if (prefix / mass >= static_cast<double>(p_.top_p) + 1e-9) {
        cand_.resize(k);
        break;
      }
    }
  } else if (floor > 0.0) {
    std::sort(cand_.begin(), cand_.end(), before);
  }
  return top_p ? mass : 0.0;
}

}  // namespace larql
