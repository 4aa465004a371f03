// GGUF export (extract/gguf_export.h). Keys and defaults: llama.cpp llama-model.cpp
// load_hparams (LLM_ARCH_GEMMA3, LLM_ARCH_LLAMA) and gguf-py's constants (Keys.LLM, Keys.Attention,
// Keys.Rope); the generic reader (model/config.cc config_from_gguf) reads the same keys back.
#include "extract/gguf_export.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "formats/gguf.h"
#include "model/arch.h"
#include "model/gguf_source.h"
#include "model/vindex_source.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace larql::extract {
namespace {

namespace k = config_keys;

uint32_t u32_of(int64_t v, const std::string& key) {
  if (v < 0 || v > static_cast<int64_t>(UINT32_MAX))
    throw Error(ErrorKind::InvalidArgument, "export: " + key + " = " + std::to_string(v) + " does not fit a u32");
  return static_cast<uint32_t>(v);
}

bool is_block_quantised(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

/// One tensor to write: where it comes from and the name llama.cpp knows it by.
struct Item {
  TensorRole role;
  int64_t layer;
  std::string out_name;
  size_t rank;  ///< position in source.tensors() (storage order)
  bool rope_freqs = false;  ///< the config's RoPE frequency factors, not a role's tensor
};

}  // namespace

void config_to_gguf(const ModelConfig& c, GgufWriter& w) {
  const ArchRecord* rec = find_arch(c.arch);
  if (rec == nullptr || !rec->exportable)
    throw Error(ErrorKind::Unsupported, "export: no GGUF metadata mapping for architecture '" + c.arch +
                                            "' (fused tensors are not re-fused yet)");
  const std::string p = c.arch + ".";
  auto u32 = [&](const char* key, int64_t v) { w.set(p + key, GgufValue::u32(u32_of(v, p + key))); };
  auto f32 = [&](const char* key, double v) { w.set(p + key, GgufValue::f32(static_cast<float>(v))); };
  // What the reader will rebuild from the keys written below must be this config.
  const LayerConfig* global = nullptr;
  const LayerConfig* sliding = nullptr;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerConfig& l = c.layers[i];
    if (l.rope_form != rec->rope_form)
      throw Error(ErrorKind::Unsupported,
                  "export: layer " + std::to_string(i) + " pairs RoPE dimensions as " +
                      (l.rope_form == RopeForm::NeoX ? "NeoX halves" : "adjacent pairs") + " but llama.cpp's " +
                      c.arch + " uses the other form (a Hugging Face Llama checkpoint: llama.cpp's converter "
                               "permutes its Q/K rows; export from a GGUF of it instead)");
    if (l.sliding && !sliding) sliding = &l;
    if (!l.sliding && !global) global = &l;
  }
  // The sliding layers as a pattern llama.cpp rebuilds: the family's, else one written out.
  int64_t pattern = rec->swa_pattern;
  if (sliding != nullptr) {
    auto follows = [&](int64_t p) {
      for (size_t i = 0; i < c.layers.size(); ++i)
        if (c.layers[i].sliding != swa_layer_slides(p, static_cast<int64_t>(i))) return false;
      return true;
    };
    if (!follows(pattern)) {
      pattern = 0;
      for (int64_t p = 1; p <= c.n_layers + 1 && pattern == 0; ++p)
        if (follows(p)) pattern = p;
    }
    if (pattern == 0 || rec->swa_pattern == 0)
      throw Error(ErrorKind::Unsupported, "export: the sliding layers of this " + c.arch +
                                              " model follow no pattern llama.cpp applies");
  }
  w.set("general.architecture", GgufValue::str(c.arch));
  if (!c.name.empty()) w.set("general.name", GgufValue::str(c.name));
  u32(k::kContextLength, c.context_length);
  u32(k::kEmbeddingLength, c.hidden);
  u32(k::kBlockCount, c.n_layers);
  u32(k::kFeedForwardLength, c.ffn);
  u32(k::kHeadCount, c.n_heads);
  u32(k::kHeadCountKv, c.n_kv_heads);
  u32(k::kKeyLength, c.head_dim);
  u32(k::kValueLength, c.head_dim);
  u32(k::kRopeDimensionCount, c.head_dim);
  f32(k::kRmsEpsilon, c.norm_eps);
  // Global layers carry rope.freq_base and the scaling; sliding ones rope.freq_base_swa.
  const LayerConfig* scaled = global ? global : sliding;
  if (scaled) {
    f32(k::kRopeFreqBase, scaled->rope_base);
    if (scaled->rope_freq_scale != 1.0) {
      w.set(p + k::kRopeScalingType, GgufValue::str("linear"));
      f32(k::kRopeScalingFactor, 1.0 / scaled->rope_freq_scale);
    }
  }
  if (sliding) {
    u32(k::kSlidingWindow, sliding->window);
    if (pattern != rec->swa_pattern) u32("attention.sliding_window_pattern", pattern);
    if (global == nullptr || sliding->rope_base != global->rope_base) f32(k::kRopeFreqBaseSwa, sliding->rope_base);
  }
  // attn_scale = 1 / sqrt(query_pre_attn_scalar); the reader's default is head_dim.
  if (rec->attn_scale_from_query_pre_attn_scalar && c.attn_scale > 0) {
    const double qpas = 1.0 / (static_cast<double>(c.attn_scale) * c.attn_scale);
    if (std::fabs(qpas - static_cast<double>(c.head_dim)) > 1e-3 * static_cast<double>(c.head_dim))
      f32(k::kQueryPreAttnScalar, qpas);
  }
  if (c.n_experts > 0) {  // llama.cpp LLM_KV_EXPERT_*: its graphs hard-code whether weights renormalise
    if (c.expert_weights_norm != rec->moe_weights_norm)
      throw Error(ErrorKind::Unsupported, std::string("export: llama.cpp's ") + c.arch + " always " +
                                              (rec->moe_weights_norm ? "renormalises" : "keeps") +
                                              " the chosen experts' weights; this model does not");
    u32("expert_count", c.n_experts);
    u32("expert_used_count", c.n_experts_used);
    u32("expert_feed_forward_length", c.expert_ffn);
    if (c.shared_expert_ffn > 0) u32("expert_shared_feed_forward_length", c.shared_expert_ffn);
  }
  if (c.final_logit_softcap > 0) f32(k::kFinalLogitSoftcap, c.final_logit_softcap);
  if (c.attn_logit_softcap > 0) f32(k::kAttnLogitSoftcap, c.attn_logit_softcap);
}

