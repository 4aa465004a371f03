// The architecture record of each family (one file each in this folder; model/arch.h lists them
// in arch_records()). Internal to model/: other code reaches a record through find_arch.
#pragma once

#include "model/arch.h"

namespace larql {

const ArchRecord& gemma3_record();
const ArchRecord& gemma2_record();
const ArchRecord& llama_record();
const ArchRecord& qwen2_record();
const ArchRecord& qwen3_record();
const ArchRecord& phi3_record();
const ArchRecord& qwen2moe_record();

/// Gemma's Hugging Face names (transformers modeling_gemma2.py / modeling_gemma3.py): the Llama
/// naming, but post_attention_layernorm is the post-attention norm and pre_feedforward_layernorm
/// / post_feedforward_layernorm the FFN's.
std::string hf_gemma_name(TensorRole role, int64_t layer);

/// The Qwen families' config.json check (an ArchRecord::hf_hook): use_sliding_window = true is
/// refused (no published Qwen model sets it; its window would start at max_window_layers).
void refuse_qwen_sliding_window(const HfConfigReader& json, ModelConfig& config);

}  // namespace larql
