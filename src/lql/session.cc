#include "lql/session.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "lql/edits.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/vindex_source.h"
#include "util/half.h"
#include "quant/quant.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::lql {

namespace fs = std::filesystem;

struct Session::Open {
  std::string dir;
  vindex::VindexIndex index;
  DType dtype = DType::F32;
  MappedFile gates, embeddings;
  std::optional<vindex::DownMetaFile> down_meta;
  std::optional<vindex::FeatureLabels> labels;
  std::vector<vindex::EditedSlot> compiled_edits;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const WeightSource> base;
  std::shared_ptr<const Model> base_model;  ///< over `base`, never edited
  std::map<int64_t, std::vector<uint8_t>> gate_copies;  ///< layer -> its gate rows with edits
  std::unique_ptr<EditState> edits = std::make_unique<EditState>();
};

namespace {

DType side_dtype(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  return DType::F32;
}

}  // namespace

Session::Session(SessionOptions opt) : Session(std::move(opt), nullptr) {}
Session::Session(SessionOptions opt, std::shared_ptr<ThreadPool> pool)
    : opt_(std::move(opt)), pool_(pool ? std::move(pool) : std::make_shared<ThreadPool>(opt_.threads)) {}
Session::~Session() = default;

std::string resolve_vindex(const std::string& name, const std::vector<std::string>& model_dirs) {
  std::error_code ec;
  const auto needs_vindex = [](const std::string& path, const std::string& what) -> Error {
    std::string stem = fs::path(path).filename().string();
    if (stem.empty()) stem = fs::path(path).parent_path().filename().string();
    if (const size_t dot = stem.rfind('.'); dot != std::string::npos && dot > 0) stem.resize(dot);
    return Error(ErrorKind::Unsupported, "LQL needs a vindex, and " + path + " is " + what +
                                             ": extract one with `larql extract " + path + " -o " + stem +
                                             ".vindex --level inference` and USE \"" + stem + ".vindex\"");
  };
  const auto check = [&](const std::string& path) {
    if (fs::is_directory(path, ec)) {
      if (!fs::exists(fs::path(path) / "index.json", ec))
        throw needs_vindex(path, "a directory without index.json (a Hugging Face checkpoint?), not a vindex");
      return path;
    }
    throw needs_vindex(path, "a file (a GGUF model?), not a vindex directory");
  };
  if (fs::exists(name, ec)) return check(name);
  if (!name.empty() && name.find('/') == std::string::npos) {
    for (const fs::path d : model_dirs)
      for (const std::string& cand : {name, name + ".vindex"})
        if (fs::is_directory(d / cand, ec) && fs::exists(d / cand / "index.json", ec)) return (d / cand).string();
    for (const fs::path d : model_dirs)  // only a model of that name: say how to make its vindex
      for (const std::string& cand : {name, name + ".gguf"})
        if (fs::exists(d / cand, ec)) return check((d / cand).string());
  }
  std::string dirs;
  for (const auto& d : model_dirs) dirs += (dirs.empty() ? "" : ", ") + d;
  throw Error(ErrorKind::NotFound, "no vindex " + name + ": no such directory" +
                                       (dirs.empty() || name.find('/') != std::string::npos
                                            ? std::string()
                                            : ", and no vindex of that name in " + dirs));
}

