"""Greedy generation against llama.cpp, with llama.cpp's own noise floor as the reference.

- "Q: What is the capital of France?\nA:" -> larql's greedy continuation mentions Paris (the peer's
  does too). The bare "The capital of France is" is one of the ten compared prompts.
- 10 prompts (data/gen_prompts.txt), 64-token greedy continuations (same prompt ids, stop at
  EOS / <end_of_turn>) from larql, llama.cpp (default, f16 K/V cache: the peer) and llama.cpp
  with an f32 K/V cache (an equally valid implementation). Bar:
      identical(larql, llama) >= min(8, identical(llama-f32KV, llama) - 1).
  Why: this Q4_K_M model with 8-bit activation quantisation is chaotic at the ulp level, and
  one near-tie flip early in a greedy run changes the whole rest of the continuation; llama.cpp
  with only its K/V cache type changed does not reproduce its own continuations on 8 of 10
  prompts either. Both counts and, per prompt, the first differing step are printed and recorded
  in parity-results.json.
- Teacher-forced, which chaos after an early divergence cannot fool: along llama.cpp's greedy
  continuation (prompt + its tokens), larql's argmax equals llama.cpp's token at >= 90% of steps.
  `larql perplexity` takes text, not ids, so a prompt is scored only when the decoded text
  re-tokenizes (llama.cpp, special=False, as `larql perplexity` does) to exactly the same ids
  and larql's ids equal them; others (e.g. the chat prompt, whose markup is special tokens) are
  skipped and listed. llama-f32KV's argmax along the same path is recorded as its floor.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import peer

N_GEN = 64
MIN_IDENTICAL = 8          # the bar, capped by the floor below
FLOOR_SLACK = 1            # identical(larql) >= identical(llama-f32KV) - 1
TEACHER_FORCED_MIN = 0.90
TEACHER_FORCED_MIN_PROMPTS = 5

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path")


def _until_stop(ids):
    """Tokens up to (excluding) the first stop id: larql may or may not echo the stop token."""
    out = []
    for t in ids:
        if t in peer.STOP_IDS:
            break
        out.append(t)
    return out


@pytest.fixture(scope="module")
def llm(llama_cpp_mod, model_path):
    llm = peer.load_llama(n_ctx=1024, logits_all=False, model=model_path)
    yield llm
    del llm
    gc.collect()


@pytest.fixture(scope="module")
def llm_f32kv(llama_cpp_mod, model_path):
    llm = peer.load_llama(n_ctx=1024, logits_all=False, model=model_path, kv_f32=True)
    yield llm
    del llm
    gc.collect()


PARIS_PROMPT = "Q: What is the capital of France?\nA:"


def test_capital_of_france_paris(llm, larql_bin, model_path):
    # The bare "The capital of France is" does not reach "Paris" greedily on this 270M model in
    # llama.cpp either (it continues " the capital of the country of France. It is the largest
    # city..."), so the Paris check uses a Q/A prompt on which the peer answers Paris; the bare
    # prompt is compared token-for-token with the peer in test_greedy_matches_llama.
    ref = peer.llama_greedy(llm, peer.llama_tokenize(llm, PARIS_PROMPT), 16)
    assert "Paris" in llm.detokenize(ref).decode("utf-8", "replace"), "peer premise changed"
    out = peer.larql_generate(PARIS_PROMPT, 16, model=model_path)
    assert "Paris" in out["text"], f"greedy continuation: {out['text']!r}"


def test_stop_ids_are_gemma_specials(llm):
    # Guards the STOP_IDS constant used to truncate both sides.
    assert llm.detokenize([peer.END_OF_TURN_ID], special=True) == b"<end_of_turn>"
    assert llm.token_eos() == peer.EOS_ID


def _forced_argmax(llm, prompt_ids, forced) -> list[int]:
    """llama.cpp's argmax at each step while being fed `forced` (teacher forcing)."""
    llm.reset()
    llm.eval(list(prompt_ids))
    out = []
    for t in forced:
        out.append(int(np.argmax(peer._last_logits(llm))))
        llm.eval([t])
    return out


