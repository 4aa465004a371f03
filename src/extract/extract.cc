#include "extract/extract.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "compute/top_k_rows.h"
#include "formats/gguf.h"
#include "model/arch.h"
#include "model/config_json.h"
#include "model/ffn_features.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "tokenizer/hf_json.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"
#include "vindex/down_meta_file.h"
#include "vindex/sha256.h"

namespace larql::extract {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Append n f32 values as `dtype` to `out`.
void put_values(std::vector<uint8_t>& out, const float* x, int64_t n, const std::string& dtype) {
  const size_t at = out.size();
  if (dtype == "f32") {
    out.resize(at + static_cast<size_t>(n) * 4);
    std::memcpy(out.data() + at, x, static_cast<size_t>(n) * 4);
    return;
  }
  out.resize(at + static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == "f16" ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
    std::memcpy(out.data() + at + static_cast<size_t>(i) * 2, &h, 2);
  }
}

// Write every row of `w` as `dtype` through `out`, calling tick(rows done) now and then.
void write_rows(AtomicWriter& out, const TensorView& w, const std::string& dtype, const std::function<void(int64_t)>& tick) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<uint8_t> buf;
  constexpr int64_t kRowsPerWrite = 256;
  for (int64_t r = 0; r < w.rows; ++r) {
    quant::dequantize_row(w.type, w.row(r), row.data(), w.cols);
    put_values(buf, row.data(), w.cols, dtype);
    if ((r + 1) % kRowsPerWrite == 0 || r + 1 == w.rows) {
      out.write(buf.data(), buf.size());
      buf.clear();
      if (tick) tick(r + 1);
    }
  }
}

// Trimmed text of a token as down_meta's readers show it; "" for a token that shows nothing.
bool decodes_to_nothing(const Tokenizer& tok, int32_t id) {
  const std::string s = tok.decode({id}, /*skip_special=*/true);
  for (unsigned char c : s)
    if (!std::isspace(c)) return false;
  return true;
}

// Which weights file a role's tensor goes to.
const char* weights_file(TensorRole r) {
  switch (r) {
    case TensorRole::TokenEmbd:
    case TensorRole::Output: return "embed_weights.bin";
    case TensorRole::FfnGate:
    case TensorRole::FfnUp:
    case TensorRole::FfnDown:
    case TensorRole::FfnGateInp:
    case TensorRole::FfnGateExps:
    case TensorRole::FfnUpExps:
    case TensorRole::FfnDownExps:
    case TensorRole::FfnGateInpShexp:
    case TensorRole::FfnGateShexp:
    case TensorRole::FfnUpShexp:
    case TensorRole::FfnDownShexp: return "ffn_weights.bin";
    case TensorRole::AttnQ:
    case TensorRole::AttnK:
    case TensorRole::AttnV:
    case TensorRole::AttnOutput:
    case TensorRole::AttnQBias:
    case TensorRole::AttnKBias:
    case TensorRole::AttnVBias: return "attn_weights.bin";
    default: return "norms.bin";
  }
}

// The files write_weights() writes at a level: attention holds the attention tensors and the
// norms; inference and all every tensor.
std::vector<std::string> weight_files(vindex::ExtractLevel level) {
  if (level == vindex::ExtractLevel::Attention) return {"attn_weights.bin", "norms.bin", "weight_manifest.json"};
  return {"attn_weights.bin", "norms.bin", "ffn_weights.bin", "embed_weights.bin", "weight_manifest.json"};
}


