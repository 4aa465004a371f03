"""`larql shannon MODEL --engines ...` (docs/cli.md "shannon") on a tiny family fixture.

Bits per token on a text file equal `larql perplexity`'s mean NLL / ln 2 (the same scoring, shared
code) and, independently, the cross-entropy numpy computes from `perplexity --logits-out` (float64
log-softmax over the stored logits, the ids perplexity reports). Per engine the same holds against
`perplexity --engine`. markov-rs and no-cache equal standard bit for bit (the engine contract), so
their delta is 0; the named corpora are the accuracy suite's cases.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import peer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
MODEL = FIXTURES / "qwen2" / "qwen2-f32.gguf"
TEXT = ("The old bridge at Lowfield was built in 1887 by a small crew of engineers. Every spring the river "
        "rose, and every spring the town argued about whether the stones would hold.")


def shannon(*args, check=True):
    r = peer.run_larql(["shannon", MODEL, "--json", "-t", peer.THREADS, *map(str, args)], check=check)
    return json.loads(r.stdout) if check else r


def numpy_bits(logits: np.ndarray, ids) -> float:
    x = logits[:-1].astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    logp = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    nll = -logp[np.arange(len(ids) - 1), ids[1:]]
    return float(nll.mean() / math.log(2))


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "bridge.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def test_bits_per_token_are_perplexitys_nll_in_bits(text_file, tmp_path):
    got = shannon("--engines", "standard,markov-rs,no-cache,tq4", "--corpus", text_file)
    assert [c["corpus"] for c in got["corpora"]] == ["bridge.txt"] and not got["reference_added"]
    rows = {r["engine"]: r for r in got["corpora"][0]["engines"]}
    ppl = peer.larql_perplexity(text_file, logits_out=tmp_path / "l.npy", model=MODEL)
    assert got["tokens"] == len(ppl["ids"]) - 1
    std = rows["standard"]["bits_per_token"]
    assert std == pytest.approx(ppl["nll_mean"] / math.log(2), rel=1e-12)
    assert std == pytest.approx(numpy_bits(np.load(tmp_path / "l.npy"), ppl["ids"]), rel=1e-6)
    assert rows["standard"]["delta_bits_vs_standard"] == 0
    for engine in ("markov-rs", "no-cache"):
        assert rows[engine]["delta_bits_vs_standard"] == 0, engine
    tq = rows[[e for e in rows if e.startswith("turbo-quant")][0]]
    r = peer.run_larql(["perplexity", MODEL, text_file, "--json", "-t", peer.THREADS, "--engine", "tq4",
                        "--logits-out", tmp_path / "tq.npy"])
    tq_ppl = json.loads(r.stdout)
    assert tq["bits_per_token"] == pytest.approx(tq_ppl["nll_mean"] / math.log(2), rel=1e-12)
    assert tq["bits_per_token"] == pytest.approx(numpy_bits(np.load(tmp_path / "tq.npy"), tq_ppl["ids"]), rel=1e-6)
    assert tq["delta_bits_vs_standard"] == pytest.approx(tq["bits_per_token"] - std, abs=1e-12)
    assert got["overall"][0]["bits_per_token"] == std


def test_accuracy_corpora_and_standard_added(text_file):
    got = shannon("--engines", "markov-rs", "--corpus", "all", "--quick")
    assert got["reference_added"] and [r["engine"] for r in got["overall"]] == ["standard", "markov-rs"]
    by = {c["corpus"]: c for c in got["corpora"]}
    # The fixture's context is 256 tokens: no needle haystack fits; every 4th of 115 facts and 24 conflicts.
    assert sorted(by) == ["conflict", "parametric"]
    # ... and that is said, on stderr and in the JSON.
    assert got["skipped_corpora"] == [
        {"corpus": "in-context-512", "reason": "its haystack of 512 tokens exceeds the model's context of 256"},
        {"corpus": "in-context-1k", "reason": "its haystack of 1024 tokens exceeds the model's context of 256"}]
    assert by["parametric"]["sequences"] == 29 and by["conflict"]["sequences"] == 6
    total = sum(c["tokens"] for c in got["corpora"])
    assert got["tokens"] == total
    std = got["overall"][0]["bits_per_token"]
    weighted = sum(c["tokens"] * c["engines"][0]["bits_per_token"] for c in got["corpora"]) / total
    assert std == pytest.approx(weighted, rel=1e-12) and 0 < std < 20
    assert got["overall"][1]["delta_bits_vs_standard"] == 0
    text = peer.run_larql(["shannon", MODEL, "--corpus", text_file, "-t", peer.THREADS]).stdout
    assert "bits/token" in text and "bridge.txt" in text


def test_bad_input(text_file, tmp_path):
    r = shannon("--corpus", "no-such-corpus", check=False)
    assert r.returncode == 1 and "neither a corpus" in r.stderr, r.stderr
    r = shannon("--engines", "no-such-engine", "--corpus", text_file, check=False)
    assert r.returncode != 0 and "no-such-engine" in r.stderr, r.stderr
    r = peer.run_larql(["shannon", tmp_path / "missing.gguf", "--corpus", text_file], check=False)
    assert r.returncode == 1 and "missing.gguf" in r.stderr, r.stderr
    long = tmp_path / "long.txt"
    long.write_text(TEXT * 20, encoding="utf-8")
    r = shannon("--corpus", long, check=False)
    assert r.returncode == 1 and "--max-tokens" in r.stderr, r.stderr
    assert shannon("--corpus", long, "--max-tokens", "64")["tokens"] == 63
    # No needle haystack (512 tokens at least) fits the fixture's 256-token context: say that.
    r = shannon("--corpus", "in-context", check=False)
    assert r.returncode == 1 and "no needle haystack fits the model's context of 256 tokens" in r.stderr, r.stderr
    assert "no text" not in r.stderr


def test_skipped_needles_are_said_on_stderr():
    r = peer.run_larql(["shannon", MODEL, "--corpus", "all", "--quick", "-t", peer.THREADS])
    assert "shannon: in-context-512 skipped: its haystack of 512 tokens exceeds the model's context of 256" in r.stderr
    assert "in-context-1k skipped" in r.stderr
