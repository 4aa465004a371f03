// The web console's files (docs/console.md), built from web/ by `npm run build` and embedded in
// the binary at build time (cmake/embed_console.cmake): `GET /` is its index.html and
// `GET /assets/NAME` its hashed scripts and styles. The files are public — they hold no data;
// every call they make to the API carries the key — so the HTTP layer lets these paths through
// without the key (HttpOptions::public_path), and the page asks for the key on the first 401.
#pragma once

#include <string_view>

#include "server/http.h"

namespace larql::server {

/// One embedded file: its URL path ("/index.html", "/assets/index-abc.js"), content type,
/// strong ETag (quoted; the first 16 hex digits of the SHA-256 of the bytes) and bytes.
struct StaticFile {
  std::string_view path, content_type, etag, body;
};

/// Whether the console was embedded (false when web/ was not built: no node_modules, or
/// -DLARQL_CONSOLE=OFF).
bool console_built();

/// "/" (index.html), "/index.html" and "/assets/..." — the paths the console answers.
bool is_console_path(std::string_view path);

/// The embedded file for a request path ("/" is "/index.html"), or nullptr.
const StaticFile* console_file(std::string_view path);

/// Answer a console path: 200 with the file, its ETag and Cache-Control (index.html: no-cache,
/// so a new build is seen at once; hashed assets: a year, immutable); 304 when If-None-Match
/// names its ETag; 404 (JSON error) for an unknown file or when the console is not built;
/// 405 for a method other than GET or HEAD.
void serve_console(const Request& req, Responder& r);

}  // namespace larql::server
