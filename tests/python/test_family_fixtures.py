"""Every family against Hugging Face transformers and llama.cpp, on fixtures nobody here wrote.

tests/model/data/families/<name>/ holds a tiny random-initialised model of each family, built by
scripts/make_family_fixtures.py with transformers (saved as a Hugging Face directory, its
tokenizer trained offline), converted by llama.cpp's own convert_hf_to_gguf.py to f32 and q8_0
GGUF, and transformers' float32 logits over a >= 64-token text plus its greedy 32-token
continuation of a prompt (reference.json, logits.npy). CI needs no torch: the references are
committed.

Checked for each family (the issue's bars):
  * tokenization of the evaluation text == the ids transformers' tokenizer gave;
  * larql's logits from the Hugging Face directory and from the f32 GGUF within 1e-3
    (max |delta logit|) of transformers' float32 logits at every position;
  * from the q8_0 GGUF: top-1 equal to llama.cpp's on the same file at >= 99% of positions (or
    llama.cpp's own noise floor - 0.02 where that is lower: test_q8_0_against_llama_cpp), and
    mean KL to transformers <= llama.cpp's own mean KL to transformers + 0.002;
  * greedy continuation from the f32 GGUF and the directory == transformers' (32 tokens).
Known divergences, each from the model definition's side: Mistral's sliding window (32 here)
is in config.json, but llama.cpp's `llama` architecture has no window and its converter writes
none, so the GGUF (and llama.cpp) differ from transformers from position 32 on: the GGUF checks
stop there, the directory checks do not.
"""
from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

import peer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.json").exists()) if FIXTURES.exists() else []
LOGIT_TOL = 1e-3
# Positions a GGUF can be compared on: all, except where llama.cpp's file drops the window.
GGUF_LIMIT = {"mistral": 32}


def load(name):
    d = FIXTURES / name
    ref = json.loads((d / "reference.json").read_text())
    return d, ref, np.load(d / ref["logits_file"])


def larql_logits(model, text, tmp_path, tag):
    txt = tmp_path / f"{tag}.txt"
    txt.write_text(text, encoding="utf-8")
    npy = tmp_path / f"{tag}.npy"
    out = peer.larql_perplexity(txt, logits_out=npy, model=model)
    return out["ids"], np.load(npy)


def test_there_are_fixtures():
    assert len(FAMILIES) >= 9, FAMILIES


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("source", ["hf", "f32"])
def test_logits_equal_transformers(name, source, larql_bin, tmp_path):
    d, ref, want = load(name)
    model = d if source == "hf" else d / f"{name}-f32.gguf"
    ids, got = larql_logits(model, ref["eval_text"], tmp_path, source)
    assert ids == ref["eval_ids"], f"{name} ({source}): tokenization differs from transformers'"
    assert len(ids) >= 64
    n = GGUF_LIMIT.get(name, len(ids)) if source == "f32" else len(ids)
    diff = np.abs(got[:n].astype(np.float64) - want[:n])
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    assert diff.max() <= LOGIT_TOL, f"{name} ({source}): max |delta logit| {diff.max():.3g} at position {worst[0]}"


def llama_cpp_logits(path, ids, kv_f32):
    llm = peer.load_llama(n_ctx=256, logits_all=True, model=path, kv_f32=kv_f32)
    out = np.array(peer.llama_logits(llm, ids), dtype=np.float32, copy=True)
    del llm
    gc.collect()
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_q8_0_against_llama_cpp(name, larql_bin, llama_cpp_mod, tmp_path):
    """llama.cpp with f32 K/V, as larql keeps them. The top-1 bar is the issue's 99% unless
    llama.cpp's own noise on the file is coarser: these random models' top-1 margins are small
    (reference.json eval_min_margin ~0.003) and q8_0 moves logits by up to ~1, so llama.cpp's
    f16-K/V and f32-K/V runs of one file agree at only 95-99% of positions; then the bar is that
    floor - 0.02 (test_parity.py's rule)."""
    d, ref, want = load(name)
    path = d / f"{name}-q8_0.gguf"
    ids, got = larql_logits(path, ref["eval_text"], tmp_path, "q8")
    assert ids == ref["eval_ids"]
    theirs, theirs_f16kv = llama_cpp_logits(path, ids, True), llama_cpp_logits(path, ids, False)
    n = GGUF_LIMIT.get(name, len(ids))
    top1 = float(np.mean(np.argmax(got[:n], 1) == np.argmax(theirs[:n], 1)))
    floor = float(np.mean(np.argmax(theirs_f16kv[:n], 1) == np.argmax(theirs[:n], 1)))
    ours = peer.compare_logits(want[:n], got[:n], ids[:n]).summary()
    peer_kl = peer.compare_logits(want[:n], theirs_f16kv[:n], ids[:n]).summary()
    peer.record_results(f"fixture-{name}-q8_0", {"larql_vs_transformers": ours, "llama_vs_transformers": peer_kl,
                                                 "top1_vs_llama": top1, "llama_floor": floor})
    bar = min(0.99, floor - 0.02)
    assert top1 >= bar, f"{name}: top-1 agreement with llama.cpp {top1:.3f} < {bar:.3f} (its own floor {floor:.3f})"
    # KL to the exact model, against llama.cpp's as users run it (its default f16 K/V).
    assert ours["kl_mean"] <= peer_kl["kl_mean"] + 0.002, (name, ours, peer_kl)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("source", ["hf", "f32"])
def test_greedy_equals_transformers(name, source, larql_bin):
    d, ref, _ = load(name)
    if source == "f32" and name in GGUF_LIMIT:
        pytest.skip(f"{name}: llama.cpp's GGUF has no sliding window (module docstring)")
    model = d if source == "hf" else d / f"{name}-f32.gguf"
    # transformers' generate ran its 32 tokens through end-of-turn ids: so does larql here.
    out = peer.larql_generate(ref["prompt"], len(ref["greedy_ids"]), model=model, extra_args=["--ignore-eos"])
    assert out["prompt_ids"] == ref["prompt_ids"]
    assert out["ids"] == ref["greedy_ids"], f"{name} ({source}): first divergence at {peer.first_divergence(out['ids'], ref['greedy_ids'])}"
