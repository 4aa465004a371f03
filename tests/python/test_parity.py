"""Logit parity with llama.cpp on the same GGUF, measured against llama.cpp's own noise floor.

Expected values come from llama.cpp (llama-cpp-python) evaluating the *same* token ids that larql
scored; larql's ids are separately checked against llama.cpp's own tokenization.

Three comparisons on the same ids, for the short prompts and for the long text:
  (a) larql             vs llama.cpp (default: f16 K/V cache)   -- "the peer"; this is tested
  (b) llama.cpp f32 K/V vs llama.cpp (default)                   -- the noise floor
  (c) larql             vs llama.cpp f32 K/V                     -- informative only
KL is always KL(reference || other) with the second-named llama.cpp as the reference.

Why a floor: this Q4_K_M model quantises activations to 8 bits inside every matmul, so it is
chaotic at the ulp level -- a 1-ulp change in an input flips some int8 roundings and moves logits
by ~1. An equally valid implementation therefore does not reproduce llama.cpp's top-1 at 99%:
llama.cpp against itself with only the K/V cache type changed (f16 -> f32) agrees on top-1 at
~91% and has mean KL ~0.005 on a 22-token text. (larql's first position, BOS only, matches
llama.cpp to 4e-6 when emulating its f16 K/V rounding; every later position differs by ~1 logit,
just as llama.cpp does with a RoPE base changed by 1e-4 relative.) So the bars are relative to
(b), measured on the same ids in the same run:
- mean KL(a) <= max(0.01, 1.5 x mean KL(b))        (the absolute 0.01 bar is reported too),
- top-1(a)   >= min(0.99, top-1(b) - 0.02),
- on 2,048 tokens of long text (past Gemma 3's 512-token sliding window) the same for all
  positions, for positions < 512 and for positions >= 512 alone, and perplexity within 1% of
  llama.cpp's;
- and, regardless of the floor, a sanity bar that a real bug (wrong RoPE, broken sliding window,
  bad dequantisation) cannot pass: top-1(a) >= 0.90 and mean KL(a) <= 0.03.

Measured numbers (a, b, c; per set; per 256-position bucket) go to
<LARQL_RESULTS_DIR or build>/parity-results.json.

Memory: a 2,048-position logit matrix is 2 GiB of f32. Matrices are written to .npy files in a
tmp dir and memory-mapped; at most one lives in process memory (llama.cpp's `scores`), and the
comparison reads all three in float64 row chunks in one pass (peer.compare_logits_multi).
"""
from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

import peer

# Floor-relative bars (see the module docstring).
KL_ABS = 0.01
KL_FLOOR_FACTOR = 1.5
TOP1_ABS = 0.99
TOP1_FLOOR_SLACK = 0.02
# Sanity bars that hold whatever the floor measures.
SANITY_TOP1 = 0.90
SANITY_KL = 0.03
PPL_REL_TOL = 0.01
LONG_TOKENS = 2048
SLIDING_WINDOW = 512
BUCKET = 256
SHORT_CTX = 512
# A text file is scored as plain text: special-token markup such as `<end_of_turn>` in the file is
# not parsed, as in llama.cpp's own `llama-perplexity` (common_tokenize(..., parse_special=false)).
PPL_SPECIAL = False

# llama.cpp variants: name -> load_llama(kv_f32=...). "llama" is the peer.
VARIANTS = (("llama", False), ("llama_f32kv", True))
# (reference, other): KL(reference || other).
PAIRS = {
    "a": ("llama", "larql"),        # larql vs the peer (tested)
    "b": ("llama", "llama_f32kv"),  # the noise floor
    "c": ("llama_f32kv", "larql"),  # informative
}
PAIR_LABELS = {"a": "larql       vs llama", "b": "llama-f32KV vs llama",
               "c": "larql       vs llama-f32KV"}

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path", "llama_cpp_mod")


def _long_text_path() -> Path:
    p = Path("/usr/share/common-licenses/GPL-3")
    return p if p.is_file() else peer.DATA_DIR / "long_text_gpl3.txt"


def _compare(mats: dict, ids) -> dict:
    """{"a"|"b"|"c": Comparison} on the same ids."""
    out = peer.compare_logits_multi(mats, list(PAIRS.values()), ids)
    return {k: out[pq] for k, pq in PAIRS.items()}


