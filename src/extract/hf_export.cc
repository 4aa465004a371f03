// A weight source as a Hugging Face directory (extract/hf_export.h). Names and layouts: model/arch.h
// (hf_tensor_name, the fused rows), model/hf_source.cc (what larql reads back: experts one tensor
// each, Gemma's w, shapes [rows, cols]); the Q/K un-permutation inverts llama.cpp's
// convert_hf_to_gguf.py LlamaModel.permute (w.reshape(n_head, 2, d/2, ...).swapaxes(1, 2)).
#include "extract/hf_export.h"

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/safetensors_writer.h"
#include "model/arch.h"
#include "model/hf_source.h"
#include "model/model.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "tokenizer/hf_json.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/half.h"
#include "util/text_file.h"

namespace fs = std::filesystem;

namespace larql::extract {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

StDType st_of(DType t) { return t == DType::F16 ? StDType::F16 : t == DType::BF16 ? StDType::BF16 : StDType::F32; }

size_t elem_size(DType t) { return t == DType::F32 ? 4 : 2; }


/// One run of rows of a source tensor, written in the output's order and type.
struct RowRun {
  SourceTensor t;
  int64_t rows = 0, cols = 0;
  uint64_t first_byte = 0;  ///< where row 0 starts in t.data (an expert's slab)
  int64_t heads = 0, head_dim = 0;  ///< > 0: un-permute rows from adjacent to NeoX pairing
  bool minus_one = false;   ///< Gemma's norm: write x - 1
};

/// The source row that output row `o` comes from.
int64_t source_row(const RowRun& r, int64_t o) {
  if (r.heads <= 0) return o;
  const int64_t d = r.head_dim, half = d / 2, h = o / d, rem = o % d;
  return h * d + 2 * (rem % half) + rem / half;
}

class Emitter {
 public:
  Emitter(const SafetensorsWriter::Sink& sink, DType out, uint64_t* inexact) : sink_(sink), out_(out), inexact_(inexact) {}
  /// Writes what is buffered; call once after the last run.
  void finish() { flush(); }
  void run(const RowRun& r) {
    const auto rb = row_bytes(r.t.type, static_cast<uint64_t>(r.cols));
    if (!rb) throw Error(ErrorKind::Unsupported, "compile: tensor " + r.t.name + ": rows of " + std::to_string(r.cols) + " " +
                                                     dtype_name(r.t.type) + " values are not whole blocks");
    std::vector<float> f(static_cast<size_t>(r.cols));
    const size_t out_row = static_cast<size_t>(r.cols) * elem_size(out_);
    for (int64_t o = 0; o < r.rows; ++o) {
      const uint8_t* in = r.t.data + r.first_byte + static_cast<uint64_t>(source_row(r, o)) * *rb;
      if (r.t.type == out_ && !r.minus_one) {
        put(in, out_row);
        continue;
      }
      quant::dequantize_row(r.t.type, in, f.data(), r.cols);
      if (r.minus_one)
        for (float& x : f) {
          const float w = x - 1.0f;
          if (w + 1.0f != x && !std::isnan(x)) ++*inexact_;
          x = w;
        }
      const size_t at = buf_.size();
      buf_.resize(at + out_row);
      uint8_t* p = buf_.data() + at;
      if (out_ == DType::F32) {
        std::memcpy(p, f.data(), out_row);
      } else {
        for (int64_t i = 0; i < r.cols; ++i) {
          const uint16_t h = out_ == DType::F16 ? f32_to_f16(f[static_cast<size_t>(i)]) : f32_to_bf16(f[static_cast<size_t>(i)]);
          std::memcpy(p + 2 * i, &h, 2);
        }
      }
      if (buf_.size() >= (1u << 20)) flush();
    }
  }

