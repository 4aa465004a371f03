#include "server/scheduler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "compute/logits.h"
#include "kv/generate.h"
#include "kv/standard.h"
#include "server/error_status.h"
#include "util/error.h"

namespace larql::server {
namespace {

/// Prompt tokens a standard sequence reads per scheduler iteration, so a long prompt does not
/// stall the streams already decoding (each iteration also runs one decode step for them).
constexpr size_t kPrefillChunk = 128;

Event error_event(const Error& e) {
  Event ev;
  ev.kind = Event::Kind::Error;
  ev.http_status = http_status_of(e.kind());
  ev.error = e.what();
  ev.error_type = ev.http_status < 500 ? "invalid_request_error" : "server_error";
  return ev;
}

}  // namespace

Job::Job(GenParams p) : params_(std::move(p)) {
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) throw Error(ErrorKind::Io, "eventfd failed");
}

Job::~Job() {
  if (efd_ >= 0) ::close(efd_);
}

void Job::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.kind == Event::Kind::Done && ++done_choices_ == params_.n) finished_ = true;
    if (e.kind == Event::Kind::Error) finished_ = true;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(efd_, &one, sizeof one);
}

std::vector<Event> Job::take() {
  uint64_t v;
  [[maybe_unused]] const ssize_t n = ::read(efd_, &v, sizeof v);  // clear the eventfd
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
}

struct Scheduler::Seq {
  std::shared_ptr<Job> job;
  int choice = 0;
  std::shared_ptr<Forward> fwd;
  std::unique_ptr<Engine> engine;
  StandardEngine* standard = nullptr;  ///< set when the engine batches
  Sampler sampler;
  StopTextStream text;
  std::vector<int32_t> history;        ///< prompt + generated (the repetition penalty's window)
  std::unordered_map<int32_t, int> counts;  ///< generated tokens (OpenAI's penalties)
  std::optional<JsonState> json;       ///< the JSON automaton, for json_object requests
  std::optional<SchemaState> schema;   ///< the schema's automaton, for json_schema requests
  std::vector<float> logits;           ///< [vocab]: the next token's
  size_t prompt_done = 0;              ///< prompt tokens read so far
  int64_t resumed_from = 0;            ///< prompt tokens taken from a saved session
  int64_t generated = 0;
  int32_t next = -1;                   ///< the token to decode in the next step
  bool finished = false;

  Seq(std::shared_ptr<Job> j, int c, const Tokenizer& tok, SamplerParams sp)
      : job(std::move(j)), choice(c), sampler(sp), text(tok, job->params().stop) {}
  bool prefilling() const { return prompt_done < job->params().prompt.size(); }
};

Scheduler::Scheduler(std::shared_ptr<Forward> runner, const Tokenizer& tok, SchedulerOptions opt)
    : runner_(std::move(runner)), tok_(tok), opt_(opt), eog_(eog_ids(tok)) {
  if (opt_.max_batch < 1 || opt_.max_queue < 0)
    throw Error(ErrorKind::InvalidArgument, "scheduler: max_batch must be >= 1 and max_queue >= 0");
  const int64_t model_ctx = runner_->config().context_length;
  if (opt_.context <= 0 || opt_.context > model_ctx) opt_.context = model_ctx;
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(true); }

bool Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || static_cast<int>(queue_.size()) >= opt_.max_queue) {
      ++stats_.jobs_refused;
      return false;
    }
    queue_.push_back(job);
    stats_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return true;
}

