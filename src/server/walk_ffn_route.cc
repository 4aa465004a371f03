#include "server/walk_ffn_route.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <nlohmann/json.hpp>

#include "server/error_status.h"
#include "server/request_json.h"
#include "shard/walk_ffn.h"
#include "util/error.h"
#include "util/half.h"

namespace larql::server {
namespace {

using json = nlohmann::json;

constexpr uint32_t kBatchMarker = 0xFFFFFFFFu;
constexpr const char* kBinary = "application/x-larql-ffn";
constexpr const char* kBinaryF16 = "application/x-larql-ffn-f16";

[[noreturn]] void refuse(const std::string& msg) { throw Error(ErrorKind::InvalidArgument, "walk-ffn: " + msg); }

/// "Application/JSON; charset=utf-8" -> "application/json".
std::string media_type(const std::string& v) {
  std::string m = v.substr(0, v.find(';'));
  const auto b = m.find_first_not_of(" \t"), e = m.find_last_not_of(" \t");
  m = b == std::string::npos ? "" : m.substr(b, e - b + 1);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return m;
}

uint32_t u32_at(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);  // little-endian hosts only (x86-64, arm64), as the gRPC rows
  return v;
}

void check_layer_list(const std::vector<int64_t>& layers, int64_t n_layers) {
  if (layers.empty()) refuse("'layers' is empty");
  if (static_cast<int64_t>(layers.size()) > n_layers)
    refuse(std::to_string(layers.size()) + " layers asked; the model has " + std::to_string(n_layers));
  for (const int64_t l : layers)
    if (l < 0 || l >= n_layers) refuse("layer " + std::to_string(l) + " is past the model's " + std::to_string(n_layers) + " layers");
}

void check_rows(WalkFfnRequest& q, uint64_t values, int64_t hidden) {
  shard::check_row_count(static_cast<uint64_t>(q.seq_len), kWalkFfnMaxRows, "walk-ffn: seq_len");
  const uint64_t want = static_cast<uint64_t>(q.seq_len) * static_cast<uint64_t>(hidden);
  if (values != want)
    refuse("'residual' has " + std::to_string(values) + " values; seq_len " + std::to_string(q.seq_len) + " x hidden " +
           std::to_string(hidden) + " = " + std::to_string(want) + " expected");
}

WalkFfnRequest parse_binary(const std::string& b, int64_t hidden, int64_t n_layers) {
  WalkFfnRequest q;
  q.binary = true;
  if (b.size() < 16) refuse("a binary body is at least 16 bytes (layer, seq_len, flags, top_k); got " + std::to_string(b.size()));
  size_t at = 0;
  if (u32_at(b, 0) == kBatchMarker) {
    q.batch = true;
    const uint64_t n = u32_at(b, 4);
    if (n == 0 || n > static_cast<uint64_t>(n_layers))
      refuse("a batch of " + std::to_string(n) + " layers; the model has " + std::to_string(n_layers));
    at = 8;
    if (b.size() < at + 4 * n + 12) refuse("the body ends inside the batch header (" + std::to_string(n) + " layers)");
    for (uint64_t i = 0; i < n; ++i, at += 4) q.layers.push_back(u32_at(b, at));
  } else {
    q.layers.push_back(u32_at(b, 0));
    at = 4;
  }
  q.seq_len = u32_at(b, at);
  const uint32_t flags = u32_at(b, at + 4);
  at += 12;  // seq_len, flags, top_k (top_k selects features in the gate-KNN mode, not served here)
  check_layer_list(q.layers, n_layers);
  if ((flags & 1u) == 0)
    refuse("a binary request must ask for the full output (flags bit 0): the features-only walk is not served");
  const size_t rest = b.size() - at;
  if (rest % 4 != 0) refuse("the residual is " + std::to_string(rest) + " bytes, not a whole number of f32 values");
  check_rows(q, rest / 4, hidden);
  q.rows.resize(rest / 4);
  std::memcpy(q.rows.data(), b.data() + at, rest);
  return q;
}

int64_t layer_value(const json& v, const std::string& what) {
  if (!v.is_number_integer() && !v.is_number_unsigned()) refuse(what + " must be a layer number, got " + v.dump());
  if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
  const auto l = v.get<int64_t>();
  if (l < 0) refuse(what + " must be >= 0, got " + std::to_string(l));
  return l;
}

WalkFfnRequest parse_json(const std::string& body, int64_t hidden, int64_t n_layers) {
  WalkFfnRequest q;
  const json j = parse_request_json(body);
  if (!j.is_object()) refuse("the body must be a JSON object");
  if (j.contains("layers") && !j["layers"].is_null()) {
    if (!j["layers"].is_array()) refuse("'layers' must be an array of layer numbers");
    q.batch = true;
    for (size_t i = 0; i < j["layers"].size(); ++i) q.layers.push_back(layer_value(j["layers"][i], "'layers'[" + std::to_string(i) + "]"));
  } else if (j.contains("layer") && !j["layer"].is_null()) {
    q.layers.push_back(layer_value(j["layer"], "'layer'"));
  } else {
    refuse("give 'layer' or 'layers'");
  }
  check_layer_list(q.layers, n_layers);
  const json* fo = j.contains("full_output") ? &j["full_output"] : nullptr;
  if (fo != nullptr && !fo->is_null() && !fo->is_boolean()) refuse("'full_output' must be true or false");
  if (fo == nullptr || fo->is_null() || !fo->get<bool>())
    refuse("'full_output' must be true: larql serves the FFN output; the features-only walk (gate-KNN feature ids) is "
           "LQL's WALK (GET /v1/walk)");
  if (j.contains("moe_layer") && j["moe_layer"].is_boolean() && j["moe_layer"].get<bool>())
    refuse("'moe_layer' is not served: a mixture of experts' layer runs whole here (or on expert shards over gRPC)");
  q.seq_len = 1;
  if (j.contains("seq_len") && !j["seq_len"].is_null()) {
    const json& s = j["seq_len"];
    if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<int64_t>() >= 0))
      refuse("'seq_len' must be a positive integer, got " + s.dump());
    const uint64_t v = s.get<uint64_t>();
    shard::check_row_count(v, kWalkFfnMaxRows, "walk-ffn: seq_len");
    q.seq_len = static_cast<int64_t>(v);
  }
  if (!j.contains("residual") || !j["residual"].is_array()) refuse("'residual' (an array of numbers) is required");
  const json& r = j["residual"];
  check_rows(q, r.size(), hidden);
  q.rows.resize(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i].is_number()) refuse("'residual'[" + std::to_string(i) + "] is not a number: " + r[i].dump());
    const float v = static_cast<float>(r[i].get<double>());
    if (!std::isfinite(v)) refuse("'residual'[" + std::to_string(i) + "] = " + r[i].dump() + " is not a finite f32");
    q.rows[i] = v;
  }
  return q;
}