def _pooled(cmps: list[peer.Comparison], start: int = 0, stop: int | None = None) -> dict:
    """Top-1 / KL pooled over the positions [start, stop) of several comparisons."""
    agree = np.concatenate([c.agree()[start:stop] for c in cmps])
    kl = np.concatenate([c.kl[start:stop] for c in cmps])
    if agree.size == 0:
        return {"positions": 0}
    return {"positions": int(agree.size), "top1_agreement": float(agree.mean()),
            "top1_disagreements": int((~agree).sum()), "kl_mean": float(kl.mean()),
            "kl_max": float(kl.max()), "kl_p99": float(np.quantile(kl, 0.99))}


def _bars(a: dict, b: dict) -> dict:
    kl_bar = max(KL_ABS, KL_FLOOR_FACTOR * b["kl_mean"])
    top1_bar = min(TOP1_ABS, b["top1_agreement"] - TOP1_FLOOR_SLACK)
    return {
        "kl_bar": kl_bar, "top1_bar": top1_bar,
        "kl_ok": a["kl_mean"] <= kl_bar, "top1_ok": a["top1_agreement"] >= top1_bar,
        "kl_abs_bar": KL_ABS, "kl_abs_ok": a["kl_mean"] <= KL_ABS,
        "top1_abs_bar": TOP1_ABS, "top1_abs_ok": a["top1_agreement"] >= TOP1_ABS,
        "sanity_ok": a["top1_agreement"] >= SANITY_TOP1 and a["kl_mean"] <= SANITY_KL,
    }


def _table(title: str, part: dict) -> str:
    lines = [title]
    for k in PAIRS:
        s = part[k]
        lines.append(f"  ({k}) {PAIR_LABELS[k]:<26} top-1 {s['top1_agreement']:7.2%}  "
                     f"mean KL {s['kl_mean']:.4f}  max KL {s['kl_max']:.3f}")
    b = part["bars"]
    lines.append(f"      bars on (a): top-1 >= {b['top1_bar']:.2%} [{'ok' if b['top1_ok'] else 'FAIL'}]"
                 f", KL <= {b['kl_bar']:.4f} [{'ok' if b['kl_ok'] else 'FAIL'}]; absolute "
                 f"KL <= {KL_ABS} [{'holds' if b['kl_abs_ok'] else 'does not hold'}]; sanity "
                 f"[{'ok' if b['sanity_ok'] else 'FAIL'}]")
    return "\n".join(lines)


def _part(cmps: dict[str, list], start: int = 0, stop: int | None = None) -> dict:
    part = {k: _pooled(cmps[k], start, stop) for k in PAIRS}
    if part["a"]["positions"]:
        part["bars"] = _bars(part["a"], part["b"])
    return part


def _assert_bars(part: dict, what: str, detail: str = ""):
    a, b, bars = part["a"], part["b"], part["bars"]
    assert bars["top1_ok"], (
        f"{what}: top-1 agreement with llama.cpp {a['top1_agreement']:.4%} < bar "
        f"{bars['top1_bar']:.4%} = min({TOP1_ABS}, llama-f32KV's {b['top1_agreement']:.4%} - "
        f"{TOP1_FLOOR_SLACK}); {detail}")
    assert bars["kl_ok"], (
        f"{what}: mean KL {a['kl_mean']:.4g} > bar {bars['kl_bar']:.4g} = max({KL_ABS}, "
        f"{KL_FLOOR_FACTOR} x llama-f32KV's {b['kl_mean']:.4g}); {detail}")


def _assert_sanity(part: dict, what: str):
    a = part["a"]
    assert a["top1_agreement"] >= SANITY_TOP1 and a["kl_mean"] <= SANITY_KL, (
        f"{what}: top-1 {a['top1_agreement']:.4%} (sanity >= {SANITY_TOP1:.0%}), mean KL "
        f"{a['kl_mean']:.4g} (sanity <= {SANITY_KL}) -- far outside llama.cpp's noise floor "
        f"(f32 K/V: top-1 {part['b']['top1_agreement']:.4%}, KL {part['b']['kl_mean']:.4g})")


