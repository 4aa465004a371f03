// `larql lql [NAME.vindex]`: the LQL REPL (libedit line editing, history, keyword completion),
// or a script with -e "..." / -f FILE / statements on a stdin that is not a terminal
// (docs/lql.md "The REPL and scripts").
#include <editline/readline.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "lql/executor.h"
#include "lql/help.h"
#include "lql/parser.h"
#include "lql/script.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql::cli {
namespace {

std::atomic<bool> g_interrupted{false};
void lql_on_sigint(int) { g_interrupted.store(true); }

// Strings seen in the session's statements (entity names, prompts), for completion.
std::set<std::string>& seen_strings() {
  static std::set<std::string> s;
  return s;
}

struct LqlArgs {
  std::string vindex, file;
  std::vector<std::string> exprs;
  bool json = false, keep_going = false, no_history = false;
  int threads = 0, width = 0;
};

int terminal_width(int forced) {
  if (forced > 0) return forced;
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return isatty(STDOUT_FILENO) ? 100 : 1 << 20;  // a pipe: never cut
}

class Runner {
 public:
  explicit Runner(const LqlArgs& a)
      : a_(a), session_(lql::SessionOptions{a.threads, ".", model_dirs()}), exec_(session_) {}

  lql::Session& session() { return session_; }

