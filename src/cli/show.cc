// `larql show MODEL`: architecture, metadata and the tensor table, from the model's weight source.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "kv/generate.h"
#include "model/vindex_source.h"
#include "vindex/index.h"

namespace larql::cli {
namespace {

struct ShowArgs {
  std::string model;
  bool json = false, tensors = false, metadata = false;
};

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The vindex's own description (docs/vindex-format.md): level, dtype, quant, layers, bands,
// every file's size, the source.
nlohmann::json vindex_json(const std::string& dir, const vindex::VindexIndex& x) {
  nlohmann::json files = nlohmann::json::object();
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& [name, sum] : x.checksums) {
    const auto n = std::filesystem::file_size(std::filesystem::path(dir) / name, ec);
    files[name] = {{"bytes", ec ? 0 : n}, {"sha256", sum}};
    total += ec ? 0 : n;
  }
  const auto idx_bytes = std::filesystem::file_size(std::filesystem::path(dir) / "index.json", ec);
  total += ec ? 0 : idx_bytes;
  nlohmann::json bands = nlohmann::json::object();
  for (const auto& [k, b] : x.layer_bands) bands[k] = {b.first, b.last};
  const std::string why = vindex_not_runnable_reason(dir, x);
  return {{"path", dir},
          {"model", x.model},
          {"family", x.family},
          {"vindex_spec_version", x.vindex_spec_version},
          {"extract_level", vindex::extract_level_name(x.extract_level)},
          {"dtype", x.dtype},
          {"quant", x.quant},
          {"has_model_weights", x.has_model_weights},
          {"runnable", why.empty()},
          {"num_layers", x.num_layers},
          {"hidden_size", x.hidden_size},
          {"intermediate_size", x.intermediate_size},
          {"vocab_size", x.vocab_size},
          {"features", x.layers.empty() ? 0 : x.layers[0].num_features},
          {"experts", x.layers.empty() ? 0 : x.layers[0].num_experts},
          {"features_per_expert", x.layers.empty() ? 0 : x.layers[0].num_features_per_expert},
          {"down_top_k", x.down_top_k},
          {"layer_bands", bands},
          {"source", {{"format", x.source.format}, {"name", x.source.name}, {"fingerprint", x.source.fingerprint},
                      {"extracted_at", x.source.extracted_at}, {"larql_version", x.source.larql_version}}},
          {"files", files},
          {"bytes", total}};
}

void print_vindex(const nlohmann::json& v) {
  std::printf("vindex         %s\n", v["path"].get<std::string>().c_str());
  std::printf("model          %s (%s), vindex spec %lld\n", v["model"].get<std::string>().c_str(),
              v["family"].get<std::string>().c_str(), v["vindex_spec_version"].get<long long>());
  std::printf("level          %s%s\n", v["extract_level"].get<std::string>().c_str(),
              v["runnable"].get<bool>() ? " (runs a model)" : " (does not run a model: needs level inference)");
  std::printf("dtype / quant  %s / %s\n", v["dtype"].get<std::string>().c_str(), v["quant"].get<std::string>().c_str());
  std::string experts;
  if (v["experts"].get<long long>() > 0) {
    const long long e = v["experts"].get<long long>(), per = v["features_per_expert"].get<long long>();
    experts = " (" + std::to_string(e) + " experts x " + std::to_string(per);
    if (v["features"].get<long long>() > e * per) experts += " + " + std::to_string(v["features"].get<long long>() - e * per) + " shared";
    experts += ")";
  }
  std::printf("layers         %lld x %lld features%s, hidden %lld, vocab %lld, down_top_k %lld\n",
              v["num_layers"].get<long long>(), v["features"].get<long long>(), experts.c_str(), v["hidden_size"].get<long long>(),
              v["vocab_size"].get<long long>(), v["down_top_k"].get<long long>());
  std::string bands;
  for (const auto& [k, b] : v["layer_bands"].items())
    bands += (bands.empty() ? "" : ", ") + k + " " + std::to_string(b[0].get<long long>()) + "-" + std::to_string(b[1].get<long long>());
  std::printf("bands          %s\n", bands.empty() ? "(none)" : bands.c_str());
  const auto& src = v["source"];
  std::printf("source         %s %s, extracted %s by larql %s\n", src["format"].get<std::string>().c_str(),
              src["name"].get<std::string>().c_str(), src["extracted_at"].get<std::string>().c_str(),
              src["larql_version"].get<std::string>().c_str());
  std::printf("fingerprint    %s\n", src["fingerprint"].get<std::string>().c_str());
  std::printf("files          %zu + index.json, %.1f MiB\n", v["files"].size(), v["bytes"].get<uint64_t>() / 1048576.0);
  for (const auto& [name, f] : v["files"].items())
    std::printf("  %-24s %12llu bytes  %s\n", name.c_str(), static_cast<unsigned long long>(f["bytes"].get<uint64_t>()),
                f["sha256"].get<std::string>().substr(0, 16).c_str());
}

void run(const ShowArgs& a) {
  const std::string path = resolve_model(a.model);
  std::error_code ec;
  nlohmann::json vx;
  if (std::filesystem::is_directory(path, ec) && is_vindex_model_dir(path)) {  // a Hugging Face one: as a file
    const vindex::VindexIndex x = vindex::read_index(path);
    vx = vindex_json(path, x);
    if (!vx["runnable"].get<bool>()) {
      if (a.json)
        std::printf("%s\n", nlohmann::json({{"vindex", vx}}).dump(2).c_str());
      else
        print_vindex(vx);
      return;
    }
    if (!a.json) {
      print_vindex(vx);
      std::printf("\n");
    }
  }
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  const WeightSource& src = m->source();
  const std::vector<SourceTensor> tensors = src.tensors();
  std::map<std::string, std::pair<size_t, size_t>> by_type;  // dtype -> (count, bytes)
  size_t total = 0;
  for (const auto& t : tensors) {
    auto& e = by_type[dtype_name(t.type)];
    e.first++;
    e.second += t.nbytes;
    total += t.nbytes;
  }
  std::string globals;
  for (size_t i = 0; i < c.layers.size(); ++i)
    if (!c.layers[i].sliding) globals += (globals.empty() ? "" : ",") + std::to_string(i);
  if (a.json) {
    nlohmann::json j = {{"path", m->path()}, {"name", c.name}, {"architecture", c.arch},
                        {"layers", c.n_layers}, {"hidden", c.hidden}, {"ffn", c.ffn},
                        {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim},
                        {"vocab", c.vocab}, {"context_length", c.context_length}, {"norm_eps", c.norm_eps},
                        {"attn_scale", c.attn_scale}, {"embed_scale", c.embed_scale},
                        {"tied_embeddings", c.tied_embeddings}, {"global_layers", globals},
                        {"tensor_bytes", total}, {"fingerprint", m->fingerprint()}};
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : c.layers)
      layers.push_back({{"sliding", l.sliding}, {"window", l.window},
                        {"rope_form", l.rope_form == RopeForm::NeoX ? "neox" : "adjacent"}, {"rope_base", l.rope_base},
                        {"rope_freq_scale", l.rope_freq_scale}});
    j["layer_configs"] = layers;
    j["format"] = src.format();
    j["source_bytes"] = src.byte_size();
    j["qkv_bias"] = c.qkv_bias;
    j["qk_norm"] = c.qk_norm;
    j["post_norms"] = c.post_norms;
    j["activation"] = c.activation == Activation::Silu ? "silu" : "gelu_tanh";
    j["attn_logit_softcap"] = c.attn_logit_softcap;
    j["final_logit_softcap"] = c.final_logit_softcap;
    j["rope_freq_factors"] = c.rope_freq_factors;
    j["rope_attn_factor"] = c.rope_attn_factor;
    if (c.n_experts > 0)
      j["experts"] = {{"count", c.n_experts}, {"used", c.n_experts_used}, {"ffn", c.expert_ffn},
                      {"renormalised", c.expert_weights_norm}, {"shared_ffn", c.shared_expert_ffn}};
    const Tokenizer tok(src.vocabulary());
    j["tokenizer"] = {{"vocab", tok.vocab_size()}, {"bos_id", tok.bos_id()}, {"eos_id", tok.eos_id()},
                      {"add_bos", tok.add_bos()}, {"eog_ids", eog_ids(tok)},
                      {"chat_format", chat_format_of(tok) ? chat_format_name(*chat_format_of(tok)) : ""}};
    nlohmann::json meta = nlohmann::json::object();
    for (const MetadataEntry& e : src.metadata()) meta[e.key] = {{"type", e.type}, {"value", e.value}};
    j["metadata"] = meta;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : tensors)
      ts.push_back({{"name", t.name}, {"type", dtype_name(t.type)}, {"dims", t.dims}, {"bytes", t.nbytes}});
    j["tensors"] = ts;
    if (!vx.is_null()) j["vindex"] = vx;
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("model          %s\n", m->path().c_str());
  std::printf("name           %s (%s, %s)\n", c.name.c_str(), c.arch.c_str(), src.format().c_str());
  int64_t window = 0;
  for (const LayerConfig& l : c.layers) window = std::max(window, l.window);
  if (window > 0 && globals.empty())
    std::printf("layers         %lld (all slide over %lld tokens)\n", (long long)c.n_layers, (long long)window);
  else if (window > 0)
    std::printf("layers         %lld (global: %s; others slide over %lld tokens)\n", (long long)c.n_layers,
                globals.c_str(), (long long)window);
  else
    std::printf("layers         %lld (no sliding window)\n", (long long)c.n_layers);
  std::printf("hidden / ffn   %lld / %lld\n", (long long)c.hidden, (long long)c.ffn);
  std::printf("heads          %lld query, %lld key/value, head_dim %lld\n", (long long)c.n_heads,
              (long long)c.n_kv_heads, (long long)c.head_dim);
  std::printf("rope_theta     %.0f global, %.0f sliding\n", c.layers.empty() ? 0.0 : c.layers.back().rope_base,
              c.layers.empty() ? 0.0 : c.layers.front().rope_base);
  std::printf("vocab          %lld   context %lld   rms eps %g\n", (long long)c.vocab, (long long)c.context_length,
              c.norm_eps);
  std::printf("rope           %s pairs%s\n", !c.layers.empty() && c.layers[0].rope_form == RopeForm::Adjacent ? "adjacent" : "NeoX (split-half)",
              c.qkv_bias ? "; Q/K/V biases" : "");
  if (!c.rope_freq_factors.empty())
    std::printf("rope factors   %zu per-frequency divisors (Llama 3.1 / LongRoPE)%s\n", c.rope_freq_factors.size(),
                c.rope_attn_factor != 1.0 ? ", attention factor applied" : "");
  if (c.attn_logit_softcap > 0 || c.final_logit_softcap > 0)
    std::printf("softcap        attention %g, final logits %g\n", c.attn_logit_softcap, c.final_logit_softcap);
  if (c.n_experts > 0)
    std::printf("experts        %lld, %lld used per token (weights %s), ffn %lld each%s\n", (long long)c.n_experts,
                (long long)c.n_experts_used, c.expert_weights_norm ? "renormalised" : "as routed",
                (long long)c.expert_ffn,
                c.shared_expert_ffn > 0 ? ("; shared expert ffn " + std::to_string(c.shared_expert_ffn)).c_str() : "");
  std::printf("lm_head        %s\n", c.tied_embeddings ? "tied to the token embedding"
                                                       : ("its own matrix, " + src.tensor_name(TensorRole::Output, -1)).c_str());
  std::printf("tensors        %zu, %.1f MiB\n", tensors.size(), total / 1048576.0);
  for (const auto& [t, e] : by_type)
    std::printf("  %-6s %4zu tensors  %8.1f MiB\n", t.c_str(), e.first, e.second / 1048576.0);
  std::printf("fingerprint    %s\n", m->fingerprint().c_str());
  if (a.metadata) {
    std::printf("\n%-48s %-18s %s\n", "key", "type", "value");
    for (const MetadataEntry& e : src.metadata()) {
      // One line each: long values (the chat template) are cut, newlines shown as \n.
      std::string v;
      for (char ch : e.value) v += ch == '\n' ? std::string("\\n") : std::string(1, ch);
      if (v.size() > 100) v = v.substr(0, 97) + "...";
      std::printf("%-48s %-18s %s\n", e.key.c_str(), e.type.c_str(), v.c_str());
    }
  }
  if (a.tensors) {
    std::printf("\n%-36s %-6s %-18s %10s\n", "name", "type", "dims", "bytes");
    for (const auto& t : tensors)
      std::printf("%-36s %-6s %-18s %10zu\n", t.name.c_str(), dtype_name(t.type), dims_str(t.dims).c_str(), t.nbytes);
  }
}

}  // namespace

void register_show(CLI::App& app) {
  auto a = std::make_shared<ShowArgs>();
  CLI::App* s = app.add_subcommand("show", "print a model's architecture, dtypes and tensors; for a vindex also its level, dtype, quant, bands and files");
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_flag("--tensors", a->tensors, "list every tensor");
  s->add_flag("--metadata", a->metadata, "list every metadata key and value");
  s->add_flag("--json", a->json, "machine-readable output (includes every tensor)");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
