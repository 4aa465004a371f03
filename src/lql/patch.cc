#include "lql/patch.h"

#include "model/overlay_source.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::lql {

using nlohmann::json;

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// "FILE: FIELD: problem" (FIELD empty: "FILE: problem").
[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& what) {
  throw Error(ErrorKind::Format, file + ": " + (field.empty() ? "" : field + ": ") + what);
}

// nlohmann's parse error quotes everything it read of the failing token ("last read: '...'"): a
// truncated base64 vector makes that kilobytes. Keep the start and a short excerpt.
std::string short_parse_error(std::string msg) {
  if (auto b = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && b != std::string::npos) msg.erase(0, b + 2);
  const std::string key = "last read: '";
  const auto at = msg.find(key);
  if (at == std::string::npos) return msg;
  const auto from = at + key.size();
  const auto end = msg.rfind('\'');
  if (end == std::string::npos || end < from) return msg;
  constexpr size_t kExcerpt = 24;
  const std::string read = msg.substr(from, end - from);
  if (read.size() <= 2 * kExcerpt) return msg;
  return msg.substr(0, from) + read.substr(0, kExcerpt) + "..." + read.substr(read.size() - kExcerpt) + "' (" +
         std::to_string(read.size()) + " bytes)" + msg.substr(end + 1);
}

}  // namespace

const char* op_name(PatchOp::Kind k) {
  switch (k) {
    case PatchOp::Kind::Insert: return "insert";
    case PatchOp::Kind::Update: return "update";
    case PatchOp::Kind::Delete: return "delete";
    case PatchOp::Kind::InsertKnn: return "insert_knn";
    case PatchOp::Kind::DeleteKnn: return "delete_knn";
  }
  return "?";
}

std::string encode_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; ++k) bytes[4 * i + static_cast<size_t>(k)] = static_cast<char>((u >> (8 * k)) & 0xFF);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? kB64[(w >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

std::vector<float> decode_floats(std::string_view s) {
  if (s.size() % 4 != 0)
    throw Error(ErrorKind::InvalidArgument, "bad base64: length " + std::to_string(s.size()) + " is not a multiple of 4");
  std::string bytes;
  bytes.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t w = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=') {
        if (i + 4 != s.size() || k < 2) throw Error(ErrorKind::InvalidArgument, "bad base64: '=' at offset " + std::to_string(i + k));
        ++pad;
        w <<= 6;
        continue;
      }
      if (pad) throw Error(ErrorKind::InvalidArgument, "bad base64: data after '=' at offset " + std::to_string(i + k));
      const int v = b64_value(c);
      if (v < 0) throw Error(ErrorKind::InvalidArgument, "bad base64: character " + std::to_string(static_cast<unsigned char>(c)) +
                                                            " at offset " + std::to_string(i + k));
      w = (w << 6) | static_cast<uint32_t>(v);
    }
    for (int k = 0; k < 3 - pad; ++k) bytes.push_back(static_cast<char>((w >> (16 - 8 * k)) & 0xFF));
  }
  if (bytes.size() % 4 != 0)
    throw Error(ErrorKind::InvalidArgument, "bad base64: " + std::to_string(bytes.size()) + " bytes is not whole f32 values");
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 * i + static_cast<size_t>(k)])) << (8 * k);
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

std::string patch_to_json(const Patch& p) {
  json ops = json::array();
  for (const auto& o : p.ops) {
    json j;
    j["op"] = op_name(o.kind);
    switch (o.kind) {
      case PatchOp::Kind::Insert:
      case PatchOp::Kind::Update:
        j["layer"] = o.layer;
        j["feature"] = o.feature;
        if (o.kind == PatchOp::Kind::Insert) {
          j["entity"] = o.entity;
          j["relation"] = o.relation;
          j["target"] = o.target;
          j["target_id"] = o.target_id;
          j["confidence"] = o.confidence;
        }
        if (!o.gate.empty()) j["gate_vector_b64"] = encode_floats(o.gate);
        if (!o.up.empty()) j["up_vector_b64"] = encode_floats(o.up);
        if (!o.down.empty()) j["down_vector_b64"] = encode_floats(o.down);
        break;
      case PatchOp::Kind::Delete:
        j["layer"] = o.layer;
        j["feature"] = o.feature;
        if (!o.reason.empty()) j["reason"] = o.reason;
        break;
      case PatchOp::Kind::InsertKnn:
        j["layer"] = o.layer;
        j["entity"] = o.entity;
        j["relation"] = o.relation;
        j["target"] = o.target;
        j["target_id"] = o.target_id;
        j["confidence"] = o.confidence;
        j["key_vector_b64"] = encode_floats(o.key);
        break;
      case PatchOp::Kind::DeleteKnn: j["entity"] = o.entity; break;
    }
    ops.push_back(std::move(j));
  }
  json j = {{"version", p.version},         {"base_model", p.base_model}, {"base_fingerprint", p.base_fingerprint},
            {"description", p.description}, {"created_at", p.created_at}, {"operations", std::move(ops)}};
  return j.dump(2) + "\n";
}

