"""`larql perplexity --engine SPEC`: teacher-forced scoring through an engine (docs/cli.md).

Expected values come from elsewhere: the batched pass (standard is batch-invariant, so token by
token must give the same logits), and the K/V layouts (f32 rows; turbo-quant's published
4 + head_dim x bits / 8 bytes per head vector) applied to the model geometry `larql show` reports.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import peer

pytestmark = pytest.mark.usefixtures("larql_bin")

TEXT = peer.DATA_DIR / "long_text_gpl3.txt"


def _geometry(model_path) -> dict:
    proc = peer.run_larql(["show", model_path, "--json"])
    return json.loads(proc.stdout)


def _ppl(model_path, out, *extra) -> dict:
    proc = peer.run_larql(["perplexity", model_path, TEXT, "--max-tokens", "160", "--json",
                           "--logits-out", out, *extra], timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_standard_token_by_token_equals_the_batched_pass(model_path, tmp_path):
    g = _geometry(model_path)
    batched = _ppl(model_path, tmp_path / "b.npy")
    stepped = _ppl(model_path, tmp_path / "s.npy", "--engine", "standard")
    assert stepped["ids"] == batched["ids"]
    assert stepped["engine"] == "standard"
    assert "engine" not in batched
    a, b = np.load(tmp_path / "b.npy"), np.load(tmp_path / "s.npy")
    assert a.shape == b.shape == (160, g["vocab"])
    assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"
    assert stepped["nll_mean"] == batched["nll_mean"]
    # f32 K and V rows on every layer.
    assert stepped["kv_bytes_per_token"] == g["layers"] * 2 * g["n_kv_heads"] * g["head_dim"] * 4
    assert stepped["kv_fixed_bytes"] == 0


@pytest.mark.parametrize("spec, bits, recent", [("tq4", 4, 16), ("turbo-quant:bits=3,recent=0", 3, 0)])
def test_turbo_quant_bytes_per_token(model_path, tmp_path, spec, bits, recent):
    g = _geometry(model_path)
    out = _ppl(model_path, tmp_path / "t.npy", "--engine", spec)
    per_vector = 4 + g["head_dim"] * bits // 8
    assert out["kv_bytes_per_token"] == g["layers"] * 2 * g["n_kv_heads"] * per_vector
    # The exact window: `recent` f32 K and V rows per layer.
    assert out["kv_fixed_bytes"] == g["layers"] * 2 * recent * g["n_kv_heads"] * g["head_dim"] * 4
    assert 1.0 < out["perplexity"] < 1e3


def test_unknown_engine_is_refused_before_loading(model_path):
    proc = peer.run_larql(["perplexity", model_path, TEXT, "--engine", "no-such-engine"], check=False)
    assert proc.returncode == 1, proc.stderr
    assert "no-such-engine" in proc.stderr
