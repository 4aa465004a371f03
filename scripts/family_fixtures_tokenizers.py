"""The tokenizers of scripts/make_family_fixtures.py: byte-level BPE (the tokenizers package,
with the Llama 3 or Qwen2 pre-tokenizer regex) and SentencePiece (the sentencepiece package,
byte fallback) vocabularies trained offline on the project's own corpora, wrapped as the
family's transformers tokenizer with its special tokens and a chat template like the real
model's. Deterministic: the same corpus gives the same bytes."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CORPUS_FILES = [
    REPO / "data" / "apollo" / "document.txt",
    REPO / "data" / "accuracy" / "conflict.jsonl",
    REPO / "data" / "accuracy" / "parametric.jsonl",
]

BPE_VOCAB = 384       # byte-level BPE: 256 byte tokens + merges, specials appended after
SPM_VOCAB = 448       # SentencePiece (includes 256 byte-fallback pieces)

# Pre-tokenizer regexes exactly as published in the real tokenizer.json files (and quoted as the
# "original regex from tokenizer.json" in llama.cpp's src/llama-vocab.cpp).
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)
CHATML_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
INST_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
    "{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
    "'<|end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}"
    "{% else %}{{ eos_token }}{% endif %}"
)


# ------------------------------------------------------------------------------------------------
# corpus and tokenizers
# ------------------------------------------------------------------------------------------------

def corpus_lines() -> list[str]:
    lines: list[str] = []
    for p in CORPUS_FILES:
        for line in p.read_text(encoding="utf-8").splitlines():
            if p.suffix == ".jsonl" and line.strip():
                obj = json.loads(line)
                for v in obj.values():
                    if isinstance(v, str):
                        lines.append(v)
            elif line.strip():
                lines.append(line)
    return lines


def corpus_sha256() -> str:
    h = hashlib.sha256()
    for p in CORPUS_FILES:
        h.update(p.read_bytes())
    return h.hexdigest()


def build_bpe_tokenizer(kind: str, out_dir: Path):
    """Byte-level BPE with the real family's pre-tokenizer regex; specials appended after the
    trained vocabulary (as in the real models)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    regex = LLAMA3_REGEX if kind == "llama3_bpe" else QWEN2_REGEX
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3_bpe")))
    if kind == "qwen2_bpe":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    if kind == "llama3_bpe":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>", "<|reserved_special_token_0|>"]
        tok.add_special_tokens(specials)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                       eos_token="<|end_of_text|>", chat_template=LLAMA3_TEMPLATE,
                                       model_max_length=256, clean_up_tokenization_spaces=False)
    else:
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.add_special_tokens(specials)
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                       pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE,
                                       model_max_length=256, clean_up_tokenization_spaces=False)
    fast.save_pretrained(out_dir)
    return fast


def train_spm(kind: str) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    common = dict(
        sentence_iterator=iter(corpus_lines()), model_writer=buf, vocab_size=SPM_VOCAB,
        model_type="bpe", byte_fallback=True, character_coverage=1.0, num_threads=1,
        split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, shuffle_input_sentence=False, input_sentence_size=0,
        max_sentence_length=1 << 16, minloglevel=2,
    )
    if kind == "gemma_spm":
        spm.SentencePieceTrainer.train(
            **common, pad_id=0, eos_id=1, bos_id=2, unk_id=3, add_dummy_prefix=False,
            pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
            user_defined_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"])
    else:
        spm.SentencePieceTrainer.train(**common, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, add_dummy_prefix=True)
    return buf.getvalue()


def build_spm_tokenizer(kind: str, out_dir: Path):
    from transformers import AutoTokenizer

    model_bytes = train_spm(kind)
    stage = out_dir / "_spm"
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "tokenizer.model").write_bytes(model_bytes)
    if kind == "gemma_spm":
        cfg = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
               "unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False,
               "chat_template": GEMMA_TEMPLATE}
    elif kind == "phi3_spm":
        cfg = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "<|endoftext|>",
               "unk_token": "<unk>", "pad_token": "<|endoftext|>", "add_bos_token": False,
               "add_eos_token": False, "legacy": False, "chat_template": PHI3_TEMPLATE}
    else:
        cfg = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
               "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": False,
               "chat_template": INST_TEMPLATE}
    cfg.update({"model_max_length": 256, "clean_up_tokenization_spaces": False})
    (stage / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    tok = AutoTokenizer.from_pretrained(str(stage))
    if kind == "phi3_spm":
        # Phi-3's added tokens sit right after the SentencePiece vocabulary.
        tok.add_special_tokens({"additional_special_tokens": [
            "<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]})
    tok.save_pretrained(out_dir)
    shutil.copyfile(stage / "tokenizer.model", out_dir / "tokenizer.model")
    shutil.rmtree(stage)
    return AutoTokenizer.from_pretrained(str(out_dir)), model_bytes