 private:
  void put(const uint8_t* p, size_t n) {
    buf_.insert(buf_.end(), p, p + n);
    if (buf_.size() >= (1u << 20)) flush();
  }
  void flush() {
    if (!buf_.empty()) sink_(buf_.data(), buf_.size());
    buf_.clear();
  }
  const SafetensorsWriter::Sink& sink_;
  DType out_;
  uint64_t* inexact_;
  std::vector<uint8_t> buf_;
};

/// One safetensors entry: its runs of rows, concatenated.
struct Planned {
  std::string name;
  DType out = DType::F32;
  std::vector<int64_t> shape;
  std::vector<RowRun> runs;
  uint64_t nbytes() const {
    uint64_t n = elem_size(out);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

long staging_pid(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  return end != nullptr && *end == '\0' ? pid : 0;
}

bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

std::string read_all(const fs::path& p) { return read_text_file(p.string(), p.filename().string(), 1u << 30); }

}  // namespace

HfExportResult export_hf_dir(const WeightSource& source, const std::string& out_dir, const HfExportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.dtype != "auto" && opt.dtype != "f32" && opt.dtype != "f16" && opt.dtype != "bf16")
    throw Error(ErrorKind::InvalidArgument, "compile: --dtype \"" + opt.dtype + "\" is not one of auto, f32, f16, bf16");
  if (opt.max_shard_bytes == 0) throw Error(ErrorKind::InvalidArgument, "compile: the shard size must be > 0");
  if (out_dir.empty()) throw Error(ErrorKind::InvalidArgument, "compile: the output directory is empty");
  const fs::path target = fs::absolute(fs::path(out_dir)).lexically_normal();
  const fs::path tgt = target.filename().empty() ? target.parent_path() : target;  // "out/"
  if (tgt.filename().empty()) throw Error(ErrorKind::InvalidArgument, "compile: output \"" + out_dir + "\" names no directory");
  std::error_code ec;
  {
    const std::string& src = source.path();
    if (!src.empty()) {
      const fs::path s = fs::absolute(fs::path(src)).lexically_normal();
      const fs::path sd = s.filename().empty() ? s.parent_path() : s;
      const fs::path rel = tgt.lexically_relative(sd);
      if (tgt == sd || (fs::is_directory(sd, ec) && !rel.empty() && *rel.begin() != ".."))
        throw Error(ErrorKind::InvalidArgument, "compile: output " + tgt.string() + " is the model " + sd.string() + " or inside it");
    }
  }
  if (!fs::is_directory(tgt.parent_path(), ec))
    throw Error(ErrorKind::NotFound, "compile: output " + tgt.string() + ": directory " + tgt.parent_path().string() + " does not exist");
  if (fs::exists(tgt, ec)) {
    if (!fs::is_directory(tgt, ec))
      throw Error(ErrorKind::InvalidArgument, "compile: output " + tgt.string() + " exists and is not a directory");
    if (!opt.force) throw Error(ErrorKind::InvalidArgument, "compile: output " + tgt.string() + " exists (use --force to replace it)");
  }

  const ModelConfig& c = source.config();
  const ArchRecord& rec = require_arch(c.arch, source.path());
  const bool adjacent = c.layers[0].rope_form == RopeForm::Adjacent;
  for (size_t i = 0; i < c.layers.size(); ++i)
    if ((c.layers[i].rope_form == RopeForm::Adjacent) != adjacent)
      throw Error(ErrorKind::Unsupported, "compile: layer " + std::to_string(i) + " pairs RoPE dimensions otherwise than layer 0");

