// The pipeline mode's client (shard/pipeline.h; docs/sharding.md "Pipeline").
#include "shard/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "util/error.h"

namespace larql::shard {
namespace {

std::string range(int64_t b, int64_t e) { return b + 1 == e ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e - 1); }

}  // namespace

std::string PipelineStage::describe() const {
  std::string s = replicas.empty() ? "layers " + range(begin, end) : replicas[0]->info().describe();
  if (replicas.size() > 1) s += " and " + std::to_string(replicas.size() - 1) + " replica(s)";
  return s;
}

Pipeline connect_pipeline_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                                 std::chrono::milliseconds timeout) {
  const ModelConfig& c = local.config();
  const auto shards = dial_shards(local, spec, tls, timeout);
  Pipeline p;
  for (const auto& s : shards) {
    const ShardInfo& i = s->info();
    if (!i.attention || !i.ffn)
      throw Error(ErrorKind::InvalidArgument, "shard " + i.describe() + " holds only " + (i.ffn ? "the FFN" : "attention") +
                                                  " of its layers; a pipeline shard runs whole layers (serve it without "
                                                  "--ffn-only, or use --ffn remote:... for FFN shards)");
    if (i.n_experts > 0 && (i.expert_begin != 0 || i.expert_end != i.n_experts))
      throw Error(ErrorKind::InvalidArgument, "shard " + i.describe() + " holds an expert range; a pipeline shard runs whole "
                                                  "layers with every expert (use --ffn remote:... for expert shards)");
    auto it = std::find_if(p.begin(), p.end(), [&](const PipelineStage& st) { return st.begin == i.layer_begin && st.end == i.layer_end; });
    if (it != p.end()) {
      it->replicas.push_back(s);
      continue;
    }
    for (const auto& st : p)
      if (i.layer_begin < st.end && st.begin < i.layer_end)
        throw Error(ErrorKind::InvalidArgument, "shards " + st.describe() + " and " + i.describe() +
                                                    " hold overlapping layer ranges (replicas must hold the same layers)");
    PipelineStage st;
    st.begin = i.layer_begin;
    st.end = i.layer_end;
    st.replicas.push_back(s);
    p.push_back(std::move(st));
  }
  std::sort(p.begin(), p.end(), [](const PipelineStage& a, const PipelineStage& b) { return a.begin < b.begin; });
  std::string missing;
  int64_t at = 0;
  for (const auto& st : p) {
    if (st.begin > at) missing += (missing.empty() ? "" : ", ") + range(at, st.begin);
    at = st.end;
  }
  if (at < c.n_layers) missing += (missing.empty() ? "" : ", ") + range(at, c.n_layers);
  if (!missing.empty()) {
    std::string held;
    for (const auto& st : p) held += (held.empty() ? "" : ", ") + st.describe();
    throw Error(ErrorKind::InvalidArgument, "no pipeline shard holds layer(s) " + missing + " (the shards: " + held + ")");
  }
  return p;
}

ShardMap pipeline_shard_map(const Pipeline& p, int64_t n_layers) {
  ShardMap m(static_cast<size_t>(n_layers));
  for (const auto& st : p)
    for (int64_t li = st.begin; li < st.end && li < n_layers; ++li) m[static_cast<size_t>(li)].push_back(st.replicas);
  return m;
}

// ---- PipelineModel ----

PipelineModel::PipelineModel(std::shared_ptr<Forward> forward, Pipeline pipeline)
    : f_(std::move(forward)), pipeline_(std::move(pipeline)) {
  if (!f_ || pipeline_.empty()) throw Error(ErrorKind::InvalidArgument, "PipelineModel: no forward or no stage");
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  prefix_ = std::string("larql-") + buf + "-";
}

DeviceInfo PipelineModel::info() const {
  std::string name;
  for (const auto& st : pipeline_) name += (name.empty() ? "" : " -> ") + st.describe();
  return DeviceInfo{"pipeline", name, 0};
}