void append_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void append_f32(std::string& s, float v) { s.append(reinterpret_cast<const char*>(&v), 4); }

void append_values(std::string& s, const float* x, size_t n, WalkFfnEncoding e) {
  if (e == WalkFfnEncoding::F32) {
    s.append(reinterpret_cast<const char*>(x), n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    s.append(reinterpret_cast<const char*>(&h), 2);
  }
}

}  // namespace

WalkFfnRequest parse_walk_ffn(const std::string& content_type, const std::string& body, int64_t hidden, int64_t n_layers) {
  const std::string m = media_type(content_type);
  if (m == kBinary) return parse_binary(body, hidden, n_layers);
  if (m.rfind(kBinary, 0) == 0)  // e.g. ...-ffn-f16: requests are f32 only (not read as f32 by mistake)
    refuse("Content-Type " + m + ": binary requests are " + kBinary + " (f32 rows); f16 is for answers (Accept)");
  return parse_json(body, hidden, n_layers);  // as every JSON route: whatever a client labels it
}

WalkFfnEncoding walk_ffn_encoding(const std::string& accept, bool request_binary) {
  bool f32 = false, f16 = false;
  for (size_t p = 0; p <= accept.size();) {
    const size_t q = std::min(accept.find(',', p), accept.size());
    const std::string m = media_type(accept.substr(p, q - p));
    f16 = f16 || m == kBinaryF16;
    f32 = f32 || m == kBinary;
    p = q + 1;
  }
  if (f16) return WalkFfnEncoding::F16;
  return f32 || request_binary ? WalkFfnEncoding::F32 : WalkFfnEncoding::Json;
}

