#include "kv/registry.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "kv/device_engine.h"
#include "kv/standard.h"
#include "kv/no_cache.h"
#include "kv/markov_rs.h"
#include "kv/cached_residual.h"
#include "kv/calibration.h"
#include "kv/turbo_quant.h"
#include "kv/unlimited_context.h"
#include "kv/boundary_kv.h"
#include "kv/apollo/engine.h"
#include "util/error.h"

namespace larql {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

const EngineEntry* find_entry(const std::string& name) {
  for (const auto& e : engine_registry()) {
    if (e.name == name) return &e;
    if (std::find(e.aliases.begin(), e.aliases.end(), name) != e.aliases.end()) return &e;
  }
  return nullptr;
}

std::string known_names() {
  std::string s;
  for (const auto& e : engine_registry()) {
    s += (s.empty() ? "" : ", ") + e.name;
    if (!e.aliases.empty()) {
      s += " (";
      for (size_t i = 0; i < e.aliases.size(); ++i) s += (i ? ", " : "") + e.aliases[i];
      s += ")";
    }
  }
  return s;
}

/// Validate v for key k; returns the canonical text (integers without leading zeros or '+').
std::string check_value(const EngineEntry& e, const EngineKey& k, const std::string& v) {
  const std::string where = "engine '" + e.name + "': key '" + k.name + "' = '" + v + "'";
  switch (k.type) {
    case KeyType::Int: {
      int64_t x = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), x);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || x < k.min_int)
        throw Error(ErrorKind::InvalidArgument,
                    where + (k.min_int == 1 ? std::string(" is not a positive integer")
                                            : " is not an integer >= " + std::to_string(k.min_int)));
      return std::to_string(x);
    }
    case KeyType::Float: {
      char* end = nullptr;
      errno = 0;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || !(x >= 0) || !std::isfinite(x) || errno == ERANGE)
        throw Error(ErrorKind::InvalidArgument, where + " is not a finite non-negative number in range");
      break;
    }
    case KeyType::Enum:
      if (std::find(k.allowed.begin(), k.allowed.end(), v) == k.allowed.end()) {
        std::string list;
        for (const auto& a : k.allowed) list += (list.empty() ? "" : ", ") + a;
        throw Error(ErrorKind::InvalidArgument, where + " is not accepted (accepted: " + list + ")");
      }
      break;
    case KeyType::String:
      if (v.empty()) throw Error(ErrorKind::InvalidArgument, where + " is empty");
      break;
  }
  return v;
}

const EngineKey kSinkKey{
    "sink", KeyType::Enum, "1",
    "1: layers the engine window cuts also attend to position 0 (<bos>, the attention sink), kept forever; 0: off",
    {"0", "1"}};

const EngineKey kColdKvKey{
    "cold_kv", KeyType::Enum, "cache",
    "K/V of cold positions: cache = derived once from the (round-tripped) residual and kept (O(1) work per step, "
    "memory like standard); derive = re-derived every step (memory bounded by the window, O(cold rows) work per step)",
    {"cache", "derive"}};

/// markov-rs / markov-rs-codec in either cold_kv mode; both modes share the state-file format.
/// markov-rs-codec's hot tier when `window` is not given: positions older than this are encoded.
constexpr int64_t kMarkovRsCodecDefaultWindow = 256;

std::unique_ptr<Engine> make_markov_rs(std::shared_ptr<Forward> f, const EngineSpec& s, ColdCodec codec) {
  // markov-rs is unbounded by default; the codec variant needs a bounded hot tier to encode anything.
  const int64_t window = s.get_int("window", codec == ColdCodec::F32 ? 0 : kMarkovRsCodecDefaultWindow);
  if (s.get_string("cold_kv", "cache") == "derive") return std::make_unique<MarkovRsEngine>(std::move(f), window, codec);
  const std::string cfg = MarkovRsEngine::config_string(window, codec);
  const auto layers = static_cast<size_t>(f->config().n_layers);
  return std::make_unique<CachedResidualEngine>(
      std::move(f), window, std::vector<ColdCodec>(layers, codec),
      ResidualEngineIdentity{codec == ColdCodec::F32 ? "markov-rs" : "markov-rs-codec", cfg});
}

}  // namespace

