"""`larql parity` and `larql diag` (docs/cli.md), on the committed family fixtures (tiny, fast).

parity's numbers are checked against numpy on the two sides' own `larql perplexity --logits-out`
matrices (KL(A||B) per position in float64, top-1 agreement, the first position whose argmax
differs); a GGUF against its `keep` vindex, and a model against itself through the standard
engine (batch-invariant), part nowhere (KL 0, residual cosines 1). diag finds a NaN written into
one weight of a copied GGUF: it names the tensor and its layer, the first non-finite activation is
in that layer, and the exit code is 1; the clean file exits 0.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import peer
from gguf_table import read_gguf

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
TEXT = ("The old bridge at Lowfield was built in 1887 by a small crew of engineers. Every spring the river "
        "rose, and every spring the town argued about whether the stones would hold.")


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def parity(a, b, text, *extra, check=True):
    r = peer.run_larql(["parity", a, b, text, "--json", "-t", peer.THREADS, *extra], check=check)
    return json.loads(r.stdout) if check else r


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("family", ["mixtral", "llama3"])
def test_parity_f32_vs_q8_0_matches_numpy(family, text_file, tmp_path):
    a, b = FIXTURES / family / f"{family}-f32.gguf", FIXTURES / family / f"{family}-q8_0.gguf"
    got = parity(a, b, text_file)
    peer.larql_perplexity(text_file, logits_out=tmp_path / "a.npy", model=a)
    peer.larql_perplexity(text_file, logits_out=tmp_path / "b.npy", model=b)
    la, lb = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    pa, pb = log_softmax(la), log_softmax(lb)
    kl = np.maximum(0.0, (np.exp(pa) * (pa - pb)).sum(axis=-1))
    assert got["tokens"] == la.shape[0]
    assert got["kl_mean"] == pytest.approx(kl.mean(), rel=1e-6, abs=1e-12)
    assert got["kl_max"] == pytest.approx(kl.max(), rel=1e-6)
    assert got["kl_max_position"] == int(kl.argmax())
    same = la.argmax(-1) == lb.argmax(-1)
    assert got["top1_agreement"] == pytest.approx(same.mean())
    first = int(np.argmin(same)) if not same.all() else None
    assert got["first_divergence"] == first
    assert len(got["layers"]) == 2 and all(0.9 < x["cosine_min"] <= 1.0 + 1e-9 for x in got["layers"])


def test_parity_of_a_gguf_and_its_vindex_and_an_engine_is_exact(text_file, tmp_path):
    g = FIXTURES / "qwen2_moe" / "qwen2_moe-f32.gguf"
    vx = tmp_path / "q.vindex"
    peer.run_larql(["extract", g, "-o", vx, "--level", "inference"])
    for got in (parity(g, vx, text_file), parity(g, g, text_file, "--engine-b", "standard")):
        assert got["kl_mean"] == 0.0 and got["kl_max"] == 0.0
        assert got["top1_agreement"] == 1.0 and got["first_divergence"] is None
        assert all(x["cosine_at"] == pytest.approx(1.0, abs=1e-12) for x in got["layers"])
    assert parity(g, g, text_file, "--engine-b", "standard")["layers"] == []  # an engine side is not observed


def test_parity_refuses_two_vocabularies(text_file):
    r = parity(FIXTURES / "mixtral" / "mixtral-f32.gguf", FIXTURES / "qwen2" / "qwen2-f32.gguf", text_file, check=False)
    assert r.returncode == 1 and "vocabulary" in r.stderr, r.stderr
    r = parity(FIXTURES / "mixtral" / "mixtral-f32.gguf", FIXTURES / "mixtral" / "mixtral-f32.gguf", text_file,
               "--engine-b", "no-such-engine", check=False)
    assert r.returncode != 0 and "no-such-engine" in r.stderr


def test_parity_refuses_an_empty_text(tmp_path):
    # As shannon does: BOS alone is no text to compare (it reported "1 tokens ... no divergence").
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    m = FIXTURES / "llama3" / "llama3-f32.gguf"
    r = parity(m, m, empty, check=False)
    assert r.returncode == 1 and "empty.txt: the text has no token after BOS to compare" in r.stderr, r.stderr + r.stdout
    assert r.stdout == ""


def test_diag_names_a_nan_weight_and_its_layer(tmp_path):
    src = FIXTURES / "qwen2_moe" / "qwen2_moe-f32.gguf"
    clean = peer.run_larql(["diag", src, "--json"])
    j = json.loads(clean.stdout)
    assert j["ok"] and j["non_finite_weights"] == [] and j["first_non_finite_activation"] is None
    assert [x["layer"] for x in j["layers"]] == [0, 1] and all(x["residual_mean"] > 0 for x in j["layers"])
    bad = tmp_path / "nan.gguf"
    shutil.copy(src, bad)
    _, _, table = read_gguf(bad)
    qtype, dims, offset = table["blk.1.attn_q.weight"]
    assert int(qtype) == 0  # F32
    with open(bad, "r+b") as f:
        f.seek(offset + 4 * 70)  # row 1, column 6 of [cols 64, rows ...]
        f.write(struct.pack("<f", float("nan")))
    r = peer.run_larql(["diag", bad, "--json"], check=False)
    assert r.returncode == 1, r.stderr
    j = json.loads(r.stdout)
    assert not j["ok"]
    assert j["non_finite_weights"] == [{"tensor": "blk.1.attn_q.weight", "layer": 1, "non_finite": 1, "first_row": 1}]
    assert j["first_non_finite_activation"]["layer"] == 1
    # The NaN layer's norms are NaN, its max too (not the 0 std::max keeps): null in JSON, "nan" in the table.
    assert j["layers"][1]["residual_mean"] is None and j["layers"][1]["residual_max"] is None
    assert j["layers"][0]["residual_max"] >= j["layers"][0]["residual_mean"] > 0
    assert "blk.1.attn_q.weight" in r.stderr
    text = peer.run_larql(["diag", bad], check=False)
    assert "NaN/Inf: blk.1.attn_q.weight (layer 1): 1 value, first in row 1" in text.stdout
    row1 = next(line.split() for line in text.stdout.splitlines() if line.split()[:1] == ["1"])
    assert row1[1:3] == ["nan", "nan"], text.stdout
