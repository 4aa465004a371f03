#!/usr/bin/env python3
"""turbo-quant's K/V cache against llama.cpp's own quantised K/V caches, teacher-forced.

    bench/kv_quant_vs_llamacpp.py [--larql build/larql] [--model models/gemma-3-270m-q4_k_m.gguf]
        [--text tests/python/data/long_text_gpl3.txt] [--tokens 1024 4096] [--threads 2]
        [--engines "turbo-quant:bits=4;turbo-quant:bits=3"] [--llama-types q8_0 q5_0 q4_0]
        [--tmp DIR] [--json OUT]

Protocol (every position is scored with every earlier K/V row quantised, as in generation):
- The text's first N tokens (BOS first; ids from `larql perplexity --json`, fed to both sides).
- larql: `larql perplexity --engine SPEC --logits-out F.npy` runs the engine teacher-forced from
  the first token (prefill of BOS alone, then one decode step per token), so each position
  attends to the quantised rows of all earlier positions. Reference: larql standard (f32 K/V,
  one batched pass; standard is batch-invariant, so this equals decoding token by token).
- llama.cpp (llama-cpp-python, flash attention on, which a quantised V cache requires):
  `type_k = type_v` = q8_0 / q5_0 / q4_0, one eval of all N tokens with logits for every
  position. llama.cpp writes a batch's K/V into the quantised cache before attention reads it,
  so every row a position sees, its own included, is quantised. Reference: the same llama.cpp
  with an f16 cache (its default type); an f32-cache row shows the f16 cache's own distance.
- Per row: mean KL(reference || quantised) in nats over all N positions, the share of positions
  whose argmax agrees with the reference, K/V bytes per token (all layers, K and V) and fixed
  bytes (held whatever the length). llama.cpp: n_layers x 2 x kv_dim / 32 blocks (ggml's
  layouts: q8_0 34 B per 32 values = f16 scale + 32 int8; q5_0 22 B = f16 scale + 4 B of high
  bits + 16 B of nibbles; q4_0 18 B = f16 scale + 16 B of nibbles; f16 64 B), geometry from
  `larql show --json`. larql: `larql perplexity --json`'s kv_bytes_per_token and
  kv_fixed_bytes, measured from the engine's memory() (turbo-quant: 4 + head_dim x bits / 8
  bytes per head vector; fixed: its exact window of `recent` f32 K/V rows per layer).

Logit matrices are [N, 262144] f32 (4 GiB at 4,096 tokens): they are written to --tmp and
compared in row chunks (tests/python/peer.py). Prints a markdown table; --json writes numbers.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(HERE))

import peer  # noqa: E402
from side_by_side import machine  # noqa: E402

# Bytes per 32-value block of llama.cpp's cache types (ggml's block layouts: block_q8_0 = f16 d +
# 32 int8; block_q5_0 = f16 d + u8 qh[4] + u8 qs[16]; block_q4_0 = f16 d + u8 qs[16]).
LLAMA_BLOCK_BYTES = {"f32": 128, "f16": 64, "q8_0": 34, "q5_0": 22, "q4_0": 18}


def larql_logits(args, spec: str | None, n: int, out: Path) -> dict:
    cmd = [args.larql, "perplexity", args.model, args.text, "--max-tokens", str(n), "--logits-out", str(out),
           "--threads", str(args.threads), "--json"]
    if spec:
        cmd += ["--engine", spec]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    j = json.loads(p.stdout.strip().splitlines()[-1])
    j["wall_s"] = time.perf_counter() - t0
    return j


def llama_ctx(args, n: int, cache_type: str):
    """A llama.cpp context with a `cache_type` K/V cache (flash attention on: a quantised V cache
    requires it), logits for every position."""
    llama_cpp = peer.import_llama_cpp()
    t = getattr(llama_cpp, "GGML_TYPE_" + cache_type.upper())
    return llama_cpp.Llama(model_path=args.model, n_ctx=n, n_batch=512, n_ubatch=512, n_threads=args.threads,
                           n_threads_batch=args.threads, logits_all=True, flash_attn=True, type_k=t, type_v=t,
                           seed=0, verbose=False)


def llama_logits(args, ids: list[int], cache_type: str, out: Path) -> dict:
    """Evaluate ids with a `cache_type` K/V cache; write logits [n, vocab] to out (.npy)."""
    t0 = time.perf_counter()
    llm = llama_ctx(args, len(ids), cache_type)
    logits = peer.llama_logits(llm, ids)
    np.save(out, logits)
    info = {"n_layer": int(peer.import_llama_cpp().llama_model_n_layer(llm._model.model)),
            "wall_s": time.perf_counter() - t0}
    del logits, llm
    gc.collect()
    return info


def compare(ref: Path, test: Path, ids: list[int]) -> dict:
    a, b = np.load(ref, mmap_mode="r"), np.load(test, mmap_mode="r")
    s = peer.compare_logits(a, b, ids, chunk=32).summary()
    return {"kl_mean": s["kl_mean"], "kl_p99": s["kl_p99"], "kl_max": s["kl_max"], "top1": s["top1_agreement"]}


def geometry(args) -> dict:
    p = subprocess.run([args.larql, "show", args.model, "--json"], capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    return {"layers": j["layers"], "kv_dim": j["n_kv_heads"] * j["head_dim"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--larql", default=str(REPO / "build" / "larql"))
    ap.add_argument("--model", default=str(REPO / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--text", default=str(REPO / "tests" / "python" / "data" / "long_text_gpl3.txt"))
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default="tq4;tq4:recent=0;tq3;tq3:recent=0",
                    help="larql engine specs, split on ';'")
    ap.add_argument("--llama-types", nargs="*", default=["q8_0", "q5_0", "q4_0"],
                    help="llama.cpp cache types (none: larql rows only)")
    ap.add_argument("--tmp", default=None, help="directory for the logit matrices (default: a temp dir)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    engines = [e for e in args.engines.split(";") if e]
    geo = geometry(args)
    f16_bytes = geo["layers"] * 2 * geo["kv_dim"] * 2
    tmp = Path(tempfile.mkdtemp(prefix="larql-kvq-", dir=args.tmp))
    rows: dict[str, dict] = {}  # label -> {"impl", "ref", "bytes", "fixed", n: {...}}
    cross: dict[int, dict] = {}
    try:
        for n in args.tokens:
            print(f"[{n} tokens]", file=sys.stderr)
            ref_l = tmp / "larql-standard.npy"
            ref = larql_logits(args, None, n, ref_l)
            ids = ref["ids"]
            if len(ids) < n:
                raise RuntimeError(f"{args.text}: only {len(ids)} tokens, asked for {n}")
            for spec in engines:
                out = tmp / "larql-engine.npy"
                j = larql_logits(args, spec, n, out)
                if j["ids"] != ids:
                    raise RuntimeError(f"{spec}: token ids differ from the reference run")
                r = rows.setdefault(j["engine"], {"impl": "larql", "ref": "larql standard",
                                                  "bytes": j["kv_bytes_per_token"], "fixed": j["kv_fixed_bytes"]})
                r[n] = compare(ref_l, out, ids) | {"wall_s": j["wall_s"]}
                print(f"  larql {spec}: {r[n]}", file=sys.stderr)
                out.unlink()
            if not args.llama_types:
                ref_l.unlink()
                continue
            ref_c = tmp / "llama-f16.npy"
            info = llama_logits(args, ids, "f16", ref_c)
            if info["n_layer"] != geo["layers"]:
                raise RuntimeError(f"llama.cpp reports {info['n_layer']} layers, larql {geo['layers']}")
            for t in ["f32"] + args.llama_types:
                out = tmp / "llama-test.npy"
                w = llama_logits(args, ids, t, out)
                per_vec = geo["kv_dim"] // 32 * LLAMA_BLOCK_BYTES[t]
                r = rows.setdefault(f"llama.cpp {t}", {"impl": "llama.cpp", "ref": "llama.cpp f16",
                                                       "bytes": geo["layers"] * 2 * per_vec, "fixed": 0})
                r[n] = compare(ref_c, out, ids) | {"wall_s": w["wall_s"]}
                print(f"  llama.cpp {t}: {r[n]}", file=sys.stderr)
                out.unlink()
            cross[n] = compare(ref_c, ref_l, ids)
            ref_l.unlink()
            ref_c.unlink()
    finally:
        for f in tmp.glob("*.npy"):
            f.unlink()
        tmp.rmdir()

    ns = args.tokens
    print("| K/V cache | reference | bytes/token | × f16 | fixed bytes | "
          + " | ".join(f"mean KL @{n} | top-1 @{n}" for n in ns) + " |")
    print("|" + "---|" * (5 + 2 * len(ns)))
    for label, r in sorted(rows.items(), key=lambda kv: -kv[1]["bytes"] - kv[1]["fixed"] / 1e9):
        cells = []
        for n in ns:
            m = r.get(n)
            cells += [f"{m['kl_mean']:.4f}", f"{100 * m['top1']:.1f}%"] if m else ["", ""]
        print(f"| {label} | {r['ref']} | {r['bytes']:,} | {r['bytes'] / f16_bytes:.3f} | {r['fixed']:,} | "
              + " | ".join(cells) + " |")
    for n, m in cross.items():
        print(f"\nlarql standard vs llama.cpp f16 (two implementations, no quantised cache) @{n}: "
              f"mean KL {m['kl_mean']:.4f}, top-1 {100 * m['top1']:.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "text": args.text, "threads": args.threads,
                                               "f16_bytes_per_token": f16_bytes,
                                               "cross": {str(k): v for k, v in cross.items()},
                                               "rows": {k: {str(kk): vv for kk, vv in v.items()} for k, v in rows.items()}},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
