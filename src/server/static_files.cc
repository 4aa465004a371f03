#include "server/static_files.h"

#include <string>

namespace larql::server {

// The generated table (build/.../console_assets.cc): kConsoleFileCount files, then an empty row.
extern const StaticFile kConsoleFiles[];
extern const size_t kConsoleFileCount;

bool console_built() { return kConsoleFileCount > 0; }

bool is_console_path(std::string_view path) {
  return path == "/" || path == "/index.html" || path.substr(0, 8) == "/assets/";
}

const StaticFile* console_file(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (size_t i = 0; i < kConsoleFileCount; ++i)
    if (kConsoleFiles[i].path == path) return &kConsoleFiles[i];
  return nullptr;
}

namespace {
/// If-None-Match holds `etag` (a list, or "*"); weak validators compare by their opaque part.
bool etag_matches(const std::string& header, std::string_view etag) {
  if (header.empty()) return false;
  if (header == "*") return true;
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(',', pos);
    if (end == std::string::npos) end = header.size();
    std::string_view tag(header.data() + pos, end - pos);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
    if (tag == etag) return true;
    pos = end + 1;
  }
  return false;
}
}  // namespace

void serve_console(const Request& req, Responder& r) {
  if (req.method != "GET" && req.method != "HEAD") {
    r.send(405, "application/json", error_json("use GET for " + req.path, "invalid_request_error"), {{"Allow", "GET, HEAD"}});
    return;
  }
  const StaticFile* f = console_file(req.path);
  if (!f) {
    const std::string why = console_built()
                                ? "no console file " + req.path
                                : "the web console is not in this build (web/ was not built: run scripts/setup.sh, then "
                                  "rebuild; docs/console.md)";
    r.send(404, "application/json", error_json(why, "not_found_error"));
    return;
  }
  const bool immutable = f->path.substr(0, 8) == "/assets/";
  std::map<std::string, std::string> headers = {
      {"ETag", std::string(f->etag)},
      {"Cache-Control", immutable ? "public, max-age=31536000, immutable" : "no-cache"},
      {"X-Content-Type-Options", "nosniff"},
  };
  if (f->path == "/index.html") {
    // Only this origin's scripts, styles and API: nothing from a CDN, no inline script.
    headers["Content-Security-Policy"] =
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'";
    headers["X-Frame-Options"] = "DENY";
  }
  if (etag_matches(req.header("if-none-match"), f->etag)) {
    r.send(304, std::string(f->content_type), "", headers);
    return;
  }
  r.send(200, std::string(f->content_type), req.method == "HEAD" ? std::string() : std::string(f->body), headers);
}

}  // namespace larql::server
