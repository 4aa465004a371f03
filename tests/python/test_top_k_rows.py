"""down_meta's search (compute::top_k_rows) on the real model against numpy.

For FFN features of two layers, the top-10 tokens of token_embd · ffn_down[:, f] — the raw,
unscaled embedding, as a vindex's down_meta records them — from `larql_down_meta_dump`
(tests/compute/tools/down_meta_dump.cc), against numpy in float64 on the weights dequantised by
the `gguf` package, for a sample of 50 features per layer: the same ids in the same order, scores
within 1e-6 relative (the issue's bar is 1e-3).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gguf_table import dequantize_tensor, read_gguf

REPO = Path(__file__).resolve().parents[2]
TOP_K = 10
SAMPLE = 50


def tool() -> Path:
    t = Path(os.environ.get("LARQL_BUILD_DIR", REPO / "build")) / "larql_down_meta_dump"
    if not (t.is_file() and os.access(t, os.X_OK)):
        pytest.fail("%s not built: `cmake --build build --target larql_down_meta_dump`" % t)
    return t


@pytest.fixture(scope="module")
def weights(model_path):
    mm, _, table = read_gguf(model_path)
    return mm, table, dequantize_tensor(mm, table, "token_embd.weight").astype(np.float64)


@pytest.mark.parametrize("layer", [0, 9])
def test_down_meta_matches_numpy(model_path, weights, layer):
    mm, table, embed = weights
    r = subprocess.run([str(tool()), str(model_path), str(layer), str(TOP_K)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    print("\n" + r.stderr.strip())
    got = {}
    for line in r.stdout.splitlines():
        f, entries = line.split("\t")
        got[int(f)] = [(int(e.split(":")[0]), float(e.split(":")[1])) for e in entries.split(",")]
    down = dequantize_tensor(mm, table, f"blk.{layer}.ffn_down.weight").astype(np.float64)  # [hidden, ffn]
    assert len(got) == down.shape[1]
    rng = np.random.default_rng(layer)
    sample = rng.choice(down.shape[1], SAMPLE, replace=False)
    scores = embed @ down[:, sample]  # [vocab, SAMPLE]
    for col, f in enumerate(sample):
        s = scores[:, col]
        order = np.lexsort((np.arange(s.size), -s))[:TOP_K]  # score desc, then id asc
        want = [(int(i), float(s[i])) for i in order]
        ids = [i for i, _ in got[int(f)]]
        assert ids == [i for i, _ in want], (layer, int(f), ids, want)
        for (_, gs), (_, ws) in zip(got[int(f)], want):
            assert gs == pytest.approx(ws, rel=1e-6, abs=1e-9), (layer, int(f))
