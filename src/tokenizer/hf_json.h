// A vocabulary as Hugging Face tokenizer files and back: `tokenizer.json` (a `tokenizers` BPE
// model with byte fallback) and `tokenizer_config.json` (the special tokens, add_bos, the chat
// template). What a vindex stores so that its tokenizer loads without the GGUF, and so that
// Hugging Face tools read it too.
//
// SentencePiece (SPM, GGUF "llama") to BPE, as Hugging Face converts SentencePiece models
// (transformers' SentencePieceExtractor): the merges are every split of a NORMAL piece into two
// NORMAL pieces, ordered by the piece's score (descending; equal scores keep vocabulary order,
// then (left id, right id)). SPM's "merge the adjacent pair whose concatenation has the highest
// score" and BPE's "apply the lowest-ranked merge" then pick the same pair, so both give the
// same ids (tests/tokenizer/hf_json_test.cc checks the 246-string golden set). CONTROL and
// USER_DEFINED tokens become added tokens (special = CONTROL), `<0xXX>` BYTE tokens serve the
// byte fallback, spaces are replaced by U+2581 by the normalizer, BOS is added by the post
// processor when add_bos.
//
// Byte-level BPE (GGUF "gpt2": GPT-2, Llama 3, Qwen2) is read and written in its own form: a
// ByteLevel pre-tokenizer (after the model's Split regex), merges kept in rank order.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace larql {

struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

/// Write a vocabulary as Hugging Face files. A byte-level BPE ("gpt2") vocabulary is written as its
/// own kind of file: the pre's Split regex + ByteLevel pre-tokenizer (llama-bpe, qwen2) or plain
/// ByteLevel (gpt-2), ByteLevel decoder, CONTROL / USER_DEFINED tokens as added tokens, merges
/// as pairs. Errors: Unsupported for a model other than "llama" (SPM) and "gpt2", or a "gpt2" pre
/// other than those three (naming it); InvalidArgument for arrays of unequal length; Format for a
/// merge that is not two tokens separated by a space.
HfTokenizerFiles to_hf_tokenizer(const VocabData& vocab);

/// Read them back. A byte-level BPE tokenizer.json (a ByteLevel pre-tokenizer, alone with GPT-2's
/// regex -> pre "gpt-2", or after a Split whose regex is Llama 3's -> "llama-bpe" or Qwen2's ->
/// "qwen2") gives model "gpt2": tokens from model.vocab and added_tokens (special -> CONTROL, else
/// USER_DEFINED), merges in order as "left right" strings, scores 0, add_bos from the post
/// processor's special token or the config. Errors, besides those below: Unsupported naming an
/// unknown Split regex or another pre-tokenizer shape (add_prefix_space, byte_fallback); Format
/// for a merge that is not two tokens separated by a space (naming model.merges[i]), missing
/// merges, or an id in neither model.vocab nor added_tokens.
/// Otherwise (a SentencePiece conversion, as to_hf_tokenizer writes): scores are rebuilt from the merge ranks (a piece's score is minus the rank of
/// the first merge that makes it), which orders merges as the original scores did; token types
/// from the added tokens (special -> CONTROL, else USER_DEFINED) and the `<0xXX>` pattern (BYTE);
/// special ids from tokenizer_config.json's bos/eos/pad/unk/eot tokens ("" config: none but the
/// post processor's BOS). Errors: Format naming the field (not JSON, no BPE model, a merge of a
/// piece that is not in the vocabulary, an id out of range or used twice, a special token that
/// is not in the vocabulary); Unsupported for a model type other than BPE.
VocabData vocab_from_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json);

/// The vocabulary of a vindex directory (docs/vindex-format.md): `tokenizer.gguf` when present
/// (vocab_to_gguf's metadata: tens of milliseconds), else `tokenizer.json` (+
/// `tokenizer_config.json` when present; about a second of JSON for a 262k vocabulary).
/// Errors: NotFound when neither tokenizer.gguf nor tokenizer.json exists (naming the
/// directory); those of GgufFile::open / vocab_from_gguf, read_text_file and
/// vocab_from_hf_tokenizer otherwise (naming the file).
VocabData vocab_from_directory(const std::string& dir);

}  // namespace larql
