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
  // Largest first, ties by lower id (a total order: the same candidates in the same order on
  // every platform); top_k = 0 or >= vocab sorts them all.
  compute::top_k(x, vocab, p_.top_k > 0 ? p_.top_k : vocab, cand_);
  size_t n = cand_.size();
  // Probabilities at temperature 1 for the top-p / min-p filters (as llama.cpp does).
  std::vector<double> prob(n);
  const double mx = cand_[0].value;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].value) - mx);
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
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i)
    w[i] = std::exp((static_cast<double>(cand_[i].value) - mx) / p_.temperature);
  std::discrete_distribution<size_t> dist(w.begin(), w.end());
  return cand_[dist(rng_)].index;
}

}  // namespace larql
