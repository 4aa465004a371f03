#include "model/model.h"

#include <cstdio>
#include <algorithm>
#include <cstring>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql {
namespace {

std::string shape_str(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const GgufTensor& require_tensor(const GgufFile& file, const std::string& name) {
  const GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) throw Error(ErrorKind::Format, file.path() + ": tensor '" + name + "' is missing");
  return *t;
}

std::vector<float> load_vector(const GgufFile& file, const std::string& name, int64_t n) {
  const GgufTensor& t = require_tensor(file, name);
  if (t.n_elements() != static_cast<uint64_t>(n))
    throw Error(ErrorKind::Format, file.path() + ": tensor '" + name + "' has shape " + shape_str(t.dims) +
                                       ", expected [" + std::to_string(n) + "]");
  if (!quant::can_dequantize(t.type))
    throw Error(ErrorKind::Unsupported, file.path() + ": tensor '" + name + "' has unsupported type " +
                                            dtype_name(t.type));
  std::vector<float> v(static_cast<size_t>(n));
  quant::dequantize_row(t.type, t.data, v.data(), n);
  return v;
}

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

TensorView tensor_view(const GgufFile& file, const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensor& t = require_tensor(file, name);
  if (t.dims.size() != 2 || t.dims[0] != static_cast<uint64_t>(cols) || t.dims[1] != static_cast<uint64_t>(rows))
    throw Error(ErrorKind::Format, file.path() + ": tensor '" + name + "' has shape " + shape_str(t.dims) +
                                       ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) + "]");
  if (!quant::can_dequantize(t.type))
    throw Error(ErrorKind::Unsupported, file.path() + ": tensor '" + name + "' has unsupported type " +
                                            dtype_name(t.type));
  TensorView v;
  v.type = t.type;
  v.rows = rows;
  v.cols = cols;
  v.data = t.data;
  v.row_bytes = t.nbytes / static_cast<size_t>(rows);
  return v;
}

std::shared_ptr<Model> Model::load(const std::string& path) {
  auto m = std::make_shared<Model>();
  m->path_ = path;
  m->file_ = GgufFile::open(path);
  const GgufFile& f = *m->file_;
  m->config_ = config_from_gguf(f);
  const ModelConfig& c = m->config_;

  ModelWeights& w = m->weights_;
  w.token_embd = tensor_view(f, "token_embd.weight", c.vocab, c.hidden);
  w.lm_head = c.tied_embeddings ? w.token_embd : tensor_view(f, "output.weight", c.vocab, c.hidden);
  w.output_norm = load_vector(f, "output_norm.weight", c.hidden);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attn_norm = load_vector(f, b + "attn_norm.weight", c.hidden);
    l.wq = tensor_view(f, b + "attn_q.weight", c.q_dim(), c.hidden);
    l.wk = tensor_view(f, b + "attn_k.weight", c.kv_dim(), c.hidden);
    l.wv = tensor_view(f, b + "attn_v.weight", c.kv_dim(), c.hidden);
    if (c.qk_norm) {
      l.q_norm = load_vector(f, b + "attn_q_norm.weight", c.head_dim);
      l.k_norm = load_vector(f, b + "attn_k_norm.weight", c.head_dim);
    }
    l.wo = tensor_view(f, b + "attn_output.weight", c.hidden, c.q_dim());
    l.ffn_norm = load_vector(f, b + "ffn_norm.weight", c.hidden);
    l.w_gate = tensor_view(f, b + "ffn_gate.weight", c.ffn, c.hidden);
    l.w_up = tensor_view(f, b + "ffn_up.weight", c.ffn, c.hidden);
    l.w_down = tensor_view(f, b + "ffn_down.weight", c.hidden, c.ffn);
    if (c.post_norms) {
      l.post_attn_norm = load_vector(f, b + "post_attention_norm.weight", c.hidden);
      l.post_ffn_norm = load_vector(f, b + "post_ffw_norm.weight", c.hidden);
    }
  }
  // Fingerprint: the whole header (metadata, vocabulary, tensor table), the first KiB of every
  // tensor's data and the file size — cheap, and different for any re-quantised or edited file.
  uint64_t h = fnv1a(f.bytes(), std::min(f.data_offset(), f.file_size()));
  for (const GgufTensor& t : f.tensors()) {
    h = fnv1a(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size(), h);
    const uint64_t meta[3] = {static_cast<uint64_t>(t.type), t.offset, t.n_elements()};
    h = fnv1a(reinterpret_cast<const uint8_t*>(meta), sizeof meta, h);
    h = fnv1a(t.data, std::min<size_t>(t.nbytes, 1024), h);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%016llx-%zu", static_cast<unsigned long long>(h), f.file_size());
  m->fingerprint_ = buf;
  return m;
}

}  // namespace larql
