// libFuzzer target for the LQL front end: lex and parse arbitrary text (parse_script, and
// split_statements as the REPL does), and for every script that parses, check the round trip
// print -> parse -> print: the printed text parses, to as many pipelines and stages, and prints
// the same (printer.h). The only acceptable failure of the first parse is a larql::Error; any
// error or difference in the round trip traps. Seeds: the ```lql blocks of docs/lql.md
// (scripts/fuzz.sh splits them into fuzz/corpus-work/lql/). Run via scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lql/lexer.h"
#include "lql/parser.h"
#include "lql/printer.h"
#include "lql/script.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  try {
    std::string rest;
    (void)larql::lql::split_statements(src, &rest);
  } catch (const larql::Error&) {
  }
  try {
    (void)larql::lql::lex(src);
  } catch (const larql::Error&) {
  }
  std::vector<larql::lql::Pipeline> script;
  try {
    script = larql::lql::parse_script(src);
  } catch (const larql::Error&) {
    return 0;  // rejected input: fine
  }
  for (const auto& p : script) {
    const std::string once = larql::lql::to_lql(p);
    try {
      const auto again = larql::lql::parse_one(once);
      if (again.stages.size() != p.stages.size()) __builtin_trap();
      if (larql::lql::to_lql(again) != once) __builtin_trap();
    } catch (const larql::Error&) {
      __builtin_trap();  // printed text that does not parse
    }
  }
  return 0;
}