std::unique_ptr<PipelineSequence> PipelineModel::open(int64_t capacity) const {
  const int64_t ctx = f_->config().context_length;
  if (capacity < 1 || capacity > ctx)
    throw Error(ErrorKind::InvalidArgument, "a sequence of " + std::to_string(capacity) + " positions: must be in [1, " +
                                                std::to_string(ctx) + "]");
  return std::make_unique<PipelineSequence>(shared_from_this(), f_->sibling(), capacity,
                                            prefix_ + std::to_string(next_.fetch_add(1)));
}

void PipelineModel::decode_batch(std::span<DeviceSequence* const> seqs, const int32_t* tokens, int32_t* argmax_out) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto* s = dynamic_cast<const PipelineSequence*>(seqs[i]);
    if (s == nullptr || s->owner() != this)
      throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " belongs to another model");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seqs[i])
        throw Error(ErrorKind::InvalidArgument, "decode_batch: sequence " + std::to_string(i) + " appears twice");
  }
  // Each sequence's K/V are on its own shards: one RunLayers chain per sequence.
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->append(&tokens[i], 1);
    if (argmax_out != nullptr) argmax_out[i] = seqs[i]->argmax();
  }
}

// ---- PipelineSequence ----

PipelineSequence::PipelineSequence(std::shared_ptr<const PipelineModel> owner, std::shared_ptr<Forward> f, int64_t capacity,
                                   std::string id)
    : owner_(std::move(owner)), f_(std::move(f)), capacity_(capacity), id_(std::move(id)),
      chosen_(owner_->stages().size(), -1), last_(static_cast<size_t>(f_->config().hidden)) {}

PipelineSequence::~PipelineSequence() {
  const Pipeline& p = owner_->stages();
  for (size_t s = 0; s < p.size(); ++s) {
    if (chosen_[s] < 0) continue;
    auto& c = *p[s].replicas[static_cast<size_t>(chosen_[s])];
    if (c.suspect()) continue;  // a shard that just failed: its K/V expire there by themselves
    try {
      c.end_sequence(id_, std::chrono::milliseconds(1000));
    } catch (...) {
      // Best effort: the shard drops an idle sequence after its TTL anyway.
    }
  }
}

void PipelineSequence::check(const int32_t* tokens, int64_t n) const {
  const int64_t vocab = f_->config().vocab;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                                                  std::to_string(vocab) + ")");
  if (n_past_ + n > capacity_)
    throw Error(ErrorKind::ContextOverflow, std::to_string(n) + " tokens after " + std::to_string(n_past_) +
                                                " do not fit the sequence's " + std::to_string(capacity_) + " positions");
}

void PipelineSequence::stage_run(size_t s, int64_t pos, float* x, int64_t m) {
  const PipelineStage& st = owner_->stages()[s];
  const size_t k = st.replicas.size();
  if (pos > 0 && chosen_[s] >= 0) {
    ShardClient& c = *st.replicas[static_cast<size_t>(chosen_[s])];
    try {
      c.run_layers(id_, st.begin, st.end, pos, x, m);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::BackendUnavailable) {
        failed_stage_ = static_cast<int>(s);
        st.first->store((static_cast<size_t>(chosen_[s]) + 1) % k);  // the next sequence starts elsewhere
      }
      throw;
    }
    return;
  }
  // The sequence starts here: the replica it had (a rewind to 0), else the stage's preferred one,
  // then the others. A failed attempt may have overwritten part of x: each starts from the input.
  const size_t first = chosen_[s] >= 0 ? static_cast<size_t>(chosen_[s]) : st.first->load() % k;
  if (k > 1) in_.assign(x, x + m * f_->config().hidden);
  std::string errors;
  for (size_t t = 0; t < k; ++t) {
    const size_t i = (first + t) % k;
    if (t > 0) std::copy(in_.begin(), in_.end(), x);
    try {
      st.replicas[i]->run_layers(id_, st.begin, st.end, pos, x, m);
      chosen_[s] = static_cast<int>(i);
      if (i != first) st.first->store(i);
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BackendUnavailable || k == 1) {
        if (e.kind() == ErrorKind::BackendUnavailable) failed_stage_ = static_cast<int>(s);
        throw;
      }
      errors += std::string(errors.empty() ? "" : "; ") + e.what();
    }
  }
  failed_stage_ = -1;  // every replica was tried: nothing to run again on
  throw Error(ErrorKind::BackendUnavailable, "every replica of layers " + range(st.begin, st.end) + " failed: " + errors);
}