void Session::use(const std::string& name) {
  const std::string dir = resolve_vindex(name, opt_.model_dirs);
  auto o = std::make_unique<Open>();
  o->dir = dir;
  o->index = vindex::read_index(dir);
  o->dtype = side_dtype(o->index.dtype);
  const auto& ix = o->index;
  const uint64_t esize = static_cast<uint64_t>(vindex::dtype_size(ix.dtype));
  if (!ix.layers.empty()) {
    o->gates = MappedFile::open((fs::path(dir) / "gate_vectors.bin").string());
    const auto& last = ix.layers.back();
    if (o->gates.size() < last.offset + last.length)
      throw Error(ErrorKind::Format, dir + "/gate_vectors.bin: " + std::to_string(o->gates.size()) +
                                         " bytes, index.json's layers need " +
                                         std::to_string(last.offset + last.length));
  }
  const fs::path emb = fs::path(dir) / "embeddings.bin";
  if (fs::exists(emb)) {
    o->embeddings = MappedFile::open(emb.string());
    const uint64_t need = static_cast<uint64_t>(ix.vocab_size) * static_cast<uint64_t>(ix.hidden_size) * esize;
    if (o->embeddings.size() < need)
      throw Error(ErrorKind::Format, emb.string() + ": " + std::to_string(o->embeddings.size()) +
                                         " bytes, vocab_size x hidden_size needs " + std::to_string(need));
  }
  const fs::path dm = fs::path(dir) / "down_meta.bin";
  // Listed but missing is an error (DownMetaFile::open names the file), not an empty result.
  if (ix.checksums.count("down_meta.bin") != 0 || fs::exists(dm)) o->down_meta = vindex::DownMetaFile::open(dm.string());
  if (ix.checksums.count("feature_labels.json") != 0 || fs::exists(fs::path(dir) / "feature_labels.json"))
    o->labels = vindex::read_feature_labels(dir);
  o->compiled_edits = vindex::read_edited_slots(dir);
  for (const auto& e : o->compiled_edits)
    if (e.layer >= ix.num_layers || e.feature >= ix.intermediate_size)
      throw Error(ErrorKind::Format, dir + "/edits.json: layer " + std::to_string(e.layer) + " feature " +
                                         std::to_string(e.feature) + " is outside the model");
  // KNN facts a COMPILE baked into this vindex (lql/exec_compile.cc).
  const fs::path knn = fs::path(dir) / "knn_facts.vlp";
  if (fs::exists(knn)) {
    Patch p = load_patch(knn.string(), PatchLimits{ix.num_layers, ix.intermediate_size, ix.hidden_size, ix.vocab_size});
    for (const auto& op : p.ops)
      if (op.kind != PatchOp::Kind::InsertKnn)
        throw Error(ErrorKind::Format, knn.string() + ": holds a " + op_name(op.kind) + " op; only insert_knn belongs there");
    NamedPatch np{knn.string(), std::move(p)};
    for (const auto& op : np.patch.ops) o->edits->apply(nullptr, op);
    o->edits->applied.push_back(std::move(np));
  }
  open_ = std::move(o);
}

void Session::use_shared(Session& base) {
  if (!base.has_vindex()) throw Error(ErrorKind::InvalidArgument, "use_shared: the base session has no vindex in use");
  // The vindex's own KNN facts (knn_facts.vlp) leave the weights alone; any other edit does not.
  if (base.edits().overlay || base.edits().recording || !base.open_->gate_copies.empty())
    throw Error(ErrorKind::InvalidArgument, "use_shared: the base session has edits");
  base.tokenizer();
  std::shared_ptr<const Model> model;
  std::shared_ptr<const WeightSource> source;
  if (base.runs_model()) {
    source = base.base_source("a shared session");
    model = base.model("a shared session");
  }
  use(base.path());
  open_->tokenizer = base.open_->tokenizer;
  open_->base = std::move(source);
  open_->model = std::move(model);
}

const vindex::VindexIndex& Session::index() const {
  if (!open_) throw Error(ErrorKind::InvalidArgument, "no vindex in use (USE \"NAME.vindex\" first)");
  return open_->index;
}

const std::string& Session::path() const {
  index();
  return open_->dir;
}

std::map<std::string, vindex::Band> Session::bands() const {
  const auto& ix = index();
  if (!ix.layer_bands.empty()) return ix.layer_bands;
  return layer_bands_of(ix.family, ix.num_layers);
}

std::string Session::band_of(int64_t layer) const {
  for (const char* name : {"syntax", "knowledge", "output"}) {
    auto b = bands();
    auto it = b.find(name);
    if (it != b.end() && layer >= it->second.first && layer <= it->second.last) return name;
  }
  return "all";
}

