// Forward::decode_batch: one decode step for many sequences in one pass over the weights
// (docs/architecture.md "Many sequences").
#include <algorithm>
#include <string>

#include "inference/forward.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql {

void Forward::decode_batch(std::span<BatchItem> items) {
  const ModelConfig& c = config();
  const int64_t H = c.hidden, N = static_cast<int64_t>(items.size());
  if (N == 0) return;
  for (int64_t i = 0; i < N; ++i) {
    const BatchItem& it = items[static_cast<size_t>(i)];
    const std::string where = "decode_batch: item " + std::to_string(i);
    if (it.cache == nullptr || it.x == nullptr) throw Error(ErrorKind::InvalidArgument, where + " has no cache or output");
    if (it.cache->n_layers() != c.n_layers)
      throw Error(ErrorKind::InvalidArgument, where + "'s cache has " + std::to_string(it.cache->n_layers()) +
                                                  " layers, the model " + std::to_string(c.n_layers));
    for (int64_t j = 0; j < i; ++j)
      if (items[static_cast<size_t>(j)].cache == it.cache)
        throw Error(ErrorKind::InvalidArgument, where + " shares its cache with item " + std::to_string(j));
    for (int64_t li = 0; li < c.n_layers; ++li)
      if (it.cache->layer(li).end_pos() != it.cache->n_past())
        throw Error(ErrorKind::InvariantViolation, where + "'s cache ends at " +
                                                       std::to_string(it.cache->layer(li).end_pos()) + " in layer " +
                                                       std::to_string(li) + ", " + std::to_string(it.cache->n_past()) +
                                                       " in layer 0");
  }
  // Live rows: rows[r] is item seq[r]'s residual at position pos[r]. Token ids are checked by
  // embed before any cache changes.
  float* x = Workspace::grow(ws_.rows, static_cast<size_t>(N * H));
  ws_.pos.resize(static_cast<size_t>(N));
  ws_.seq.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    BatchItem& it = items[static_cast<size_t>(i)];
    it.cancelled = false;
    embed(&it.token, 1, x + i * H);
    ws_.pos[static_cast<size_t>(i)] = it.cache->n_past();
    ws_.seq[static_cast<size_t>(i)] = i;
  }
  int64_t n = N;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  for (int64_t li = 0; li < c.n_layers; ++li) {
    // Cancelled sequences leave here: their rows of layers < li are rewound, their row dropped.
    int64_t live = 0;
    for (int64_t r = 0; r < n; ++r) {
      BatchItem& it = items[static_cast<size_t>(ws_.seq[static_cast<size_t>(r)])];
      if (it.cancel != nullptr && it.cancel->load(std::memory_order_relaxed)) {
        for (int64_t l = 0; l < li; ++l) it.cache->layer(l).truncate(ws_.pos[static_cast<size_t>(r)]);
        it.cancelled = true;
        continue;
      }
      if (live != r) {
        std::copy(x + r * H, x + (r + 1) * H, x + live * H);
        ws_.pos[static_cast<size_t>(live)] = ws_.pos[static_cast<size_t>(r)];
        ws_.seq[static_cast<size_t>(live)] = ws_.seq[static_cast<size_t>(r)];
      }
      ++live;
    }
    n = live;
    if (n == 0) return;
    float* q = Workspace::grow(ws_.q, static_cast<size_t>(n * qd));
    float* k = Workspace::grow(ws_.k, static_cast<size_t>(n * kvd));
    float* v = Workspace::grow(ws_.v, static_cast<size_t>(n * kvd));
    float* attn = Workspace::grow(ws_.attn, static_cast<size_t>(n * qd));
    qkv_at(li, x, n, ws_.pos.data(), q, k, v);
    // Attention per sequence over its own K/V, exactly as layer() does for one row (eviction
    // waits for the end of the step, so a cancelled sequence can be rewound).
    ws_.spans.resize(static_cast<size_t>(n));
    ws_.masks.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      LayerKv& kv = items[static_cast<size_t>(ws_.seq[static_cast<size_t>(r)])].cache->layer(li);
      kv.append(k + r * kvd, v + r * kvd, 1);
      ws_.spans[static_cast<size_t>(r)] = span_of(kv);
      ws_.masks[static_cast<size_t>(r)] = mask_of(kv);
    }
    attend_rows(li, q, n, ws_.pos.data(), ws_.spans.data(), ws_.masks.data(), attn);
    finish_rows(li, attn, n, x, 0, ws_.pos.data(), ws_.seq.data());
  }
  for (int64_t r = 0; r < n; ++r) {
    BatchItem& it = items[static_cast<size_t>(ws_.seq[static_cast<size_t>(r)])];
    for (int64_t li = 0; li < c.n_layers; ++li) it.cache->layer(li).evict();
    std::copy(x + r * H, x + (r + 1) * H, it.x);
  }
}

}  // namespace larql
