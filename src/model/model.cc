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

std::shared_ptr<Model> Model::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return is_vindex_model_dir(path) ? load(VindexSource::open(path)) : load(HfSource::open(path));
  return load(GgufSource::open(path));
}

std::shared_ptr<Model> Model::load(std::shared_ptr<const WeightSource> source) {
  if (source == nullptr) throw Error(ErrorKind::InvalidArgument, "Model::load: no weight source");
  auto m = std::make_shared<Model>();
  m->source_ = std::move(source);
  const ModelConfig& c = m->source_->config();
  const Loader ld(*m->source_);
  using R = TensorRole;

  ModelWeights& w = m->weights_;
  w.token_embd = ld.matrix(R::TokenEmbd, -1, c.vocab, c.hidden);
  w.lm_head = c.tied_embeddings ? w.token_embd : ld.matrix(R::Output, -1, c.vocab, c.hidden);
  w.output_norm = ld.vector(R::OutputNorm, -1, c.hidden);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attn_norm = ld.vector(R::AttnNorm, i, c.hidden);
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
    l.ffn_norm = ld.vector(R::FfnNorm, i, c.hidden);
    if (c.n_experts > 0) {
      const int64_t E = c.n_experts, Fe = c.expert_ffn;
      l.router = ld.matrix(R::FfnGateInp, i, E, c.hidden);
      l.exp_gate = ld.experts(R::FfnGateExps, i, E, Fe, c.hidden);
      l.exp_up = ld.experts(R::FfnUpExps, i, E, Fe, c.hidden);
      l.exp_down = ld.experts(R::FfnDownExps, i, E, c.hidden, Fe);
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
    if (c.post_norms) {
      l.post_attn_norm = ld.vector(R::PostAttnNorm, i, c.hidden);
      l.post_ffn_norm = ld.vector(R::PostFfnNorm, i, c.hidden);
    }
  }
  return m;
}

}  // namespace larql
