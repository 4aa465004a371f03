#include "model/model.h"

#include <filesystem>

#include "model/gguf_source.h"
#include "model/hf_source.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql {
namespace {

std::string shape_str(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

class Loader {
 public:
  explicit Loader(const WeightSource& s) : s_(s) {}

  SourceTensor require(TensorRole role, int64_t layer) const {
    auto t = s_.tensor(role, layer);
    if (!t) throw Error(ErrorKind::Format, s_.path() + ": tensor '" + s_.tensor_name(role, layer) + "' is missing");
    if (!quant::can_dequantize(t->type))
      throw Error(ErrorKind::Unsupported, s_.path() + ": tensor '" + t->name + "' has unsupported type " +
                                              dtype_name(t->type));
    return *t;
  }

  /// A [rows, cols] matrix (GGUF dims [cols, rows]).
  TensorView matrix(TensorRole role, int64_t layer, int64_t rows, int64_t cols) const {
    const SourceTensor t = require(role, layer);
    if (t.dims.size() != 2 || t.dims[0] != static_cast<uint64_t>(cols) || t.dims[1] != static_cast<uint64_t>(rows))
      throw Error(ErrorKind::Format, s_.path() + ": tensor '" + t.name + "' has shape " + shape_str(t.dims) +
                                         ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) + "]");
    TensorView v;
    v.type = t.type;
    v.rows = rows;
    v.cols = cols;
    v.data = t.data;
    v.row_bytes = t.nbytes / static_cast<size_t>(rows);
    return v;
  }

  /// The experts of a stacked tensor (GGUF dims [cols, rows, n_experts]): one [rows, cols] view
  /// per expert, each its slab of the tensor's bytes.
  std::vector<TensorView> experts(TensorRole role, int64_t layer, int64_t n_experts, int64_t rows, int64_t cols) const {
    const SourceTensor t = require(role, layer);
    if (t.dims.size() != 3 || t.dims[0] != static_cast<uint64_t>(cols) || t.dims[1] != static_cast<uint64_t>(rows) ||
        t.dims[2] != static_cast<uint64_t>(n_experts))
      throw Error(ErrorKind::Format, s_.path() + ": tensor '" + t.name + "' has shape " + shape_str(t.dims) +
                                         ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) + ", " +
                                         std::to_string(n_experts) + "] (n_experts = " + std::to_string(n_experts) + ")");
    const size_t slab = t.nbytes / static_cast<size_t>(n_experts);
    std::vector<TensorView> v(static_cast<size_t>(n_experts));
    for (int64_t e = 0; e < n_experts; ++e) {
      TensorView& x = v[static_cast<size_t>(e)];
      x.type = t.type;
      x.rows = rows;
      x.cols = cols;
      x.data = t.data + static_cast<size_t>(e) * slab;
      x.row_bytes = slab / static_cast<size_t>(rows);
    }
    return v;
  }

  /// A vector of n values, dequantised to f32.
  std::vector<float> vector(TensorRole role, int64_t layer, int64_t n) const {
    const SourceTensor t = require(role, layer);
    uint64_t count = 1;
    for (uint64_t d : t.dims) count *= d;
    if (count != static_cast<uint64_t>(n))
      throw Error(ErrorKind::Format, s_.path() + ": tensor '" + t.name + "' has shape " + shape_str(t.dims) +
                                         ", expected [" + std::to_string(n) + "]");
    std::vector<float> v(static_cast<size_t>(n));
    quant::dequantize_row(t.type, t.data, v.data(), n);
    return v;
  }

 private:
  const WeightSource& s_;
};

}  // namespace

bool is_vindex_model_dir(const std::string& dir) {
  if (is_hf_model_dir(dir)) return false;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "index.json", ec)) return true;
  throw Error(ErrorKind::NotFound, dir + ": a directory, but neither a vindex (no index.json) nor a Hugging Face model "
                                         "(no config.json, model.safetensors or model.safetensors.index.json)");
}

std::shared_ptr<Model> Model::load(const std::string& path) { return load(path, ModelPart{}); }