std::string EngineSpec::to_string() const {
  std::string s = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

int64_t EngineSpec::get_int(const std::string& key, int64_t fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : std::stoll(it->second);
}

double EngineSpec::get_double(const std::string& key, double fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : std::strtod(it->second.c_str(), nullptr);
}

std::string EngineSpec::get_string(const std::string& key, const std::string& fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : it->second;
}

const std::vector<EngineEntry>& engine_registry() {
  static const std::vector<EngineEntry> kRegistry = {
      {"standard",
       {"full", "fp32", "markov-bounded", "bounded", "sliding"},
       {{"window", KeyType::Int, "",
         "evict: every layer attends to its newest N positions (itself included), in prefill as in decode; N must be "
         ">= the model's sliding window (default: unbounded)", {}},
        kSinkKey},
       "K/V tensors per layer (f32); sliding layers keep only their model window; window=N evicts the others",
       "the reference: parity with llama.cpp on the same GGUF is measured",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         return std::make_unique<StandardEngine>(std::move(f), s.get_int("window", 0), s.get_string("sink", "1") == "1");
       },
       {},
       {"standard:window=520"}},
      {"no-cache",
       {"no_cache", "none", "off"},
       {},
       "the token list only; every step re-runs the full forward (O(N^2), a debugging oracle)",
       "the same logits as standard (max |delta logit| <= 1e-3)",
       [](std::shared_ptr<Forward> f, const EngineSpec&) -> std::unique_ptr<Engine> {
         return std::make_unique<NoCacheEngine>(std::move(f));
       }},
      {"markov-rs",
       {"markov_rs", "markov-residual", "markov_residual"},
       {{"window", KeyType::Int, "", "hot tier: newest N positions keep residuals in f32; older ones move to the cold tier (default: unbounded)", {}},
        kColdKvKey},
       "the residual stream per layer (global layers: every position; sliding: their window); K/V derived",
       "exact: greedy tokens identical to standard, per-step KL <= 1e-6 nats",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         return make_markov_rs(std::move(f), s, ColdCodec::F32);
       }},
      {"markov-rs-codec",
       {"markov_rs_codec", "markov-residual-codec", "markov_residual_codec"},
       {{"window", KeyType::Int, std::to_string(kMarkovRsCodecDefaultWindow),
         "hot tier: newest N positions in f32; older residuals encoded", {}},
        {"codec", KeyType::Enum, "bf16", "cold-tier residual codec", {"bf16", "int8"}},
        kColdKvKey},
       "markov-rs with the cold residual tier encoded (bf16 round-to-nearest-even, or int8 per-row scale)",
       "mean KL vs markov-rs <= 0.01 nats (bf16); int8 reported",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         return make_markov_rs(std::move(f), s, s.get_string("codec", "bf16") == "int8" ? ColdCodec::Int8 : ColdCodec::Bf16);
       }},
      {"boundary-per-layer",
       {"boundary_per_layer", "boundary-pl"},
       {{"window", KeyType::Int, "", "hot tier (default: the calibration record's window; another value is refused)", {}},
        {"layers", KeyType::Int, "", "layer count (default: the model's; must equal it)", {}},
        {"budget", KeyType::Float, "", "KL budget in nats: the record's bound must be <= budget (default: not checked)", {}},
        {"record", KeyType::String, "", "calibration record (default: <model>.bpl.json; the CLI's: $LARQL_BPL_RECORD when set)", {}}},
       "markov-rs with a per-layer cold-tier codec (f32/bf16/int8) from `larql calibrate` (<model>.bpl.json); cold K/V cached",
       "end-to-end mean KL vs standard <= the calibration record's bound on held-out text",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         const std::string record = s.get_string("record", "");
         // Uncalibrated (bf16) is the fallback for the default path only: a record named by the
         // spec (or by $LARQL_BPL_RECORD through the CLI) must exist.
         std::error_code ec;
         if (!record.empty() && !std::filesystem::exists(record, ec))
           throw Error(ErrorKind::NotFound, "boundary-per-layer: record=" + record +
                                                ": no such file (make one with `larql calibrate MODEL --engine "
                                                "boundary-per-layer --budget X -o " + record +
                                                "`, or leave record unset to run uncalibrated)");
         const std::string path = record.empty() ? bpl_record_path(f->model().path()) : record;
         const double budget = s.get_double("budget", -1.0);
         return make_boundary_per_layer(std::move(f), path, s.get_int("window", 0), s.get_int("layers", 0), budget);
       }},
      {"turbo-quant",
       {"turbo_quant", "turboquant", "tq4", "tq3"},
       {{"bits", KeyType::Enum, "4", "bits per K/V coordinate (tq3 = bits=3, tq4 = bits=4)", {"3", "4"}},
        {"recent", KeyType::Int, "16", "the last N positions stay exact f32 (0: every row quantised before attention)", {}, 0}},
       "K/V quantised in place: per head an f32 gain + WHT-rotated Lloyd-Max codes (3 or 4 bits) of V and of "
       "(K - K[BOS]) scaled by the q/k-norm weights; the last `recent` positions exact",
       "lossy: prefill = decode bit for bit; teacher-forced KL and top-1 vs standard measured (docs/BENCHMARKS.md)",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         return std::make_unique<TurboQuantEngine>(std::move(f), static_cast<int>(s.get_int("bits", 4)),
                                                   s.get_int("recent", TurboQuantEngine::kDefaultRecent));
       },
       {{"tq3", {{"bits", "3"}}}, {"tq4", {{"bits", "4"}}}}},
      {"unlimited-context",
       {"unlimited", "unlimited_context"},
       {{"window", KeyType::Int, "512",
         "tokens per window (>= the model's sliding window): global layers attend to the sink, the whole previous "
         "window and their own; sliding layers keep their own span across windows", {}},
        {"sink", KeyType::Enum, "1", "1: global layers also attend to position 0 (<bos>, the attention sink); 0: off", {"0", "1"}}},
       "the sliding layers' span + the global layers' previous and current window and <bos> sink row + every token id",
       "exact while the context fits two windows; beyond, KL vs standard is measured (no cliff at a boundary)",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         return std::make_unique<UnlimitedContextEngine>(std::move(f), s.get_int("window", 512), s.get_string("sink", "1") == "1");
       }},
      {"boundary-kv",
       {"boundary_kv", "boundary"},
       {{"window", KeyType::Int, "", "as standard:window=N, with the sink (default: unbounded)", {}},
        {"chunk_tokens", KeyType::Int, "512", "a boundary frame at the end of every chunk of this many tokens", {}},
        {"sequence_id", KeyType::String, "",
         "archive file name under archive_dir; letters, digits, '.', '_', '-' "
         "(default: a fresh id per sequence, kept in its saved state)", {}},
        {"archive_dir", KeyType::String, "", "directory of the archives (default: ./larql-archive; the CLI's: $LARQL_ARCHIVE_DIR when set)", {}}},
       "standard K/V + gated bf16/int8 boundary frames (residual, tokens, confidence) in an on-disk archive",
       "identical to standard; resume from the archive replays its tokens exactly",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         BoundaryKvOptions o;
         o.window = s.get_int("window", 0);
         o.chunk_tokens = s.get_int("chunk_tokens", 512);
         o.sequence_id = s.get_string("sequence_id", "");
         o.archive_dir = s.get_string("archive_dir", "");
         return std::make_unique<BoundaryKvEngine>(std::move(f), std::move(o));
       }},
      {"apollo",
       {},
       {{"layer", KeyType::Int, "", "injection layer, 0..n_layers-1 (default: 7/8 of the model's layers, 16 of 18 on Gemma 3 270M)", {}, 0},
        {"coef", KeyType::Float, "8.0", "injection scale; 0 runs the retrieved passage without injection", {}},
        {"top_k", KeyType::Int, "12", "entry tokens injected at most", {}},
        {"store", KeyType::String, "", "store file from `larql apollo build DOCUMENT -o STORE` (required)", {}}},
       "retrieval: routes the query to one window of a document store, runs passage + query, injects entry tokens",
       "task-level: QA answer accuracy vs standard with the whole document in context (`larql apollo eval`)",
       [](std::shared_ptr<Forward> f, const EngineSpec& s) -> std::unique_ptr<Engine> {
         ApolloOptions o;
         o.store = s.get_string("store", "");
         o.layer = s.params.count("layer") ? s.get_int("layer", -1) : -1;
         o.coef = s.get_double("coef", 8.0);
         o.top_k = s.get_int("top_k", 12);
         return std::make_unique<ApolloEngine>(std::move(f), std::move(o));
       }},
  };
  return kRegistry;
}

