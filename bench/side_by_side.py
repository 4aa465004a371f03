#!/usr/bin/env python3
"""larql vs llama.cpp, side by side, on one model and one machine.

    bench/side_by_side.py --larql build/larql --model models/gemma-3-270m-q4_k_m.gguf \
        [--threads 2] [--prompt-tokens 512] [--decode-tokens 128] [--json OUT]

larql: `larql bench MODEL --prompt-tokens P --decode-tokens D --threads T --json`.
llama.cpp (llama-cpp-python, same threads): the first P tokens (BOS first) of a fixed text,
prefill timed over one eval of the prompt (n_batch = P), decode timed over D single-token evals,
on a fresh context. Each side runs in its own child process; peak RSS is that child's
ru_maxrss (wait4). Timings are recorded, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))


def machine() -> dict:
    info = {"platform": platform.platform(), "logical_cpus": os.cpu_count()}
    try:
        info["affinity_cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        text = Path("/proc/cpuinfo").read_text()
        model, flags, cores = None, set(), set()
        phys = None
        for line in text.splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and model is None:
                model = v
            elif k == "flags" and not flags:
                flags = set(v.split())
            elif k == "physical id":
                phys = v
            elif k == "core id":
                cores.add((phys, v))
        info["cpu_model"] = model
        if cores:
            info["physical_cores"] = len(cores)
        info["simd"] = sorted(f for f in flags if f in {
            "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
            "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile"})
        info["avx2"] = "avx2" in flags
        info["avx512"] = "avx512f" in flags
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return info


def run_child(cmd: list[str], timeout: float) -> tuple[int, str, str, int, float]:
    """Run cmd; return (exit code, stdout, stderr, peak RSS bytes of exactly this child, wall s).
    Reaps with os.wait4 so the RSS is this child's alone (the llama.cpp child's includes the
    Python interpreter and numpy, a few tens of MiB)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        return 127, "", f"cannot start {cmd[0]}: {e}", 0, 0.0
    import threading
    bufs = {"out": "", "err": ""}

    def pump(stream, key):
        bufs[key] = stream.read()

    th = [threading.Thread(target=pump, args=(p.stdout, "out")),
          threading.Thread(target=pump, args=(p.stderr, "err"))]
    for t in th:
        t.start()
    deadline = time.monotonic() + timeout
    rc, rss = None, 0
    while rc is None:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            rc = os.waitstatus_to_exitcode(status)
            rss = ru.ru_maxrss * 1024
            p.returncode = rc
            break
        if time.monotonic() > deadline:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = rc = 124
            rss = ru.ru_maxrss * 1024
            bufs["err"] += f"\n(timed out after {timeout}s)"
            break
        time.sleep(0.05)
    for t in th:
        t.join()
    return rc, bufs["out"], bufs["err"], rss, time.perf_counter() - t0


def llama_worker(args) -> None:
    """Child process: benchmark llama.cpp and print one JSON object."""
    import peer
    text_path = Path("/usr/share/common-licenses/GPL-3")
    if not text_path.is_file():
        text_path = REPO / "tests" / "python" / "data" / "long_text_gpl3.txt"
    t0 = time.perf_counter()
    llm = peer.load_llama(n_ctx=args.prompt_tokens + args.decode_tokens + 16, logits_all=False,
                          model=Path(args.model), threads=args.threads,
                          n_batch=max(args.prompt_tokens, 1))
    load_s = time.perf_counter() - t0
    ids = peer.llama_tokenize(llm, text_path.read_text(encoding="utf-8"))
    while len(ids) < args.prompt_tokens:
        ids += ids[1:]
    ids = ids[:args.prompt_tokens]
    if args.warmup:
        peer.llama_bench(llm, ids[:16], 4)
    res = peer.llama_bench(llm, ids, args.decode_tokens)
    import llama_cpp
    res.update({"threads": args.threads, "load_s": load_s,
                "llama_cpp_python": getattr(llama_cpp, "__version__", "?"),
                "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
                "warmup": bool(args.warmup), "prompt_source": str(text_path),
                "extra_bufts": peer.EXTRA_BUFTS_DEFAULT})
    print(json.dumps(res))