ExportResult export_gguf(const WeightSource& source, const std::string& path, const ExportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (path.empty()) throw Error(ErrorKind::InvalidArgument, "export: the output needs a file name");
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw Error(ErrorKind::InvalidArgument, "export: output " + path + " is a directory; give a file name (e.g. model.gguf)");
  if (fs::exists(path, ec)) {
    if (fs::equivalent(path, source.path(), ec))
      throw Error(ErrorKind::InvalidArgument, "export: output " + path + " is the model being exported; refusing to overwrite it");
    if (!opt.force)
      throw Error(ErrorKind::InvalidArgument, "export: output " + path + " exists; pass --force to replace it");
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw Error(ErrorKind::NotFound, "export: output " + path + ": directory " + parent.string() + " does not exist");

  const ModelConfig& c = source.config();
  const ArchRecord* rec = find_arch(c.arch);
  if (rec == nullptr || !rec->exportable)
    throw Error(ErrorKind::Unsupported, "export: " + source.path() + ": architecture '" + c.arch +
                                            "' cannot be exported yet (its fused tensors are not re-fused)");

  // Storage order: each source name's position in tensors().
  const std::vector<SourceTensor> stored = source.tensors();
  std::map<std::string, size_t> rank_of;
  bool unique_names = true;
  for (size_t i = 0; i < stored.size(); ++i) unique_names &= rank_of.emplace(stored[i].name, i).second;
  if (!unique_names) rank_of.clear();  // names do not identify tensors: role order, count check

  std::vector<Item> items;
  std::vector<bool> covered(stored.size(), false);
  for (TensorRole role : all_tensor_roles()) {
    const bool per_layer = is_layer_role(role);
    for (int64_t l = per_layer ? 0 : -1; l < (per_layer ? c.n_layers : 0); ++l) {
      if (!source.tensor(role, l)) continue;
      const std::string out = gguf_tensor_name(role, l);
      auto it = rank_of.find(source.tensor_name(role, l));
      const size_t rank = it == rank_of.end() ? stored.size() : it->second;
      if (rank < stored.size()) covered[rank] = true;
      items.push_back({role, l, out, rank});
    }
  }
  // Llama 3.1's RoPE frequency factors: a GGUF's own tensor, or written from the config.
  constexpr const char* kRopeFreqs = "rope_freqs.weight";
  const bool has_factors = !c.rope_freq_factors.empty();
  if (has_factors) {
    const auto it = rank_of.find(kRopeFreqs);
    if (it != rank_of.end()) covered[it->second] = true;
    items.push_back({TensorRole::TokenEmbd, -1, kRopeFreqs, it != rank_of.end() ? it->second : 0, true});
  }
  for (size_t i = 0; i < stored.size(); ++i)
    if (unique_names ? !covered[i] : items.size() < stored.size())
      throw Error(ErrorKind::Unsupported, "export: " + source.path() + ": tensor " + stored[i].name +
                                              " has no role larql knows, so no llama.cpp name; refusing to drop it");
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.rank < b.rank; });

  ExportResult r;
  const auto* gguf = dynamic_cast<const GgufSource*>(&source);
  GgufWriter w(gguf ? gguf->file().alignment() : 32);
  if (gguf) {
    const GgufFile& f = gguf->file();
    // In the file's order: metadata_key(i) views the file's bytes, so its address orders them.
    std::vector<size_t> order(f.metadata_count());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f.metadata_key(a).data() < f.metadata_key(b).data(); });
    for (size_t i : order) w.set(std::string(f.metadata_key(i)), f.metadata_value(i));
    r.copied_metadata = true;
  } else {
    config_to_gguf(c, w);
  }
  bool quantised = false;
  for (const Item& it : items) {
    if (it.rope_freqs) {
      w.add_tensor_view(kRopeFreqs, DType::F32, {static_cast<uint64_t>(c.rope_freq_factors.size())},
                        reinterpret_cast<const uint8_t*>(c.rope_freq_factors.data()),
                        c.rope_freq_factors.size() * sizeof(float));
      continue;
    }
    const auto t = source.tensor(it.role, it.layer);
    quantised |= is_block_quantised(t->type);
    w.add_tensor_view(it.out_name, t->type, t->dims, t->data, t->nbytes);
  }
  if (!gguf) {
    if (quantised) w.set("general.quantization_version", GgufValue::u32(2));
    vocab_to_gguf(source.vocabulary(), w);
  }
  r.tensors = items.size();
  r.metadata = w.metadata_count();
  w.write(path, opt.progress);
  r.bytes = fs::file_size(path, ec);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace larql::extract
