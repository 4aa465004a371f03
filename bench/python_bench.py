#!/usr/bin/env python3
"""Python generate() throughput against the CLI and llama-cpp-python, side by side in one run
(docs/BENCHMARKS.md "Python package").

Each round, on the same model, prompt, thread count and greedy decoding of N tokens (end of
generation ignored):
  * `larql run --json` — the CLI's own decode tok/s (the engine's timer);
  * `larql.Model.generate` — tokens over the wall time the Python loop saw between the first
    and the last piece (what a Python caller gets), and the engine's own decode tok/s;
  * llama-cpp-python's `create_completion(stream=True)` — the same wall-time measure over its
    chunks — and its low-level eval loop (llama.cpp's C speed, no Python sampling).
Rounds alternate the order; the median of each is reported.

    python bench/python_bench.py --model models/gemma-3-270m-q4_k_m.gguf --larql build/larql -t 2
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def cli_round(larql, model, n, threads):
    r = subprocess.run([larql, "run", model, PROMPT, "-n", str(n), "--temperature", "0", "--ignore-eos", "--json", "-t",
                        str(threads)], capture_output=True, text=True, check=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["decode_tok_s"]


def py_round(m, n):
    g = m.generate(PROMPT, max_tokens=n, temperature=0, ignore_eos=True)
    first = last = None
    count = 0
    for _ in g:
        t = time.perf_counter()
        if first is None:
            first = t
        last = t
        count += 1
    r = g.result
    wall = (len(r["ids"]) - 1) / (last - first) if last and last > first else float("nan")
    return wall, r["decode_tok_s"]


def llama_round(llm, n):
    first = last = None
    count = 0
    for _ in llm.create_completion(PROMPT, max_tokens=n, temperature=0, top_k=1, stream=True):
        t = time.perf_counter()
        if first is None:
            first = t
        last = t
        count += 1
    return (count - 1) / (last - first)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--larql", default="build/larql")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import larql
    import peer
    m = larql.Model(a.model, threads=a.threads)
    llm = peer.load_llama(n_ctx=1024, model=Path(a.model), threads=a.threads)
    prompt_ids = peer.llama_tokenize(llm, PROMPT)
    res = {"cli": [], "py_wall": [], "py_engine": [], "llama_py": [], "llama_c": []}
    py_round(m, 8)  # warm-up: page in the weights
    llama_round(llm, 8)
    for i in range(a.rounds):
        order = [0, 1, 2] if i % 2 == 0 else [2, 1, 0]
        for k in order:
            if k == 0:
                res["cli"].append(cli_round(a.larql, a.model, a.n, a.threads))
            elif k == 1:
                w, e = py_round(m, a.n)
                res["py_wall"].append(w)
                res["py_engine"].append(e)
            else:
                res["llama_py"].append(llama_round(llm, a.n))
                res["llama_c"].append(peer.llama_bench(llm, prompt_ids, a.n)["decode_tok_s"])
    med = {k: statistics.median(v) for k, v in res.items()}
    med["py_over_cli"] = med["py_wall"] / med["cli"]
    med["llama_py_over_llama_c"] = med["llama_py"] / med["llama_c"]
    if a.json:
        print(json.dumps(med))
        return
    print(f"decode tok/s, median of {a.rounds} rounds, {a.n} tokens, {a.threads} threads:")
    print(f"  larql CLI (engine timer)            {med['cli']:8.1f}")
    print(f"  larql Python generate (wall)        {med['py_wall']:8.1f}  = {med['py_over_cli']:.3f}x the CLI")
    print(f"  larql Python generate (engine)      {med['py_engine']:8.1f}")
    print(f"  llama-cpp-python stream (wall)      {med['llama_py']:8.1f}  = {med['llama_py_over_llama_c']:.3f}x its C loop")
    print(f"  llama.cpp eval loop (C speed)       {med['llama_c']:8.1f}")


if __name__ == "__main__":
    main()
