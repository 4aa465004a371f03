#!/usr/bin/env python3
"""Per-token cost of splitting a model over processes (docs/sharding.md), side by side in one run.

Setups, each measured by `larql bench --json` (standard engine, prefill and decode tok/s):
  - one process;
  - `--ffn remote:...` over 2 and 3 shards on loopback (attention here, each layer's FFN on its
    shard: one WalkFfn round trip per layer per token);
  - `--pipeline remote:...` over 2 and 3 shards on loopback (the layers and their K/V on the
    shards: one RunLayers round trip per shard per token);
  - the 2-shard splits again with each shard in a network namespace this script makes (ip netns +
    a veth pair per shard), with 0 ms and — where the kernel has netem — 1 ms and 5 ms added to
    each direction of each veth (`tc qdisc ... netem delay`), so a round trip costs 2 x that more;
  - llama.cpp's RPC backend split the same way, when scripts/build_llama_rpc.sh has built
    `ggml-rpc-server` and `llama-bench` (GGML_RPC=ON): `llama-bench` alone, then over 2
    `ggml-rpc-server`s on loopback and in the namespaces (-ngl 99 -sm layer -ts 1/1: every layer
    on the servers, half each), so each engine's split is compared with its own one-process speed
    (OMP_WAIT_POLICY=passive for llama.cpp: see LLAMA_ENV).

Also reported: round trips and payload bytes per decoded token (from the model's sizes: f32 rows,
protobuf/HTTP-2 framing not counted). Needs root for the namespaces; without them (or without
netem) those rows are left out and the output says why — nothing is simulated.

Usage: bench/shard_bench.py --larql build/larql --model models/gemma-3-270m-q4_k_m.gguf
                            [--threads 2] [--repeats 3] [--decode-tokens 64] [--latency 0,1,5]
                            [--llama-rpc build/llama-rpc/build/bin] [--json]
Results go to docs/BENCHMARKS.md ("Split over processes").
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

NS_PREFIX = "larqlb"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


# ---- network namespaces ----

class Namespaces:
    """One namespace per shard, reached over a veth pair: host 10.29.I.1 <-> namespace 10.29.I.2."""

    def __init__(self, count: int):
        self.count = count
        self.made: list[int] = []
        self.netem_ms: float | None = None

    def __enter__(self):
        for i in range(self.count):
            ns, host, peer = f"{NS_PREFIX}{i}", f"{NS_PREFIX}h{i}", f"{NS_PREFIX}n{i}"
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", host, check=False)
            sh("ip", "netns", "add", ns)
            self.made.append(i)
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", ns)
            sh("ip", "addr", "add", f"10.29.{i}.1/24", "dev", host)
            sh("ip", "link", "set", host, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.29.{i}.2/24", "dev", peer)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", peer, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for i in self.made:
            sh("ip", "link", "del", f"{NS_PREFIX}h{i}", check=False)
            sh("ip", "netns", "del", f"{NS_PREFIX}{i}", check=False)

    def address(self, i: int) -> str:
        return f"10.29.{i}.2"

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", f"{NS_PREFIX}{i}"]

    def set_delay(self, ms: float) -> str | None:
        """netem delay `ms` on both ends of every veth (0: none). Returns why it cannot, or None."""
        for i in self.made:
            for pre, dev in (([], f"{NS_PREFIX}h{i}"), (self.prefix(i), f"{NS_PREFIX}n{i}")):
                sh(*pre, "tc", "qdisc", "del", "dev", dev, "root", check=False)
                if ms > 0:
                    r = sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", f"{ms}ms", check=False)
                    if r.returncode != 0:
                        return f"tc netem: {r.stderr.strip()} (kernel {platform.release()})"
        self.netem_ms = ms
        return None


def namespaces_usable() -> str | None:
    if os.geteuid() != 0:
        return "not root: network namespaces need it"
    r = sh("ip", "netns", "add", f"{NS_PREFIX}probe", check=False)
    if r.returncode != 0:
        return f"ip netns add: {r.stderr.strip()}"
    sh("ip", "netns", "del", f"{NS_PREFIX}probe", check=False)
    return None


ECHO = ("import socket,sys\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 7999)); s.listen(1)\n"
        "print('up', flush=True); c,_=s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
        "while (b := c.recv(1)): c.sendall(b)\n")


def rtt_ms(ns: "Namespaces", i: int) -> float:
    """The median TCP round trip (1 byte there and back, Nagle off) to namespace i: what netem adds to."""
    import socket
    p = subprocess.Popen([*ns.prefix(i), sys.executable, "-c", ECHO, ns.address(i)], stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        c = socket.create_connection((ns.address(i), 7999), timeout=10)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            c.sendall(b"x")
            c.recv(1)
            times.append(1000 * (time.perf_counter() - t0))
        c.close()
        return statistics.median(times)
    finally:
        p.kill()
        p.wait()


# ---- larql ----

def start_shard(larql: str, model: str, layers: str, threads: int, prefix: list[str] | None = None,
                host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    cmd = [*(prefix or []), larql, "serve", model, "--grpc-port", "0", "--layers", layers, "-t", str(threads)]
    if host != "127.0.0.1":
        cmd += ["--grpc-host", host, "--grpc-insecure"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.match(r"listening on grpc://(\S+)", p.stdout.readline())
    if not m:
        p.kill()
        sys.exit(f"shard {layers} did not start")
    return p, m.group(1)


def larql_bench(a, mode: str | None, spec: str | None) -> dict:
    cmd = [a.larql, "bench", a.model, "--engine", "standard", "--prompt-tokens", str(a.prompt_tokens), "--decode-tokens",
           str(a.decode_tokens), "-t", str(a.threads), "--json"]
    if mode:
        cmd += [f"--{mode}", spec, "--shard-timeout-ms", "120000"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800).stdout
    e = json.loads(out)["engines"][0]
    return {"prefill_tok_s": e["prefill_tok_s"], "decode_tok_s": e["decode_tok_s"]}


def ranges(n_layers: int, k: int) -> list[str]:
    cuts = [round(i * n_layers / k) for i in range(k + 1)]
    return [f"{cuts[i]}-{cuts[i + 1] - 1}" for i in range(k)]


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in ("prefill_tok_s", "decode_tok_s")}


def paired(measure_base, measure_split, repeats: int) -> tuple[dict, dict]:
    """Baseline and split measured in turn, `repeats` times each: the machine's load (other
    processes on shared cores) drifts over minutes, so each split's ratio is taken against the
    one-process runs made beside it, not against one baseline from the start of the run."""
    base, split = [], []
    for _ in range(repeats):
        base.append(measure_base())
        split.append(measure_split())
    return median_of(base), median_of(split)


def larql_split(a, n_layers: int, k: int, mode: str, ns: Namespaces | None = None) -> tuple[dict, dict]:
    shards = []
    try:
        for i, r in enumerate(ranges(n_layers, k)):
            if ns:
                shards.append(start_shard(a.larql, a.model, r, a.threads, ns.prefix(i), ns.address(i)))
            else:
                shards.append(start_shard(a.larql, a.model, r, a.threads))
        spec = "remote:" + ",".join(addr for _, addr in shards)
        return paired(lambda: larql_bench(a, None, None), lambda: larql_bench(a, mode, spec), a.repeats)
    finally:
        for p, _ in shards:
            p.terminate()
            p.wait(timeout=30)


# ---- llama.cpp ----

# llama.cpp's OpenMP threads spin while they wait: on cores shared with other processes a thread
# spinning while the one it waits for is descheduled made its decode 45x slower here (0.6 tok/s
# against 27.6); passive waiting is its best on a shared machine.
LLAMA_ENV = {**os.environ, "OMP_WAIT_POLICY": "passive"}

def llama_bench(a, rpc: str | None) -> dict:
    cmd = [str(Path(a.llama_rpc) / "llama-bench"), "-m", a.model, "-p", str(a.prompt_tokens), "-n", str(a.decode_tokens),
           "-t", str(a.threads), "-r", "1", "-o", "json"]
    if rpc:  # every layer on the servers, split evenly between them by layer
        cmd += ["--rpc", rpc, "-ngl", "99", "-sm", "layer", "-ts", "/".join(["1"] * len(rpc.split(",")))]
    else:
        cmd += ["-ngl", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800, env=LLAMA_ENV).stdout
    res = json.loads(out)
    pp = next(r for r in res if r["n_prompt"] > 0 and r["n_gen"] == 0)
    tg = next(r for r in res if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {"prefill_tok_s": pp["avg_ts"], "decode_tok_s": tg["avg_ts"]}


def llama_split(a, k: int, ns: Namespaces | None = None) -> tuple[dict, dict]:
    servers, addrs = [], []
    try:
        for i in range(k):
            host = ns.address(i) if ns else "127.0.0.1"
            port = 50652 + i
            p = subprocess.Popen([*(ns.prefix(i) if ns else []), str(Path(a.llama_rpc) / "ggml-rpc-server"), "-H", host,
                                  "-p", str(port), "-t", str(a.threads)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=LLAMA_ENV)
            servers.append(p)
            addrs.append(f"{host}:{port}")
        time.sleep(1.5)
        rpc = ",".join(addrs)
        return paired(lambda: llama_bench(a, None), lambda: llama_bench(a, rpc), a.repeats)
    finally:
        for p in servers:
            p.terminate()
            p.wait(timeout=30)


# ---- main ----

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--larql", default="build/larql")
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--latency", default="0,1,5", help="ms added to each direction of each veth (0: the veth alone)")
    ap.add_argument("--llama-rpc", default="build/llama-rpc/build/bin",
                    help="directory with llama.cpp's ggml-rpc-server and llama-bench (scripts/build_llama_rpc.sh)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    show = json.loads(sh(a.larql, "show", a.model, "--json").stdout)
    n_layers, hidden = int(show["layers"]), int(show["hidden"])
    row_bytes = 2 * hidden * 4  # one f32 row out and back
    notes: list[str] = []
    rows: list[dict] = []

    def add(engine: str, setup: str, pair: tuple[dict, dict], trips: int, payload: int, **extra):
        base, r = pair
        rows.append({"engine": engine, "setup": setup, **r, **extra,
                     "one_process_prefill_tok_s": base["prefill_tok_s"], "one_process_decode_tok_s": base["decode_tok_s"],
                     "decode_vs_one_process": r["decode_tok_s"] / base["decode_tok_s"],
                     "prefill_vs_one_process": r["prefill_tok_s"] / base["prefill_tok_s"],
                     "round_trips_per_token": trips, "payload_bytes_per_token": payload})

    for k in (2, 3):
        add("larql", f"--ffn, {k} shards, loopback", larql_split(a, n_layers, k, "ffn"), n_layers, n_layers * row_bytes)
    for k in (2, 3):
        add("larql", f"--pipeline, {k} shards, loopback", larql_split(a, n_layers, k, "pipeline"), k, k * row_bytes)

    llama = Path(a.llama_rpc) / "ggml-rpc-server"
    have_llama = llama.is_file() and (Path(a.llama_rpc) / "llama-bench").is_file()
    if have_llama:
        add("llama.cpp", "RPC, 2 servers, loopback", llama_split(a, 2), -1, -1)
    else:
        notes.append(f"llama.cpp's RPC backend not measured: no {llama} (scripts/build_llama_rpc.sh builds it)")

    why = namespaces_usable()
    if why:
        notes.append(f"no network namespaces ({why}): the latency rows are left out")
    else:
        with Namespaces(3) as ns:
            for ms in (float(x) for x in a.latency.split(",")):
                why = ns.set_delay(ms)
                if why:
                    notes.append(f"{ms:g} ms added latency not measured: {why}")
                    continue
                rtt = rtt_ms(ns, 0)
                where = f"veth + {ms:g} ms each way" if ms > 0 else "veth, nothing added"
                for mode in ("ffn", "pipeline"):
                    trips = n_layers if mode == "ffn" else 2
                    add("larql", f"--{mode}, 2 shards, {where}", larql_split(a, n_layers, 2, mode, ns), trips,
                        trips * row_bytes, rtt_ms=rtt)
                if have_llama:
                    add("llama.cpp", f"RPC, 2 servers, {where}", llama_split(a, 2, ns), -1, -1, rtt_ms=rtt)
            ns.set_delay(0)

    result = {"machine": f"{cpu_name()}, {os.cpu_count()} cores, {a.threads} threads per process",
              "kernel": platform.release(), "model": a.model, "n_layers": n_layers, "hidden": hidden,
              "prompt_tokens": a.prompt_tokens, "decode_tokens": a.decode_tokens, "repeats": a.repeats,
              "load_average": os.getloadavg(), "rows": rows, "notes": notes}
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['machine']}; kernel {result['kernel']}; {a.model}; median of {a.repeats}, each split beside its own "
          "one-process runs")
    print(f"{'engine':<10} {'setup':<42} {'prefill/s':>10} {'decode/s':>9} {'alone/s':>8} {'dec x':>6} {'RTT ms':>7} "
          f"{'trips':>6} {'bytes':>7}")
    for r in rows:
        rtt = f"{r['rtt_ms']:.3f}" if r.get("rtt_ms") is not None else ""
        trips = str(r["round_trips_per_token"]) if r["round_trips_per_token"] >= 0 else "?"
        payload = str(r["payload_bytes_per_token"]) if r["payload_bytes_per_token"] >= 0 else "?"
        print(f"{r['engine']:<10} {r['setup']:<42} {r['prefill_tok_s']:>10.1f} {r['decode_tok_s']:>9.2f} "
              f"{r['one_process_decode_tok_s']:>8.2f} {r['decode_vs_one_process']:>6.3f} {rtt:>7} {trips:>6} {payload:>7}")
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