@pytest.fixture(scope="module")
def generations(llm, llm_f32kv, larql_bin, model_path):
    rows = []
    for prompt in peer.read_lines("gen_prompts.txt"):
        lq = peer.larql_generate(prompt, N_GEN, model=model_path)
        ref = peer.llama_greedy(llm, lq["prompt_ids"], N_GEN)
        ref32 = peer.llama_greedy(llm_f32kv, lq["prompt_ids"], N_GEN)
        a, b, c = _until_stop(lq["ids"]), _until_stop(ref), _until_stop(ref32)
        div = peer.first_divergence(a, b)
        div32 = peer.first_divergence(c, b)
        rows.append({
            "prompt": prompt,
            "prompt_ids": lq["prompt_ids"],
            "prompt_ids_match_llama": lq["prompt_ids"] == peer.llama_tokenize(llm, prompt),
            "identical": div is None,
            "first_divergence": div,
            "f32kv_identical": div32 is None,
            "f32kv_first_divergence": div32,
            "larql_vs_f32kv_first_divergence": peer.first_divergence(a, c),
            "larql_len": len(a), "llama_len": len(b), "f32kv_len": len(c),
            "larql_at_div": a[div:div + 4] if div is not None else None,
            "llama_at_div": b[div:div + 4] if div is not None else None,
            "llama_ids": b,
            "larql_text": lq["text"],
            "llama_text": llm.detokenize(b).decode("utf-8", "replace"),
            "larql_decode_tok_s": lq.get("decode_tok_s"),
        })
    n_same = sum(r["identical"] for r in rows)
    n_floor = sum(r["f32kv_identical"] for r in rows)
    bar = min(MIN_IDENTICAL, n_floor - FLOOR_SLACK)
    path = peer.record_results("generation_greedy", {
        "identical": n_same, "f32kv_identical": n_floor, "bar": bar, "of": len(rows),
        "n": N_GEN, "rows": [{k: v for k, v in r.items() if k not in ("llama_ids", "prompt_ids")}
                             for r in rows]})
    print(f"\n[generation] {N_GEN} greedy tokens, identical to llama.cpp: larql {n_same}/"
          f"{len(rows)}, llama-f32KV {n_floor}/{len(rows)} (bar for larql: >= {bar}) -> {path}")
    print("  first differing step vs llama (None = identical):  larql | llama-f32KV | "
          "larql vs f32KV")
    for r in rows:
        print(f"    {str(r['first_divergence']):>4} | {str(r['f32kv_first_divergence']):>4} | "
              f"{str(r['larql_vs_f32kv_first_divergence']):>4}   {r['prompt'][:50]!r}")
    return rows


