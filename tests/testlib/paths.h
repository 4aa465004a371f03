// Paths the tests use: the source tree and the real default model.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace larql::testing {

/// Root of the source tree (set by CTest; falls back to the working directory).
inline std::string source_dir() {
  const char* s = std::getenv("LARQL_SOURCE_DIR");
  return s ? s : std::filesystem::current_path().string();
}

/// The default model, or "" if it is not there (setup puts it at models/).
inline std::string default_model_path() {
  const char* s = std::getenv("LARQL_MODEL");
  std::string p = s ? s : source_dir() + "/models/gemma-3-270m-q4_k_m.gguf";
  return std::filesystem::exists(p) ? p : "";
}

/// A directory of this test process's own under the system's temporary directory
/// (`<tmp>/<tag>-<pid>`), created on first use and removed with everything in it when the process
/// exits: CTest runs every test in its own process, so files written per process must not outlive it.
inline const std::filesystem::path& process_temp_dir(const std::string& tag) {
  struct Dir {
    std::filesystem::path path;
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir{std::filesystem::temp_directory_path() / (tag + "-" + std::to_string(::getpid()))};
  std::filesystem::create_directories(dir.path);
  return dir.path;
}

}  // namespace larql::testing

/// Skip (loudly) a test that needs the real model when it is absent. CI always has it:
/// `make test` installs it first.
#define LARQL_REQUIRE_MODEL(var)                                                        \
  std::string var = ::larql::testing::default_model_path();                             \
  if (var.empty()) GTEST_SKIP() << "real model missing: run `make setup` (models/...)"