void Scheduler::stop(bool cancel_running) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (cancel_running) cancel_all_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::admit(const std::shared_ptr<Job>& job, std::vector<std::unique_ptr<Seq>>& active) {
  const GenParams& p = job->params();
  std::vector<std::unique_ptr<Seq>> seqs;
  try {
    if (p.prompt.empty()) throw Error(ErrorKind::EmptyPrompt, "the prompt has no tokens");
    if (static_cast<int64_t>(p.prompt.size()) >= opt_.context)
      throw Error(ErrorKind::ContextOverflow, "the prompt is " + std::to_string(p.prompt.size()) +
                                                  " tokens; the context holds " + std::to_string(opt_.context) +
                                                  " and one more is needed to answer");
    for (int c = 0; c < p.n; ++c) {
      SamplerParams sp = p.sampler;
      sp.seed += static_cast<uint64_t>(c);
      auto s = std::make_unique<Seq>(job, c, tok_, sp);
      s->fwd = runner_->sibling();
      s->engine = make_engine(p.engine, s->fwd);
      s->standard = dynamic_cast<StandardEngine*>(s->engine.get());
      s->history = p.prompt;
      if (p.session && p.session->resume_from > 0) {
        // Resume: the saved engine state; a file that no longer loads means starting over.
        try {
          s->engine->load_state(p.session->path());
          if (s->engine->n_past() != p.session->resume_from)
            throw Error(ErrorKind::InvariantViolation, "session state has another length than recorded");
          s->prompt_done = static_cast<size_t>(p.session->resume_from);
          s->resumed_from = p.session->resume_from;
          ++stats_.sessions_resumed;
        } catch (const Error&) {
          s->engine = make_engine(p.engine, s->fwd);
          s->standard = dynamic_cast<StandardEngine*>(s->engine.get());
          s->prompt_done = 0;
        }
      }
      if (p.json_object) {
        if (!json_vocab_) json_vocab_ = std::make_shared<JsonVocab>(tok_);
        s->json = JsonState{};
      }
      if (p.schema) {
        if (!json_vocab_) json_vocab_ = std::make_shared<JsonVocab>(tok_);
        s->schema = SchemaState(*p.schema);
      }
      seqs.push_back(std::move(s));
    }
  } catch (const Error& e) {
    job->push(error_event(e));
    ++stats_.jobs_failed;
    return;
  }
  stats_.prompt_tokens += p.prompt.size() * static_cast<size_t>(p.n);
  for (auto& s : seqs) active.push_back(std::move(s));
}

