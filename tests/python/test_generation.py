"""Greedy generation against llama.cpp.

- "Q: What is the capital of France?\nA:" -> larql's greedy continuation mentions Paris (the peer's
  does too). The bare "The capital of France is" is one of the ten compared prompts.
- 10 prompts (data/gen_prompts.txt), 64-token greedy continuations from larql and from llama.cpp
  (argmax over llama.cpp's logits, same prompt ids, stop at EOS / <end_of_turn>): token-identical
  on at least 8 of 10. Which differ, and where, is printed and recorded in parity-results.json.
"""
from __future__ import annotations

import pytest

import peer

N_GEN = 64
MIN_IDENTICAL = 8

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
    return peer.load_llama(n_ctx=1024, logits_all=False, model=model_path)


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


@pytest.fixture(scope="module")
def generations(llm, larql_bin, model_path):
    rows = []
    for prompt in peer.read_lines("gen_prompts.txt"):
        lq = peer.larql_generate(prompt, N_GEN, model=model_path)
        ref = peer.llama_greedy(llm, lq["prompt_ids"], N_GEN)
        a, b = _until_stop(lq["ids"]), _until_stop(ref)
        div = peer.first_divergence(a, b)
        rows.append({
            "prompt": prompt,
            "prompt_ids_match_llama": lq["prompt_ids"] == peer.llama_tokenize(llm, prompt),
            "identical": div is None,
            "first_divergence": div,
            "larql_len": len(a), "llama_len": len(b),
            "larql_at_div": a[div:div + 4] if div is not None else None,
            "llama_at_div": b[div:div + 4] if div is not None else None,
            "larql_text": lq["text"],
            "llama_text": llm.detokenize(b).decode("utf-8", "replace"),
            "larql_decode_tok_s": lq.get("decode_tok_s"),
        })
    n_same = sum(r["identical"] for r in rows)
    path = peer.record_results("generation_greedy", {"identical": n_same, "of": len(rows),
                                                     "n": N_GEN, "rows": rows})
    print(f"\n[generation] {n_same}/{len(rows)} prompts token-identical over {N_GEN} tokens "
          f"-> {path}")
    for r in rows:
        if not r["identical"]:
            print(f"  differs at token {r['first_divergence']}: {r['prompt'][:50]!r}\n"
                  f"    larql: {r['larql_text'][:160]!r}\n    llama: {r['llama_text'][:160]!r}")
    return rows


def test_gen_prompt_ids_match_llama(generations):
    bad = [r["prompt"] for r in generations if not r["prompt_ids_match_llama"]]
    assert not bad, f"larql run prompt_ids differ from llama.cpp's tokenization for: {bad}"


def test_greedy_matches_llama(generations):
    n_same = sum(r["identical"] for r in generations)
    diffs = [f"{r['prompt'][:40]!r}: first difference at token {r['first_divergence']} "
             f"(larql {r['larql_at_div']} vs llama {r['llama_at_div']})"
             for r in generations if not r["identical"]]
    assert len(generations) == 10
    assert n_same >= MIN_IDENTICAL, \
        f"only {n_same}/10 greedy continuations identical:\n  " + "\n  ".join(diffs)
