// Dispatch, USE, SHOW MODELS / LAYERS, STATS, and the helpers the statement families share.
#include "lql/executor.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "lql/exec_internal.h"
#include "util/error.h"

namespace larql::lql {

namespace fs = std::filesystem;
using detail::not_built;

namespace detail {

void not_built(const std::string& what, Pos pos, const std::string& why) {
  throw Error(ErrorKind::Unsupported, what + " is not built yet (" + pos.str() + ")" + (why.empty() ? "" : ": " + why));
}

void check_layer(Session& s, int64_t layer, Pos pos) {
  const int64_t n = static_cast<int64_t>(s.index().layers.size());
  if (layer < 0 || layer >= n)
    throw Error(ErrorKind::InvalidArgument, "layer " + std::to_string(layer) + " at " + pos.str() +
                                                " is out of range: the vindex has " +
                                                (n == 0 ? std::string("no gate vectors")
                                                        : "layers 0-" + std::to_string(n - 1)));
}

std::vector<int64_t> layers_of(Session& s, const std::optional<LayerRange>& r, Pos pos) {
  std::vector<int64_t> out;
  const int64_t n = static_cast<int64_t>(s.index().layers.size());
  if (!r) {
    for (int64_t l = 0; l < n; ++l) out.push_back(l);
    return out;
  }
  check_layer(s, r->first, r->first_pos);
  check_layer(s, r->last, r->last_pos);
  for (int64_t l = r->first; l <= r->last; ++l) out.push_back(l);
  return out;
}

std::vector<int64_t> layers_of_band(Session& s, Band b, Pos pos) {
  if (b == Band::All) return layers_of(s, std::nullopt, pos);
  const char* name = b == Band::Syntax ? "syntax" : b == Band::Knowledge ? "knowledge" : "output";
  const auto bands = s.bands();
  auto it = bands.find(name);
  if (it == bands.end())
    throw Error(ErrorKind::InvalidArgument, std::string("the vindex has no ") + name + " band (" +
                                                std::to_string(s.index().num_layers) +
                                                " layers: bands need 8 or more, or layer_bands in index.json) at " +
                                                pos.str());
  return layers_of(s, LayerRange{it->second.first, it->second.last, pos, pos}, pos);
}

std::vector<std::string> feature_tokens(Session& s, int64_t layer, int64_t feature, size_t skip, size_t n) {
  std::vector<std::string> out;
  const auto* dm = s.down_meta();
  if (!dm || layer >= dm->num_layers() || feature >= dm->num_features(static_cast<uint32_t>(layer))) return out;
  const auto* edited = edited_down_record(s, layer, feature);
  std::vector<std::string> skipped;
  for (uint32_t i = 0; i < dm->top_k() && out.size() < n; ++i) {
    const auto e = edited ? (*edited)[i] : dm->entry(static_cast<uint32_t>(layer), static_cast<uint32_t>(feature), i);
    if (e.token == 0 && e.logit == 0.0f) break;  // padding
    std::string text = s.token_text(e.token);
    // Tokens that read the same (" Paris" and "Paris") are listed once.
    if (std::find(skipped.begin(), skipped.end(), text) != skipped.end() ||
        std::find(out.begin(), out.end(), text) != out.end())
      continue;
    if (i < skip) skipped.push_back(std::move(text));
    else out.push_back(std::move(text));
  }
  return out;
}

std::optional<std::pair<int64_t, double>> feature_top(Session& s, int64_t layer, int64_t feature) {
  const auto* dm = s.down_meta();
  if (!dm || layer >= dm->num_layers() || feature >= dm->num_features(static_cast<uint32_t>(layer))) return std::nullopt;
  const auto* edited = edited_down_record(s, layer, feature);
  const auto e = edited ? edited->front() : dm->entry(static_cast<uint32_t>(layer), static_cast<uint32_t>(feature), 0);
  if (e.token == 0 && e.logit == 0.0f) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(e.token), static_cast<double>(e.logit));
}

}  // namespace detail

namespace {

uint64_t dir_bytes(const fs::path& d) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

Table show_models(Session& s) {
  Table t;
  t.statement = "SHOW";
  t.title = "Vindexes in " + s.options().models_dir;
  t.columns = {{"name"}, {"model"}, {"layers", Column::Type::Int}, {"level"}, {"weights"},
               {"size_mib", Column::Type::Float, 1}};
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(s.options().models_dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / "index.json", ec)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    try {
      const auto ix = vindex::read_index(d.string());
      t.rows.push_back({d.filename().string(), ix.model, ix.num_layers,
                        std::string(vindex::extract_level_name(ix.extract_level)),
                        std::string(ix.has_model_weights ? "yes" : "no"),
                        static_cast<double>(dir_bytes(d)) / (1024.0 * 1024.0)});
    } catch (const Error& e) {
      t.notes.push_back(d.filename().string() + ": " + e.what());
    }
  }
  if (dirs.empty()) t.notes.push_back("(no vindex directories)");
  return t;
}

