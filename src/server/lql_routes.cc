#include "server/lql_routes.h"

#include "lql/printer.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lql/edits.h"
#include "server/error_status.h"
#include "server/histogram.h"
#include "lql/executor.h"
#include "lql/parser.h"
#include "lql/printer.h"
#include "lql/script.h"
#include "lql/table.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::server {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// A refused LQL request: status and the OpenAI envelope's fields, plus a parse error's place.
struct Refusal {
  int status = 400;
  std::string message, param, code;
  int line = 0, column = 0;  ///< > 0: a syntax error's place
};

[[noreturn]] void refuse(int status, const std::string& code, const std::string& message, const std::string& param = "") {
  throw Refusal{status, message, param, code, 0, 0};
}

/// A statement that names a file, refused (no --lql-allow-files, or the path is outside it).
struct FileRefused {
  std::string message;
};

/// The HTTP status of an LQL error: the caller's mistake 400, a missing thing 404, something
/// well-formed the vindex or larql cannot do 422, a cancelled statement 503, else 500.
const char* type_of(int status) {
  return status == 404 ? "not_found_error" : status == 403 ? "permission_error" : status >= 500 ? "server_error"
                                                                                                   : "invalid_request_error";
}

/// The LINE:COL a parse error names ("expected LAYER at 1:22, found ..."); {0, 0} when none.
std::pair<int, int> place_of(const std::string& message) {
  static const std::regex at(R"(at (\d+):(\d+))");
  std::smatch m;
  if (std::regex_search(message, m, at)) return {std::stoi(m[1].str()), std::stoi(m[2].str())};
  return {0, 0};
}

int64_t int_param(const std::map<std::string, std::string>& p, const char* name, int64_t def, int64_t lo, int64_t hi) {
  auto it = p.find(name);
  if (it == p.end()) return def;
  const std::string& v = it->second;
  const bool digits = !v.empty() && v.size() <= 9 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int64_t x = digits ? std::stoll(v) : -1;
  if (!digits || x < lo || x > hi)
    throw Error(ErrorKind::InvalidArgument, std::string(name) + ": must be an integer in [" + std::to_string(lo) + ", " +
                                                std::to_string(hi) + "], got \"" + v + "\"");
  return x;
}

std::string text_param(const std::map<std::string, std::string>& p, const char* name, bool required) {
  auto it = p.find(name);
  if (it == p.end() || it->second.empty()) {
    if (required) throw Error(ErrorKind::InvalidArgument, std::string(name) + ": is required and must not be empty");
    return "";
  }
  if (const size_t bad = first_non_text_byte(it->second); bad != std::string::npos)
    throw Error(ErrorKind::InvalidArgument, std::string(name) + ": is not UTF-8 text (a NUL or an invalid UTF-8 sequence at byte " +
                                                std::to_string(bad) + ")");
  return it->second;
}

/// A layer parameter inside the served vindex's layers (num_layers < 0: not known, not checked).
int64_t check_layer(const char* name, int64_t layer, int64_t num_layers) {
  if (num_layers >= 0 && layer >= num_layers)
    throw Error(ErrorKind::InvalidArgument, std::string(name) + ": " + std::to_string(layer) + " is out of range (" +
                                                (num_layers == 0 ? std::string("the vindex has no layers")
                                                                 : "the vindex has layers 0-" + std::to_string(num_layers - 1)) +
                                                ")");
  return layer;
}

int64_t layer_param(const std::map<std::string, std::string>& p, int64_t num_layers) {
  constexpr int64_t kMaxLayer = 100000;
  return check_layer("layer", int_param(p, "layer", 0, 0, kMaxLayer), num_layers);
}

}  // namespace

std::string lql_quote(std::string_view text) { return lql::quote_string(text); }