// The type a tensor is stored as (docs/vindex-format.md, "Model weights"): `keep` -> the
// source's own; otherwise vectors (norms, biases) -> f32; `none` -> every matrix at `dtype`;
// `q4k` (the original's recipe) -> Q, K, O, gate, up as Q4_K and V, down as Q6_K (rows whose
// width is not a multiple of 256 fall back as llama.cpp's quantiser does: Q4_K -> Q5_0, Q6_K ->
// Q8_0; neither a multiple of 32 -> `dtype`), the embedding and lm_head at `dtype`.
DType stored_type(TensorRole role, const SourceTensor& t, const std::string& quant, const std::string& dtype) {
  if (quant == "keep") return t.type;
  if (t.dims.size() < 2) return DType::F32;
  const DType flt = dtype == "f32" ? DType::F32 : dtype == "f16" ? DType::F16 : DType::BF16;
  // The router stays at `dtype`: llama.cpp's quantiser never quantises ffn_gate_inp either (a
  // few thousand values that pick the experts).
  if (quant == "none" || role == TensorRole::TokenEmbd || role == TensorRole::Output || role == TensorRole::FfnGateInp) return flt;
  const uint64_t cols = t.dims[0];
  const bool six = role == TensorRole::AttnV || role == TensorRole::FfnDown || role == TensorRole::FfnDownExps ||
                   role == TensorRole::FfnDownShexp;
  if (cols % 256 == 0) return six ? DType::Q6_K : DType::Q4_K;
  if (cols % 32 == 0) return six ? DType::Q8_0 : DType::Q5_0;
  return flt;
}

// Write `t` as `type` through `w`, row by row (dequantised to f32, re-encoded).
void write_converted(AtomicWriter& w, const SourceTensor& t, DType type) {
  const int64_t cols = static_cast<int64_t>(t.dims.empty() ? 1 : t.dims[0]);
  int64_t rows = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) rows *= static_cast<int64_t>(t.dims[i]);
  const auto in_rb = row_bytes(t.type, static_cast<uint64_t>(cols));
  const auto out_rb = row_bytes(type, static_cast<uint64_t>(cols));
  if (!in_rb || !out_rb || *in_rb * static_cast<uint64_t>(rows) != t.nbytes)
    throw Error(ErrorKind::Format, "tensor '" + t.name + "': " + std::to_string(t.nbytes) + " bytes do not hold its shape as " +
                                       dtype_name(t.type));
  constexpr int64_t kRowsPerWrite = 64;
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> buf(static_cast<size_t>(*out_rb * kRowsPerWrite));
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerWrite) {
    const int64_t n = std::min(kRowsPerWrite, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      quant::dequantize_row(t.type, t.data + static_cast<size_t>(r0 + r) * *in_rb, row.data(), cols);
      quant::quantize_row(type, row.data(), buf.data() + static_cast<size_t>(r) * *out_rb, cols);
    }
    w.write(buf.data(), static_cast<size_t>(*out_rb * static_cast<uint64_t>(n)));
  }
}

void write_weights(const Model& model, const fs::path& staging, vindex::ExtractLevel level, const std::string& quant,
                   const std::string& dtype,
                   const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const WeightSource& src = model.source();
  const int64_t n_layers = model.config().n_layers;
  std::map<std::string, std::unique_ptr<AtomicWriter>> out;
  json manifest = json::array();
  static const uint8_t zeros[64] = {};
  auto put = [&](TensorRole role, int64_t layer) {
    const std::string file = weights_file(role);
    if (level == vindex::ExtractLevel::Attention && file != std::string("attn_weights.bin") && file != std::string("norms.bin"))
      return;
    const auto t = src.tensor(role, layer);
    if (!t) return;
    auto& w = out[file];
    if (!w) w = std::make_unique<AtomicWriter>((staging / file).string(), file);
    if (w->size() % 64 != 0) w->write(zeros, 64 - w->size() % 64);
    const uint64_t offset = w->size();
    const DType type = stored_type(role, *t, quant, dtype);
    if (type == t->type) w->write(t->data, t->nbytes);
    else write_converted(*w, *t, type);
    const uint64_t length = w->size() - offset;
    json shape = json::array();
    if (t->dims.size() == 3) {  // stacked experts: [n_experts, rows, cols]
      shape = {t->dims[2], t->dims[1], t->dims[0]};
    } else if (t->dims.size() >= 2) {
      uint64_t rows = 1;
      for (size_t i = 1; i < t->dims.size(); ++i) rows *= t->dims[i];
      shape = {rows, t->dims[0]};
    } else {
      shape = {t->dims.empty() ? 1 : t->dims[0]};
    }
    manifest.push_back({{"role", tensor_role_name(role)}, {"layer", layer}, {"key", t->name}, {"kind", "tensor"},
                        {"dtype", dtype_name(type)}, {"shape", shape}, {"file", file}, {"offset", offset},
                        {"length", length}});
  };
  for (TensorRole r : all_tensor_roles())
    if (!is_layer_role(r)) put(r, -1);
  for (int64_t l = 0; l < n_layers; ++l) {
    for (TensorRole r : all_tensor_roles())
      if (is_layer_role(r)) put(r, l);
    progress("weights", l + 1, n_layers);
  }
  for (auto& [_, w] : out) w->commit();
  write_file_atomic((staging / "weight_manifest.json").string(), manifest.dump(1) + "\n", "weight_manifest.json");
}

