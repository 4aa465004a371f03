"""larql and llama.cpp against an exact answer: the numpy float64 Gemma 3 forward pass.

tests/python/gemma3_numpy.py computes the logits of the same file's weights (dequantised by the
`gguf` package) with every product in float64: the answer both engines approximate, each with
8-bit activations inside its quantised matmuls. On 640 tokens of the GPL-3 text (past the
512-token sliding window) this measures how far each engine is from it, pooled and beyond the
window, and records the numbers (<results dir>/reference_numpy.json).

Bars: both engines pass the sanity bars a real bug cannot (top-1 >= 0.90, mean KL <= 0.03 nats,
also beyond the window), and larql is at least as close to the exact answer as llama.cpp (its
peer) within noise: mean KL(exact || larql) <= 1.25 x mean KL(exact || llama.cpp) + 0.002.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import peer

gemma3_numpy = pytest.importorskip("gemma3_numpy")

TOKENS = 640
WINDOW = 512
SANITY_TOP1 = 0.90
SANITY_KL = 0.03

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path", "llama_cpp_mod")


@pytest.fixture(scope="module")
def result(model_path, tmp_path_factory):
    src = peer.DATA_DIR / "long_text_gpl3.txt"
    tmp = tmp_path_factory.mktemp("exact")
    npy = tmp / "larql.npy"
    lq = peer.larql_perplexity(src, logits_out=npy, max_tokens=TOKENS, model=model_path)
    ids = lq["ids"]
    assert len(ids) == TOKENS

    w = gemma3_numpy.load_gguf(model_path)
    exact = gemma3_numpy.forward(w, ids)
    del w
    gc.collect()

    llm = peer.load_llama(n_ctx=TOKENS + 64, logits_all=True, model=model_path, kv_f32=True)
    mats = {"exact": exact, "larql": np.load(npy, mmap_mode="r"), "llama": peer.llama_logits(llm, ids)}
    cmp = peer.compare_logits_multi(mats, [("exact", "larql"), ("exact", "llama")], ids)
    del mats, llm
    gc.collect()
    res = {"source": src.name, "tokens": TOKENS}
    for who in ("larql", "llama"):
        c = cmp[("exact", who)]
        res[who] = {"all": c.summary(), "beyond_window": c.summary(WINDOW)}
    path = peer.record_results("reference_numpy", res)
    for who in ("larql", "llama"):
        for part in ("all", "beyond_window"):
            s = res[who][part]
            print(f"\n[exact f64 vs {who:5s}] {part:13s}: top-1 {s['top1_agreement']:.4f}, mean KL "
                  f"{s['kl_mean']:.5f}, p99 KL {s['kl_p99']:.4f}, max |dlogit| {s['max_abs_dlogit']:.3f}"
                  f" ({s['positions']} positions) -> {path}")
    return res


@pytest.mark.parametrize("who", ["larql", "llama"])
@pytest.mark.parametrize("part", ["all", "beyond_window"])
def test_engines_are_near_the_exact_answer(result, who, part):
    s = result[who][part]
    assert s["top1_agreement"] >= SANITY_TOP1, s
    assert s["kl_mean"] <= SANITY_KL, s


def test_larql_is_as_exact_as_llama_cpp(result):
    lq, ll = result["larql"]["all"]["kl_mean"], result["llama"]["all"]["kl_mean"]
    assert lq <= 1.25 * ll + 0.002, (lq, ll)