  HfExportResult res;
  res.unpermuted_qk = adjacent;
  auto out_type = [&](DType t) -> DType {
    if (opt.dtype == "f32") return DType::F32;
    if (opt.dtype == "f16") return DType::F16;
    if (opt.dtype == "bf16") return DType::BF16;
    return is_float(t) ? t : DType::F32;
  };
  // Plan every entry, in role order.
  std::vector<Planned> plan;
  std::set<std::string> covered;  // the source's tensor names written
  auto run_of = [&](TensorRole role, const SourceTensor& t) {
    RowRun r;
    r.t = t;
    r.cols = static_cast<int64_t>(t.dims.empty() ? 1 : t.dims[0]);
    r.rows = 1;
    for (size_t i = 1; i < t.dims.size(); ++i) r.rows *= static_cast<int64_t>(t.dims[i]);
    const bool q = role == TensorRole::AttnQ || role == TensorRole::AttnQBias;
    const bool k = role == TensorRole::AttnK || role == TensorRole::AttnKBias;
    if (adjacent && (q || k)) {
      r.heads = q ? c.n_heads : c.n_kv_heads;
      r.head_dim = c.head_dim;
      if (t.dims.size() == 1) r.rows = r.cols, r.cols = 1;  // a bias: one value per row
      if (r.rows != r.heads * r.head_dim)
        throw Error(ErrorKind::Format, "compile: tensor " + t.name + " has " + std::to_string(r.rows) + " rows, not heads x head_dim");
    }
    r.minus_one = rec.hf_norm_plus_one && is_norm_role(role);
    return r;
  };
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<RowRun> runs) {
    Planned p;
    p.name = name;
    p.shape = std::move(shape);
    // One output type per entry: the parts' common type (--dtype's, or the stored float type),
    // else f32; Gemma's w = x - 1 is computed and kept in f32 unless --dtype says otherwise.
    p.out = out_type(runs[0].t.type);
    for (const RowRun& r : runs)
      if (out_type(r.t.type) != p.out || (r.minus_one && opt.dtype == "auto")) p.out = DType::F32;
    for (const RowRun& r : runs) {
      if (!is_float(r.t.type)) ++res.dequantised;
      else if (r.t.type != p.out) ++res.converted;
    }
    p.runs = std::move(runs);
    plan.push_back(std::move(p));
  };
  const std::string layer_prefix = "model.layers.";
  for (TensorRole role : all_tensor_roles()) {
    const bool per_layer = is_layer_role(role);
    for (int64_t l = per_layer ? 0 : -1; l < (per_layer ? c.n_layers : 0); ++l) {
      const auto t = source.tensor(role, l);
      if (!t) continue;
      covered.insert(source.tensor_name(role, l));
      // Phi-3: Q/K/V and gate/up go back into their fused matrices (at Q and at gate).
      const auto part = fused_rows(rec, c, role, true);
      if (part) {
        const bool first = part->row0 == 0;
        if (!first) continue;
        std::vector<RowRun> runs;
        int64_t rows = 0, cols = 0, values = 0;
        const std::vector<TensorRole> members =
            role == TensorRole::AttnQ ? std::vector<TensorRole>{TensorRole::AttnQ, TensorRole::AttnK, TensorRole::AttnV}
            : role == TensorRole::AttnQBias
                ? std::vector<TensorRole>{TensorRole::AttnQBias, TensorRole::AttnKBias, TensorRole::AttnVBias}
                : std::vector<TensorRole>{TensorRole::FfnGate, TensorRole::FfnUp};
        for (TensorRole m : members) {
          const auto mt = source.tensor(m, l);
          if (!mt) throw Error(ErrorKind::Format, "compile: " + source.path() + ": " + source.tensor_name(m, l) + " is missing");
          covered.insert(source.tensor_name(m, l));
          runs.push_back(run_of(m, *mt));
          rows += runs.back().rows;
          cols = runs.back().cols;
          values += runs.back().rows * runs.back().cols;
        }
        const std::vector<int64_t> shape = t->dims.size() == 1 ? std::vector<int64_t>{values} : std::vector<int64_t>{rows, cols};
        add(layer_prefix + std::to_string(l) + "." + part->suffix, shape, std::move(runs));
        continue;
      }
      const std::string name = hf_tensor_name(rec, role, l);
      if (name.empty())
        throw Error(ErrorKind::Unsupported, "compile: " + source.path() + ": tensor " + t->name + " (" + tensor_role_name(role) +
                                                ") has no Hugging Face name in " + rec.title);
      RowRun r = run_of(role, *t);
      if (const size_t star = name.find('*'); star != std::string::npos) {
        // Stacked experts [cols, rows, n_experts]: one tensor per expert.
        if (t->dims.size() != 3) throw Error(ErrorKind::Format, "compile: tensor " + t->name + " is not [cols, rows, experts]");
        const int64_t e_rows = static_cast<int64_t>(t->dims[1]), n_e = static_cast<int64_t>(t->dims[2]);
        const auto rb = row_bytes(t->type, t->dims[0]);
        if (!rb) throw Error(ErrorKind::Unsupported, "compile: tensor " + t->name + ": rows are not whole blocks");
        for (int64_t e = 0; e < n_e; ++e) {
          RowRun er = r;
          er.rows = e_rows;
          er.first_byte = static_cast<uint64_t>(e * e_rows) * *rb;
          add(name.substr(0, star) + std::to_string(e) + name.substr(star + 1), {e_rows, er.cols}, {er});
        }
        continue;
      }
      std::vector<int64_t> shape;
      if (t->dims.size() == 1) shape = role == TensorRole::FfnGateInpShexp ? std::vector<int64_t>{1, r.rows * r.cols}
                                                                            : std::vector<int64_t>{r.rows * r.cols};
      else shape = {r.rows, r.cols};
      add(name, shape, {r});
    }
  }
  for (const SourceTensor& t : source.tensors())
    if (!covered.count(t.name) && t.name != "rope_freqs.weight" && t.name != "rope_factors_long.weight" &&
        t.name != "rope_factors_short.weight")
      throw Error(ErrorKind::Unsupported, "compile: " + source.path() + ": tensor " + t.name +
                                              " has no role larql knows, so no Hugging Face name; refusing to drop it");
  // 4-byte types before 2-byte ones (every tensor stays aligned to its element), then shards.
  std::stable_sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) { return elem_size(a.out) > elem_size(b.out); });
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total_data = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint64_t n = plan[i].nbytes();
    if (!shards.back().empty() && in_shard + n > opt.max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(i);
    in_shard += n;
    total_data += n;
  }
  // torch_dtype: the type most of the bytes have.
  std::map<DType, uint64_t> by_type;
  for (const Planned& p : plan) by_type[p.out] += p.nbytes();
  DType main_type = DType::F32;
  for (const auto& [t, n] : by_type)
    if (n > by_type[main_type]) main_type = t;
  const std::string torch_dtype = main_type == DType::F16 ? "float16" : main_type == DType::BF16 ? "bfloat16" : "float32";
  res.config_json = config_to_hf_json(c, source.special_tokens(), torch_dtype);

  // Staging beside the target; those of dead compiles go.
  const fs::path staging = tgt.string() + ".partial-" + std::to_string(::getpid());
  const std::string prefix = tgt.filename().string() + ".partial-";
  for (const auto& e : fs::directory_iterator(tgt.parent_path(), ec))
    if (process_gone(staging_pid(e.path().filename().string(), prefix))) fs::remove_all(e.path(), ec);
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec))
    throw Error(ErrorKind::Io, "compile: cannot create " + staging.string() + ": " + ec.message());
  struct Cleanup {
    fs::path p;
    bool keep = false;
    ~Cleanup() {
      std::error_code e;
      if (!keep) fs::remove_all(p, e);
    }
  } cleanup{staging};

  uint64_t done = 0;
  const uint64_t grand_total = total_data;  // progress over the tensor bytes
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char fname[64];
    if (shards.size() == 1) std::snprintf(fname, sizeof fname, "model.safetensors");
    else std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (size_t i : shards[s]) {
      const Planned& p = plan[i];
      w.add(p.name, st_of(p.out), p.shape, [&p, &res](const SafetensorsWriter::Sink& sink) {
        Emitter em(sink, p.out, &res.norm_values_inexact);
        for (const RowRun& r : p.runs) em.run(r);
        em.finish();
      });
      weight_map[p.name] = fname;
    }
    const uint64_t header = w.file_size() - w.data_bytes();
    w.write((staging / fname).string(), [&](uint64_t d, uint64_t) {
      if (opt.progress) opt.progress(done + (d > header ? d - header : 0), grand_total);
    });
    done += w.data_bytes();
    res.tensors += w.tensor_count();
  }
  res.shards = shards.size();
  if (shards.size() > 1)
    write_file_atomic((staging / "model.safetensors.index.json").string(),
                      nlohmann::json({{"metadata", {{"total_size", total_data}}}, {"weight_map", weight_map}}).dump(2) + "\n",
                      "model.safetensors.index.json");
  write_file_atomic((staging / "config.json").string(), res.config_json, "config.json");
  {
    const SpecialTokens& sp = source.special_tokens();
    nlohmann::ordered_json g = {{"_from_model_config", true}};
    if (sp.bos >= 0) g["bos_token_id"] = sp.bos;
    if (sp.eos >= 0 && sp.eot >= 0 && sp.eot != sp.eos) g["eos_token_id"] = {sp.eos, sp.eot};
    else if (sp.eos >= 0) g["eos_token_id"] = sp.eos;
    if (sp.pad >= 0) g["pad_token_id"] = sp.pad;
    write_file_atomic((staging / "generation_config.json").string(), g.dump(2) + "\n", "generation_config.json");
  }
  // Tokenizer: the directory's own files (a vindex's), else written from the vocabulary.
  const fs::path tdir = opt.tokenizer_dir;
  if (!opt.tokenizer_dir.empty() && fs::is_regular_file(tdir / "tokenizer.json", ec)) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (fs::is_regular_file(tdir / f, ec)) write_file_atomic((staging / f).string(), read_all(tdir / f), f);
    res.tokenizer_copied = true;
  } else {
    const HfTokenizerFiles hf = to_hf_tokenizer(source.vocabulary());
    write_file_atomic((staging / "tokenizer.json").string(), hf.tokenizer_json, "tokenizer.json");
    write_file_atomic((staging / "tokenizer_config.json").string(), hf.tokenizer_config_json, "tokenizer_config.json");
  }
  fsync_directory(staging.string());
  if (opt.verify) {
    try {
      auto back = HfSource::open(staging.string());
      (void)Model::load(std::shared_ptr<const WeightSource>(back));
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("compile: the written directory does not load back (nothing was replaced): ") + e.what());
    }
  }
  for (const auto& e : fs::directory_iterator(staging, ec))
    if (e.is_regular_file()) res.bytes += e.file_size();
  replace_directory(staging.string(), tgt.string());
  cleanup.keep = true;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace larql::extract