std::shared_ptr<Model> Model::load(const std::string& path, const ModelPart& part) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (!is_vindex_model_dir(path)) return load(HfSource::open(path), part);
    // A part may come from a slice that holds only its files; the whole model needs level inference.
    const bool partial = part.layer_begin != 0 || part.layer_end != -1 || part.expert_begin != 0 ||
                         part.expert_end != -1 || !part.embedding || !part.attention || !part.ffn;
    return load(VindexSource::open(path, partial), part);
  }
  return load(GgufSource::open(path), part);
}

std::shared_ptr<Model> Model::load(std::shared_ptr<const WeightSource> source) { return load(std::move(source), ModelPart{}); }

std::shared_ptr<Model> Model::load(std::shared_ptr<const WeightSource> source, const ModelPart& part_in) {
  if (source == nullptr) throw Error(ErrorKind::InvalidArgument, "Model::load: no weight source");
  auto m = std::make_shared<Model>();
  m->source_ = std::move(source);
  const ModelConfig& c = m->source_->config();
  const ModelPart part = part_in.resolved(c);
  m->part_ = part;
  const Loader ld(*m->source_);
  using R = TensorRole;

  ModelWeights& w = m->weights_;
  if (part.embedding) {
    w.token_embd = ld.matrix(R::TokenEmbd, -1, c.vocab, c.hidden);
    w.lm_head = c.tied_embeddings ? w.token_embd : ld.matrix(R::Output, -1, c.vocab, c.hidden);
    w.output_norm = ld.vector(R::OutputNorm, -1, c.hidden);
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = part.layer_begin; i < part.layer_end; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    // The norms of an owned layer are always held (a few KB): a part that runs attention here and
    // the FFN elsewhere still applies the FFN's norms around the remote call.
    l.attn_norm = ld.vector(R::AttnNorm, i, c.hidden);
    l.ffn_norm = ld.vector(R::FfnNorm, i, c.hidden);
    if (c.post_norms) {
      l.post_attn_norm = ld.vector(R::PostAttnNorm, i, c.hidden);
      l.post_ffn_norm = ld.vector(R::PostFfnNorm, i, c.hidden);
    }
    if (part.attention) {
      l.wq = ld.matrix(R::AttnQ, i, c.q_dim(), c.hidden);
      l.wk = ld.matrix(R::AttnK, i, c.kv_dim(), c.hidden);
      l.wv = ld.matrix(R::AttnV, i, c.kv_dim(), c.hidden);
      if (c.qkv_bias) {
        l.bq = ld.vector(R::AttnQBias, i, c.q_dim());
        l.bk = ld.vector(R::AttnKBias, i, c.kv_dim());
        l.bv = ld.vector(R::AttnVBias, i, c.kv_dim());
      }
      if (c.qk_norm) {
        l.q_norm = ld.vector(R::AttnQNorm, i, c.head_dim);
        l.k_norm = ld.vector(R::AttnKNorm, i, c.head_dim);
      }
      l.wo = ld.matrix(R::AttnOutput, i, c.hidden, c.q_dim());
    }
    if (!part.ffn) continue;
    if (c.n_experts > 0) {
      const int64_t E = c.n_experts, Fe = c.expert_ffn;
      l.router = ld.matrix(R::FfnGateInp, i, E, c.hidden);
      l.exp_gate = ld.experts(R::FfnGateExps, i, E, Fe, c.hidden);
      l.exp_up = ld.experts(R::FfnUpExps, i, E, Fe, c.hidden);
      l.exp_down = ld.experts(R::FfnDownExps, i, E, c.hidden, Fe);
      // Experts outside the part keep no view (their bytes are never read).
      for (int64_t e = 0; e < E; ++e) {
        if (part.has_expert(e)) continue;
        l.exp_gate[static_cast<size_t>(e)] = TensorView{};
        l.exp_up[static_cast<size_t>(e)] = TensorView{};
        l.exp_down[static_cast<size_t>(e)] = TensorView{};
      }
      if (c.shared_expert_ffn > 0) {
        const int64_t Fs = c.shared_expert_ffn;
        l.shexp_router = ld.vector(R::FfnGateInpShexp, i, c.hidden);
        l.shexp_gate = ld.matrix(R::FfnGateShexp, i, Fs, c.hidden);
        l.shexp_up = ld.matrix(R::FfnUpShexp, i, Fs, c.hidden);
        l.shexp_down = ld.matrix(R::FfnDownShexp, i, c.hidden, Fs);
      }
    } else {
      l.w_gate = ld.matrix(R::FfnGate, i, c.ffn, c.hidden);
      l.w_up = ld.matrix(R::FfnUp, i, c.ffn, c.hidden);
      l.w_down = ld.matrix(R::FfnDown, i, c.hidden, c.ffn);
    }
  }
  return m;
}