# ----------------------------------------------------------------------------------------------
# Short prompts
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_results(larql_bin, model_path, llama_cpp_mod, tmp_path_factory):
    """Per prompt: larql ids, llama.cpp's ids, and the (a, b, c) comparisons on larql's ids."""
    tmp = tmp_path_factory.mktemp("short")
    rows = []
    for k, prompt in enumerate(peer.read_lines("prompts.txt")):
        txt = tmp / f"p{k}.txt"
        txt.write_text(prompt, encoding="utf-8")
        npy = tmp / f"p{k}.larql.npy"
        lq = peer.larql_perplexity(txt, logits_out=npy, model=model_path)
        ids = lq["ids"]
        shape = np.load(npy, mmap_mode="r").shape
        assert len(shape) == 2 and shape[0] == len(ids), \
            f"prompt {k}: --logits-out shape {shape} for {len(ids)} ids"
        assert len(ids) <= SHORT_CTX, f"prompt {k}: {len(ids)} ids > {SHORT_CTX}"
        rows.append({"prompt": prompt, "ids": ids, "larql_ppl": lq.get("perplexity"),
                     "files": {"larql": npy}})
    for name, kv_f32 in VARIANTS:
        llm = peer.load_llama(n_ctx=SHORT_CTX, logits_all=True, model=model_path, kv_f32=kv_f32)
        for k, r in enumerate(rows):
            if name == "llama":
                r["llama_ids"] = peer.llama_tokenize(llm, r["prompt"], special=PPL_SPECIAL)
            path = tmp / f"p{k}.{name}.npy"
            np.save(path, peer.llama_logits(llm, r["ids"]))
            r["files"][name] = path
        del llm
        gc.collect()
    for r in rows:
        mats = {name: np.load(p, mmap_mode="r") for name, p in r["files"].items()}
        r["cmp"] = _compare(mats, r["ids"])
        del mats
        for p in r.pop("files").values():
            p.unlink()
    return rows


@pytest.fixture(scope="module")
def short_summary(short_results):
    cmps = {k: [r["cmp"][k] for r in short_results] for k in PAIRS}
    agg = {"prompts": len(short_results), "all": _part(cmps)}
    per = []
    for r in short_results:
        s = {"prompt": r["prompt"][:60], "positions": len(r["ids"])}
        for k in PAIRS:
            c = r["cmp"][k].summary()
            s[k] = {"top1_agreement": c["top1_agreement"], "kl_mean": c["kl_mean"],
                    "kl_max": c["kl_max"], "max_abs_dlogit": c["max_abs_dlogit"]}
        s["a_disagreements"] = r["cmp"]["a"].disagreements(5)
        per.append(s)
    agg["per_prompt"] = per
    path = peer.record_results("parity_short_prompts", agg)
    print("\n" + _table(f"[parity short] {agg['prompts']} prompts, "
                        f"{agg['all']['a']['positions']} positions -> {path}", agg["all"]))
    return agg


def test_short_prompt_count():
    assert len(peer.read_lines("prompts.txt")) >= 20


def test_short_prompt_ids_match_llama(short_results):
    bad = [(r["prompt"], r["ids"], r["llama_ids"]) for r in short_results
           if r["ids"] != r["llama_ids"]]
    assert not bad, "larql perplexity ids differ from llama.cpp's tokenization:\n" + "\n".join(
        f"  {p!r}\n    larql: {a}\n    llama: {b}" for p, a, b in bad)


def test_short_prompts_vs_noise_floor(short_summary):
    worst = sorted(short_summary["per_prompt"], key=lambda p: -p["a"]["kl_mean"])[:3]
    _assert_bars(short_summary["all"], "short prompts",
                 f"worst prompts: {json.dumps(worst, indent=1)[:3000]}")


def test_short_prompts_sanity(short_summary):
    _assert_sanity(short_summary["all"], "short prompts")