void PipelineSequence::advance(const int32_t* tokens, int64_t n, float* all) {
  const int64_t H = f_->config().hidden, C = f_->chunk();
  for (int64_t off = 0; off < n; off += C) {
    const int64_t m = std::min(C, n - off);
    float* x = all != nullptr ? all + off * H : Workspace::grow(x_, static_cast<size_t>(m * H));
    f_->embed(tokens + off, m, x);
    for (size_t s = 0; s < chosen_.size(); ++s) stage_run(s, n_past_, x, m);
    n_past_ += m;
    std::copy(x + (m - 1) * H, x + m * H, last_.begin());
  }
}

void PipelineSequence::append_rows(const int32_t* tokens, int64_t n, float* x) {
  if (n <= 0) return;
  check(tokens, n);
  const int64_t start = n_past_;
  failed_stage_ = -1;
  ran_ = false;
  try {
    advance(tokens, n, x);
  } catch (const Error& e) {
    n_past_ = start;  // the next call starts here again (the shards rewind what they ran)
    const bool can_rerun = e.kind() == ErrorKind::BackendUnavailable && start > 0 && failed_stage_ >= 0 &&
                           owner_->stages()[static_cast<size_t>(failed_stage_)].replicas.size() > 1;
    if (!can_rerun) throw;
    // The sequence's K/V of that stage were on the replica that failed: run it again from
    // position 0, the failed stage on another replica (the others start it afresh where they are).
    std::vector<int32_t> all(history_.begin(), history_.begin() + start);
    all.insert(all.end(), tokens, tokens + n);
    chosen_[static_cast<size_t>(failed_stage_)] = -1;
    n_past_ = 0;
    failed_stage_ = -1;
    std::vector<float> rows;
    if (x != nullptr) rows.resize(all.size() * static_cast<size_t>(f_->config().hidden));
    try {
      advance(all.data(), static_cast<int64_t>(all.size()), x != nullptr ? rows.data() : nullptr);
    } catch (...) {
      n_past_ = 0;
      history_.clear();
      throw;
    }
    if (x != nullptr) std::copy(rows.end() - n * f_->config().hidden, rows.end(), x);
  }
  history_.resize(static_cast<size_t>(start));
  history_.insert(history_.end(), tokens, tokens + n);
  ran_ = true;
}

void PipelineSequence::hidden(float* out) {
  if (!ran_) throw Error(ErrorKind::InvariantViolation, "the sequence has no last position to read (append first)");
  std::copy(last_.begin(), last_.end(), out);
}

void PipelineSequence::logits(float* out) {
  if (!ran_) throw Error(ErrorKind::InvariantViolation, "the sequence has no last position to read (append first)");
  f_->logits(last_.data(), 1, out);
}

int32_t PipelineSequence::argmax() {
  logits_.resize(static_cast<size_t>(f_->config().vocab));
  logits(logits_.data());
  return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
}

void PipelineSequence::truncate(int64_t pos) {
  if (pos < 0 || pos > n_past_)
    throw Error(ErrorKind::InvalidArgument, "truncate: position " + std::to_string(pos) + " is outside [0, " +
                                                std::to_string(n_past_) + "]");
  // The shards drop what follows when the next call starts at `pos` (RunLayers rewinds).
  n_past_ = pos;
  history_.resize(static_cast<size_t>(pos));
  ran_ = false;
}

}  // namespace larql::shard
