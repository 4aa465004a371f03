"""Issue 13's load check, the CI-sized run: 32 concurrent streaming clients for 60 s from a second
process on loopback (bench/serve_load.py). Every stream must complete (finish_reason, usage and
[DONE]) with no error, and the server's peak RSS stays within the model file plus a bound for
the K/V of 32 short sequences and the runtime (400 MB). Latencies are printed and recorded in
docs/BENCHMARKS.md (the 64-client, 10-minute run), never asserted.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_32_streaming_clients_for_60_s(larql_bin, model_path, tmp_path):
    out = tmp_path / "load.json"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "serve_load.py"), "--larql", str(larql_bin),
                        "--model", str(model_path), "--json", str(out), "load", "--clients", "32", "--seconds", "60"],
                       capture_output=True, text=True, timeout=600)
    assert out.exists(), p.stdout + p.stderr
    r = json.loads(out.read_text())["larql"]
    print(json.dumps(r))
    assert r["errors"] == 0, r["error_samples"]
    assert r["incomplete"] == 0
    assert r["requests"] >= 32  # every client finished at least one stream
    file_mb = model_path.stat().st_size / 2**20
    assert r["peak_rss_mb"] < file_mb + 400, r
    assert p.returncode == 0, p.stderr
