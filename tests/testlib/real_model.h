// The real default model (models/gemma-3-270m-q4_k_m.gguf), loaded once per test binary and
// shared by the tests that need it, with its tokenizer and a real text to run.
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "tokenizer/tokenizer.h"

namespace larql::testing {

struct RealModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;  ///< 2 threads (the machine the suite is sized for)
  Tokenizer tok;

  /// The first n tokens (BOS first) of a text file under the source tree.
  std::vector<int32_t> text(const std::string& relative_path, int64_t n) const {
    std::ifstream in(source_dir() + "/" + relative_path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<int32_t> ids = tok.encode(ss.str(), true, false);
    if (static_cast<int64_t>(ids.size()) > n) ids.resize(static_cast<size_t>(n));
    return ids;
  }
  /// data/apollo/document.txt: 4,748 tokens of English prose written for this project.
  std::vector<int32_t> document(int64_t n) const { return text("data/apollo/document.txt", n); }
  /// tests/python/data/long_text_gpl3.txt: the GPL-3 licence text (license text, as in issue 8).
  std::vector<int32_t> license(int64_t n) const { return text("tests/python/data/long_text_gpl3.txt", n); }
};

/// The shared instance, or nullptr when the model file is absent (use LARQL_REQUIRE_MODEL first).
inline RealModel* shared_real_model() {
  static std::unique_ptr<RealModel> m = [] {
    const std::string path = default_model_path();
    if (path.empty()) return std::unique_ptr<RealModel>();
    auto model = Model::load(path);
    auto fwd = std::make_shared<Forward>(model, 2);
    auto tok = Tokenizer(model->source().vocabulary());
    return std::unique_ptr<RealModel>(new RealModel{std::move(model), std::move(fwd), std::move(tok)});
  }();
  return m.get();
}

}  // namespace larql::testing