std::map<std::string, std::string> parse_query(std::string_view q, const std::vector<std::string>& allowed) {
  auto decode = [](std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        out += ' ';
      } else if (s[i] == '%') {
        auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
        if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0)
          throw Error(ErrorKind::InvalidArgument, "query: a bad %-escape at byte " + std::to_string(i));
        out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  };
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at <= q.size() && !q.empty()) {
    const size_t end = std::min(q.find('&', at), q.size());
    const std::string_view part = q.substr(at, end - at);
    at = end + 1;
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    const std::string name = decode(part.substr(0, eq));
    const std::string value = eq == std::string_view::npos ? "" : decode(part.substr(eq + 1));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw Error(ErrorKind::InvalidArgument, name + ": unknown parameter (this route takes " + list + ")");
    }
    if (!out.emplace(name, value).second) throw Error(ErrorKind::InvalidArgument, name + ": given twice");
  }
  return out;
}

std::string browse_statement(const std::string& path, const std::map<std::string, std::string>& p, int64_t* limit,
                             int64_t num_layers) {
  *limit = -1;
  constexpr int64_t kMaxRows = 100000;
  if (path == "/v1/describe") {
    std::string s = "DESCRIBE " + lql_quote(text_param(p, "entity", true));
    if (p.count("layer")) s += " AT LAYER " + std::to_string(layer_param(p, num_layers));
    const std::string band = text_param(p, "band", false);
    if (!band.empty()) {
      if (band == "syntax" || band == "knowledge" || band == "output") s += " " + band;
      else if (band == "all") s += " ALL LAYERS";
      else throw Error(ErrorKind::InvalidArgument, "band: must be syntax, knowledge, output or all, got \"" + band + "\"");
    }
    const std::string detail = text_param(p, "detail", false);
    if (!detail.empty()) {
      if (detail == "brief" || detail == "verbose" || detail == "raw") s += " " + detail;
      else throw Error(ErrorKind::InvalidArgument, "detail: must be brief, verbose or raw, got \"" + detail + "\"");
    }
    if (p.count("limit")) *limit = int_param(p, "limit", 0, 1, kMaxRows);
    return s;
  }
  if (path == "/v1/walk") {
    std::string s = "WALK " + lql_quote(text_param(p, "prompt", true));
    if (p.count("top")) s += " TOP " + std::to_string(int_param(p, "top", 5, 1, kMaxRows));
    const std::string layers = text_param(p, "layers", false);
    if (!layers.empty()) {
      // Checked here, as LQL's parser and executor would (a first > last range, a layer past the
      // vindex's), so that the 400 names the parameter, not a column of a statement the client
      // never wrote.
      static const std::regex range(R"((\d{1,6})(-(\d{1,6}))?)");
      std::smatch m;
      if (!std::regex_match(layers, m, range))
        throw Error(ErrorKind::InvalidArgument, "layers: must be N or A-B, got \"" + layers + "\"");
      const int64_t first = std::stoll(m[1].str()), last = m[3].matched ? std::stoll(m[3].str()) : first;
      if (last < first)
        throw Error(ErrorKind::InvalidArgument, "layers: " + layers + " is not a range (first > last)");
      check_layer("layers", last, num_layers);
      s += " LAYERS " + std::to_string(first) + (m[3].matched ? "-" + std::to_string(last) : "");
    }
    return s;
  }
  if (path == "/v1/select") {
    const std::string entity = text_param(p, "entity", false), nearest = text_param(p, "nearest", false);
    if (!entity.empty() && !nearest.empty())
      throw Error(ErrorKind::InvalidArgument, "nearest: give entity or nearest, not both");
    std::string s = "SELECT * FROM EDGES";
    std::vector<std::string> where;
    if (!nearest.empty()) {
      if (!p.count("layer")) throw Error(ErrorKind::InvalidArgument, "layer: nearest needs a layer");
      s += " NEAREST TO " + lql_quote(nearest) + " AT LAYER " + std::to_string(layer_param(p, num_layers));
    } else if (p.count("layer")) {
      where.push_back("layer = " + std::to_string(layer_param(p, num_layers)));
    }
    if (!entity.empty()) where.push_back("token = " + lql_quote(entity));
    for (size_t i = 0; i < where.size(); ++i) s += (i == 0 ? " WHERE " : " AND ") + where[i];
    if (p.count("limit")) s += " LIMIT " + std::to_string(int_param(p, "limit", 20, 1, kMaxRows));
    return s;
  }
  if (path == "/v1/relations") {
    std::string s = "SHOW RELATIONS";
    if (p.count("layer")) s += " AT LAYER " + std::to_string(layer_param(p, num_layers));
    return s;
  }
  if (path == "/v1/stats") return "STATS";
  if (path == "/v1/infer") {
    std::string s = "INFER " + lql_quote(text_param(p, "prompt", true));
    if (p.count("top")) s += " TOP " + std::to_string(int_param(p, "top", 5, 1, 1000));
    return s;
  }
  throw Error(ErrorKind::NotFound, "no browse route " + path);
}

