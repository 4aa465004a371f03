// larql — command-line entry point. Each verb lives in its own file; this only dispatches and
// turns errors into "error: ..." on stderr with a non-zero exit.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "cli/common.h"
#include "quant/quant.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"larql — run and query transformer models (GGUF, Hugging Face directories, vindexes) on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "larql 0.1.0");
  // The kernels' ISA, chosen once for every kernel family before any verb runs (a verb's
  // callback runs after this one). Accepted before or after the verb (fallthrough).
  std::string isa;
  app.add_option("--isa", isa,
                 "lower the kernels' instruction set for every kernel family: scalar, avx2, avx512 "
                 "(default: the best this CPU has; also $LARQL_ISA)")
      ->envname("LARQL_ISA")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            // Any case (AVX2 as avx2); the error names both places the value may have come from.
            std::string low = v;
            std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return std::tolower(ch); });
            if (low == "scalar" || low == "avx2" || low == "avx512") {
              v = low;
              return {};
            }
            return "'" + v + "' (from --isa or $LARQL_ISA) is not one of scalar, avx2, avx512";
          },
          "{scalar,avx2,avx512}"));
  app.fallthrough();
  app.parse_complete_callback([&isa] {
    if (!isa.empty()) larql::quant::set_isa(larql::quant::parse_isa(isa));
  });
  larql::cli::register_run(app);
  larql::cli::register_chat(app);
  larql::cli::register_show(app);
  larql::cli::register_tokenize(app);
  larql::cli::register_perplexity(app);
  larql::cli::register_parity(app);
  larql::cli::register_diag(app);
  larql::cli::register_shannon(app);
  larql::cli::register_compare(app);
  larql::cli::register_bench(app);
  larql::cli::register_engines(app);
  larql::cli::register_accuracy(app);
  larql::cli::register_calibrate(app);
  larql::cli::register_apollo(app);
  larql::cli::register_extract(app);
  larql::cli::register_build(app);
  larql::cli::register_slice(app);
  larql::cli::register_export(app);
  larql::cli::register_compile(app);
  larql::cli::register_cache(app);
  larql::cli::register_lql(app);
  larql::cli::register_serve(app);
  larql::cli::register_router(app);
  larql::cli::register_label(app);
  larql::cli::register_edit_eval(app);
  // Name an unknown verb instead of CLI11's generic "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string verbs;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      verbs += (verbs.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "error: unknown command '%s' (commands: %s)\nRun with --help for usage.\n", argv[1],
                   verbs.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fprintf(stderr, "Run with --help for usage.\n");
    return 2;
  } catch (const larql::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    if (e.kind() == larql::ErrorKind::Usage) {
      std::fprintf(stderr, "Run with --help for usage.\n");
      return 2;
    }
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
  // Output that did not reach its destination is a failure, not a silent success.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: writing to stdout failed: %s\n", errno ? std::strerror(errno) : "unknown error");
    return 1;
  }
  return 0;
}
