#!/usr/bin/env python3
"""Write a Hugging Face model directory from a Gemma 3 GGUF, with tools independent of larql.

    .venv/bin/python scripts/hf_from_gguf.py MODEL.gguf OUT_DIR [--dtype f32|f16|bf16] [--shards N]

OUT_DIR receives what a Hugging Face checkpoint holds:
- `model.safetensors` (or N shards and `model.safetensors.index.json`): every weight dequantised
  by the `gguf` package (llama.cpp's gguf-py) and written by the `safetensors` package under the
  Hugging Face Gemma 3 names (`model.layers.N.self_attn.q_proj.weight`, ...). Norm weights are
  stored as Hugging Face does, without Gemma's +1 (the GGUF holds 1 + w; docs/gemma3.md).
- `config.json` (`Gemma3ForCausalLM`, `gemma3_text`) from the GGUF metadata and the family
  defaults the GGUF does not carry (docs/gemma3.md).
- `tokenizer.json` built with the `tokenizers` package from the GGUF vocabulary: a BPE model with
  byte fallback whose merges are every split of a vocabulary piece into two vocabulary pieces,
  ranked by the piece's score (the SentencePiece-to-BPE conversion Hugging Face uses), control
  and user-defined tokens as added tokens; `tokenizer_config.json` with the special tokens and
  the chat template.
It is the fixture for the vindex's independent checks (issue 10): the tests compare larql run on
this directory with the GGUF and with tests/python/gemma3_numpy.py.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from gemma3_numpy import HF_LAYER_NAMES  # noqa: E402
from gguf_table import dequantize_tensor, read_gguf  # noqa: E402

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
VOCAB_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def build_tokenizer(meta: dict):
    """A `tokenizers.Tokenizer` equivalent to the GGUF's SentencePiece (BPE) vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta["tokenizer.ggml.scores"]
    types = meta["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t for t, ty in zip(tokens, types) if ty == TOKEN_NORMAL}
    merges = []
    for piece, score in zip(tokens, scores):
        if piece not in normal or len(piece) < 2:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in normal and piece[k:] in normal]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((float(score), lr) for lr in local)
    merges.sort(key=lambda m: -m[0])  # stable: equal scores keep the (left id, right id) order
    unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 3))]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[lr for _, lr in merges], unk_token=unk, fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    added = [AddedToken(t, special=(ty == TOKEN_CONTROL), normalized=False)
             for t, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    tok.add_tokens(added)
    bos = tokens[int(meta["tokenizer.ggml.bos_token_id"])]
    if meta.get("tokenizer.ggml.add_bos_token", True):
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                           special_tokens=[(bos, vocab[bos])])
    return tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tokenizer-only", action="store_true")
    args = ap.parse_args()
    mm, meta, table = read_gguf(args.model, arrays=VOCAB_KEYS)
    args.out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(meta)
    tok.save(str(args.out / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]
    special = lambda key: tokens[int(meta[key])]  # noqa: E731
    (args.out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": special("tokenizer.ggml.bos_token_id"), "eos_token": special("tokenizer.ggml.eos_token_id"),
        "unk_token": special("tokenizer.ggml.unknown_token_id"), "pad_token": special("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", True)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "chat_template": meta.get("tokenizer.chat_template", ""),
        "tokenizer_class": "GemmaTokenizerFast",
    }, indent=2))
    if args.tokenizer_only:
        return 0
    write_weights(mm, meta, table, args)
    return 0


def hf_name(gguf_name: str) -> str:
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if gguf_name in fixed:
        return fixed[gguf_name]
    _, layer, rest = gguf_name.split(".", 2)
    per_layer = {g: h for h, g in HF_LAYER_NAMES.items()}
    return f"model.layers.{layer}.{per_layer[rest]}"


def write_weights(mm, meta, table, args) -> None:
    from safetensors.numpy import save_file

    a = "gemma3."
    n_layers = int(meta[a + "block_count"])
    config = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": int(meta[a + "embedding_length"]), "intermediate_size": int(meta[a + "feed_forward_length"]),
        "num_hidden_layers": n_layers, "num_attention_heads": int(meta[a + "attention.head_count"]),
        "num_key_value_heads": int(meta[a + "attention.head_count_kv"]),
        "head_dim": int(meta[a + "attention.key_length"]),
        "rms_norm_eps": float(meta[a + "attention.layer_norm_rms_epsilon"]),
        "sliding_window": int(meta[a + "attention.sliding_window"]),
        "rope_theta": float(meta[a + "rope.freq_base"]), "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": int(meta[a + "attention.key_length"]),
        "max_position_embeddings": int(meta[a + "context_length"]),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]), "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n_layers)],
        "tie_word_embeddings": "output.weight" not in table, "torch_dtype": {"f32": "float32", "f16": "float16",
                                                                              "bf16": "bfloat16"}[args.dtype],
        "bos_token_id": int(meta["tokenizer.ggml.bos_token_id"]), "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
        "pad_token_id": int(meta["tokenizer.ggml.padding_token_id"]),
        "attn_logit_softcapping": None, "final_logit_softcapping": None,
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2))
    names = sorted(table)
    groups = [names[i::args.shards] for i in range(args.shards)]
    weight_map = {}
    total = 0
    for gi, group in enumerate(groups):
        arrays = {}
        for name in group:
            w = dequantize_tensor(mm, table, name)
            if name.endswith("norm.weight"):
                w = w - 1.0  # Hugging Face stores w; Gemma's RMSNorm multiplies by 1 + w
            arrays[hf_name(name)] = to_dtype(w, args.dtype)
        shard = "model.safetensors" if args.shards == 1 else f"model-{gi + 1:05d}-of-{args.shards:05d}.safetensors"
        save_file(arrays, str(args.out / shard), metadata={"format": "pt"})
        for n, arr in arrays.items():
            weight_map[n] = shard
            total += arr.nbytes
    if args.shards > 1:
        (args.out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def to_dtype(w: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return np.ascontiguousarray(w, dtype=np.float32)
    if dtype == "f16":
        return np.ascontiguousarray(w, dtype=np.float16)
    # bf16: numpy has no bfloat16; safetensors' numpy API cannot write one.
    raise SystemExit("--dtype bf16 is not supported by this script (numpy has no bfloat16)")


if __name__ == "__main__":
    sys.exit(main())
