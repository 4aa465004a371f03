#include "kv/apollo/store.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "kv/state_file.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

constexpr const char* kStoreEngine = "apollo-store";
constexpr double kStopRank = 300.0;

std::string store_config(int64_t window, int64_t stride) {
  return "window=" + std::to_string(window) + ",stride=" + std::to_string(stride);
}

bool has_alnum(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const auto u = static_cast<unsigned char>(ch);
    return u >= 0x80 || std::isalnum(u);  // any non-ASCII byte counts: letters of other scripts
  });
}

}  // namespace

std::vector<int32_t> ApolloStore::window_tokens_of(int64_t w) const {
  const ApolloWindow& win = windows.at(static_cast<size_t>(w));
  return std::vector<int32_t>(doc.begin() + win.start, doc.begin() + win.start + win.len);
}

size_t ApolloStore::bytes() const {
  return (separator.size() + doc.size()) * sizeof(int32_t) + windows.size() * 2 * sizeof(uint64_t) +
         entries.size() * 4 * sizeof(uint32_t);
}

std::vector<float> content_weights(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return tok.token_score(a) > tok.token_score(b); });
  std::vector<float> w(static_cast<size_t>(n), 0.0f);
  for (int32_t r = 0; r < n; ++r) {
    const int32_t id = order[static_cast<size_t>(r)];
    if (tok.token_type(id) != TokenType::Normal) continue;
    // U+2581 (the SPM space) is three non-ASCII bytes: strip it before looking for a letter.
    std::string text = tok.token_text(id);
    for (size_t p; (p = text.find("\xE2\x96\x81")) != std::string::npos;) text.erase(p, 3);
    if (!has_alnum(text)) continue;
    w[static_cast<size_t>(id)] = static_cast<float>(std::max(0.0, std::log((r + 1) / kStopRank)));
  }
  return w;
}

double window_idf(int64_t df, int64_t n) {
  return std::log(1.0 + (static_cast<double>(n - df) + 0.5) / (static_cast<double>(df) + 0.5));
}

ApolloStore build_apollo_store(const std::vector<int32_t>& doc, const Tokenizer& tok, const std::string& fingerprint,
                               int64_t window_tokens, int64_t stride) {
  if (doc.empty()) throw Error(ErrorKind::InvalidArgument, "apollo build: the document has no tokens");
  if (window_tokens < 16)
    throw Error(ErrorKind::InvalidArgument, "apollo build: --window " + std::to_string(window_tokens) + " is below 16 tokens");
  if (stride < 1 || stride > window_tokens)
    throw Error(ErrorKind::InvalidArgument, "apollo build: --stride " + std::to_string(stride) + " is outside [1, " +
                                                std::to_string(window_tokens) + "]");
  ApolloStore s;
  s.fingerprint = fingerprint;
  s.window_tokens = window_tokens;
  s.stride = stride;
  s.separator = tok.encode("\n\n", false, false);
  s.doc = doc;
  const auto n = static_cast<int64_t>(doc.size());
  for (int64_t start = 0;; start += stride) {
    const int64_t len = std::min(window_tokens, n - start);
    s.windows.push_back({start, len});
    if (start + len >= n) break;
  }
  const std::vector<float> weight = content_weights(tok);
  std::unordered_map<int32_t, int64_t> df;
  for (size_t w = 0; w < s.windows.size(); ++w) {
    std::unordered_set<int32_t> seen;
    for (int64_t i = 0; i < s.windows[w].len; ++i) seen.insert(doc[static_cast<size_t>(s.windows[w].start + i)]);
    for (int32_t t : seen) ++df[t];
  }
  const auto n_win = static_cast<int64_t>(s.windows.size());
  for (size_t w = 0; w < s.windows.size(); ++w)
    for (int64_t i = 0; i < s.windows[w].len; ++i) {
      const int32_t t = doc[static_cast<size_t>(s.windows[w].start + i)];
      const float wt = weight.at(static_cast<size_t>(t));
      if (wt <= 0) continue;
      s.entries.push_back({t, static_cast<float>(wt * window_idf(df[t], n_win)), static_cast<int32_t>(w),
                           static_cast<int32_t>(i)});
    }
  return s;
}