struct LqlApi::Impl {
  LqlOptions opt;
  std::unique_ptr<lql::Session> base;  ///< the served vindex; never edited, only shared from
  std::unique_ptr<LqlSessionTable> table;
  std::atomic<uint64_t> requests{0}, statements{0}, errors{0}, refused_files{0};
  LatencyHistogram latency{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  std::unique_ptr<lql::Session> make_session() {
    lql::SessionOptions so;
    so.models_dir = opt.allow_files.empty() ? "." : opt.allow_files;
    auto s = std::make_unique<lql::Session>(so, opt.pool);
    s->use_shared(*base);
    return s;
  }

  /// A path a statement names, checked against --lql-allow-files and made absolute inside it.
  std::string allowed(const std::string& path, const std::string& what, lql::Pos pos) {
    if (opt.allow_files.empty())
      throw FileRefused{what + " at " + pos.str() + " names a file (" + lql_quote(path) +
                        "): statements that read or write files are refused over HTTP (start the server with "
                        "--lql-allow-files DIR to allow paths inside DIR)"};
    const fs::path root = fs::weakly_canonical(fs::absolute(opt.allow_files));
    const fs::path p(path);
    const fs::path full = fs::weakly_canonical(p.is_absolute() ? p : root / p);
    auto [ri, fi] = std::mismatch(root.begin(), root.end(), full.begin(), full.end());
    if (ri != root.end() || fi == full.end())
      throw FileRefused{what + " at " + pos.str() + " names " + lql_quote(path) + ", which is not inside --lql-allow-files " +
                        root.string()};
    return full.string();
  }

  /// Refuse (or confine to --lql-allow-files) every file a statement names. SAVE PATCH writes
  /// the file BEGIN PATCH named, resolved again now: a directory on its path swapped for a link
  /// out of --lql-allow-files since BEGIN is refused.
  void check_files(lql::Session& session, lql::Statement& st) {
    using namespace lql;
    if (auto* u = std::get_if<UseStmt>(&st.body)) u->path = allowed(u->path, "USE", st.pos);
    if (auto* s = std::get_if<ShowStmt>(&st.body); s && s->what == ShowStmt::What::Models && opt.allow_files.empty())
      throw FileRefused{"SHOW MODELS at " + st.pos.str() +
                        " lists a directory: refused over HTTP unless the server runs with --lql-allow-files DIR"};
    if (auto* pa = std::get_if<PatchStmt>(&st.body)) {
      if (pa->op == PatchStmt::Op::Begin) pa->name = allowed(pa->name, "BEGIN PATCH", st.pos);
      if (pa->op == PatchStmt::Op::Apply) pa->name = allowed(pa->name, "APPLY PATCH", st.pos);
      // REMOVE PATCH names a patch of the stack, recorded under BEGIN / APPLY's resolved name:
      // resolve a relative name inside DIR the same way (it touches no file, so nothing to refuse).
      if (pa->op == PatchStmt::Op::Remove && !opt.allow_files.empty() && !pa->name.empty() &&
          !fs::path(pa->name).is_absolute())
        pa->name = fs::weakly_canonical(fs::weakly_canonical(fs::absolute(opt.allow_files)) / pa->name).string();
      if (pa->op == PatchStmt::Op::Save && opt.allow_files.empty())
        throw FileRefused{"SAVE PATCH at " + st.pos.str() +
                          " writes a file: refused over HTTP unless the server runs with --lql-allow-files DIR"};
      if (pa->op == PatchStmt::Op::Save) {
        const auto& ed = session.edits();
        if (ed.recording && !ed.anonymous) allowed(ed.recording->name, "SAVE PATCH", st.pos);
      }
    }
    if (auto* d = std::get_if<DiffStmt>(&st.body)) {
      if (!d->a.current) d->a.path = allowed(d->a.path, "DIFF", st.pos);
      if (!d->b.current) d->b.path = allowed(d->b.path, "DIFF", st.pos);
      if (d->into_patch) *d->into_patch = allowed(*d->into_patch, "DIFF ... INTO PATCH", st.pos);
    }
    if (auto* c = std::get_if<CompileStmt>(&st.body)) {
      if (!c->source.current) c->source.path = allowed(c->source.path, "COMPILE", st.pos);
      c->path = allowed(c->path, "COMPILE", st.pos);
    }
  }

  /// Run one statement; its document as `larql lql --json` prints it.
  std::string run(lql::Session& session, lql::Executor& ex, lql::Statement st) {
    check_files(session, st);
    const auto t0 = std::chrono::steady_clock::now();
    lql::Table t = ex.run(st);
    t.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    latency.add(t.elapsed_ms / 1000.0);
    ++statements;
    return lql::render_json(t);
  }
};

LqlApi::LqlApi(LqlOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(opt);
  if (!impl_->opt.allow_files.empty()) {
    std::error_code ec;
    if (!fs::is_directory(impl_->opt.allow_files, ec))
      throw Error(ErrorKind::InvalidArgument, "--lql-allow-files " + impl_->opt.allow_files + " is not a directory");
  }
  if (!impl_->opt.vindex.empty()) {
    impl_->base = std::make_unique<lql::Session>(lql::SessionOptions{}, impl_->opt.pool);
    impl_->base->use(impl_->opt.vindex);
    impl_->base->tokenizer();
    if (impl_->base->runs_model()) impl_->base->model("LQL over HTTP");
  }
  LqlSessionTable::Options to;
  to.max_sessions = impl_->opt.max_sessions;
  to.ttl = std::chrono::seconds(impl_->opt.session_ttl_s);
  impl_->table = std::make_unique<LqlSessionTable>(to, [this] { return impl_->make_session(); });
}

LqlApi::~LqlApi() = default;

bool LqlApi::handles(const std::string& path) {
  return path == "/v1/lql" || path == "/v1/describe" || path == "/v1/walk" || path == "/v1/select" ||
         path == "/v1/relations" || path == "/v1/stats" || path == "/v1/infer";
}

void LqlApi::operator()(const Request& req, Responder& r) {
  Impl& m = *impl_;
  ++m.requests;
  std::vector<std::string> docs;  // the documents of the statements run so far
  auto results = [&] {
    std::string out = "[";
    for (size_t i = 0; i < docs.size(); ++i) out += (i ? "," : "") + docs[i];
    return out + "]";
  };
  try {
    const bool lql = req.path == "/v1/lql";
    if (lql && req.method != "POST") refuse(405, "", "use POST for /v1/lql");
    if (!lql && req.method != "GET" && !(req.path == "/v1/infer" && req.method == "POST"))
      refuse(405, "", "use GET for " + req.path + (req.path == "/v1/infer" ? " (or POST)" : ""));
    if (!m.base)
      refuse(400, "lql_needs_vindex",
             "LQL needs a vindex, and this server was started on " + m.opt.model_path +
                 " (as `larql lql` does, it opens only a vindex directory): extract one with `larql extract MODEL -o "
                 "NAME.vindex --level inference` and run `larql serve NAME.vindex`");
    // The statements, and whether to run past a failed one.
    const int64_t num_layers = static_cast<int64_t>(m.base->index().layers.size());
    std::string text;
    bool keep_going = false;
    int64_t limit = -1;
    if (lql || req.method == "POST") {
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::parse_error& e) {
        refuse(400, "", std::string("the request body is not valid JSON: ") + e.what());
      }
      if (!body.is_object()) refuse(400, "", "the request body must be a JSON object");
      std::map<std::string, std::string> params;
      for (auto it = body.begin(); it != body.end(); ++it) {
        const std::string& k = it.key();
        if (lql && k == "query") {
          if (!it->is_string()) refuse(400, "", "'query' must be a string of LQL statements", "query");
          text = it->get<std::string>();
        } else if (lql && k == "keep_going") {
          if (!it->is_boolean()) refuse(400, "", "'keep_going' must be true or false", "keep_going");
          keep_going = it->get<bool>();
        } else if (!lql && k == "prompt" && it->is_string()) {
          params[k] = it->get<std::string>();
        } else if (!lql && k == "top" && it->is_number_unsigned()) {
          params[k] = std::to_string(it->get<uint64_t>());
        } else if (!lql && (k == "prompt" || k == "top")) {
          refuse(400, "", "'" + k + "' must be " + (k == "top" ? "a positive integer" : "a string"), k);
        } else {
          refuse(400, "", "'" + k + "' is not a field of " + req.path + (lql ? " (query, keep_going)" : " (prompt, top)"), k);
        }
      }
      if (lql) {  // blanks, comments and bare ';' alike: no statement to run
        if (lql::script_statements(text).empty())
          refuse(400, "", "'query' holds no statement (only blanks, comments or ';')", "query");
      }
      if (!lql) {
        try {
          text = browse_statement(req.path, params, &limit, num_layers);
        } catch (const Error& e) {
          const std::string msg = e.what();
          refuse(400, "", msg, msg.substr(0, msg.find(':')));
        }
      }
    } else {
      try {
        std::vector<std::string> allowed;
        if (req.path == "/v1/describe") allowed = {"entity", "layer", "band", "detail", "limit"};
        else if (req.path == "/v1/walk") allowed = {"prompt", "top", "layers"};
        else if (req.path == "/v1/select") allowed = {"entity", "nearest", "layer", "limit"};
        else if (req.path == "/v1/relations") allowed = {"layer"};
        else if (req.path == "/v1/infer") allowed = {"prompt", "top"};
        text = browse_statement(req.path, parse_query(req.query, allowed), &limit, num_layers);
      } catch (const Error& e) {
        const std::string msg = e.what();
        refuse(400, "", msg, msg.substr(0, msg.find(':')));
      }
    }
    // The session: X-Session-Id's, else a fresh one for this request.
    const std::string sid = req.header("x-session-id");
    std::optional<LqlSessionTable::Lease> lease;
    std::unique_ptr<lql::Session> fresh;
    if (req.headers.count("x-session-id")) {
      if (!LqlSessionTable::valid_id(sid))
        refuse(400, "invalid_session_id", "X-Session-Id must be 1 to 128 characters of A-Z a-z 0-9 _ -", "X-Session-Id");
      try {
        lease.emplace(m.table->acquire(sid));
      } catch (const Error& e) {
        refuse(e.kind() == ErrorKind::Unsupported ? 429 : http_status_of(e.kind()), "lql_sessions_busy", e.what());
      }
    } else {
      fresh = m.make_session();
    }
    lql::Session& session = lease ? lease->session() : *fresh;
    session.set_cancel(m.opt.cancel);
    lql::Executor ex(session);
    std::map<std::string, std::string> headers;
    if (lease) headers["X-Session-Id"] = sid;
    if (!keep_going) {
      // Every statement parsed before any runs: a syntax error anywhere runs nothing.
      std::vector<lql::Pipeline> script;
      try {
        script = lql::parse_script(text);
      } catch (const Error& e) {
        const auto [line, col] = place_of(e.what());
        throw Refusal{400, e.what(), "query", "lql_syntax", line, col};
      }
      for (const auto& p : script)
        for (const auto& st : p.stages) {
          try {
            docs.push_back(m.run(session, ex, st));
          } catch (const Error& e) {
            refuse(http_status_of(e.kind()), error_kind_name(e.kind()), e.what());
          }
        }
    } else {
      // As `larql lql --json --keep-going`: each statement parsed and run alone, a failed one
      // answered by {"error", "kind"} in its place.
      for (const auto& ch : lql::script_statements(text)) {
        try {
          const lql::Pipeline p = lql::parse_one(ch.text, ch.pos);
          for (const auto& st : p.stages) docs.push_back(m.run(session, ex, st));
        } catch (const Error& e) {
          ++m.errors;
          docs.push_back(dump(json{{"error", e.what()}, {"kind", error_kind_name(e.kind())}}));
        } catch (const FileRefused& e) {
          ++m.errors;
          ++m.refused_files;
          docs.push_back(dump(json{{"error", e.message}, {"kind", "forbidden"}}));
        }
      }
    }
    if (limit >= 0 && !docs.empty()) {  // /v1/describe?limit=N: the first N rows
      auto d = nlohmann::ordered_json::parse(docs.back());
      if (d.contains("rows") && d["rows"].size() > static_cast<size_t>(limit)) {
        const size_t dropped = d["rows"].size() - static_cast<size_t>(limit);
        d["rows"].erase(d["rows"].begin() + limit, d["rows"].end());
        d["notes"].push_back(std::to_string(dropped) + " rows dropped by limit=" + std::to_string(limit));
        docs.back() = d.dump(-1, ' ', false, json::error_handler_t::replace);
      }
    }
    r.send(200, "application/json", (lql ? "{\"results\":" + results() + "}" : docs.back()), headers);
  } catch (const Refusal& e) {
    ++m.errors;
    json err = {{"message", e.message}, {"type", type_of(e.status)}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    if (e.line > 0) {
      err["line"] = e.line;
      err["column"] = e.column;
    }
    r.send(e.status, "application/json", "{\"error\":" + dump(err) + ",\"results\":" + results() + "}");
  } catch (const FileRefused& e) {
    ++m.errors;
    ++m.refused_files;
    json err = {{"message", e.message}, {"type", type_of(403)}, {"param", "query"}, {"code", "lql_files_refused"}};
    r.send(403, "application/json", "{\"error\":" + dump(err) + ",\"results\":" + results() + "}");
  } catch (const Error& e) {  // e.g. a session that cannot be opened
    ++m.errors;
    const int status = http_status_of(e.kind());
    r.send(status, "application/json", error_json(e.what(), type_of(status), "", error_kind_name(e.kind())));
  } catch (const json::exception& e) {
    ++m.errors;
    r.send(400, "application/json", error_json(std::string("the request cannot be read: ") + e.what(), "invalid_request_error"));
  }
}

std::string LqlApi::metrics() const {
  const Impl& m = *impl_;
  std::ostringstream o;
  auto line = [&](const char* name, const char* type, const char* help, uint64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
  };
  line("larql_lql_requests_total", "counter", "requests to /v1/lql and the browse routes", m.requests.load());
  line("larql_lql_statements_total", "counter", "LQL statements run to completion", m.statements.load());
  line("larql_lql_errors_total", "counter", "LQL requests or statements answered with an error", m.errors.load());
  line("larql_lql_files_refused_total", "counter", "statements refused for naming a file", m.refused_files.load());
  line("larql_lql_sessions", "gauge", "live X-Session-Id sessions", m.table->size());
  line("larql_lql_sessions_evicted_total", "counter", "sessions dropped for room (least recently used)", m.table->evicted());
  line("larql_lql_sessions_expired_total", "counter", "sessions dropped after --lql-session-ttl idle", m.table->expired());
  m.latency.write(o, "larql_lql_statement_seconds", "one LQL statement's run time");
  return o.str();
}

}  // namespace larql::server