EngineSpec parse_engine_spec(std::string_view raw) {
  const std::string spec = trim(raw);
  if (spec.empty()) throw Error(ErrorKind::InvalidArgument, "empty engine spec (known engines: " + known_names() + ")");
  const size_t colon = spec.find(':');
  const std::string name = trim(std::string_view(spec).substr(0, colon));
  const EngineEntry* e = find_entry(name);
  if (e == nullptr)
    throw Error(ErrorKind::InvalidArgument, "unknown engine '" + name + "' (known engines: " + known_names() + ")");
  EngineSpec out;
  out.name = e->name;
  if (colon != std::string::npos) {
    std::string_view rest = std::string_view(spec).substr(colon + 1);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string kv = trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (kv.empty()) continue;
      const size_t eq = kv.find('=');
      const std::string key = trim(std::string_view(kv).substr(0, eq));
      auto k = std::find_if(e->keys.begin(), e->keys.end(), [&](const EngineKey& x) { return x.name == key; });
      if (k == e->keys.end()) {
        std::string list;
        for (const auto& x : e->keys) list += (list.empty() ? "" : ", ") + x.name;
        throw Error(ErrorKind::InvalidArgument, "engine '" + e->name + "': unknown key '" + key + "' (keys: " +
                                                    (list.empty() ? "none" : list) + ")");
      }
      if (eq == std::string::npos)
        throw Error(ErrorKind::InvalidArgument, "engine '" + e->name + "': key '" + key + "' needs a value (" + key + "=...)");
      const std::string value = trim(std::string_view(kv).substr(eq + 1));
      const std::string canonical = check_value(*e, *k, value);
      if (out.params.count(key))
        throw Error(ErrorKind::InvalidArgument, "engine '" + e->name + "': key '" + key + "' given twice");
      out.params[key] = canonical;
    }
  }
  // An alias that implies key values (e.g. tq3 -> bits=3).
  if (auto preset = e->alias_params.find(name); preset != e->alias_params.end()) {
    for (const auto& [key, value] : preset->second) {
      auto it = out.params.find(key);
      if (it != out.params.end() && it->second != value)
        throw Error(ErrorKind::InvalidArgument, "engine '" + e->name + "': alias '" + name + "' means " + key + "=" +
                                                    value + ", but " + key + "=" + it->second + " was given");
      out.params[key] = value;
    }
  }
  return out;
}