// Sample the next token from s.logits, report it, and decide whether the sequence goes on.
// Returns false when it finished.
bool Scheduler::sample_and_emit(Seq& s) {
  const GenParams& p = s.job->params();
  const int64_t vocab = runner_->config().vocab;
  auto done = [&](const char* reason) {
    Event ev;
    ev.kind = Event::Kind::Done;
    ev.choice = s.choice;
    std::string tail = s.text.finish();
    if (!tail.empty()) {
      Event t;
      t.choice = s.choice;
      t.text = std::move(tail);
      s.job->push(std::move(t));
    }
    ev.finish_reason = reason;
    ev.prompt_tokens = static_cast<int64_t>(p.prompt.size());
    ev.completion_tokens = s.generated;
    ev.cached_tokens = s.resumed_from;
    if (p.session) {  // saved before Done is reported, so the next request finds it
      try {
        s.engine->session().history = s.history;
        s.engine->save_state(p.session->path());
        p.session->saved(s.history, s.engine->n_past());
        ++stats_.sessions_saved;
      } catch (const Error&) {
        // Not saved: the lease releases the id when the job ends; the session keeps its last state.
      }
    }
    s.job->push(std::move(ev));
    if (s.job->finished()) ++stats_.jobs_done;
    s.finished = true;
    return false;
  };
  std::vector<double> logp;
  if (p.top_logprobs >= 0) compute::log_softmax(s.logits.data(), vocab, logp);
  std::vector<compute::Scored> top;
  if (p.top_logprobs > 0) compute::top_k(s.logits.data(), vocab, p.top_logprobs, top);
  if (p.frequency_penalty != 0 || p.presence_penalty != 0)
    for (const auto& [id, n] : s.counts)
      s.logits[static_cast<size_t>(id)] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
  if (s.json) {
    json_vocab_->mask(*s.json, eog_, allowed_);
    for (int64_t i = 0; i < vocab; ++i)
      if (!allowed_[static_cast<size_t>(i)]) s.logits[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
  }
  if (s.schema) {
    json_vocab_->mask(*s.schema, eog_, allowed_);
    for (int64_t i = 0; i < vocab; ++i)
      if (!allowed_[static_cast<size_t>(i)]) s.logits[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
  }
  const int32_t tok = s.sampler.sample(s.logits.data(), vocab, s.history);
  if (std::find(eog_.begin(), eog_.end(), tok) != eog_.end()) return done("stop");
  if (s.json && !json_vocab_->advance(*s.json, tok)) return done("stop");  // cannot happen: masked
  if (s.schema && !json_vocab_->advance(*s.schema, tok)) return done("stop");  // cannot happen: masked
  ++s.generated;
  ++s.counts[tok];
  s.history.push_back(tok);
  ++stats_.generated_tokens;
  Event ev;
  ev.choice = s.choice;
  ev.text = s.text.push(tok);
  auto entry = [&](int32_t id) {
    TokenLogprob t;
    t.id = id;
    t.bytes = tok_.token_to_piece(id);
    t.text = utf8_sanitize(t.bytes, /*hold_incomplete_tail=*/false, nullptr);
    t.logprob = logp.empty() ? 0.0 : logp[static_cast<size_t>(id)];
    return t;
  };
  ev.token = entry(tok);
  for (const auto& c : top) ev.top.push_back(entry(c.index));
  s.job->push(std::move(ev));
  if (s.text.stopped()) return done("stop");
  if (s.generated >= p.max_tokens) return done("length");
  if (s.engine->n_past() + 1 > opt_.context) return done("length");
  s.next = tok;
  return true;
}

// A job whose sequence failed reports the error once; all its sequences leave the batch.
void Scheduler::fail(std::vector<std::unique_ptr<Seq>>& active, Job& job, const Error& e) {
  if (!job.finished()) {
    job.push(error_event(e));
    ++stats_.jobs_failed;
  }
  for (auto& s : active)
    if (s->job.get() == &job) s->finished = true;
}

void Scheduler::step(std::vector<std::unique_ptr<Seq>>& active) {
  const int64_t V = runner_->config().vocab;
  const auto now = std::chrono::steady_clock::now();
  // Leave: cancelled jobs, timed-out jobs.
  for (auto& s : active) {
    if (s->finished) continue;
    const bool cancelled = s->job->cancel.load() || cancel_all_;
    const bool late = now > s->job->params().deadline;
    if (cancelled || late) {
      Event ev;
      ev.kind = Event::Kind::Done;
      ev.choice = s->choice;
      ev.finish_reason = cancelled ? "cancelled" : "timeout";
      ev.prompt_tokens = static_cast<int64_t>(s->job->params().prompt.size());
      ev.completion_tokens = s->generated;
      ev.cached_tokens = s->resumed_from;
      s->job->push(std::move(ev));
      s->finished = true;
      if (s->job->finished()) {
        ++stats_.jobs_done;
        if (cancelled) ++stats_.jobs_cancelled;
      }
    }
  }
  // One prompt chunk for the first sequence still reading its prompt.
  std::vector<Seq*> ready;  // sequences whose logits are fresh
  for (auto& s : active) {
    if (s->finished || !s->prefilling()) continue;
    try {
      const auto& prompt = s->job->params().prompt;
      std::vector<float> h;
      if (!s->standard && s->prompt_done > 0) {  // a resumed session: the new tokens one by one
        const size_t from = s->prompt_done;
        for (size_t i = from; i < prompt.size(); ++i) h = s->engine->decode_step(prompt[i]);
        s->prompt_done = prompt.size();
        stats_.prefilled_tokens += prompt.size() - from;
      } else if (!s->standard) {
        h = s->engine->prefill(prompt);
        s->prompt_done = prompt.size();
        stats_.prefilled_tokens += prompt.size();
      } else {
        const size_t n = std::min(kPrefillChunk, prompt.size() - s->prompt_done);
        std::vector<int32_t> chunk(prompt.begin() + static_cast<std::ptrdiff_t>(s->prompt_done),
                                   prompt.begin() + static_cast<std::ptrdiff_t>(s->prompt_done + n));
        h = s->prompt_done == 0 ? s->standard->prefill(chunk) : s->standard->extend(chunk);
        s->prompt_done += n;
        stats_.prefilled_tokens += n;
      }
      if (!s->prefilling()) {
        s->logits.resize(static_cast<size_t>(V));
        runner_->logits(h.data(), 1, s->logits.data());
        ready.push_back(s.get());
      }
    } catch (const Error& e) {
      fail(active, *s->job, e);
    }
    break;
  }
  // Decode: every sequence with a token to feed, standard ones in one batch.
  std::vector<StandardEngine::BatchStep> batch;
  std::vector<Seq*> batched, single;
  for (auto& s : active) {
    if (s->finished || s->prefilling() || s->next < 0) continue;
    if (s->standard) {
      StandardEngine::BatchStep b;
      b.engine = s->standard;
      b.token = s->next;
      b.cancel = &s->job->cancel;
      batch.push_back(std::move(b));
      batched.push_back(s.get());
    } else {
      single.push_back(s.get());
    }
  }
  std::vector<Seq*> rows;
  std::vector<float> x;
  if (!batch.empty()) {
    try {
      StandardEngine::decode_batch(*runner_, batch);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch[i].cancelled) continue;  // reported as cancelled next iteration
        rows.push_back(batched[i]);
        x.insert(x.end(), batch[i].hidden.begin(), batch[i].hidden.end());
      }
    } catch (const Error& e) {
      for (Seq* s : batched) fail(active, *s->job, e);
    }
  }
  for (Seq* s : single) {
    try {
      const auto h = s->engine->decode_step(s->next);
      rows.push_back(s);
      x.insert(x.end(), h.begin(), h.end());
    } catch (const Error& e) {
      fail(active, *s->job, e);
    }
  }
  if (!rows.empty()) {
    const auto n = static_cast<int64_t>(rows.size());
    std::vector<float> logits(static_cast<size_t>(n * V));
    runner_->logits(x.data(), n, logits.data());
    for (int64_t i = 0; i < n; ++i) {
      Seq* s = rows[static_cast<size_t>(i)];
      s->logits.assign(logits.begin() + i * V, logits.begin() + (i + 1) * V);
      s->next = -1;
      ready.push_back(s);
    }
    ++stats_.decode_steps;
    stats_.batched_rows += static_cast<uint64_t>(n);
    stats_.last_batch = n;
  }
  for (Seq* s : ready)
    if (!s->finished && !(s->job->cancel.load() || cancel_all_)) sample_and_emit(*s);
}

void Scheduler::loop() {
  std::vector<std::unique_ptr<Seq>> active;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (cancel_all_)
        for (auto& j : queue_) j->cancel = true;
      while (!queue_.empty() && static_cast<int>(active.size()) < opt_.max_batch) {
        auto job = queue_.front();
        queue_.pop_front();
        lock.unlock();
        admit(job, active);
        lock.lock();
      }
      stats_.queue_depth = static_cast<int64_t>(queue_.size());
      if (stopping_ && queue_.empty() && active.empty()) break;
    }
    if (!active.empty()) step(active);
    // Finished sequences leave the batch (their slots free for the next admission).
    active.erase(std::remove_if(active.begin(), active.end(), [](const std::unique_ptr<Seq>& s) { return s->finished; }),
                 active.end());
    stats_.active_sequences = static_cast<int64_t>(active.size());
  }
}

}  // namespace larql::server