  /// Parse and run one statement's text; false (after printing the error) when it failed.
  bool run_chunk(const lql::Chunk& ch) {
    try {
      const lql::Pipeline p = lql::parse_one(ch.text, ch.pos);
      for (const auto& tok : lql::lex(ch.text))
        if (tok.kind == lql::TokKind::String && !tok.text.empty() && tok.text.size() < 64 &&
            std::none_of(tok.text.begin(), tok.text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
          seen_strings().insert(tok.text);  // completion offers names as typed: none with a line break
      for (const auto& st : p.stages) {
        const auto t0 = std::chrono::steady_clock::now();
        lql::Table t = exec_.run(st);
        t.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (a_.json) {
          std::printf("%s\n", lql::render_json(t).c_str());
        } else {
          std::printf("%s\n", lql::render_text(t, terminal_width(a_.width)).c_str());
        }
        std::fflush(stdout);
      }
      return true;
    } catch (const Error& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "error: %s\n", e.what());
      if (a_.json) {
        nlohmann::json j = {{"error", e.what()}, {"kind", error_kind_name(e.kind())}};
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        std::fflush(stdout);
      }
      return false;
    }
  }

  /// Run every statement of a script (the last ';' optional). Returns the exit status: 0, or 1
  /// after the first error (every error with --keep-going).
  int run_script(const std::string& src) {
    int status = 0;
    for (const auto& ch : lql::script_statements(src)) {
      if (!run_chunk(ch)) {
        status = 1;
        if (!a_.keep_going) break;
      }
    }
    return status;
  }

 private:
  const LqlArgs& a_;
  lql::Session session_;
  lql::Executor exec_;
};

bool g_complete_in_string = false;  // the word being completed is inside quotes: names only
char g_complete_quote = 0;          // ... and the quote it is in

char* keyword_generator(const char* text, int state) {
  static size_t index;
  static std::string prefix;
  static std::vector<std::string> names;
  if (state == 0) {
    index = 0;
    prefix = text;
    names.clear();
    // Inside quotes: the strings of earlier statements (entity names) that can stand there as
    // typed (no quote of this kind, no backslash); outside: keywords only.
    if (g_complete_in_string)
      for (const auto& n : seen_strings())
        if (n.find(g_complete_quote) == std::string::npos && n.find('\\') == std::string::npos) names.push_back(n);
  }
  const auto& kws = lql::keywords();
  if (g_complete_in_string && index < kws.size()) index = kws.size();
  while (index < kws.size()) {
    const std::string kw(kws[index++]);
    if (kw.size() < prefix.size()) continue;
    bool match = true;
    for (size_t i = 0; i < prefix.size() && match; ++i)
      match = std::toupper(static_cast<unsigned char>(prefix[i])) == kw[i];
    if (match) {
      // Keep the case the user started with.
      std::string out = kw;
      if (!prefix.empty() && std::islower(static_cast<unsigned char>(prefix[0])))
        for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return strdup(out.c_str());
    }
  }
  // Then the strings seen in earlier statements (entity names), matched case-sensitively.
  while (index < kws.size() + names.size()) {
    const std::string& n = names[index++ - kws.size()];
    if (n.compare(0, prefix.size(), prefix) == 0) return strdup(n.c_str());
  }
  return nullptr;
}

const std::string* g_pending = nullptr;  // the lines of the statement typed so far (the REPL's)

char** complete(const char* text, int start, int) {
  rl_attempted_completion_over = 1;
  // In a string or not: the statement's earlier lines, then this line up to the word.
  std::string before = g_pending ? *g_pending : std::string();
  before.append(rl_line_buffer, static_cast<size_t>(std::max(0, start)));
  g_complete_quote = lql::open_quote(before);
  g_complete_in_string = g_complete_quote != 0;
  return rl_completion_matches(text, keyword_generator);
}

// The REPL's history file: $XDG_STATE_HOME/larql/lql_history (the directory made when missing),
// else ~/.larql_history; empty (no history file) when neither is set or --no-history.
std::string history_path(const LqlArgs& a) {
  if (a.no_history) return "";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::path(x) / "larql";
    std::filesystem::create_directories(dir, ec);
    return (dir / "lql_history").string();
  }
  if (const char* h = std::getenv("HOME"); h && *h) return (std::filesystem::path(h) / ".larql_history").string();
  return "";
}

int repl(Runner& r, const LqlArgs& a) {
  rl_attempted_completion_function = complete;
  using_history();
  stifle_history(1000);
  const std::string hist = history_path(a);
  if (!hist.empty()) read_history(hist.c_str());  // a missing file is a first run, not an error
  // Ctrl-C stops the running statement (the session checks the flag before each layer) and, at
  // the prompt, drops the line being typed; it never leaves the REPL.
  struct sigaction sa {};
  sa.sa_handler = lql_on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  r.session().set_cancel(&g_interrupted);
  std::string pending;  // the statement's lines so far (the text after the last ';')
  std::string entry;    // every line typed since the prompt was last "lql> ": one history entry
  g_pending = &pending;
  // A statement typed over several lines is one history entry (on one line: one_line), added
  // once it is complete; written at once, so a killed REPL keeps it (a failed write, say a
  // read-only home, costs only the history).
  auto remember = [&] {
    if (!lql::is_blank(entry)) {
      add_history((entry.find('\n') == std::string::npos ? entry : lql::one_line(entry)).c_str());
      if (!hist.empty()) write_history(hist.c_str());
    }
    entry.clear();
  };
  auto discard_note = [&] {
    if (lql::is_blank(pending)) return;
    std::string what = lql::one_line(pending);
    if (what.size() > 60) what = what.substr(0, 57) + "...";
    std::fprintf(stderr, "note: the unfinished statement was discarded: %s\n", what.c_str());
  };
  while (true) {
    g_interrupted.store(false);
    char* line = readline(pending.empty() ? "lql> " : "...> ");
    if (!line && g_interrupted.load()) {  // Ctrl-C at the prompt
      std::printf("^C\n");
      pending.clear();
      entry.clear();
      continue;
    }
    if (!line) {  // Ctrl-D
      std::printf("\n");
      std::fflush(stdout);
      discard_note();
      return 0;
    }
    std::string text(line);
    std::free(line);
    std::string word = text.substr(0, text.find_last_not_of(" \t") + 1);
    word.erase(0, std::min(word.size(), word.find_first_not_of(" \t")));
    // A backslash command: a line starting with '\' (outside a string being continued), answered
    // at once; it is never part of a statement.
    if (!word.empty() && word[0] == '\\' && lql::open_quote(pending) == 0) {
      if (word == "\\q" || word == "\\quit") {
        discard_note();
        return 0;
      }
      if (word == "\\help" || word == "\\h" || word == "\\?") std::printf("%s", lql::help_text().c_str());
      else std::fprintf(stderr, "unknown command %s (\\help lists them)\n", word.c_str());
      continue;
    }
    if (pending.empty() && (word == "exit" || word == "quit")) return 0;
    if (pending.empty() && word == "help") {
      std::printf("%s", lql::help_text().c_str());
      continue;
    }
    entry += (entry.empty() ? "" : "\n") + text;
    pending += text + "\n";
    std::string rest;
    const auto chunks = lql::split_statements(pending, &rest);
    for (const auto& ch : chunks) {
      g_interrupted.store(false);
      r.run_chunk(ch);
    }
    pending = lql::is_blank(rest) ? std::string() : rest;
    if (pending.empty()) remember();
  }
}

void run(const LqlArgs& a) {
  Runner r(a);
  if (!a.vindex.empty()) r.session().use(a.vindex);
  int status = 0;
  if (!a.exprs.empty() || !a.file.empty()) {
    for (const auto& e : a.exprs) {
      status = r.run_script(e);
      if (status != 0 && !a.keep_going) break;
    }
    if ((status == 0 || a.keep_going) && !a.file.empty()) {
      const int s2 = r.run_script(read_text_file(a.file, "the LQL script"));
      status = status ? status : s2;
    }
  } else if (!isatty(STDIN_FILENO)) {
    std::string src((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    status = r.run_script(src);
  } else {
    std::printf("larql lql — \\help for help, Ctrl-D to quit\n");
    status = repl(r, a);
  }
  std::fflush(stdout);
  if (status != 0) std::exit(status);
}

}  // namespace

void register_lql(CLI::App& app) {
  auto a = std::make_shared<LqlArgs>();
  CLI::App* s = app.add_subcommand("lql", "query a vindex in LQL: a REPL, or a script with -e / -f (docs/lql.md)");
  s->add_option("vindex", a->vindex, "the vindex directory to USE first");
  s->add_option("-e,--execute", a->exprs, "run these statements (';'-separated) and exit; may be repeated");
  s->add_option("-f,--file", a->file, "run the statements of FILE and exit");
  s->add_flag("--json", a->json, "print each result as one JSON document (docs/lql.md \"JSON output\")");
  s->add_flag("--keep-going", a->keep_going, "with -e / -f / stdin: run the statements after a failed one (exit 1 at the end)");
  s->add_flag("--no-history", a->no_history,
              "the REPL reads and writes no history file (default: $XDG_STATE_HOME/larql/lql_history, else "
              "~/.larql_history)");
  s->add_option("-t,--threads", a->threads, "compute threads (0: one per core)")->check(CLI::Range(0, 1024));
  s->add_option("--width", a->width, "text width of tables (default: the terminal's; unlimited on a pipe)")
      ->check(CLI::Range(20, 100000));
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
