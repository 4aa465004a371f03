// Chat templates. Gemma's is transcribed from the Jinja `chat_template` in google/gemma-3-*-it
// tokenizer_config.json (bos_token omitted here: encode(add_bos = true) adds it); detection and the
// ChatML / Llama 3 / Llama 2 formats follow llama.cpp's src/llama-chat.cpp
// (llm_chat_detect_template, llm_chat_apply_template).
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

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

/// "user" / "assistant" / "system"; "model" is taken as "assistant". InvalidArgument otherwise.
std::string_view role_of(const ChatMessage& m, size_t i) {
  if (m.role == "user" || m.role == "system" || m.role == "assistant") return m.role;
  if (m.role == "model") return "assistant";
  throw Error(ErrorKind::InvalidArgument, "chat template: message " + std::to_string(i) + " has unknown role '" +
                                              m.role + "' (expected system, user, assistant or model)");
}

}  // namespace

std::optional<ChatFormat> detect_chat_template(std::string_view t) {
  if (t == "gemma") return ChatFormat::Gemma;
  if (t == "chatml") return ChatFormat::ChatML;
  if (t == "llama3") return ChatFormat::Llama3;
  if (t == "llama2") return ChatFormat::Llama2;
  if (t == "phi3") return ChatFormat::Phi3;
  if (t == "mistral-v1" || t == "mistral-v3" || t == "mistral-v3-tekken" || t == "mistral-v7") return ChatFormat::Mistral;
  if (contains(t, "<|im_start|>")) return ChatFormat::ChatML;
  if (contains(t, "[INST]"))
    return contains(t, "[SYSTEM_PROMPT]") || contains(t, "' [INST] ' + system_message") || contains(t, "[AVAILABLE_TOOLS]")
               ? ChatFormat::Mistral
               : ChatFormat::Llama2;
  if (contains(t, "<start_of_turn>")) return ChatFormat::Gemma;
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return ChatFormat::Llama3;
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return ChatFormat::Phi3;
  return std::nullopt;
}

std::optional<ChatFormat> chat_format_of(const Tokenizer& tok) {
  if (!tok.chat_template().empty()) return detect_chat_template(tok.chat_template());
  for (const auto& [marker, format] : {std::pair{"<start_of_turn>", ChatFormat::Gemma},
                                       {"<|im_start|>", ChatFormat::ChatML},
                                       {"<|start_header_id|>", ChatFormat::Llama3},
                                       {"<|assistant|>", ChatFormat::Phi3}})
    if (tok.find_token(marker)) return format;
  return std::nullopt;
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Gemma: return "gemma";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Llama2: return "llama2";
    case ChatFormat::Phi3: return "phi3";
    case ChatFormat::Mistral: return "mistral";
  }
  return "?";
}

std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                std::string_view jinja) {
  std::string out;
  switch (f) {
    case ChatFormat::Gemma:
      return apply_gemma_chat_template(messages, add_generation_prompt);
    case ChatFormat::ChatML:
      for (size_t i = 0; i < messages.size(); ++i) {
        out += "<|im_start|>";
        out += role_of(messages[i], i);
        out += '\n';
        out += messages[i].content;
        out += "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::Mistral: {
      // llama.cpp llm_chat_apply_template, LLM_CHAT_TEMPLATE_MISTRAL_V7 / V1 / V3 / V3_TEKKEN, the
      // variant chosen as llm_chat_detect_template chooses it.
      if (jinja == "mistral-v7" || contains(jinja, "[SYSTEM_PROMPT]")) {
        for (size_t i = 0; i < messages.size(); ++i) {
          const std::string_view role = role_of(messages[i], i);
          if (role == "system") out += "[SYSTEM_PROMPT] " + messages[i].content + "[/SYSTEM_PROMPT]";
          else if (role == "user") out += "[INST] " + messages[i].content + "[/INST]";
          else out += " " + messages[i].content + "</s>";
        }
        return out;
      }
      const bool v1 = jinja == "mistral-v1" || (jinja != "mistral-v3" && jinja != "mistral-v3-tekken" && contains(jinja, " [INST]"));
      const bool tekken = !v1 && (jinja == "mistral-v3-tekken" || contains(jinja, "\"[INST]\""));
      const std::string lead = v1 ? " " : "", trail = tekken ? "" : " ";
      bool inside_turn = false;
      for (size_t i = 0; i < messages.size(); ++i) {
        if (!inside_turn) {
          out += lead + "[INST]" + trail;
          inside_turn = true;
        }
        const std::string_view role = role_of(messages[i], i);
        if (role == "system") {
          out += messages[i].content + "\n\n";
        } else if (role == "user") {
          out += messages[i].content + lead + "[/INST]";
        } else {
          out += trail;
          out += !v1 && !tekken ? trim(messages[i].content) : std::string_view(messages[i].content);
          out += "</s>";
          inside_turn = false;
        }
      }
      return out;
    }
    case ChatFormat::Phi3:
      for (size_t i = 0; i < messages.size(); ++i) {
        out += "<|";
        out += role_of(messages[i], i);
        out += "|>\n";
        out += messages[i].content;
        out += "<|end|>\n";
      }
      if (add_generation_prompt) out += "<|assistant|>\n";
      return out;
    case ChatFormat::Llama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        out += "<|start_header_id|>";
        out += role_of(messages[i], i);
        out += "<|end_header_id|>\n\n";
        out += trim(messages[i].content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::Llama2: {
      // llama.cpp's LLAMA_2 variants, chosen by what the Jinja source mentions.
      const bool strip = contains(jinja, "content.strip()");
      const bool bos_inside = !strip && contains(jinja, "bos_token + '[INST]");
      const bool sys_block = strip || bos_inside || contains(jinja, "<<SYS>>");
      bool inside_turn = true;  // the first [INST] follows the BOS that encode() adds
      out += "[INST] ";
      for (size_t i = 0; i < messages.size(); ++i) {
        const std::string_view role = role_of(messages[i], i);
        const std::string_view content = strip ? trim(messages[i].content) : std::string_view(messages[i].content);
        if (!inside_turn) {
          inside_turn = true;
          out += bos_inside ? "<s>[INST] " : "[INST] ";
        }
        if (role == "system") {
          out += sys_block ? "<<SYS>>\n" : "";
          out += content;
          out += sys_block ? "\n<</SYS>>\n\n" : "\n";
        } else if (role == "user") {
          out += content;
          out += " [/INST]";
        } else {
          out += content;
          out += "</s>";
          inside_turn = false;
        }
      }
      return out;
    }
  }
  return out;
}

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