void save_apollo_store(const ApolloStore& s, const std::string& path) {
  StateWriter w(path, {kStoreEngine, store_config(s.window_tokens, s.stride), s.fingerprint,
                       static_cast<uint64_t>(s.doc.size())});
  auto ids = [&](const std::vector<int32_t>& v) {
    w.u64(v.size());
    std::vector<uint32_t> u(v.begin(), v.end());
    w.u32s(u.data(), u.size());
  };
  ids(s.separator);
  ids(s.doc);
  w.u64(s.windows.size());
  for (const ApolloWindow& win : s.windows) {
    w.u64(static_cast<uint64_t>(win.start));
    w.u64(static_cast<uint64_t>(win.len));
  }
  w.u64(s.entries.size());
  std::vector<uint32_t> rec;
  rec.reserve(s.entries.size() * 4);
  for (const ApolloEntry& e : s.entries) {
    uint32_t c;
    std::memcpy(&c, &e.coefficient, 4);
    rec.insert(rec.end(), {static_cast<uint32_t>(e.token), c, static_cast<uint32_t>(e.window),
                           static_cast<uint32_t>(e.position)});
  }
  w.u32s(rec.data(), rec.size());
  w.close();
}

ApolloStore load_apollo_store(const std::string& path, const std::string& expect_fingerprint, int64_t vocab_size) {
  StateReader r(path);
  StateHeader h;
  try {
    h = r.header(kStoreEngine, expect_fingerprint);
  } catch (const Error& e) {
    // A file of the container format but another kind (an engine state file), or another model.
    const std::string what = e.what();
    if (e.kind() == ErrorKind::InvalidArgument && what.find("saved by engine") != std::string::npos)
      throw Error(ErrorKind::InvalidArgument, path + ": not an apollo store (" + what.substr(what.find("saved by engine") + 9) +
                                                  "; build one with `larql apollo build`)");
    if (e.kind() == ErrorKind::Format && what.find("bad magic") != std::string::npos)
      throw Error(ErrorKind::Format, path + ": not an apollo store (build one with `larql apollo build DOCUMENT -o STORE`)");
    throw;
  }
  ApolloStore s;
  s.fingerprint = h.fingerprint;
  long long w = 0, st = 0;
  if (std::sscanf(h.config.c_str(), "window=%lld,stride=%lld", &w, &st) != 2 || w < 16 || st < 1 || st > w)
    throw Error(ErrorKind::Format, path + ": store config '" + h.config + "' is not window=W,stride=S");
  s.window_tokens = w;
  s.stride = st;
  auto count = [&](size_t record_bytes, const char* what) {
    const uint64_t n = r.u64();
    if (n > r.remaining() / record_bytes)
      throw Error(ErrorKind::Format, path + ": " + what + " count " + std::to_string(n) + " exceeds the file");
    return static_cast<size_t>(n);
  };
  auto ids = [&](std::vector<int32_t>& out, const char* what) {
    std::vector<uint32_t> u(count(4, what));
    r.u32s(u.data(), u.size());
    for (uint32_t t : u)
      if (t >= static_cast<uint64_t>(vocab_size))
        throw Error(ErrorKind::Format, path + ": " + what + " token id " + std::to_string(t) + " is outside the vocabulary");
    out.assign(u.begin(), u.end());
  };
  ids(s.separator, "separator");
  ids(s.doc, "document");
  if (s.doc.empty() || s.doc.size() != h.n_past)
    throw Error(ErrorKind::Format, path + ": document has " + std::to_string(s.doc.size()) + " tokens, header says " +
                                       std::to_string(h.n_past));
  s.windows.resize(count(16, "window"));
  for (ApolloWindow& win : s.windows) {
    const uint64_t a = r.u64(), len = r.u64();
    if (len == 0 || len > static_cast<uint64_t>(s.window_tokens) || a >= s.doc.size() || len > s.doc.size() - a)
      throw Error(ErrorKind::Format, path + ": a window [" + std::to_string(a) + ", +" + std::to_string(len) +
                                         ") lies outside the document");
    win = {static_cast<int64_t>(a), static_cast<int64_t>(len)};
  }
  if (s.windows.empty()) throw Error(ErrorKind::Format, path + ": the store has no windows");
  std::vector<uint32_t> rec(count(16, "entry") * 4);
  r.u32s(rec.data(), rec.size());
  for (size_t i = 0; i < rec.size(); i += 4) {
    ApolloEntry e;
    e.token = static_cast<int32_t>(rec[i]);
    std::memcpy(&e.coefficient, &rec[i + 1], 4);
    const uint32_t win = rec[i + 2], pos = rec[i + 3];
    if (rec[i] >= static_cast<uint64_t>(vocab_size) || win >= s.windows.size() ||
        pos >= static_cast<uint64_t>(s.windows[win].len) || !std::isfinite(e.coefficient))
      throw Error(ErrorKind::Format, path + ": entry " + std::to_string(i / 4) + " is inconsistent with its window");
    e.window = static_cast<int32_t>(win);
    e.position = static_cast<int32_t>(pos);
    s.entries.push_back(e);
  }
  r.expect_end();
  return s;
}

}  // namespace larql