Table show_layers(Session& s, const ShowStmt& st, Pos pos) {
  Table t;
  t.statement = "SHOW";
  t.title = "Layers of " + s.path();
  t.columns = {{"layer", Column::Type::Int}, {"band"}, {"features", Column::Type::Int},
               {"with_meta", Column::Type::Int}, {"top_token"}, {"top_count", Column::Type::Int}};
  for (int64_t l : detail::layers_of(s, st.range, pos)) {
    const int64_t nf = s.index().layers[static_cast<size_t>(l)].num_features;
    int64_t with_meta = 0;
    std::map<int64_t, int64_t> counts;
    for (int64_t f = 0; f < nf; ++f)
      if (auto top = detail::feature_top(s, l, f)) {
        ++with_meta;
        ++counts[top->first];
      }
    Cell top_tok, top_count;
    if (!counts.empty()) {
      auto best = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second < b.second : a.first > b.first;
      });
      top_tok = s.token_text(best->first);
      top_count = best->second;
    }
    t.rows.push_back({l, s.band_of(l), nf, with_meta, top_tok, top_count});
  }
  return t;
}

std::string band_text(const std::map<std::string, vindex::Band>& b, const char* name) {
  auto it = b.find(name);
  return it == b.end() ? "-" : std::to_string(it->second.first) + "-" + std::to_string(it->second.last);
}

Table stats(Session& s) {
  const auto& ix = s.index();
  Table t;
  t.statement = "STATS";
  t.title = "Vindex " + s.path();
  t.columns = {{"key"}, {"value"}};
  int64_t features = 0;
  for (const auto& l : ix.layers) features += l.num_features;
  const auto bands = s.bands();
  auto add = [&](const std::string& k, const std::string& v) { t.rows.push_back({k, v}); };
  add("model", ix.model);
  add("family", ix.family);
  add("layers", std::to_string(ix.num_layers));
  add("hidden_size", std::to_string(ix.hidden_size));
  add("intermediate_size", std::to_string(ix.intermediate_size));
  add("vocab_size", std::to_string(ix.vocab_size));
  add("features", std::to_string(features));
  add("extract_level", vindex::extract_level_name(ix.extract_level));
  add("dtype", ix.dtype);
  add("quant", ix.quant);
  add("model_weights", ix.has_model_weights ? "yes" : "no");
  add("down_top_k", s.down_meta() ? std::to_string(s.down_meta()->top_k()) : "- (no down_meta.bin)");
  add("bands_from", ix.layer_bands.empty() ? "layer count" : "index.json");
  add("syntax", band_text(bands, "syntax"));
  add("knowledge", band_text(bands, "knowledge"));
  add("output", band_text(bands, "output"));
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", static_cast<double>(dir_bytes(s.path())) / (1024.0 * 1024.0));
  add("size", mib);
  return t;
}

Table run_statement(Session& s, const Statement& st) {
  const Pos pos = st.pos;
  return std::visit(
      [&](const auto& b) -> Table {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, UseStmt>) {
          try {
            s.use(b.path);
          } catch (const Error& e) {
            throw Error(e.kind(), "USE at " + pos.str() + ": " + e.what());
          }
          Table t;
          t.statement = "USE";
          const auto& ix = s.index();
          t.title = "Using " + s.path() + ": " + ix.model + ", " + std::to_string(ix.num_layers) + " layers, level " +
                    vindex::extract_level_name(ix.extract_level) +
                    (ix.has_model_weights ? ", with model weights" : ", no model weights");
          return t;
        } else if constexpr (std::is_same_v<T, ShowStmt>) {
          switch (b.what) {
            case ShowStmt::What::Models: return show_models(s);
            case ShowStmt::What::Layers: return show_layers(s, b, pos);
            case ShowStmt::What::Features: return detail::exec_show_features(s, b, pos);
            case ShowStmt::What::Entities: return detail::exec_show_entities(s, b, pos);
            case ShowStmt::What::Relations: return detail::exec_show_relations(s, b, pos);
            case ShowStmt::What::Patches: return detail::exec_show_patches(s);
          }
          not_built("SHOW", pos);
        } else if constexpr (std::is_same_v<T, StatsStmt>) {
          return stats(s);
        } else if constexpr (std::is_same_v<T, DescribeStmt>) {
          return detail::exec_describe(s, b, pos);
        } else if constexpr (std::is_same_v<T, WalkStmt>) {
          return detail::exec_walk(s, b, pos);
        } else if constexpr (std::is_same_v<T, ExplainStmt>) {
          return detail::exec_explain(s, b, pos);
        } else if constexpr (std::is_same_v<T, SelectStmt>) {
          return detail::exec_select(s, b, pos);
        } else if constexpr (std::is_same_v<T, InferStmt>) {
          return detail::exec_infer(s, b, pos);
        } else if constexpr (std::is_same_v<T, TraceStmt>) {
          return detail::exec_trace(s, b, pos);
        } else if constexpr (std::is_same_v<T, InsertStmt>) {
          return detail::exec_insert(s, b, pos);
        } else if constexpr (std::is_same_v<T, UpdateStmt>) {
          return detail::exec_update(s, b, pos);
        } else if constexpr (std::is_same_v<T, DeleteStmt>) {
          return detail::exec_delete(s, b, pos);
        } else if constexpr (std::is_same_v<T, PatchStmt>) {
          return detail::exec_patch(s, b, pos);
        } else if constexpr (std::is_same_v<T, DiffStmt>) {
          return detail::exec_diff(s, b, pos);
        } else if constexpr (std::is_same_v<T, CompileStmt>) {
          if (b.into_model) return detail::exec_compile_model(s, b, pos);
          return detail::exec_compile(s, b, pos);
        }
      },
      st.body);
}

}  // namespace

Table Executor::run(const Statement& st) { return run_statement(s_, st); }

std::vector<Table> Executor::run(const Pipeline& p) {
  std::vector<Table> out;
  for (const auto& st : p.stages) out.push_back(run(st));
  return out;
}

}  // namespace larql::lql
