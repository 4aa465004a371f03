"""Logit parity with llama.cpp on the same GGUF.

Expected values come from llama.cpp (llama-cpp-python) evaluating the *same* token ids that larql
scored; larql's ids are separately checked against llama.cpp's own tokenization.

Thresholds (ENGINES.md: "parity with llama.cpp on the same GGUF is measured"):
- top-1 agreement >= 99% of positions, mean KL(llama || larql) <= 0.01 nats,
- on 2,048 tokens of long text (past Gemma 3's 512-token sliding window) the same, also for
  positions >= 512 alone, and perplexity within 1% of llama.cpp's.

Measured numbers go to <LARQL_RESULTS_DIR or build>/parity-results.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import peer

TOP1_MIN = 0.99
KL_MAX = 0.01
PPL_REL_TOL = 0.01
LONG_TOKENS = 2048
SLIDING_WINDOW = 512
# A text file is scored as plain text: special-token markup such as `<end_of_turn>` in the file is
# not parsed, as in llama.cpp's own `llama-perplexity` (common_tokenize(..., parse_special=false)).
PPL_SPECIAL = False

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path", "llama_cpp_mod")


def _long_text_path() -> Path:
    p = Path("/usr/share/common-licenses/GPL-3")
    return p if p.is_file() else peer.DATA_DIR / "long_text_gpl3.txt"


@pytest.fixture(scope="module")
def llm(llama_cpp_mod, model_path):
    return peer.load_llama(n_ctx=LONG_TOKENS + 64, logits_all=True, model=model_path)


@pytest.fixture(scope="module")
def short_results(llm, larql_bin, model_path, tmp_path_factory):
    """Per prompt: larql ids, llama.cpp's ids, and the comparison on larql's ids."""
    tmp = tmp_path_factory.mktemp("short")
    out = []
    for k, prompt in enumerate(peer.read_lines("prompts.txt")):
        txt = tmp / f"p{k}.txt"
        txt.write_text(prompt, encoding="utf-8")
        npy = tmp / f"p{k}.npy"
        lq = peer.larql_perplexity(txt, logits_out=npy, model=model_path)
        ids = lq["ids"]
        test = np.load(npy, mmap_mode="r")
        assert test.ndim == 2 and test.shape[0] == len(ids), \
            f"prompt {k}: --logits-out shape {test.shape} for {len(ids)} ids"
        ref = peer.llama_logits(llm, ids)
        cmp = peer.compare_logits(ref, test, ids)
        out.append({"prompt": prompt, "ids": ids,
                    "llama_ids": peer.llama_tokenize(llm, prompt, special=PPL_SPECIAL),
                    "cmp": cmp, "larql_ppl": lq.get("perplexity")})
        del test
        npy.unlink()
    return out


def _aggregate(results) -> dict:
    agree = np.concatenate([r["cmp"].agree() for r in results])
    kl = np.concatenate([r["cmp"].kl for r in results])
    per = []
    for r in results:
        s = r["cmp"].summary()
        s["prompt"] = r["prompt"][:60]
        s["disagreements"] = r["cmp"].disagreements(5)
        per.append(s)
    return {"prompts": len(results), "positions": int(agree.size),
            "top1_agreement": float(agree.mean()), "kl_mean": float(kl.mean()),
            "kl_max": float(kl.max()), "per_prompt": per}


@pytest.fixture(scope="module")
def short_summary(short_results):
    agg = _aggregate(short_results)
    path = peer.record_results("parity_short_prompts", agg)
    print(f"\n[parity short] {agg['prompts']} prompts, {agg['positions']} positions: "
          f"top-1 {agg['top1_agreement']:.4%}, mean KL {agg['kl_mean']:.3g} nats, "
          f"max KL {agg['kl_max']:.3g} -> {path}")
    return agg


def test_short_prompt_count():
    assert len(peer.read_lines("prompts.txt")) >= 20


def test_short_prompt_ids_match_llama(short_results):
    bad = [(r["prompt"], r["ids"], r["llama_ids"]) for r in short_results
           if r["ids"] != r["llama_ids"]]
    assert not bad, "larql perplexity ids differ from llama.cpp's tokenization:\n" + "\n".join(
        f"  {p!r}\n    larql: {a}\n    llama: {b}" for p, a, b in bad)


def test_short_prompts_top1(short_summary):
    bad = [p for p in short_summary["per_prompt"] if p["top1_disagreements"]]
    assert short_summary["top1_agreement"] >= TOP1_MIN, (
        f"top-1 agreement {short_summary['top1_agreement']:.4%} < {TOP1_MIN:.0%}; "
        f"disagreeing prompts: {json.dumps(bad, indent=1)[:4000]}")


def test_short_prompts_kl(short_summary):
    worst = sorted(short_summary["per_prompt"], key=lambda p: -p["kl_mean"])[:3]
    assert short_summary["kl_mean"] <= KL_MAX, (
        f"mean KL {short_summary['kl_mean']:.4g} > {KL_MAX}; worst prompts: "
        f"{json.dumps(worst, indent=1)[:3000]}")


# ----------------------------------------------------------------------------------------------
# Long text: 2,048 tokens, past the sliding window
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_result(llm, larql_bin, model_path, tmp_path_factory):
    src = _long_text_path()
    text = src.read_text(encoding="utf-8")
    npy = tmp_path_factory.mktemp("long") / "long.npy"
    lq = peer.larql_perplexity(src, logits_out=npy, max_tokens=LONG_TOKENS, model=model_path,
                               timeout=3600)
    ids = lq["ids"]
    llama_ids = peer.llama_tokenize(llm, text, special=PPL_SPECIAL)[:LONG_TOKENS]
    test = np.load(npy, mmap_mode="r")
    assert test.shape[0] == len(ids), f"--logits-out rows {test.shape[0]} != {len(ids)} ids"
    ref = peer.llama_logits(llm, ids)
    ppl_llama = peer.perplexity_from_logits(ref, ids)
    cmp = peer.compare_logits(ref, test, ids)
    del test
    npy.unlink()
    res = {
        "source": str(src),
        "tokens": len(ids),
        "larql_reported_tokens": lq.get("tokens"),
        "ids_match_llama": ids == llama_ids,
        "first_id_mismatch": peer.first_divergence(ids, llama_ids),
        "all": cmp.summary(),
        "below_window": cmp.summary(0, SLIDING_WINDOW),
        "beyond_window": cmp.summary(SLIDING_WINDOW),
        "ppl_llama": ppl_llama,
        "ppl_larql_reported": lq.get("perplexity"),
        "nll_mean_larql_reported": lq.get("nll_mean"),
        "disagreements": cmp.disagreements(30),
    }
    # KL by 256-position bucket: shows drift with position (e.g. a broken sliding window).
    res["kl_mean_by_256"] = [float(cmp.kl[s:s + 256].mean()) for s in range(0, len(ids), 256)]
    path = peer.record_results("parity_long_text", res)
    a, b = res["all"], res["beyond_window"]
    print(f"\n[parity long] {len(ids)} tokens of {src.name}: top-1 {a['top1_agreement']:.4%} "
          f"(>=512: {b.get('top1_agreement', float('nan')):.4%}), mean KL {a['kl_mean']:.3g} "
          f"(>=512: {b.get('kl_mean', float('nan')):.3g}), ppl llama {ppl_llama:.4f} vs larql "
          f"{res['ppl_larql_reported']} -> {path}")
    res["llama_ids"] = llama_ids
    res["ids"] = ids
    return res


def test_long_token_count(long_result):
    assert long_result["tokens"] == LONG_TOKENS, \
        f"larql scored {long_result['tokens']} tokens, asked for --max-tokens {LONG_TOKENS}"
    assert long_result["larql_reported_tokens"] == LONG_TOKENS


def test_long_ids_match_llama(long_result):
    i = long_result["first_id_mismatch"]
    assert long_result["ids_match_llama"], (
        f"first tokenization mismatch at {i}: larql {long_result['ids'][max(0, i - 3):i + 3]} "
        f"vs llama.cpp {long_result['llama_ids'][max(0, i - 3):i + 3]}")


@pytest.mark.parametrize("part", ["all", "below_window", "beyond_window"])
def test_long_top1(long_result, part):
    s = long_result[part]
    assert s["positions"] > 0
    assert s["top1_agreement"] >= TOP1_MIN, (
        f"{part}: top-1 agreement {s['top1_agreement']:.4%} < {TOP1_MIN:.0%} "
        f"({s['top1_disagreements']} positions); first: "
        f"{json.dumps(long_result['disagreements'][:10])}; KL by 256: "
        f"{long_result['kl_mean_by_256']}")


@pytest.mark.parametrize("part", ["all", "below_window", "beyond_window"])
def test_long_kl(long_result, part):
    s = long_result[part]
    assert s["kl_mean"] <= KL_MAX, (
        f"{part}: mean KL {s['kl_mean']:.4g} > {KL_MAX} (max {s['kl_max']:.3g}); KL by 256 "
        f"positions: {long_result['kl_mean_by_256']}")


def test_long_perplexity(long_result):
    ref = long_result["ppl_llama"]
    got = long_result["ppl_larql_reported"]
    assert got is not None, "larql perplexity --json has no 'perplexity'"
    assert abs(got - ref) / ref <= PPL_REL_TOL, \
        f"larql perplexity {got:.4f} vs llama.cpp {ref:.4f} (> {PPL_REL_TOL:.0%} apart)"
    # nll_mean is the log of the perplexity by the contract.
    nll = long_result["nll_mean_larql_reported"]
    assert nll is not None and abs(np.exp(nll) - got) / got < 1e-3