void walk_ffn_route(const Forward& runner, const Request& req, Responder& r) {
  try {
    if (req.method != "POST") {
      r.send(405, "application/json", error_json("use POST for /v1/walk-ffn", "invalid_request_error"));
      return;
    }
    const std::string ct = media_type(req.header("content-type"));
    if (ct != kBinary && ct.rfind(kBinary, 0) == 0) {
      r.send(415, "application/json",
             error_json("walk-ffn: Content-Type " + ct + ": binary requests are " + kBinary + " (f32 rows); f16 is for "
                        "answers (Accept: " + kBinaryF16 + ")", "invalid_request_error"));
      return;
    }
    const ModelConfig& c = runner.config();
    const WalkFfnRequest q = parse_walk_ffn(ct, req.body, c.hidden, c.n_layers);
    const auto t0 = std::chrono::steady_clock::now();
    const auto f = runner.sibling();
    for (const int64_t l : q.layers) shard::check_walk_ffn_layer(*f, l, "walk-ffn");  // every layer before any work
    const size_t per = static_cast<size_t>(q.seq_len * c.hidden);
    std::vector<float> out(per * q.layers.size());
    for (size_t i = 0; i < q.layers.size(); ++i)
      shard::walk_ffn(*f, q.layers[i], q.rows.data(), q.seq_len, kWalkFfnMaxRows, out.data() + i * per, "walk-ffn");
    const double ms = std::round(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() * 10) / 10;
    const WalkFfnEncoding e = walk_ffn_encoding(req.header("accept"), q.binary);
    if (e == WalkFfnEncoding::Json) {
      auto rows = [&](size_t i) { return std::vector<float>(out.begin() + i * per, out.begin() + (i + 1) * per); };
      json j;
      if (!q.batch) {
        j = {{"layer", q.layers[0]}, {"output", rows(0)}, {"seq_len", q.seq_len}, {"latency_ms", ms}};
      } else {
        json results = json::array();
        for (size_t i = 0; i < q.layers.size(); ++i)
          results.push_back({{"layer", q.layers[i]}, {"output", rows(i)}, {"seq_len", q.seq_len}});
        j = {{"results", std::move(results)}, {"seq_len", q.seq_len}, {"latency_ms", ms}};
      }
      r.send(200, "application/json", j.dump());
      return;
    }
    std::string b;
    b.reserve(16 + out.size() * 4 + q.layers.size() * 12);
    if (!q.batch) {
      append_u32(b, static_cast<uint32_t>(q.layers[0]));
      append_u32(b, static_cast<uint32_t>(q.seq_len));
      append_f32(b, static_cast<float>(ms));
      append_values(b, out.data(), per, e);
    } else {
      append_u32(b, kBatchMarker);
      append_u32(b, static_cast<uint32_t>(q.layers.size()));
      append_f32(b, static_cast<float>(ms));
      for (size_t i = 0; i < q.layers.size(); ++i) {
        append_u32(b, static_cast<uint32_t>(q.layers[i]));
        append_u32(b, static_cast<uint32_t>(q.seq_len));
        append_u32(b, static_cast<uint32_t>(per));
        append_values(b, out.data() + i * per, per, e);
      }
    }
    r.send(200, e == WalkFfnEncoding::F16 ? kBinaryF16 : kBinary, b);
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    r.send(400, "application/json",
           error_json(std::string("walk-ffn: the request body cannot be read as JSON: ") + e.what(), "invalid_request_error"));
  } catch (const Error& e) {
    const int status = http_status_of(e.kind());
    r.send(status, "application/json", error_json(e.what(), status >= 500 ? "server_error" : "invalid_request_error"));
  } catch (const std::bad_alloc&) {
    r.send(503, "application/json", error_json("walk-ffn: out of memory", "server_error"));
  }
}

}  // namespace larql::server
