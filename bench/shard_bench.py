#!/usr/bin/env python3
"""Per-token cost of splitting a model over processes (docs/sharding.md), side by side in one run.

For each setup — one process, 2 shards, 3 shards (layer ranges of equal size, all on loopback on
this machine) — `larql bench --json` measures prefill and decode tok/s of the standard engine, the
client running attention and the shards the FFN (`--ffn remote:...`). Also reported: gRPC calls
and bytes per decoded token per hop (from the model's sizes: one WalkFfn call per layer, each row
`hidden` f32 values out and back; protobuf and HTTP/2 framing not counted). Not measured here
yet: added network latency (netem) and llama.cpp's RPC backend split the same way.

Usage: bench/shard_bench.py --larql build/larql --model models/gemma-3-270m-q4_k_m.gguf
                            [--threads 2] [--repeats 3] [--decode-tokens 64] [--json]
Results go to docs/BENCHMARKS.md ("Split over processes").
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def start_shard(larql: str, model: str, layers: str, threads: int) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([larql, "serve", model, "--grpc-port", "0", "--layers", layers, "-t", str(threads)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.match(r"listening on grpc://(\S+)", p.stdout.readline())
    if not m:
        p.kill()
        sys.exit(f"shard {layers} did not start")
    return p, m.group(1)


def bench(larql: str, model: str, threads: int, prompt: int, decode: int, ffn: str | None) -> dict:
    cmd = [larql, "bench", model, "--engine", "standard", "--prompt-tokens", str(prompt), "--decode-tokens", str(decode),
           "-t", str(threads), "--json"]
    if ffn:
        cmd += ["--ffn", ffn]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800).stdout
    e = json.loads(out)["engines"][0]
    return {"prefill_tok_s": e["prefill_tok_s"], "decode_tok_s": e["decode_tok_s"]}


def ranges(n_layers: int, k: int) -> list[str]:
    cuts = [round(i * n_layers / k) for i in range(k + 1)]
    return [f"{cuts[i]}-{cuts[i + 1] - 1}" for i in range(k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--larql", default="build/larql")
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    show = json.loads(subprocess.run([a.larql, "show", a.model, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    n_layers, hidden = int(show["layers"]), int(show["hidden"])
    rows = []
    for k in (1, 2, 3):
        shards, ffn = [], None
        try:
            if k > 1:
                shards = [start_shard(a.larql, a.model, r, a.threads) for r in ranges(n_layers, k)]
                ffn = "remote:" + ",".join(addr for _, addr in shards)
            runs = [bench(a.larql, a.model, a.threads, a.prompt_tokens, a.decode_tokens, ffn) for _ in range(a.repeats)]
        finally:
            for p, _ in shards:
                p.terminate()
                p.wait(timeout=30)
        rows.append({
            "setup": "one process" if k == 1 else f"{k} shards",
            "prefill_tok_s": statistics.median(r["prefill_tok_s"] for r in runs),
            "decode_tok_s": statistics.median(r["decode_tok_s"] for r in runs),
        })
    base = rows[0]
    # One WalkFfn per layer per decoded token: the row out and back (f32), framing excluded.
    per_layer = 2 * hidden * 4
    for r in rows:
        r["decode_vs_one_process"] = r["decode_tok_s"] / base["decode_tok_s"]
        r["prefill_vs_one_process"] = r["prefill_tok_s"] / base["prefill_tok_s"]
        r["calls_per_token"] = 0 if r is base else n_layers
        r["payload_bytes_per_token"] = 0 if r is base else n_layers * per_layer
    result = {"machine": f"{cpu_name()}, {a.threads} threads per process", "model": a.model, "n_layers": n_layers,
              "hidden": hidden, "prompt_tokens": a.prompt_tokens, "decode_tokens": a.decode_tokens,
              "repeats": a.repeats, "rows": rows}
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['machine']}; {a.model}; median of {a.repeats}")
    print(f"{'setup':<12} {'prefill tok/s':>14} {'decode tok/s':>13} {'decode x':>9} {'calls/tok':>10} {'bytes/tok':>10}")
    for r in rows:
        print(f"{r['setup']:<12} {r['prefill_tok_s']:>14.1f} {r['decode_tok_s']:>13.1f} {r['decode_vs_one_process']:>9.3f} "
              f"{r['calls_per_token']:>10} {r['payload_bytes_per_token']:>10}")


if __name__ == "__main__":
    main()