TensorView Session::gate(int64_t layer) const {
  const auto& ix = index();
  if (layer < 0 || layer >= static_cast<int64_t>(ix.layers.size()))
    throw Error(ErrorKind::InvalidArgument,
                "layer " + std::to_string(layer) + " is out of range: the vindex has " +
                    (ix.layers.empty() ? std::string("no gate vectors")
                                       : "layers 0-" + std::to_string(ix.layers.size() - 1)));
  const auto& s = ix.layers[static_cast<size_t>(layer)];
  TensorView v;
  v.type = open_->dtype;
  v.rows = s.num_features;
  v.cols = ix.hidden_size;
  auto copy = open_->gate_copies.find(layer);
  v.data = copy != open_->gate_copies.end() ? copy->second.data() : open_->gates.data() + s.offset;
  v.row_bytes = static_cast<size_t>(ix.hidden_size) * static_cast<size_t>(vindex::dtype_size(ix.dtype));
  return v;
}

TensorView Session::embeddings() const {
  const auto& ix = index();
  if (!open_->embeddings.data()) throw Error(ErrorKind::NotFound, open_->dir + ": no embeddings.bin");
  TensorView v;
  v.type = open_->dtype;
  v.rows = ix.vocab_size;
  v.cols = ix.hidden_size;
  v.data = open_->embeddings.data();
  v.row_bytes = static_cast<size_t>(ix.hidden_size) * static_cast<size_t>(vindex::dtype_size(ix.dtype));
  return v;
}

const vindex::DownMetaFile* Session::down_meta() const {
  index();
  return open_->down_meta ? &*open_->down_meta : nullptr;
}

const vindex::FeatureLabels* Session::labels() const {
  index();
  return open_->labels ? &*open_->labels : nullptr;
}

const std::vector<vindex::EditedSlot>& Session::compiled_edits() const {
  index();
  return open_->compiled_edits;
}

const Tokenizer& Session::tokenizer() {
  index();
  if (!open_->tokenizer) {
    VocabData v = vocab_from_directory(open_->dir);
    if (static_cast<int64_t>(v.tokens.size()) != open_->index.vocab_size)
      throw Error(ErrorKind::Format, open_->dir + ": the vocabulary has " + std::to_string(v.tokens.size()) +
                                         " tokens, index.json's vocab_size is " + std::to_string(open_->index.vocab_size));
    open_->tokenizer = std::make_shared<const Tokenizer>(std::move(v));
  }
  return *open_->tokenizer;
}

void Session::check_cancel() const {
  if (cancel_ && cancel_->load(std::memory_order_relaxed)) throw Error(ErrorKind::Cancelled, "cancelled");
}

std::vector<GateHit> Session::gate_knn(int64_t layer, const float* q, int k, const std::vector<uint8_t>* skip) {
  check_cancel();
  const TensorView g = gate(layer);
  const int64_t hidden = g.cols;
  int64_t eligible = g.rows;
  if (skip) {
    if (static_cast<int64_t>(skip->size()) != g.rows)
      throw Error(ErrorKind::InvalidArgument, "gate_knn: a skip list of " + std::to_string(skip->size()) + " for " +
                                                  std::to_string(g.rows) + " features");
    eligible = std::count(skip->begin(), skip->end(), uint8_t{0});
  }
  k = static_cast<int>(std::min<int64_t>(k, eligible));
  if (k < 1) return {};
  std::vector<float> qs(static_cast<size_t>(2 * hidden));
  for (int64_t i = 0; i < hidden; ++i) {
    qs[static_cast<size_t>(i)] = q[i];
    qs[static_cast<size_t>(hidden + i)] = -q[i];
  }
  compute::TopKOptions opt;
  opt.top_k = k;
  opt.skip = skip;
  const auto rows = compute::top_k_rows(*pool_, g, qs.data(), 2, opt);
  std::vector<GateHit> hits;
  std::vector<uint8_t> seen(static_cast<size_t>(g.rows), 0);
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < k; ++i) {
      const auto& r = rows[static_cast<size_t>(j * k + i)];
      if (seen[static_cast<size_t>(r.row)]) continue;  // padding, or a zero score found twice
      seen[static_cast<size_t>(r.row)] = 1;
      hits.push_back({layer, r.row, j == 0 ? r.score : -r.score});
    }
  std::sort(hits.begin(), hits.end(), [](const GateHit& a, const GateHit& b) {
    const float x = std::fabs(a.score), y = std::fabs(b.score);
    return x != y ? x > y : a.feature < b.feature;
  });
  if (hits.size() > static_cast<size_t>(k)) hits.resize(static_cast<size_t>(k));
  return hits;
}