def _fmt(x, spec=".1f"):
    return "—" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--larql", default=str(REPO / "build" / "larql"))
    ap.add_argument("--model", default=str(REPO / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="llama.cpp: skip the untimed 16-token warm-up eval")
    ap.add_argument("--skip-larql", action="store_true", help="only run llama.cpp")
    ap.add_argument("--skip-llama", action="store_true", help="only run larql")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--_llama-worker", dest="worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        llama_worker(args)
        return 0

    result = {"machine": machine(), "model": str(args.model), "threads": args.threads,
              "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
              "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    status = 0

    if not args.skip_larql:
        cmd = [args.larql, "bench", args.model, "--prompt-tokens", str(args.prompt_tokens),
               "--decode-tokens", str(args.decode_tokens), "--threads", str(args.threads), "--json"]
        rc, out, err, rss, wall = run_child(cmd, args.timeout)
        if rc != 0:
            print(f"larql bench failed (exit {rc}): {err[-2000:]}", file=sys.stderr)
            result["larql"] = {"error": err[-2000:], "exit": rc}
            status = 1
        else:
            try:
                lq = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                print(f"larql bench: stdout is not JSON: {out[-1000:]!r}", file=sys.stderr)
                lq, status = {"error": "bad json"}, 1
            lq["child_peak_rss_bytes"] = rss
            lq["wall_s"] = wall
            result["larql"] = lq

    if not args.skip_llama:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_llama-worker",
               "--model", args.model, "--threads", str(args.threads),
               "--prompt-tokens", str(args.prompt_tokens),
               "--decode-tokens", str(args.decode_tokens)]
        if not args.warmup:
            cmd.append("--no-warmup")
        rc, out, err, rss, wall = run_child(cmd, args.timeout)
        if rc != 0:
            print(f"llama.cpp worker failed (exit {rc}): {err[-2000:]}", file=sys.stderr)
            result["llama_cpp"] = {"error": err[-2000:], "exit": rc}
            status = 1
        else:
            ll = json.loads(out.strip().splitlines()[-1])
            ll["child_peak_rss_bytes"] = rss
            ll["wall_s"] = wall
            result["llama_cpp"] = ll

    lq, ll = result.get("larql", {}), result.get("llama_cpp", {})
    ratios = {}
    for k in ("prefill_tok_s", "decode_tok_s"):
        if isinstance(lq.get(k), (int, float)) and isinstance(ll.get(k), (int, float)) and ll[k]:
            ratios[k] = lq[k] / ll[k]
    result["ratio_larql_over_llama"] = ratios

    m = result["machine"]
    print(f"machine : {m.get('cpu_model')} — {m.get('physical_cores', '?')} cores / "
          f"{m.get('logical_cpus')} logical, avx2={'yes' if m.get('avx2') else 'no'}, "
          f"avx512={'yes' if m.get('avx512') else 'no'} ({' '.join(m.get('simd', []))})")
    print(f"model   : {args.model}")
    print(f"setup   : {args.threads} threads, {args.prompt_tokens}-token prompt, "
          f"{args.decode_tokens} decode tokens")
    if ll and "extra_bufts" in ll and not ll["extra_bufts"]:
        print("llama.cpp: extra buffer types off (AMX CPU: its AMX matmul crashes; see tests/python/peer.py)")
    print()
    print(f"| {'':10} | {'prefill tok/s':>13} | {'decode tok/s':>12} | {'peak RSS MiB':>12} |")
    print(f"|{'-' * 12}|{'-' * 15}|{'-' * 14}|{'-' * 14}|")

    def row(name, d):
        rss = d.get("peak_rss_bytes") or d.get("child_peak_rss_bytes")
        print(f"| {name:10} | {_fmt(d.get('prefill_tok_s')):>13} | {_fmt(d.get('decode_tok_s')):>12}"
              f" | {_fmt(rss / 2**20 if rss else None):>12} |")

    if lq and "error" not in lq:
        row("larql", lq)
    if ll and "error" not in ll:
        row("llama.cpp", ll)
    if ratios:
        print(f"| {'ratio':10} | {_fmt(ratios.get('prefill_tok_s'), '.2f') + 'x':>13} | "
              f"{_fmt(ratios.get('decode_tok_s'), '.2f') + 'x':>12} | {'':>12} |")

    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json_out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
