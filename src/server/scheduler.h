// Continuous batching for `larql serve` (docs/server.md "Scheduling"): requests join and leave a
// running batch between decode steps; each step decodes every live `standard`-engine sequence in
// one pass over the weights (StandardEngine::decode_batch) and computes their logits in one
// lm_head pass; sequences on other engines step one at a time in the same loop. A sequence's
// tokens and logprobs do not depend on what else is in the batch: decode_batch's hidden states
// and the lm_head GEMM are bit-identical row by row to a lone decode_step (quant/gemm.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "inference/forward.h"
#include "inference/sampler.h"
#include "kv/registry.h"
#include "server/json_constraint.h"
#include "server/sessions.h"
#include "tokenizer/tokenizer.h"

namespace larql {
class Error;
}

namespace larql::server {

/// One request's generation settings (already validated by the HTTP layer).
struct GenParams {
  std::vector<int32_t> prompt;          ///< token ids, BOS included when the model wants one
  int64_t max_tokens = 16;              ///< tokens to generate at most
  SamplerParams sampler;                ///< temperature 0 = greedy; seed per choice = seed + index
  std::vector<std::string> stop;        ///< stop strings (cut even when they span tokens)
  int top_logprobs = -1;                ///< -1: no logprobs; 0..20: the chosen token's and n alternatives
  float frequency_penalty = 0;          ///< OpenAI: logit -= f * count(token in the generated text)
  float presence_penalty = 0;           ///< OpenAI: logit -= p * [token in the generated text]
  int n = 1;                            ///< choices (independent sequences)
  EngineSpec engine;                    ///< the request's KV engine
  bool json_object = false;             ///< constrain the output to one JSON object (json_constraint.h)
  /// Constrain the output to this schema (json_schema.h); shared by the request's choices and
  /// used by the scheduler thread only (its mask cache is not locked).
  std::shared_ptr<const SchemaGrammar> schema;
  /// A saved session (n == 1 only): resumed when lease->resume_from > 0 (the engine state is loaded
  /// and only the prompt's tokens from there on are prefilled), saved when the sequence ends with
  /// "stop" or "length".
  std::shared_ptr<SessionLease> session;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

/// A token alternative: id, its text and log-probability (nats) under the model's distribution
/// (log-softmax of the logits, before temperature and truncation).
struct TokenLogprob {
  int32_t id = 0;
  std::string text;   ///< the token's piece as valid UTF-8 (a partial character becomes U+FFFD)
  std::string bytes;  ///< the piece's raw bytes (a byte token may hold part of a character)
  double logprob = 0;
};

/// What a job reports, in order, per choice: Text events, then one Done (or Error for the whole
/// job).
struct Event {
  enum class Kind { Text, Done, Error } kind = Kind::Text;
  int choice = 0;
  std::string text;                      ///< Text: the new text (may be "" when held back)
  std::optional<TokenLogprob> token;     ///< Text: the token, with logprob when requested
  std::vector<TokenLogprob> top;         ///< Text: the alternatives when requested
  std::string finish_reason;             ///< Done: "stop" | "length" | "cancelled" | "timeout"
  int64_t prompt_tokens = 0, completion_tokens = 0;  ///< Done: usage of this choice
  int64_t cached_tokens = 0;             ///< Done: prompt tokens not prefilled (a resumed session)
  int http_status = 500;                 ///< Error
  std::string error;                     ///< Error: message
  std::string error_type;                ///< Error: OpenAI's error type
};

/// A submitted request: the scheduler pushes events; the connection thread takes them. notify_fd
/// is an eventfd written once per push, so a connection can poll() it together with its socket.
class Job {
 public:
  explicit Job(GenParams p);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const GenParams& params() const { return params_; }
  /// Set by the connection (client left, server draining): the job's sequences leave the batch
  /// before the next decode step.
  std::atomic<bool> cancel{false};
  /// Scheduler side.
  void push(Event e);
  /// Connection side: every event pushed since the last call (empty when none).
  std::vector<Event> take();
  /// Block until an event is there to take() or `timeout` passes.
  void wait(std::chrono::milliseconds timeout);
  int notify_fd() const { return efd_; }
  /// True once every choice has reported Done or the job an Error.
  bool finished() const { return finished_.load(); }

 private:
  GenParams params_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int done_choices_ = 0;
  std::atomic<bool> finished_{false};
  int efd_ = -1;
};

struct SchedulerOptions {
  int max_batch = 16;      ///< sequences decoding at once
  int max_queue = 64;      ///< jobs waiting for a slot; more are refused (429)
  int64_t context = 0;     ///< positions a sequence may reach (0: the model's context length)
};

/// Counters for /metrics (monotonic unless named as a gauge).
struct SchedulerStats {
  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0}, decode_steps{0}, batched_rows{0};
  std::atomic<uint64_t> prefilled_tokens{0};  ///< prompt tokens run through an engine (not resumed)
  std::atomic<uint64_t> sessions_resumed{0}, sessions_saved{0};
  std::atomic<uint64_t> jobs_done{0}, jobs_cancelled{0}, jobs_failed{0}, jobs_refused{0};
  std::atomic<int64_t> queue_depth{0}, active_sequences{0};  ///< gauges
  std::atomic<int64_t> last_batch{0};                        ///< gauge: rows in the last step
};

class Scheduler {
 public:
  /// `runner` runs the batched steps and the logits (its pool is the compute pool); each sequence
  /// gets its own Forward on the same model and pool for its prefill and engine. The runner's
  /// scratch is the scheduler's alone from here on: nothing else may run through it.
  Scheduler(std::shared_ptr<Forward> runner, const Tokenizer& tok, SchedulerOptions opt);
  ~Scheduler();
  /// Queue a job. false (and nothing queued) when the queue is full or the scheduler stopping.
  bool submit(const std::shared_ptr<Job>& job);
  /// Stop taking jobs; finish those running and queued (drain), or cancel them when
  /// `cancel_running`; returns when the loop has ended.
  void stop(bool cancel_running);
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerOptions& options() const { return opt_; }

 private:
  struct Seq;
  void loop();
  void admit(const std::shared_ptr<Job>& job, std::vector<std::unique_ptr<Seq>>& active);
  bool sample_and_emit(Seq& s);
  void step(std::vector<std::unique_ptr<Seq>>& active);
  void fail(std::vector<std::unique_ptr<Seq>>& active, Job& job, const Error& e);

  std::shared_ptr<Forward> runner_;
  Tokenizer tok_;  ///< a copy (it shares the vocabulary): the caller's may go away first
  SchedulerOptions opt_;
  std::vector<int32_t> eog_;
  std::shared_ptr<const JsonVocab> json_vocab_;  ///< built on the first json_object or json_schema request
  std::vector<uint8_t> allowed_;                 ///< scratch for the JSON mask
  SchedulerStats stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  bool cancel_all_ = false;
  std::thread thread_;
};

}  // namespace larql::server
