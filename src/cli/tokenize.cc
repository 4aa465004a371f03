// `larql tokenize MODEL "text"`: show the token ids and pieces of a text.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "model/gguf_source.h"
#include "tokenizer/hf_json.h"

namespace larql::cli {
namespace {

struct TokArgs {
  std::string model, text;
  bool json = false, no_bos = false, no_special = false;
};

void run(const TokArgs& a) {
  const std::string path = resolve_model(a.model);
  std::error_code ec;
  // A directory (a vindex of any level, or a Hugging Face model) keeps its vocabulary in
  // tokenizer.gguf or tokenizer.json: no weights need to be opened.
  Tokenizer tok(std::filesystem::is_directory(path, ec) ? vocab_from_directory(path) : GgufSource::open(path)->vocabulary());
  const auto ids = tok.encode(a.text, !a.no_bos && tok.add_bos(), !a.no_special);
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok.token_text(id));
    nlohmann::json j = {{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  for (int32_t id : ids) std::printf("%8d  %s\n", id, nlohmann::json(tok.token_text(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::printf("%zu tokens\n", ids.size());
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokArgs>();
  CLI::App* s = app.add_subcommand("tokenize", "print the token ids of a text");
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_option("text", a->text, "text to tokenize")->required();
  s->add_flag("--json", a->json, "print {\"ids\": [...], \"pieces\": [...]}");
  s->add_flag("--no-bos", a->no_bos, "do not add the BOS token");
  s->add_flag("--no-special", a->no_special, "treat special-token text as plain text");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