// The staging directory's progress record: the options it was started with and the SHA-256 of
// every file finished so far. Rewritten atomically (fsynced) after each finished file.
class ProgressRecord {
 public:
  ProgressRecord(fs::path staging, json options) : path_(staging / kProgressFile), options_(std::move(options)) {}

  // Load the record of a staging directory started with the same options, keeping only the
  // files whose bytes still have the recorded digest. False when there is no usable record.
  bool load_and_check() {
    std::error_code ec;
    if (!fs::is_regular_file(path_, ec)) return false;
    json j;
    try {
      j = json::parse(read_all(path_));
    } catch (const std::exception&) {
      return false;
    }
    if (!j.is_object() || j.value("options", json()) != options_ || !j.contains("files") || !j["files"].is_object()) return false;
    for (const auto& [name, sum] : j["files"].items()) {
      if (!sum.is_string() || !vindex::is_plain_file_name(name)) continue;
      const fs::path f = path_.parent_path() / name;
      if (fs::is_regular_file(f, ec) && vindex::sha256_file(f.string()) == sum.get<std::string>()) files_[name] = sum;
    }
    return true;
  }
  // Take over the checked files of another record (the staging directory renamed to ours).
  void take_files(const ProgressRecord& other) { files_ = other.files_; }
  bool has(const std::string& name) const { return files_.count(name) != 0; }
  bool has_all(const std::vector<std::string>& names) const {
    for (const auto& n : names)
      if (!has(n)) return false;
    return true;
  }
  // Hash finished files and record them.
  void finish(const std::vector<std::string>& names) {
    for (const auto& n : names) files_[n] = vindex::sha256_file((path_.parent_path() / n).string());
    save();
  }
  void save() const {
    json j = {{"options", options_}, {"files", files_}};
    write_file_atomic(path_.string(), j.dump(1) + "\n", kProgressFile);
  }
  const std::map<std::string, std::string>& files() const { return files_; }
  const fs::path& path() const { return path_; }

 private:
  static std::string read_all(const fs::path& p) {
    std::string out;
    FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) return out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
  }
  fs::path path_;
  json options_;
  std::map<std::string, std::string> files_;
};

// The pid in a staging directory's name `<prefix><pid>`, or 0.
long staging_pid(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  return end != nullptr && *end == '\0' ? pid : 0;
}

bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

