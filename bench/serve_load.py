#!/usr/bin/env python3
"""Load and throughput of `larql serve` from a second process on loopback (docs/server.md).

    bench/serve_load.py --larql build/larql --model models/gemma-3-270m-q4_k_m.gguf \\
        load [--clients 32] [--seconds 60] [--json OUT]
    bench/serve_load.py ... throughput [--streams 1,8,16] [--max-tokens 64] [--peer] [--json OUT]

load: CLIENTS threads each stream completions (`"stream": true`, include_usage) back to back for
SECONDS; every stream must end with a finish_reason chunk, a usage chunk and `data: [DONE]`.
Reports errors, incomplete streams, p50/p99 time to first token and inter-token latency, and the
server's peak RSS (VmHWM of /proc/PID/status). Exit status 1 on any error or incomplete stream.

throughput: for each stream count S, S clients each send the same number of requests (greedy,
max_tokens fixed); aggregate decode tok/s = completion tokens / wall time. With --peer the same
workload runs against llama.cpp's own Python server (`python -m llama_cpp.server`, from
llama-cpp-python's [server] extra, same threads, `--interrupt_requests False` so a new request
waits instead of cutting the running stream) — it serves one request at a time (no parallel
slots), which is what its users get. Timings are recorded, never asserted.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PROMPTS = [
    "The capital of France is", "Once upon a time, in a small village by the sea,",
    "Write a short poem about autumn leaves.", "List three uses of copper:",
    "The quick brown fox", "In 1969, the first humans", "A recipe for pancakes starts with",
    "The three laws of thermodynamics are", "def fibonacci(n):", "Dear diary, today I",
]


def start_larql(larql: str, model: str, threads: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([larql, "serve", model, "--port", "0", "-t", str(threads), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"listening on (http://\S+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"larql serve did not start: {line!r} {proc.stderr.read()}")
    return proc, m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_peer(model: str, threads: int, ctx: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                             "--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads),
                             "--n_ctx", str(ctx),
                             # its default cuts a running stream when the next request arrives
                             "--interrupt_requests", "False"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("llama_cpp.server did not start (is llama-cpp-python's [server] extra installed?)")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stream_once(url: str, prompt: str, max_tokens: int, temperature: float, seed: int) -> dict:
    """One streamed completion. Returns ttft (s), gaps (s between content chunks), tokens, complete."""
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                       "seed": seed, "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, last, gaps, finish, usage, done = None, None, [], None, None, False
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            break
        ev = json.loads(data)
        now = time.perf_counter()
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            if ch.get("text"):
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    c.close()
    tokens = usage["completion_tokens"] if usage else len(gaps) + (ttft is not None)
    return {"ttft": ttft, "gaps": gaps, "tokens": tokens, "complete": done and finish is not None,
            "wall": time.perf_counter() - t0}


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_load(url: str, pid: int, clients: int, seconds: float) -> dict:
    stop_at = time.time() + seconds
    lock = threading.Lock()
    res = {"requests": 0, "errors": 0, "incomplete": 0, "tokens": 0, "ttft": [], "gaps": [], "error_samples": []}

    def client(i: int) -> None:
        n = 0
        while time.time() < stop_at:
            try:
                r = stream_once(url, PROMPTS[(i + n) % len(PROMPTS)], 16 + (i * 7 + n * 13) % 48, 0.8, i * 1000 + n)
                with lock:
                    res["requests"] += 1
                    res["tokens"] += r["tokens"]
                    res["incomplete"] += not r["complete"]
                    if r["ttft"] is not None:
                        res["ttft"].append(r["ttft"])
                    res["gaps"].extend(r["gaps"])
            except Exception as e:  # noqa: BLE001 — every failure is counted and reported
                with lock:
                    res["errors"] += 1
                    if len(res["error_samples"]) < 5:
                        res["error_samples"].append(repr(e)[:300])
            n += 1

    t0 = time.time()
    with cf.ThreadPoolExecutor(clients) as ex:
        list(ex.map(client, range(clients)))
    wall = time.time() - t0
    out = {"clients": clients, "seconds": round(wall, 1), "requests": res["requests"], "errors": res["errors"],
           "incomplete": res["incomplete"], "completion_tokens": res["tokens"],
           "aggregate_tok_s": round(res["tokens"] / wall, 1),
           "ttft_p50_ms": ms(pct(res["ttft"], 50)), "ttft_p99_ms": ms(pct(res["ttft"], 99)),
           "itl_p50_ms": ms(pct(res["gaps"], 50)), "itl_p99_ms": ms(pct(res["gaps"], 99)),
           "peak_rss_mb": round(peak_rss_mb(pid), 1), "error_samples": res["error_samples"]}
    return out


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def run_throughput(url: str, streams: int, per_stream: int, max_tokens: int) -> dict:
    def client(i: int) -> int:
        return sum(stream_once(url, PROMPTS[(i + k) % len(PROMPTS)], max_tokens, 0.0, 0)["tokens"]
                   for k in range(per_stream))
    stream_once(url, PROMPTS[0], 4, 0.0, 0)  # warm
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(streams) as ex:
        tokens = sum(ex.map(client, range(streams)))
    wall = time.perf_counter() - t0
    return {"streams": streams, "requests": streams * per_stream, "completion_tokens": tokens,
            "seconds": round(wall, 2), "aggregate_tok_s": round(tokens / wall, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--larql", default="build/larql")
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here too")
    sub = ap.add_subparsers(dest="mode", required=True)
    lo = sub.add_parser("load")
    lo.add_argument("--clients", type=int, default=32)
    lo.add_argument("--seconds", type=float, default=60)
    th = sub.add_parser("throughput")
    th.add_argument("--streams", default="1,8,16")
    th.add_argument("--requests-per-stream", type=int, default=2)
    th.add_argument("--max-tokens", type=int, default=64)
    th.add_argument("--peer", action="store_true", help="also run llama_cpp.server on the same workload")
    a = ap.parse_args()

    results: dict = {"mode": a.mode, "threads": a.threads, "model": os.path.basename(a.model)}
    if a.mode == "load":
        proc, url = start_larql(a.larql, a.model, a.threads, ["--slots", str(max(16, a.clients)),
                                                               "--queue", str(4 * a.clients)])
        try:
            results["larql"] = run_load(url, proc.pid, a.clients, a.seconds)
        finally:
            stop(proc)
        ok = results["larql"]["errors"] == 0 and results["larql"]["incomplete"] == 0 and results["larql"]["requests"] > 0
    else:
        counts = [int(x) for x in a.streams.split(",")]
        proc, url = start_larql(a.larql, a.model, a.threads, ["--slots", str(max(counts))])
        try:
            results["larql"] = [run_throughput(url, s, a.requests_per_stream, a.max_tokens) for s in counts]
        finally:
            stop(proc)
        base = results["larql"][0]["aggregate_tok_s"]
        for r in results["larql"]:
            r["vs_1_stream"] = round(r["aggregate_tok_s"] / base, 2) if base else None
        if a.peer:
            pproc, purl = start_peer(a.model, a.threads, 2048)
            try:
                results["llama_cpp_server"] = [run_throughput(purl, s, a.requests_per_stream, a.max_tokens) for s in counts]
            finally:
                stop(pproc)
            for r, p in zip(results["larql"], results["llama_cpp_server"]):
                r["vs_llama_cpp_server"] = round(r["aggregate_tok_s"] / p["aggregate_tok_s"], 2)
        ok = True
    text = json.dumps(results, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
