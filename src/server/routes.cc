#include "server/routes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "compute/ops.h"
#include "inference/kv_cache.h"
#include "kv/generate.h"
#include "server/request_json.h"
#include "server/static_files.h"
#include "server/walk_ffn_route.h"
#include "server/error_status.h"
#include "server/lql_routes.h"
#include "util/error.h"

namespace larql::server {

using json = nlohmann::json;

namespace {

/// JSON text; any invalid UTF-8 that reached a string is replaced (U+FFFD), never an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// A refused request: status, message, the offending field.
struct BadRequest {
  int status = 400;
  std::string message, param, code;
};

[[noreturn]] void bad(const std::string& param, const std::string& message, int status = 400) {
  throw BadRequest{status, message, param, ""};
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double number_field(const json& body, const char* key, double def, double lo, double hi) {
  if (!body.contains(key) || body[key].is_null()) return def;
  const json& v = body[key];
  if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream m;
    m << "'" << key << "' must be in [" << lo << ", " << hi << "], got " << dump(v);
    bad(key, m.str());
  }
  return x;
}

int64_t int_field(const json& body, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!body.contains(key) || body[key].is_null()) return def;
  const json& v = body[key];
  if (!v.is_number_integer() && !v.is_number_unsigned())
    bad(key, std::string("'") + key + "' must be an integer, got " + dump(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + dump(v));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + dump(v));
  return x;
}

bool bool_field(const json& body, const char* key, bool def) {
  if (!body.contains(key) || body[key].is_null()) return def;
  if (!body[key].is_boolean()) bad(key, std::string("'") + key + "' must be true or false");
  return body[key].get<bool>();
}

std::vector<std::string> stop_field(const json& body) {
  std::vector<std::string> out;
  if (!body.contains("stop") || body["stop"].is_null()) return out;
  const json& v = body["stop"];
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4) bad("stop", "'stop' takes at most 4 strings");
    for (const auto& s : v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or a list of strings");
  }
  for (const auto& s : out)
    if (s.empty()) bad("stop", "'stop' strings must not be empty");
  return out;
}

std::string text_of_content(const json& content, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) bad(where, "'" + where + "' must be a string or a list of text parts");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(where, "'" + where + "': only {\"type\": \"text\", \"text\": ...} parts are supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

json token_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

/// What one choice produced.
struct Choice {
  std::string text;
  std::vector<Event> tokens;  ///< Text events that carried a token
  std::string finish_reason;
  int64_t completion_tokens = 0;
};

/// OpenAI's finish reasons: ours map to "stop" / "length"; "cancelled" and "timeout" are kept.
std::string finish_name(const std::string& r) { return r; }

json completion_logprobs(const std::vector<Event>& toks, bool with_top) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t off = 0;
  for (const auto& e : toks) {
    tokens.push_back(e.token->text);
    lps.push_back(e.token->logprob);
    offsets.push_back(off);
    off += e.token->text.size();
    if (with_top) {
      json t = json::object();
      for (const auto& a : e.top) t[a.text] = a.logprob;
      tops.push_back(t);
    }
  }
  json out = {{"tokens", tokens}, {"token_logprobs", lps}, {"text_offset", offsets}};
  out["top_logprobs"] = with_top ? tops : json(nullptr);
  return out;
}