std::optional<std::vector<float>> Session::entity_query(const std::string& entity) {
  const auto ids = tokenizer().encode(entity, false, false);
  const TensorView e = embeddings();
  std::vector<float> q(static_cast<size_t>(e.cols), 0.0f), row(static_cast<size_t>(e.cols));
  int64_t n = 0;
  for (int32_t id : ids) {
    if (id < 0 || id >= e.rows) continue;
    quant::dequantize_row(e.type, e.row(id), row.data(), e.cols);
    for (size_t i = 0; i < q.size(); ++i) q[i] += row[i];
    ++n;
  }
  if (n == 0) return std::nullopt;
  const float s = static_cast<float>(index().embed_scale) / static_cast<float>(n);
  for (float& x : q) x *= s;
  return q;
}

std::string Session::token_text(int64_t id) {
  const Tokenizer& t = tokenizer();
  if (id < 0 || id >= t.vocab_size()) return "<" + std::to_string(id) + ">";
  std::string s = t.token_to_piece(static_cast<int32_t>(id));
  const auto b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return s;  // all blank: keep it visible as it is
  const auto e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

std::string Session::token_piece(int64_t id) {
  const Tokenizer& t = tokenizer();
  if (id < 0 || id >= t.vocab_size()) return "<" + std::to_string(id) + ">";
  return t.token_to_piece(static_cast<int32_t>(id));
}

bool Session::runs_model() const {
  const auto& ix = index();
  return ix.has_model_weights && ix.extract_level >= vindex::ExtractLevel::Inference;
}

std::shared_ptr<const Model> Session::model(const std::string& what) {
  const auto& ix = index();
  if (!runs_model())
    throw Error(ErrorKind::Unsupported, what + " needs a vindex with model weights; " + open_->dir +
                                            " was extracted at level " + vindex::extract_level_name(ix.extract_level) +
                                            " (larql extract MODEL -o X.vindex --level inference)");
  if (!open_->model) open_->model = Model::load(base_source(what));
  return open_->model;
}

std::shared_ptr<const WeightSource> Session::base_source(const std::string& what) {
  const auto& ix = index();
  if (!runs_model())
    throw Error(ErrorKind::Unsupported, what + " needs a vindex with model weights; " + open_->dir +
                                            " was extracted at level " + vindex::extract_level_name(ix.extract_level) +
                                            " (larql extract MODEL -o X.vindex --level inference)");
  if (!open_->base) open_->base = VindexSource::open(open_->dir);
  return open_->base;
}

std::shared_ptr<const Model> Session::base_model(const std::string& what) {
  auto src = base_source(what);
  if (!open_->base_model) open_->base_model = Model::load(src);
  return open_->base_model;
}

void Session::set_weights(std::shared_ptr<const WeightSource> source,
                          const std::map<std::pair<int64_t, int64_t>, std::vector<float>>& gate_rows) {
  const auto& ix = index();
  open_->model = Model::load(source ? source : base_source("an edit"));
  open_->gate_copies.clear();
  const size_t esize = static_cast<size_t>(vindex::dtype_size(ix.dtype));
  const size_t rb = static_cast<size_t>(ix.hidden_size) * esize;
  for (const auto& [key, row] : gate_rows) {
    const auto [layer, feature] = key;
    if (layer < 0 || layer >= static_cast<int64_t>(ix.layers.size())) continue;
    const auto& slot = ix.layers[static_cast<size_t>(layer)];
    if (feature < 0 || feature >= slot.num_features || static_cast<int64_t>(row.size()) != ix.hidden_size) continue;
    auto& copy = open_->gate_copies[layer];
    if (copy.empty()) copy.assign(open_->gates.data() + slot.offset, open_->gates.data() + slot.offset + slot.length);
    quant::quantize_row(open_->dtype, row.data(), copy.data() + static_cast<size_t>(feature) * rb, ix.hidden_size);
  }
}

EditState& Session::edits() {
  index();
  return *open_->edits;
}

}  // namespace larql::lql