void Model::require_layer(int64_t layer, const char* what) const {
  if (part_.has_layer(layer)) return;
  throw Error(ErrorKind::InvalidArgument, std::string(what) + " needs layer " + std::to_string(layer) +
                                              ", but this model part holds " + part_.describe(config()) + " (" +
                                              path() + ")");
}

void Model::require_embedding(const char* what) const {
  if (part_.embedding) return;
  throw Error(ErrorKind::InvalidArgument, std::string(what) + " needs the token embedding and lm_head, but this model part holds " +
                                              part_.describe(config()) + " (" + path() + ")");
}

ModelPart ModelPart::resolved(const ModelConfig& c) const {
  ModelPart p = *this;
  if (p.layer_end < 0) p.layer_end = c.n_layers;
  const bool moe = c.n_experts > 0;
  if (p.expert_end < 0) p.expert_end = moe ? c.n_experts : 0;
  auto incl = [](int64_t b, int64_t e) { return std::to_string(b) + "-" + std::to_string(e - 1); };
  if (p.layer_begin < 0 || p.layer_begin >= p.layer_end || p.layer_end > c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "layer range " + incl(p.layer_begin, p.layer_end) + " is not within the model's " +
                                                std::to_string(c.n_layers) + " layers (0-" + std::to_string(c.n_layers - 1) + ")");
  if (!moe && (expert_begin != 0 || expert_end != -1))
    throw Error(ErrorKind::InvalidArgument, "an expert range was given, but the model is not a mixture of experts");
  // An empty expert range (begin == end) holds the router and the shared expert but no routed
  // expert: a client whose experts run on expert shards.
  if (moe && (p.expert_begin < 0 || p.expert_begin > p.expert_end || p.expert_end > c.n_experts))
    throw Error(ErrorKind::InvalidArgument, "expert range " + incl(p.expert_begin, p.expert_end) + " is not within the model's " +
                                                std::to_string(c.n_experts) + " experts (0-" + std::to_string(c.n_experts - 1) + ")");
  if (!p.embedding && !p.attention && !p.ffn) throw Error(ErrorKind::InvalidArgument, "a model part must hold something");
  return p;
}

bool ModelPart::whole(const ModelConfig& c) const {
  return layer_begin == 0 && layer_end == c.n_layers && expert_begin == 0 && expert_end == (c.n_experts > 0 ? c.n_experts : 0) &&
         embedding && attention && ffn;
}

std::string ModelPart::describe(const ModelConfig& c) const {
  if (whole(c)) return "the whole model";
  std::string s = "layers " + std::to_string(layer_begin) + "-" + std::to_string(layer_end - 1);
  if (c.n_experts > 0 && expert_begin == expert_end)
    s += ", no routed experts";
  else if (c.n_experts > 0 && (expert_begin != 0 || expert_end != c.n_experts))
    s += ", experts " + std::to_string(expert_begin) + "-" + std::to_string(expert_end - 1);
  if (!attention) s += ", no attention";
  if (!ffn) s += ", no FFN";
  if (!embedding) s += ", no embedding";
  return s;
}

std::pair<int64_t, int64_t> ModelPart::parse_range(const std::string& text, const std::string& what) {
  auto bad = [&] {
    return Error(ErrorKind::InvalidArgument, what + " \"" + text + "\": expected A-B (inclusive, A <= B) or A, with whole numbers");
  };
  auto num = [&](const std::string& s) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) throw bad();
    return static_cast<int64_t>(std::stoll(s));
  };
  const size_t dash = text.find('-');
  const int64_t a = num(text.substr(0, dash));
  const int64_t b = dash == std::string::npos ? a : num(text.substr(dash + 1));
  if (b < a) throw bad();
  return {a, b + 1};
}

}  // namespace larql