std::vector<EngineSpec> parse_engine_list(std::string_view specs) {
  // Split on ';'; within a piece, a ','-separated item that has no '=' before any ':' and names
  // a known engine starts a new spec ("standard,markov-rs:window=8,codec=int8" is two specs).
  std::vector<std::string> pieces;
  auto split = [](std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t b = 0;
    for (size_t i = 0; i <= s.size(); ++i)
      if (i == s.size() || s[i] == sep) {
        out.push_back(s.substr(b, i - b));
        b = i + 1;
      }
    return out;
  };
  for (std::string_view part : split(specs, ';')) {
    std::string current;
    for (std::string_view item : split(part, ',')) {
      const std::string t = trim(item);
      const size_t colon = t.find(':'), eq = t.find('=');
      const bool starts_engine = (eq == std::string::npos || colon < eq) &&
                                 find_entry(trim(std::string_view(t).substr(0, colon))) != nullptr;
      if (starts_engine || current.empty()) {
        if (!trim(current).empty()) pieces.push_back(current);
        current = t;
      } else {
        current += "," + t;
      }
    }
    if (!trim(current).empty()) pieces.push_back(current);
  }
  if (pieces.empty()) throw Error(ErrorKind::InvalidArgument, "no engine specs given");
  std::vector<EngineSpec> out;
  for (const auto& p : pieces) out.push_back(parse_engine_spec(p));
  return out;
}

std::unique_ptr<Engine> make_engine(const EngineSpec& spec, std::shared_ptr<Forward> forward) {
  const EngineEntry* e = find_entry(spec.name);
  if (e == nullptr) throw Error(ErrorKind::InvalidArgument, "unknown engine '" + spec.name + "'");
  // A backend without host K/V (a GPU) runs `standard` itself; the other engines need host state.
  if (forward && forward->device() && !forward->device()->supports(DeviceFeature::HostKv)) {
    if (e->name != "standard" || !spec.params.empty()) refuse_on_device(spec.to_string(), *forward->device());
    auto device = forward->device();
    return std::make_unique<DeviceEngine>(std::move(forward), std::move(device));
  }
  return e->make(std::move(forward), spec);
}

}  // namespace larql