@pytest.fixture(scope="module")
def teacher_forced(generations, llm, llm_f32kv, model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("forced")
    rows = []
    for k, g in enumerate(generations):
        prompt_ids, cont = g["prompt_ids"], g["llama_ids"]
        seq = prompt_ids + cont
        f32 = _forced_argmax(llm_f32kv, prompt_ids, cont)
        row = {"prompt": g["prompt"], "steps": len(cont),
               "f32kv_agree": int(sum(x == y for x, y in zip(f32, cont)))}
        text = llm.detokenize(seq[1:]).decode("utf-8", "replace")
        if peer.llama_tokenize(llm, text, special=False) != seq:
            row["skipped"] = "decoded text does not re-tokenize to the same ids"
            rows.append(row)
            continue
        txt, npy = tmp / f"g{k}.txt", tmp / f"g{k}.npy"
        txt.write_text(text, encoding="utf-8")
        lq = peer.larql_perplexity(txt, logits_out=npy, model=model_path)
        if lq["ids"] != seq:
            row["larql_ids_mismatch_at"] = peer.first_divergence(lq["ids"], seq)
            rows.append(row)
            continue
        logits = np.load(npy, mmap_mode="r")
        p = len(prompt_ids)
        larql_top = np.asarray(logits[p - 1:len(seq) - 1]).argmax(axis=1)
        del logits
        npy.unlink()
        agree = larql_top == np.asarray(cont)
        row["larql_agree"] = int(agree.sum())
        row["larql_first_miss"] = int(np.argmin(agree)) if not agree.all() else None
        rows.append(row)
    scored = [r for r in rows if "larql_agree" in r]
    steps = sum(r["steps"] for r in scored)
    res = {
        "prompts_scored": len(scored), "steps": steps,
        "larql_agreement": sum(r["larql_agree"] for r in scored) / steps if steps else None,
        "f32kv_agreement_same_prompts":
            sum(r["f32kv_agree"] for r in scored) / steps if steps else None,
        "f32kv_agreement_all_prompts": sum(r["f32kv_agree"] for r in rows)
            / max(1, sum(r["steps"] for r in rows)),
        "rows": rows,
    }
    path = peer.record_results("generation_teacher_forced", res)
    print(f"\n[teacher-forced] along llama.cpp's greedy continuations, {len(scored)}/{len(rows)} "
          f"prompts scored, {steps} steps: larql argmax = llama token at "
          f"{res['larql_agreement'] or 0:.2%} (bar {TEACHER_FORCED_MIN:.0%}); llama-f32KV "
          f"{res['f32kv_agreement_same_prompts'] or 0:.2%} on the same prompts, "
          f"{res['f32kv_agreement_all_prompts']:.2%} on all -> {path}")
    for r in rows:
        if "larql_agree" not in r:
            print(f"  not scored: {r['prompt'][:50]!r}: "
                  f"{r.get('skipped') or 'larql ids differ at %s' % r['larql_ids_mismatch_at']}")
    return res


def test_gen_prompt_ids_match_llama(generations):
    bad = [r["prompt"] for r in generations if not r["prompt_ids_match_llama"]]
    assert not bad, f"larql run prompt_ids differ from llama.cpp's tokenization for: {bad}"


def test_greedy_matches_llama(generations):
    n_same = sum(r["identical"] for r in generations)
    n_floor = sum(r["f32kv_identical"] for r in generations)
    bar = min(MIN_IDENTICAL, n_floor - FLOOR_SLACK)
    diffs = [f"{r['prompt'][:40]!r}: first difference at token {r['first_divergence']} "
             f"(larql {r['larql_at_div']} vs llama {r['llama_at_div']}; llama-f32KV differs at "
             f"{r['f32kv_first_divergence']})"
             for r in generations if not r["identical"]]
    assert len(generations) == 10
    assert n_same >= bar, (
        f"only {n_same}/10 greedy continuations identical; bar min({MIN_IDENTICAL}, "
        f"llama-f32KV's {n_floor} - {FLOOR_SLACK}) = {bar}:\n  " + "\n  ".join(diffs))


def test_teacher_forced_matches_llama(teacher_forced):
    bad_ids = [r for r in teacher_forced["rows"] if "larql_ids_mismatch_at" in r]
    assert not bad_ids, f"larql perplexity ids differ from llama.cpp's: {bad_ids}"
    assert teacher_forced["prompts_scored"] >= TEACHER_FORCED_MIN_PROMPTS, (
        f"only {teacher_forced['prompts_scored']} prompts re-tokenize to the same ids: "
        f"{teacher_forced['rows']}")
    assert teacher_forced["larql_agreement"] >= TEACHER_FORCED_MIN, (
        f"teacher-forced top-1 agreement {teacher_forced['larql_agreement']:.2%} < "
        f"{TEACHER_FORCED_MIN:.0%}: {teacher_forced['rows']}")
