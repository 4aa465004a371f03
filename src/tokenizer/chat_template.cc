// Gemma chat template, transcribed from the Jinja `chat_template` in google/gemma-3-*-it
// tokenizer_config.json (bos_token omitted here: encode(add_bos = true) adds it).
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {

namespace {

/// Jinja's `trim` filter (Python str.strip()) restricted to ASCII whitespace.
std::string_view trim(std::string_view s) {
  constexpr std::string_view kWs = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kWs);
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string apply_gemma_chat_template(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) {
  size_t start = 0;
  std::string first_user_prefix;
  if (!messages.empty() && messages[0].role == "system") {
    first_user_prefix = messages[0].content + "\n\n";
    start = 1;
  }
  std::string out;
  for (size_t i = start; i < messages.size(); ++i) {
    const ChatMessage& msg = messages[i];
    const size_t turn = i - start;
    std::string role;
    if (msg.role == "user") {
      role = "user";
    } else if (msg.role == "assistant" || msg.role == "model") {
      role = "model";
    } else if (msg.role == "system") {
      throw Error(ErrorKind::InvalidArgument,
                  "chat template: message " + std::to_string(i) + " has role 'system'; only the first may");
    } else {
      throw Error(ErrorKind::InvalidArgument,
                  "chat template: message " + std::to_string(i) + " has unknown role '" + msg.role +
                      "' (expected system, user, assistant or model)");
    }
    if ((role == "user") != (turn % 2 == 0))
      throw Error(ErrorKind::InvalidArgument,
                  "chat template: message " + std::to_string(i) +
                      ": conversation roles must alternate user/assistant/user/assistant/...");
    out += "<start_of_turn>";
    out += role;
    out += '\n';
    if (turn == 0) out += first_user_prefix;
    out += trim(msg.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace larql