json chat_logprobs(const std::vector<Event>& toks) {
  json content = json::array();
  for (const auto& e : toks) {
    json top = json::array();
    for (const auto& a : e.top) top.push_back({{"token", a.text}, {"logprob", a.logprob}, {"bytes", token_bytes(a.bytes)}});
    content.push_back({{"token", e.token->text},
                       {"logprob", e.token->logprob},
                       {"bytes", token_bytes(e.token->bytes)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

/// The compiled grammar of `response_format: {"type": "json_schema", "json_schema": {"name",
/// "schema", "strict"}}`. The schema is read again from the body's text in document order
/// (ordered_json): properties are emitted in the order the schema lists them.
std::shared_ptr<const SchemaGrammar> schema_of(const std::string& body_text, const json& rf) {
  const char* where = "response_format.json_schema";
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    bad(where, "response_format type 'json_schema' needs a 'json_schema' object with 'name' and 'schema'");
  const json& js = rf["json_schema"];
  if (!js.contains("name") || !js["name"].is_string() || js["name"].get<std::string>().empty() ||
      js["name"].get<std::string>().size() > 64)
    bad("response_format.json_schema.name", "'json_schema.name' must be a string of 1 to 64 characters");
  if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
    bad("response_format.json_schema.strict", "'json_schema.strict' must be true or false");
  if (!js.contains("schema") || !js["schema"].is_object())
    bad("response_format.json_schema.schema", "'json_schema.schema' must be a JSON Schema object");
  // Bounded before the schema is read again in document order (ordered_json's objects look keys
  // up linearly, so a schema of 50,000 properties cost tens of seconds) and compiled: OpenAI's own
  // structured outputs allow at most 5,000 object properties in a schema.
  size_t values = 0, properties = 0;
  const std::function<void(const json&)> count = [&](const json& v) {
    ++values;
    if (v.is_object() && v.contains("properties") && v["properties"].is_object()) properties += v["properties"].size();
    if (v.is_structured())
      for (const auto& c : v) count(c);
  };
  count(js["schema"]);
  if (properties > 5000)
    bad("response_format.json_schema.schema", "the schema has " + std::to_string(properties) +
                                                  " object properties; at most 5,000 are supported");
  if (values > 100000)
    bad("response_format.json_schema.schema",
        "the schema holds " + std::to_string(values) + " JSON values; at most 100,000 are supported");
  const auto ordered = nlohmann::ordered_json::parse(body_text);
  const std::string text = ordered["response_format"]["json_schema"]["schema"].dump();
  try {
    auto g = SchemaGrammar::compile(text);
    [[maybe_unused]] SchemaState probe(*g);  // the start state must fit
    return g;
  } catch (const Error& e) {
    bad("response_format.json_schema.schema", e.what());
  }
}

}  // namespace

Api::Api(std::shared_ptr<Forward> runner, Tokenizer tok, Scheduler& sched, const HttpServer* http, ApiOptions opt)
    : runner_(std::move(runner)), engines_(runner_), tok_(std::move(tok)), sched_(sched), http_(http), opt_(std::move(opt)),
      started_(std::chrono::system_clock::now()) {}

void Api::operator()(const Request& req, Responder& r) {
  ++requests_;
  try {
    if (req.path == "/health") {
      if (req.method != "GET") bad("", "use GET for /health", 405);
      if (opt_.shards.empty()) {
        r.send(200, "application/json", dump(json{{"status", "ok"}}));
      } else {
        // Each layer range's replicas, asked once (their health services, 2 s each at most).
        json ranges = json::array();
        bool all = true, any_down = false;
        std::vector<const shard::ShardClient*> seen;
        for (const auto& parts : opt_.shards)
          for (const auto& reps : parts) {
          if (reps.empty() || std::find(seen.begin(), seen.end(), reps[0].get()) != seen.end()) continue;
          seen.push_back(reps[0].get());
          json rs = json::array();
          bool some = false;
          for (const auto& c : reps) {
            const bool up = c->healthy(std::chrono::milliseconds(2000));
            some = some || up;
            any_down = any_down || !up;
            rs.push_back({{"address", c->info().address}, {"serving", up}});
          }
          all = all && some;
          const auto& i = reps[0]->info();
          json part = {{"layers", std::to_string(i.layer_begin) + "-" + std::to_string(i.layer_end - 1)},
                       {"serving", some},
                       {"replicas", rs}};
          if (i.n_experts > 0) part["experts"] = std::to_string(i.expert_begin) + "-" + std::to_string(i.expert_end - 1);
          ranges.push_back(std::move(part));
          }
        r.send(all ? 200 : 503, "application/json",
               dump(json{{"status", !all ? "down" : any_down ? "degraded" : "ok"}, {"shards", ranges}}));
      }
    } else if (req.path == "/metrics") {
      if (req.method != "GET") bad("", "use GET for /metrics", 405);
      metrics(r);
    } else if (req.path == "/v1/models") {
      if (req.method != "GET") bad("", "use GET for /v1/models", 405);
      const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
      json m = {{"id", opt_.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "larql"}};
      r.send(200, "application/json", dump(json{{"object", "list"}, {"data", json::array({m})}}));
    } else if (req.path == "/v1/embeddings") {
      if (req.method != "POST") bad("", "use POST for /v1/embeddings", 405);
      embeddings(req, r);
    } else if (req.path == "/v1/engines") {
      engines_(req, r);
    } else if (req.path == "/v1/sessions" || req.path.rfind("/v1/sessions/", 0) == 0) {
      sessions(req, r);
    } else if (req.path == "/v1/walk-ffn") {
      walk_ffn_route(*runner_, req, r);  // server/walk_ffn_route.h: the shard's WalkFfn over HTTP
    } else if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
      if (req.method != "POST") bad("", "use POST for " + req.path, 405);
      completions(req, r, req.path == "/v1/chat/completions");
    } else if (opt_.console && is_console_path(req.path)) {
      serve_console(req, r);  // the web console (docs/console.md)
    } else if (opt_.lql && LqlApi::handles(req.path)) {
      (*opt_.lql)(req, r);  // LQL over HTTP: its own errors, in the same envelope
    } else {
      bad("", "no route " + req.method + " " + req.path, 404);
    }
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    ++errors_;
    r.send(400, "application/json", error_json(std::string("the request body cannot be read: ") + e.what(),
                                               "invalid_request_error"));
  } catch (const BadRequest& e) {
    ++errors_;
    const char* type = e.status == 404 ? "not_found_error" : e.status == 429 ? "rate_limit_error"
                       : e.status >= 500 ? "server_error" : "invalid_request_error";
    r.send(e.status, "application/json", error_json(e.message, type, e.param, e.code));
  } catch (const Error& e) {  // from the model (a shard down, layers that run elsewhere): error_status.h's table
    ++errors_;
    const int status = http_status_of(e.kind());
    r.send(status, "application/json", error_json(e.what(), status >= 500 ? "server_error" : "invalid_request_error"));
  }
}

void Api::completions(const Request& req, Responder& r, bool chat) {
  json body;
  try {
    body = parse_request_json(req.body);
  } catch (const Error& e) {
    bad("", e.what());
  }
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  for (const char* unsupported : {"tools", "functions", "tool_choice", "function_call", "suffix", "audio", "modalities",
                                  "prediction"})
    if (body.contains(unsupported) && !body[unsupported].is_null())
      bad(unsupported, std::string("'") + unsupported + "' is not supported by this server");
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty())
    bad("logit_bias", "'logit_bias' is not supported by this server");
  if (bool_field(body, "echo", false)) bad("echo", "'echo' is not supported by this server");
  if (int_field(body, "best_of", 1, 1, 1) != 1) bad("best_of", "'best_of' must be 1");
  bool json_object = false;
  std::shared_ptr<const SchemaGrammar> schema;
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
    if (type == "json_object") json_object = true;
    else if (type == "json_schema") schema = schema_of(req.body, rf);
    else if (type != "text")
      bad("response_format", "response_format type '" + type + "' is not supported (text, json_object, json_schema)");
  }
  if (body.contains("model") && !body["model"].is_string()) bad("model", "'model' must be a string");

  GenParams p;
  p.json_object = json_object;
  p.schema = std::move(schema);
  // The prompt.
  std::vector<std::string> notes;
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      bad("messages", "'messages' must be a non-empty list");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < body["messages"].size(); ++i) {
      const json& m = body["messages"][i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad("messages[" + std::to_string(i) + "].role", "each message needs a string 'role'");
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant")
        bad("messages[" + std::to_string(i) + "].role",
            "role '" + role + "' is not one of system, developer, user, assistant");
      if (!m.contains("content") || m["content"].is_null())
        bad("messages[" + std::to_string(i) + "].content", "each message needs its 'content'");
      msgs.push_back({role, text_of_content(m["content"], i)});
    }
    const auto format = chat_format_of(tok_);
    if (!format) bad("messages", "this model has no chat template larql applies; use /v1/completions");
    std::string text;
    try {
      text = apply_chat_template(*format, msgs, /*add_generation_prompt=*/true, tok_.chat_template());
    } catch (const Error& e) {
      bad("messages", e.what());
    }
    p.prompt = encode_prompt(tok_, text, /*add_bos=*/true, &notes);
  } else {
    if (!body.contains("prompt")) bad("prompt", "'prompt' is required");
    const json& pr = body["prompt"];
    if (pr.is_string()) {
      p.prompt = encode_prompt(tok_, pr.get<std::string>(), true, &notes);
    } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
      p.prompt = encode_prompt(tok_, pr[0].get<std::string>(), true, &notes);
    } else if (pr.is_array() && !pr.empty() && pr[0].is_number_integer()) {
      const int64_t vocab = runner_->config().vocab;
      for (const auto& t : pr) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
          bad("prompt", "token ids in 'prompt' must be integers in [0, " + std::to_string(vocab) + ")");
        p.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else {
      bad("prompt", "'prompt' must be a string, a list of one string, or a list of token ids");
    }
  }
  const int64_t ctx = sched_.options().context;
  const int64_t max_prompt = opt_.max_prompt_tokens > 0 ? std::min(opt_.max_prompt_tokens, ctx - 1) : ctx - 1;
  if (p.prompt.empty()) bad(chat ? "messages" : "prompt", "the prompt has no tokens");
  if (static_cast<int64_t>(p.prompt.size()) > max_prompt)
    throw BadRequest{400,
                     "the prompt is " + std::to_string(p.prompt.size()) + " tokens, more than the " +
                         std::to_string(max_prompt) + " this server accepts",
                     chat ? "messages" : "prompt", "context_length_exceeded"};
  const int64_t room = ctx - static_cast<int64_t>(p.prompt.size());
  const int64_t limit = opt_.max_tokens_limit > 0 ? opt_.max_tokens_limit : ctx;
  const char* mt_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  p.max_tokens = int_field(body, mt_key, chat ? std::min(room, limit) : 16, 1, limit);
  p.max_tokens = std::min(p.max_tokens, room);
  // Sampling.
  p.sampler.temperature = static_cast<float>(number_field(body, "temperature", 1.0, 0.0, 2.0));
  p.sampler.top_p = static_cast<float>(number_field(body, "top_p", 1.0, 0.0, 1.0));
  if (p.sampler.top_p <= 0) bad("top_p", "'top_p' must be in (0, 1]");
  p.sampler.top_k = static_cast<int>(int_field(body, "top_k", 0, 0, 1 << 20));
  p.sampler.min_p = static_cast<float>(number_field(body, "min_p", 0.0, 0.0, 1.0));
  p.sampler.repeat_penalty = static_cast<float>(number_field(body, "repeat_penalty", 1.0, 0.01, 10.0));
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) bad("seed", "'seed' must be an integer");
    p.sampler.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                                       : static_cast<uint64_t>(body["seed"].get<int64_t>());
  } else {
    p.sampler.seed = std::random_device{}();
  }
  p.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", 0.0, -2.0, 2.0));
  p.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", 0.0, -2.0, 2.0));
  p.stop = stop_field(body);
  p.n = static_cast<int>(int_field(body, "n", 1, 1, 16));
  if (chat) {
    if (bool_field(body, "logprobs", false)) p.top_logprobs = static_cast<int>(int_field(body, "top_logprobs", 0, 0, 20));
    else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null())
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else {
    p.top_logprobs = static_cast<int>(int_field(body, "logprobs", -1, 0, 5));
  }
  if (body.contains("engine") && !body["engine"].is_null()) {
    if (!body["engine"].is_string()) bad("engine", "'engine' must be an engine spec string, e.g. \"standard\"");
    try {
      p.engine = parse_engine_spec(body["engine"].get<std::string>());
    } catch (const Error& e) {
      bad("engine", e.what());
    }
  } else {
    p.engine = opt_.default_engine;
  }
  try {
    validate(p.sampler);
  } catch (const Error& e) {
    bad("", e.what());
  }
  const bool stream = bool_field(body, "stream", false);
  bool include_usage = false;
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!stream) bad("stream_options", "'stream_options' needs 'stream': true");
    if (!body["stream_options"].is_object()) bad("stream_options", "'stream_options' must be an object");
    include_usage = bool_field(body["stream_options"], "include_usage", false);
  }
  p.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.request_timeout_s);

  std::shared_ptr<SessionLease> lease;
  if (body.contains("session") && !body["session"].is_null()) {
    if (!body["session"].is_string() || !SessionStore::valid_id(body["session"].get<std::string>()))
      bad("session", "'session' must be an id of 1 to 128 characters from [A-Za-z0-9_-]");
    if (p.n != 1) bad("session", "'session' needs 'n': 1");
    if (!opt_.sessions) bad("session", "this server keeps no sessions");
    const std::string sid = body["session"].get<std::string>();
    lease = opt_.sessions->acquire(sid, p.engine.to_string(), p.prompt);
    if (!lease)
      throw BadRequest{409, "session '" + sid + "' is in use by another request", "session", "session_busy"};
    p.session = lease;
  }
  const int n = p.n;
  const int top_n = p.top_logprobs;
  const int64_t prompt_tokens = static_cast<int64_t>(p.prompt.size());
  auto job = std::make_shared<Job>(std::move(p));
  if (http_ && http_->stopping()) bad("", "the server is shutting down", 503);
  if (!sched_.submit(job))
    throw BadRequest{429,
                     "the server is busy: " + std::to_string(sched_.options().max_queue) +
                         " requests are already waiting; retry later",
                     "", "queue_full"};

  const auto t_start = std::chrono::steady_clock::now();
  bool first_token = true;
  struct Timer {
    LatencyHistogram& h;
    std::chrono::steady_clock::time_point t0;
    ~Timer() { h.add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()); }
  } whole{duration_, t_start};
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  const int64_t created = unix_now();
  const std::string object = chat ? "chat.completion" : "text_completion";
  std::vector<Choice> choices(static_cast<size_t>(n));
  int64_t completion_tokens = 0, cached_tokens = 0;
  auto chunk_base = [&]() {
    return json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                {"model", opt_.model_id}, {"system_fingerprint", nullptr}};
  };
  if (stream) {
    r.start_stream();
    if (chat)
      for (int c = 0; c < n; ++c) {
        json ch = chunk_base();
        ch["choices"] = json::array(
            {{{"index", c}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (!r.event(dump(ch))) {
          job->cancel = true;
          return;
        }
      }
  }
  for (;;) {
    const bool was_finished = job->finished();
    for (Event& e : job->take()) {
      if (e.kind == Event::Kind::Error) {
        if (!stream) throw BadRequest{e.http_status, e.error, "", ""};
        r.event(dump(json{{"error", {{"message", e.error}, {"type", e.error_type}, {"param", nullptr}, {"code", nullptr}}}}));
        r.event("[DONE]");
        return;
      }
      Choice& c = choices[static_cast<size_t>(e.choice)];
      if (first_token && e.token) {
        ttft_.add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
        first_token = false;
      }
      if (e.kind == Event::Kind::Done) {
        c.finish_reason = finish_name(e.finish_reason);
        c.completion_tokens = e.completion_tokens;
        completion_tokens += e.completion_tokens;
        cached_tokens = std::max(cached_tokens, e.cached_tokens);
        if (stream) {
          json ch = chunk_base();
          if (chat)
            ch["choices"] = json::array({{{"index", e.choice}, {"delta", json::object()}, {"logprobs", nullptr},
                                          {"finish_reason", c.finish_reason}}});
          else
            ch["choices"] = json::array({{{"index", e.choice}, {"text", ""}, {"logprobs", nullptr},
                                          {"finish_reason", c.finish_reason}}});
          if (include_usage) ch["usage"] = nullptr;
          if (!r.event(dump(ch))) job->cancel = true;
        }
        continue;
      }
      c.text += e.text;
      if (e.token) c.tokens.push_back(e);
      if (stream && (!e.text.empty() || top_n >= 0)) {
        json ch = chunk_base();
        json lp = nullptr;
        if (top_n >= 0) lp = chat ? chat_logprobs({e}) : completion_logprobs({e}, top_n > 0);
        if (chat)
          ch["choices"] = json::array(
              {{{"index", e.choice}, {"delta", {{"content", e.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}});
        else
          ch["choices"] = json::array(
              {{{"index", e.choice}, {"text", e.text}, {"logprobs", lp}, {"finish_reason", nullptr}}});
        if (include_usage) ch["usage"] = nullptr;
        if (!r.event(dump(ch))) {
          job->cancel = true;
          return;
        }
      }
    }
    if (was_finished) break;
    if (!r.wait(job->notify_fd(), std::chrono::milliseconds(250))) {
      job->cancel = true;  // the client left: its sequences leave the batch before the next step
      return;
    }
  }
  json usage = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  // OpenAI's field for prompt tokens served from a cache: here, those of a resumed session.
  if (lease) usage["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  if (stream) {
    if (include_usage) {
      json ch = chunk_base();
      ch["choices"] = json::array();
      ch["usage"] = usage;
      r.event(dump(ch));
    }
    r.event("[DONE]");
    return;
  }
  json out = {{"id", id}, {"object", object}, {"created", created}, {"model", opt_.model_id},
              {"system_fingerprint", nullptr}, {"usage", usage}};
  if (lease) out["session"] = {{"id", lease->id()}, {"resumed", cached_tokens > 0}, {"cached_tokens", cached_tokens}};
  json list = json::array();
  for (int c = 0; c < n; ++c) {
    const Choice& ch = choices[static_cast<size_t>(c)];
    json lp = nullptr;
    if (top_n >= 0) lp = chat ? chat_logprobs(ch.tokens) : completion_logprobs(ch.tokens, top_n > 0);
    if (chat)
      list.push_back({{"index", c},
                      {"message", {{"role", "assistant"}, {"content", ch.text}, {"refusal", nullptr}}},
                      {"logprobs", lp},
                      {"finish_reason", ch.finish_reason}});
    else
      list.push_back({{"index", c}, {"text", ch.text}, {"logprobs", lp}, {"finish_reason", ch.finish_reason}});
  }
  out["choices"] = list;
  r.send(200, "application/json", dump(out));
}

void Api::sessions(const Request& req, Responder& r) {
  if (!opt_.sessions) bad("", "this server keeps no sessions", 404);
  if (req.path == "/v1/sessions") {
    if (req.method != "GET") bad("", "use GET for /v1/sessions", 405);
    json data = json::array();
    for (const auto& s : opt_.sessions->list())
      data.push_back({{"id", s.id}, {"object", "session"}, {"tokens", s.tokens}, {"engine", s.engine}, {"bytes", s.bytes}});
    r.send(200, "application/json", dump(json{{"object", "list"}, {"data", data}}));
    return;
  }
  const std::string id = req.path.substr(std::string("/v1/sessions/").size());
  if (req.method != "DELETE") bad("", "use DELETE for /v1/sessions/ID", 405);
  if (!SessionStore::valid_id(id)) bad("session", "a session id is 1 to 128 characters from [A-Za-z0-9_-]");
  switch (opt_.sessions->remove(id)) {
    case SessionStore::Removed::Ok:
      r.send(200, "application/json", dump(json{{"id", id}, {"object", "session"}, {"deleted", true}}));
      return;
    case SessionStore::Removed::Busy:
      throw BadRequest{409, "session '" + id + "' is in use by a request", "session", "session_busy"};
    case SessionStore::Removed::NotFound:
      bad("session", "no session '" + id + "'", 404);
  }
}

void Api::embeddings(const Request& req, Responder& r) {
  json body;
  try {
    body = parse_request_json(req.body);
  } catch (const Error& e) {
    bad("", e.what());
  }
  if (!body.is_object() || !body.contains("input")) bad("input", "'input' is required");
  if (body.contains("dimensions") && !body["dimensions"].is_null())
    bad("dimensions", "'dimensions' is not supported: embeddings have the model's hidden size");
  const std::string format = body.value("encoding_format", "float");
  if (format != "float" && format != "base64")
    bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
  // Inputs: a string, a list of strings, a list of token ids, or a list of lists of ids.
  std::vector<std::vector<int32_t>> inputs;
  const json& in = body["input"];
  const int64_t vocab = runner_->config().vocab;
  auto ids_of = [&](const json& list) {
    std::vector<int32_t> ids;
    for (const auto& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
        bad("input", "token ids in 'input' must be integers in [0, " + std::to_string(vocab) + ")");
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return ids;
  };
  if (in.is_string()) {
    inputs.push_back(encode_prompt(tok_, in.get<std::string>(), true, nullptr));
  } else if (in.is_array() && !in.empty() && in[0].is_string()) {
    for (const auto& s : in) {
      if (!s.is_string()) bad("input", "'input' lists must hold only strings, or only token ids");
      inputs.push_back(encode_prompt(tok_, s.get<std::string>(), true, nullptr));
    }
  } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
    inputs.push_back(ids_of(in));
  } else if (in.is_array() && !in.empty() && in[0].is_array()) {
    for (const auto& l : in) inputs.push_back(ids_of(l));
  } else {
    bad("input", "'input' must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  if (inputs.size() > 256) bad("input", "at most 256 inputs per request");
  const int64_t ctx = sched_.options().context;
  const int64_t H = runner_->config().hidden;
  json data = json::array();
  int64_t tokens = 0;
  // Each input through the forward pass on its own Forward (the runner belongs to the scheduler;
  // dispatch to the shared pool is serialised, so this interleaves with the decode steps).
  const auto fp = runner_->sibling();
  Forward& f = *fp;
  const auto& w = runner_->model().weights();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& ids = inputs[i];
    if (ids.empty()) bad("input", "input " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(ids.size()) > ctx)
      throw BadRequest{400, "input " + std::to_string(i) + " is " + std::to_string(ids.size()) +
                                " tokens, more than the context of " + std::to_string(ctx),
                       "input", "context_length_exceeded"};
    KvCache cache(runner_->config(), 0, false);
    std::vector<float> x(ids.size() * static_cast<size_t>(H));
    f.forward(ids.data(), static_cast<int64_t>(ids.size()), cache, x.data());
    // Mean over positions of the final-normed residual, L2-normalised.
    std::vector<double> mean(static_cast<size_t>(H), 0.0);
    std::vector<float> y(static_cast<size_t>(H));
    for (size_t t = 0; t < ids.size(); ++t) {
      compute::rmsnorm(x.data() + t * static_cast<size_t>(H), w.output_norm.data(), y.data(), H,
                       runner_->config().norm_eps);
      for (int64_t j = 0; j < H; ++j) mean[static_cast<size_t>(j)] += y[static_cast<size_t>(j)];
    }
    double norm = 0;
    for (double v : mean) norm += v * v;
    norm = std::sqrt(norm);
    std::vector<float> e(static_cast<size_t>(H));
    for (int64_t j = 0; j < H; ++j) e[static_cast<size_t>(j)] = static_cast<float>(norm > 0 ? mean[static_cast<size_t>(j)] / norm : 0.0);
    json value;
    if (format == "base64") {  // OpenAI's: base64 of the little-endian float32 array
      std::string b64(4 * ((e.size() * 4 + 2) / 3) + 1, '\0');
      const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                    reinterpret_cast<const unsigned char*>(e.data()), static_cast<int>(e.size() * 4));
      b64.resize(static_cast<size_t>(n));
      value = b64;
    } else {
      value = e;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", value}});
    tokens += static_cast<int64_t>(ids.size());
  }
  r.send(200, "application/json",
         dump(json{{"object", "list"}, {"data", data}, {"model", opt_.model_id},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}));
}

void Api::metrics(Responder& r) {
  const SchedulerStats& s = sched_.stats();
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << v << "\n";
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << v << "\n";
  };
  counter("larql_http_requests_total", "HTTP requests routed", requests_.load());
  counter("larql_http_errors_total", "HTTP requests answered with an error by the routes", errors_.load());
  counter("larql_prompt_tokens_total", "prompt tokens admitted (times n)", s.prompt_tokens.load());
  counter("larql_generated_tokens_total", "tokens generated", s.generated_tokens.load());
  counter("larql_prefilled_tokens_total", "prompt tokens run through an engine (not taken from a session)",
          s.prefilled_tokens.load());
  counter("larql_sessions_resumed_total", "requests that resumed a saved session", s.sessions_resumed.load());
  counter("larql_sessions_saved_total", "session states saved", s.sessions_saved.load());
  counter("larql_decode_steps_total", "batched decode steps", s.decode_steps.load());
  counter("larql_decode_rows_total", "sequence rows over all decode steps", s.batched_rows.load());
  counter("larql_jobs_done_total", "generation requests finished (cancelled ones included)", s.jobs_done.load());
  counter("larql_jobs_cancelled_total", "generation requests cancelled (client gone, shutdown)", s.jobs_cancelled.load());
  counter("larql_jobs_failed_total", "generation requests that failed", s.jobs_failed.load());
  counter("larql_jobs_refused_total", "generation requests refused: queue full", s.jobs_refused.load());
  gauge("larql_queue_depth", "requests waiting for a slot", s.queue_depth.load());
  gauge("larql_active_sequences", "sequences in the running batch", s.active_sequences.load());
  gauge("larql_last_batch_size", "rows in the last decode step", s.last_batch.load());
  gauge("larql_slots", "sequences the batch holds at most", sched_.options().max_batch);
  if (http_) gauge("larql_http_connections", "open HTTP connections", http_->connections());
  ttft_.write(o, "larql_time_to_first_token_seconds", "from request to its first token");
  duration_.write(o, "larql_request_duration_seconds", "completion and chat requests, whole");
  if (opt_.lql) o << opt_.lql->metrics();
  r.send(200, "text/plain; version=0.0.4", o.str());
}

}  // namespace larql::server
