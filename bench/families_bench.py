#!/usr/bin/env python3
"""larql vs llama.cpp on stand-ins of real size for families other than Gemma 3.

    .venv/bin/python bench/families_bench.py [--out DIR] [--threads 2] [--only llama-1b|mixtral-small]

Writes, once (kept in DIR, default build/families-bench/), synthetic models of real shapes with
random weights — the text they generate is meaningless; the bytes each token reads are a real
model's — as F16 GGUF with the `gguf` package, quantises them to Q4_K_M with llama.cpp's own
quantiser (llama-cpp-python's llama_model_quantize), then runs bench/side_by_side.py on each
(prefill of --prompt-tokens and decode of --decode-tokens, both programs in one run, the same
threads). Shapes:

  llama-1b       Llama 3.2 1B: hidden 2048, 16 layers, 32 heads / 8 KV heads (head_dim 64),
                 FFN 8192, vocabulary 128256, tied embeddings, rope_theta 500000.
  mixtral-small  Mixtral's layer at a size two cores can run: hidden 2048, 16 layers, 16 heads /
                 8 KV heads (head_dim 128), 8 experts of FFN 1536, top-2, vocabulary 32000.

A SentencePiece-style vocabulary of byte tokens and made-up pieces stands in for the tokenizer:
llama.cpp and larql tokenise the prompt text alike with it (docs/BENCHMARKS.md records results).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SHAPES = {
    "llama-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True,
                     rope_base=500000.0, experts=None),
    "mixtral-small": dict(hidden=2048, layers=16, heads=16, kv_heads=8, ffn=1536, vocab=32000, tied=False,
                          rope_base=1000000.0, experts=(8, 2)),
}


def vocabulary(n):
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0] * 3, [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + list(letters) + ["\u2581" + c for c in letters]
    i = 0
    while len(tokens) + len(pieces) < n:
        a, b, c = letters[i % 26], letters[(i // 26) % 26], letters[(i // 676) % 26]
        pieces.append(("\u2581" if i % 2 else "") + c + b + a + (str(i // 17576) if i >= 17576 else ""))
        i += 1
    for k, p in enumerate(pieces[: n - len(tokens)]):
        tokens.append(p)
        scores.append(-1.0 - 1e-4 * k)
        types.append(1)
    return tokens, scores, types


def write_f16(path: Path, s: dict, seed: int = 1) -> None:
    import gguf

    rng = np.random.default_rng(seed)
    hd = s["hidden"] // s["heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("stand-in")
    w.add_block_count(s["layers"])
    w.add_context_length(4096)
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)  # MOSTLY_F16
    if s["experts"]:
        w.add_expert_count(s["experts"][0])
        w.add_expert_used_count(s["experts"][1])
    tokens, scores, types = vocabulary(s["vocab"])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def mat(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float16)

    def norm(n):
        return rng.uniform(0.8, 1.2, n).astype(np.float32)

    H, V, F = s["hidden"], s["vocab"], s["ffn"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    w.add_tensor("token_embd.weight", mat(V, H))
    w.add_tensor("output_norm.weight", norm(H))
    if not s["tied"]:
        w.add_tensor("output.weight", mat(V, H))
    for i in range(s["layers"]):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(H))
        w.add_tensor(b + "attn_q.weight", mat(q, H))
        w.add_tensor(b + "attn_k.weight", mat(kv, H))
        w.add_tensor(b + "attn_v.weight", mat(kv, H))
        w.add_tensor(b + "attn_output.weight", mat(H, q))
        w.add_tensor(b + "ffn_norm.weight", norm(H))
        if s["experts"]:
            E = s["experts"][0]
            w.add_tensor(b + "ffn_gate_inp.weight", (rng.standard_normal((E, H)) / np.sqrt(H)).astype(np.float32))
            w.add_tensor(b + "ffn_gate_exps.weight", mat(E, F, H))
            w.add_tensor(b + "ffn_up_exps.weight", mat(E, F, H))
            w.add_tensor(b + "ffn_down_exps.weight", mat(E, H, F))
        else:
            w.add_tensor(b + "ffn_gate.weight", mat(F, H))
            w.add_tensor(b + "ffn_up.weight", mat(F, H))
            w.add_tensor(b + "ffn_down.weight", mat(H, F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


def quantize(src: Path, dst: Path, threads: int) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize failed ({rc}) on {src}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "build" / "families-bench"))
    ap.add_argument("--larql", default=str(REPO / "build" / "larql"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--only", choices=sorted(SHAPES))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, shape in SHAPES.items():
        if a.only and name != a.only:
            continue
        q4 = out / f"{name}-q4_k_m.gguf"
        if not q4.exists():
            f16 = out / f"{name}-f16.gguf"
            print(f"[{name}] writing {f16}", file=sys.stderr, flush=True)
            write_f16(f16, shape)
            print(f"[{name}] quantising to {q4} (llama.cpp)", file=sys.stderr, flush=True)
            quantize(f16, q4, a.threads)
            f16.unlink()
        print(f"[{name}] side by side", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(HERE / "side_by_side.py"), "--larql", a.larql, "--model", str(q4),
                        "--threads", str(a.threads), "--prompt-tokens", str(a.prompt_tokens),
                        "--decode-tokens", str(a.decode_tokens), "--json", str(out / f"{name}.json")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