ExtractResult extract_vindex(const Model& model, const std::string& out_dir, const ExtractOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool weights = opt.level >= vindex::ExtractLevel::Attention;
  if (weights && opt.quant != "keep" && opt.quant != "none" && opt.quant != "q4k")
    throw Error(ErrorKind::InvalidArgument, "--quant \"" + opt.quant + "\" is not one of keep, none, q4k");
  if (vindex::dtype_size(opt.dtype) == 0)
    throw Error(ErrorKind::InvalidArgument, "--dtype \"" + opt.dtype + "\" is not one of f32, f16, bf16");
  if (opt.down_top_k < 1 || opt.down_top_k > 4096)
    throw Error(ErrorKind::InvalidArgument, "--down-top-k " + std::to_string(opt.down_top_k) + " is outside [1, 4096]");
  if (out_dir.empty()) throw Error(ErrorKind::InvalidArgument, "the output directory is empty");
  const fs::path target = fs::absolute(fs::path(out_dir)).lexically_normal();
  if (target.filename().empty()) throw Error(ErrorKind::InvalidArgument, "output \"" + out_dir + "\" names no directory");
  {
    // A source directory (a vindex or a Hugging Face model) must not receive the output: it
    // would be read while being written, and verify refuses a directory inside a vindex.
    std::error_code dec;
    const std::string& src = model.source().path();
    if (!src.empty() && fs::is_directory(src, dec)) {
      const fs::path source = fs::absolute(fs::path(src)).lexically_normal();
      const fs::path rel = target.lexically_relative(source);
      if (target == source || (!rel.empty() && *rel.begin() != ".."))
        throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " is the source directory " + source.string() +
                                                    " or inside it");
    }
  }
  std::error_code ec;
  if (!fs::is_directory(target.parent_path(), ec))
    throw Error(ErrorKind::NotFound, "output directory's parent " + target.parent_path().string() + " does not exist");
  if (fs::exists(target, ec) && !opt.force)
    throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " already exists (use --force to replace it)");
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    throw Error(ErrorKind::InvalidArgument, "output " + target.string() + " exists and is not a directory");

  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  // What the progress record must match for a staging directory to be resumed.
  const json record_options = {{"source_fingerprint", model.fingerprint()}, {"level", vindex::extract_level_name(opt.level)},
                               {"dtype", opt.dtype}, {"quant", weights ? opt.quant : "none"},
                               {"down_top_k", opt.down_top_k}, {"larql_version", opt.larql_version}};
  const fs::path staging = target.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  ProgressRecord record(staging, record_options);
  ExtractResult result;
  // Staging directories of extracts that died (their process is gone): with `resume` the newest
  // one whose record matches is taken over; the others are removed. A live one's is left alone.
  const std::string partial_prefix = target.filename().string() + ".partial-";
  {
    std::vector<std::pair<fs::file_time_type, fs::path>> dead;
    for (const auto& e : fs::directory_iterator(target.parent_path(), ec))
      if (process_gone(staging_pid(e.path().filename().string(), partial_prefix)))
        dead.emplace_back(fs::last_write_time(e.path(), ec), e.path());
    std::sort(dead.begin(), dead.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [_, p] : dead) {
      if (opt.resume && result.resumed_from.empty()) {
        ProgressRecord old(p, record_options);
        if (old.load_and_check()) {
          fs::rename(p, staging, ec);
          if (!ec) {
            record.take_files(old);
            result.resumed_from = p.string();
            continue;
          }
        }
      }
      fs::remove_all(p, ec);
    }
  }
  if (!result.resumed_from.empty()) {
    // Anything not recorded as finished (half-written temporaries, unrecorded files) is redone.
    for (const auto& e : fs::directory_iterator(staging, ec)) {
      const std::string n = e.path().filename().string();
      if (n != kProgressFile && !record.has(n)) fs::remove_all(e.path(), ec);
    }
    for (const auto& [n, _] : record.files()) result.kept_files.push_back(n);
  } else if (!fs::create_directory(staging, ec)) {
    throw Error(ErrorKind::Io, "cannot create " + staging.string() + ": " + ec.message());
  }
  record.save();

  auto progress = [&](const std::string& phase, int64_t done, int64_t total) {
    if (opt.progress) opt.progress(phase, done, total);
  };
  try {
    vindex::VindexIndex x;
    x.model = c.name.empty() ? fs::path(model.path()).stem().string() : c.name;
    x.family = c.arch;
    const std::string fmt = model.source().format();
    const char* source_format = fmt.rfind("GGUF", 0) == 0 ? "gguf" : fmt.rfind("Hugging Face", 0) == 0 ? "safetensors" : "vindex";
    fs::path src_path = fs::path(model.path());
    if (src_path.filename().empty()) src_path = src_path.parent_path();  // "dir/"
    x.source = vindex::Source{source_format, src_path.filename().string(), model.fingerprint(),
                                 opt.extracted_at.empty() ? utc_timestamp() : opt.extracted_at, opt.larql_version};
    x.num_layers = c.n_layers;
    x.hidden_size = c.hidden;
    x.intermediate_size = ffn_feature_count(c);
    x.vocab_size = w.token_embd.rows;
    x.embed_scale = c.embed_scale;
    x.extract_level = opt.level;
    x.dtype = opt.dtype;
    x.quant = weights ? opt.quant : "none";
    x.has_model_weights = weights;
    x.down_top_k = opt.down_top_k;
    x.layer_bands = layer_bands_of(c.arch, c.n_layers);
    x.model_config_json = config_to_json(c);
    {
      const uint64_t per_value = static_cast<uint64_t>(vindex::dtype_size(opt.dtype));
      uint64_t at = 0;
      const int64_t nf = ffn_feature_count(c);
      for (int64_t l = 0; l < c.n_layers; ++l) {
        const uint64_t len = static_cast<uint64_t>(nf) * static_cast<uint64_t>(c.hidden) * per_value;
        vindex::LayerSlot slot{l, nf, at, len};
        if (c.n_experts > 0) {
          slot.num_experts = c.n_experts;
          slot.num_features_per_expert = c.expert_ffn;
        }
        x.layers.push_back(slot);
        at += len;
      }
    }

    // Gate vectors, layer by layer.
    if (!record.has("gate_vectors.bin")) {
      AtomicWriter out((staging / "gate_vectors.bin").string(), "gate_vectors.bin");
      for (int64_t l = 0; l < c.n_layers; ++l) {
        for (const TensorView* g : ffn_gate_matrices(c, w.layers[static_cast<size_t>(l)])) write_rows(out, *g, opt.dtype, nullptr);
        progress("gate vectors", l + 1, c.n_layers);
      }
      out.commit();
      record.finish({"gate_vectors.bin"});
    }
    // Embeddings (raw, unscaled).
    if (!record.has("embeddings.bin")) {
      AtomicWriter out((staging / "embeddings.bin").string(), "embeddings.bin");
      write_rows(out, w.token_embd, opt.dtype, [&](int64_t rows) { progress("embeddings", rows, w.token_embd.rows); });
      out.commit();
      record.finish({"embeddings.bin"});
    }
    // Tokenizer files, and the tokens down_meta skips (those that decode to nothing); the
    // vocabulary is released before the down_meta pass.
    const bool tokenizer_done = record.has_all({"tokenizer.json", "tokenizer_config.json", "tokenizer.gguf"});
    std::vector<uint8_t> skip;
    if (!tokenizer_done || !record.has("down_meta.bin")) {
      skip.assign(static_cast<size_t>(w.token_embd.rows), 0);
      VocabData vocab = model.source().vocabulary();
      if (!tokenizer_done) {
        const HfTokenizerFiles hf = to_hf_tokenizer(vocab);
        write_file_atomic((staging / "tokenizer.json").string(), hf.tokenizer_json, "tokenizer.json");
        write_file_atomic((staging / "tokenizer_config.json").string(), hf.tokenizer_config_json, "tokenizer_config.json");
        GgufWriter vocab_gguf;  // what larql loads (fast); the two JSON files are for other tools
        vocab_to_gguf(vocab, vocab_gguf);
        vocab_gguf.write((staging / "tokenizer.gguf").string());
        record.finish({"tokenizer.json", "tokenizer_config.json", "tokenizer.gguf"});
      }
      const Tokenizer tok(std::move(vocab));
      for (int64_t t = 0; t < w.token_embd.rows && t < tok.vocab_size(); ++t)
        skip[static_cast<size_t>(t)] = decodes_to_nothing(tok, static_cast<int32_t>(t)) ? 1 : 0;
    }
    // down_meta: per layer, every feature's top-K tokens.
    if (!record.has("down_meta.bin")) {
      ThreadPool pool(opt.threads);
      vindex::DownMetaWriter dm((staging / "down_meta.bin").string(), static_cast<uint32_t>(c.n_layers),
                                static_cast<uint32_t>(opt.down_top_k));
      compute::TopKOptions topt;
      topt.top_k = opt.down_top_k;
      topt.skip = &skip;
      std::vector<float> row, cols;
      const int64_t nf = ffn_feature_count(c);
      for (int64_t l = 0; l < c.n_layers; ++l) {
        // Every feature's down column as a query [nf, hidden]: the layer's down matrices
        // ([hidden, ffn] each: a dense FFN's, or every expert's then the shared expert's) side by side.
        cols.resize(static_cast<size_t>(nf * c.hidden));
        int64_t f0 = 0;
        for (const TensorView* d : ffn_down_matrices(c, w.layers[static_cast<size_t>(l)])) {
          row.resize(static_cast<size_t>(d->cols));
          for (int64_t r = 0; r < d->rows; ++r) {
            quant::dequantize_row(d->type, d->row(r), row.data(), d->cols);
            for (int64_t f = 0; f < d->cols; ++f) cols[static_cast<size_t>((f0 + f) * d->rows + r)] = row[static_cast<size_t>(f)];
          }
          f0 += d->cols;
        }
        const auto top = compute::top_k_rows(pool, w.lm_head, cols.data(), nf, topt);
        std::vector<vindex::TokenScore> entries(top.size());
        for (size_t i = 0; i < top.size(); ++i) entries[i] = {static_cast<uint32_t>(top[i].row), top[i].score};
        dm.add_layer(static_cast<uint32_t>(l), static_cast<uint32_t>(nf), entries);
        progress("down_meta", l + 1, c.n_layers);
      }
      dm.commit();
      record.finish({"down_meta.bin"});
    }
    // Model weights in their source blocks, named by weight_manifest.json.
    if (weights && !record.has_all(weight_files(opt.level))) {
      write_weights(model, staging, opt.level, opt.quant, opt.dtype, progress);
      record.finish(weight_files(opt.level));
    }
    // The source vindex's record of edited slots, carried.
    if (!opt.edited_slots.empty() && !record.has("edits.json")) {
      write_file_atomic((staging / "edits.json").string(), vindex::serialize_edited_slots(opt.edited_slots), "edits.json");
      record.finish({"edits.json"});
    }
    // Checksums of every file (the record's, each taken when its file was finished), then
    // index.json; the record goes before the rename.
    fs::remove(record.path(), ec);
    uint64_t bytes = 0;
    size_t n_files = 0;
    for (const auto& e : fs::directory_iterator(staging, ec)) {
      const std::string n = e.path().filename().string();
      if (!record.has(n)) throw Error(ErrorKind::Io, "unexpected file " + e.path().string() + " in the staging directory");
      bytes += fs::file_size(e.path());
      ++n_files;
    }
    if (ec) throw Error(ErrorKind::Io, "cannot list " + staging.string() + ": " + ec.message());
    if (n_files != record.files().size()) throw Error(ErrorKind::Io, "a finished file is missing from " + staging.string());
    x.checksums = record.files();
    vindex::write_index(staging.string(), x);
    bytes += fs::file_size(staging / "index.json");
    replace_directory(staging.string(), target.string());
    result.index = std::move(x);
    result.bytes = bytes;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace larql::extract