# ----------------------------------------------------------------------------------------------
# Long text: 2,048 tokens, past the sliding window
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_result(larql_bin, model_path, llama_cpp_mod, tmp_path_factory):
    src = _long_text_path()
    text = src.read_text(encoding="utf-8")
    tmp = tmp_path_factory.mktemp("long")
    npy = tmp / "long.larql.npy"
    lq = peer.larql_perplexity(src, logits_out=npy, max_tokens=LONG_TOKENS, model=model_path,
                               timeout=3600)
    ids = lq["ids"]
    rows = np.load(npy, mmap_mode="r").shape[0]
    assert rows == len(ids), f"--logits-out rows {rows} != {len(ids)} ids"

    # The peer: evaluate, save, free the context (its `scores` is a 2 GiB matrix).
    llm = peer.load_llama(n_ctx=LONG_TOKENS + 64, logits_all=True, model=model_path)
    llama_ids = peer.llama_tokenize(llm, text, special=PPL_SPECIAL)[:LONG_TOKENS]
    ref_npy = tmp / "long.llama.npy"
    np.save(ref_npy, peer.llama_logits(llm, ids))
    del llm
    gc.collect()

    # The floor: llama.cpp with an f32 K/V cache, compared straight from its `scores`.
    llm = peer.load_llama(n_ctx=LONG_TOKENS + 64, logits_all=True, model=model_path,
                          kv_f32=True)
    mats = {"llama": np.load(ref_npy, mmap_mode="r"), "larql": np.load(npy, mmap_mode="r"),
            "llama_f32kv": peer.llama_logits(llm, ids)}
    cmp = _compare(mats, ids)
    del mats, llm
    gc.collect()
    npy.unlink()
    ref_npy.unlink()

    a = cmp["a"]
    res = {
        "source": str(src),
        "tokens": len(ids),
        "larql_reported_tokens": lq.get("tokens"),
        "ids_match_llama": ids == llama_ids,
        "first_id_mismatch": peer.first_divergence(ids, llama_ids),
        "ppl_llama": a.summary()["ppl_ref"],
        "ppl_llama_f32kv": cmp["b"].summary()["ppl_test"],
        "ppl_larql_from_logits": a.summary()["ppl_test"],
        "ppl_larql_reported": lq.get("perplexity"),
        "nll_mean_larql_reported": lq.get("nll_mean"),
        "a_disagreements": a.disagreements(30),
    }
    lists = {k: [cmp[k]] for k in PAIRS}
    for part, (s, e) in {"all": (0, None), "below_window": (0, SLIDING_WINDOW),
                         "beyond_window": (SLIDING_WINDOW, None)}.items():
        res[part] = _part(lists, s, e)
    # By 256-position bucket: shows drift with position (e.g. a broken sliding window).
    res["by_bucket"] = {
        "bucket": BUCKET,
        **{k: {"kl_mean": [float(cmp[k].kl[s:s + BUCKET].mean())
                           for s in range(0, len(ids), BUCKET)],
               "top1_agreement": [float(cmp[k].agree()[s:s + BUCKET].mean())
                                  for s in range(0, len(ids), BUCKET)]}
           for k in PAIRS}}
    path = peer.record_results("parity_long_text", res)
    print("\n" + "\n".join(
        _table(f"[parity long] {len(ids)} tokens of {src.name}, {part}"
               + (f" -> {path}" if part == "all" else ""), res[part])
        for part in ("all", "below_window", "beyond_window")))
    print(f"  perplexity: llama {res['ppl_llama']:.4f}, llama-f32KV "
          f"{res['ppl_llama_f32kv']:.4f}, larql {res['ppl_larql_reported']}")
    for k in PAIRS:
        print(f"  ({k}) KL by {BUCKET}: "
              + " ".join(f"{v:.4f}" for v in res["by_bucket"][k]["kl_mean"]))
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
def test_long_vs_noise_floor(long_result, part):
    assert long_result[part]["a"]["positions"] > 0
    _assert_bars(long_result[part], f"long text, {part}",
                 f"first disagreements: {json.dumps(long_result['a_disagreements'][:10])}; "
                 f"by {BUCKET}: {json.dumps(long_result['by_bucket'])}")


@pytest.mark.parametrize("part", ["all", "below_window", "beyond_window"])
def test_long_sanity(long_result, part):
    _assert_sanity(long_result[part], f"long text, {part}")


def test_long_perplexity(long_result):
    ref = long_result["ppl_llama"]
    got = long_result["ppl_larql_reported"]
    assert got is not None, "larql perplexity --json has no 'perplexity'"
    assert abs(got - ref) / ref <= PPL_REL_TOL, \
        f"larql perplexity {got:.4f} vs llama.cpp {ref:.4f} (> {PPL_REL_TOL:.0%} apart)"
    # The reported number is the one its own logits give.
    assert abs(long_result["ppl_larql_from_logits"] - got) / got < 1e-3
    # nll_mean is the log of the perplexity by the contract.
    nll = long_result["nll_mean_larql_reported"]
    assert nll is not None and abs(np.exp(nll) - got) / got < 1e-3