int64_t out_of_range_value(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!(std::fabs(v[i]) <= kMaxEditValue)) return static_cast<int64_t>(i);
  return -1;
}

Patch patch_from_json(std::string_view text, const PatchLimits& lim, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(name, "", "not JSON: " + short_parse_error(e.what()));
  }
  if (!j.is_object()) bad(name, "", "not a JSON object");
  // An op's field is "operations[i].k", a top-level one "k".
  auto field = [](const std::string& where, const char* k) { return where.empty() ? std::string(k) : where + "." + k; };
  auto str = [&](const json& o, const char* k, const std::string& where, bool required) -> std::string {
    if (!o.contains(k)) {
      if (required) bad(name, field(where, k), "missing");
      return "";
    }
    if (!o[k].is_string()) bad(name, field(where, k), "not a string");
    return o[k].get<std::string>();
  };
  auto integer = [&](const json& o, const char* k, const std::string& where, int64_t lo, int64_t hi) -> int64_t {
    if (!o.contains(k)) bad(name, field(where, k), "missing");
    if (!o[k].is_number_integer()) bad(name, field(where, k), "not an integer");
    // An unsigned value past int64's range would wrap to a negative one: named as written.
    if (o[k].is_number_unsigned() && o[k].get<uint64_t>() > static_cast<uint64_t>(hi))
      bad(name, field(where, k), std::to_string(o[k].get<uint64_t>()) + " is out of range " + std::to_string(lo) + "-" + std::to_string(hi));
    const int64_t v = o[k].get<int64_t>();
    if (v < lo || v > hi)
      bad(name, field(where, k), std::to_string(v) + " is out of range " + std::to_string(lo) + "-" + std::to_string(hi));
    return v;
  };
  auto vec = [&](const json& o, const char* k, const std::string& where, bool required) -> std::vector<float> {
    if (!o.contains(k)) {
      if (required) bad(name, field(where, k), "missing");
      return {};
    }
    if (!o[k].is_string()) bad(name, field(where, k), "not a string");
    std::vector<float> v;
    try {
      v = decode_floats(o[k].get<std::string>());
    } catch (const Error& e) {
      bad(name, field(where, k), e.what());
    }
    if (static_cast<int64_t>(v.size()) != lim.hidden)
      bad(name, field(where, k), std::to_string(v.size()) + " floats, the model's hidden size is " + std::to_string(lim.hidden));
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) bad(name, field(where, k), "value " + std::to_string(i) + " is not finite");
    if (const int64_t i = out_of_range_value(v); i >= 0)
      bad(name, field(where, k), "value " + std::to_string(i) + " (" + std::to_string(v[static_cast<size_t>(i)]) +
                                     ") is beyond +-65504, the f16 range edits are held to");
    return v;
  };
  Patch p;
  if (!j.contains("version") || !j["version"].is_number_integer()) bad(name, "version", "missing or not an integer");
  p.version = j["version"].get<int64_t>();
  if (p.version != 1) bad(name, "version", std::to_string(p.version) + " is not a version this build reads (1)");
  p.base_model = str(j, "base_model", "", true);
  p.base_fingerprint = str(j, "base_fingerprint", "", true);
  p.description = str(j, "description", "", false);
  p.created_at = str(j, "created_at", "", false);
  if (!j.contains("operations") || !j["operations"].is_array()) bad(name, "operations", "missing or not an array");
  const auto& ops = j["operations"];
  std::map<std::pair<int64_t, int64_t>, size_t> inserted;  // (layer, feature) -> the op that inserted it
  // A feature of the model, or one MODE SUBJECT appended past it (not a range column).
  auto feature = [&](const json& o, const std::string& where) {
    const int64_t f = integer(o, "feature", where, 0, lim.num_features + lim.appended - 1);
    if (ffn_append_range_column(f, lim.num_features))
      bad(name, where + ".feature", std::to_string(f) + " is a range column of the appended features, which no edit writes");
    return f;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string where = "operations[" + std::to_string(i) + "]";
    const json& o = ops[i];
    if (!o.is_object()) bad(name, where, "not an object");
    const std::string op = str(o, "op", where, true);
    PatchOp x;
    if (op == "insert" || op == "update") {
      x.kind = op == "insert" ? PatchOp::Kind::Insert : PatchOp::Kind::Update;
      x.layer = integer(o, "layer", where, 0, lim.num_layers - 1);
      x.feature = feature(o, where);
      if (x.kind == PatchOp::Kind::Insert) {
        x.entity = str(o, "entity", where, true);
        x.relation = str(o, "relation", where, false);
        x.target = str(o, "target", where, true);
        x.target_id = integer(o, "target_id", where, 0, lim.vocab - 1);
      }
      x.gate = vec(o, "gate_vector_b64", where, x.kind == PatchOp::Kind::Insert);
      x.up = vec(o, "up_vector_b64", where, x.kind == PatchOp::Kind::Insert);
      x.down = vec(o, "down_vector_b64", where, x.kind == PatchOp::Kind::Insert);
    } else if (op == "delete") {
      x.kind = PatchOp::Kind::Delete;
      x.layer = integer(o, "layer", where, 0, lim.num_layers - 1);
      x.feature = feature(o, where);
      x.reason = str(o, "reason", where, false);
    } else if (op == "insert_knn") {
      x.kind = PatchOp::Kind::InsertKnn;
      x.layer = integer(o, "layer", where, 0, lim.num_layers - 1);
      x.entity = str(o, "entity", where, true);
      x.relation = str(o, "relation", where, false);
      x.target = str(o, "target", where, true);
      x.target_id = integer(o, "target_id", where, 0, lim.vocab - 1);
      x.key = vec(o, "key_vector_b64", where, true);
    } else if (op == "delete_knn") {
      x.kind = PatchOp::Kind::DeleteKnn;
      x.entity = str(o, "entity", where, true);
    } else {
      bad(name, where + ".op", "\"" + op + "\" is not an op (insert, update, delete, insert_knn, delete_knn)");
    }
    if (o.contains("confidence")) {
      if (!o["confidence"].is_number()) bad(name, where + ".confidence", "not a number");
      x.confidence = o["confidence"].get<double>();
      if (!(x.confidence >= 0 && x.confidence <= 1))
        bad(name, where + ".confidence", o["confidence"].dump() + " is out of range [0, 1]");
    }
    // An insert replaces its slot's gate, up and down whole: a second insert on a slot that an
    // earlier op of this file inserted (and no delete freed) would drop the first fact unseen.
    if (x.kind == PatchOp::Kind::Insert || x.kind == PatchOp::Kind::Delete) {
      const std::pair<int64_t, int64_t> slot{x.layer, x.feature};
      if (x.kind == PatchOp::Kind::Delete) {
        inserted.erase(slot);
      } else if (auto it = inserted.find(slot); it != inserted.end()) {
        bad(name, where, "inserts layer " + std::to_string(x.layer) + " feature " + std::to_string(x.feature) + ", which operations[" +
                             std::to_string(it->second) + "] (\"" + p.ops[it->second].entity +
                             "\") already inserted: the earlier fact would be lost");
      } else {
        inserted[slot] = i;
      }
    }
    p.ops.push_back(std::move(x));
  }
  return p;
}

void save_patch(const std::string& path, const Patch& p, bool replace) {
  if (replace) {
    write_file_atomic(path, patch_to_json(p), "SAVE PATCH");
    return;
  }
  AtomicWriter out(path, "SAVE PATCH");
  out.write(patch_to_json(p));
  out.commit_new();
}

Patch load_patch(const std::string& path, const PatchLimits& lim) {
  return patch_from_json(read_text_file(path, "the patch", 1ull << 30), lim, path);
}

}  // namespace larql::lql
