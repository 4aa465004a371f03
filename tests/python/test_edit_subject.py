"""INSERT ... MODE SUBJECT (docs/lql.md "Knowledge edits"): a feature at the subject's last token with
a learned down column, on 8 facts of data/edit_eval/subset100.jsonl (one per relation) and the default
model's inference vindex (conftest.py `inference_vindex`), each alone, measured from `larql lql --json`
INFER rows as test_edit_targets.py does; the full runs are edit-eval's (docs/BENCHMARKS.md "MODE
SUBJECT"). Expected answers come from the set (made by scripts/make_edit_eval.py through `larql
tokenize` and the base model's own top-1).

What the floors guard: the mode's reason to exist, paraphrases (100 facts: 93.0%, where ROBUST has
76.0% and COMPOSE 16.7%), and what it must not take: 40 of the set's real-fact prompts (which the
base model answers) keep their answer after each fact alone and after the 8 in one patch. Before
the mode scaled its down column into the quantised blocks' range (docs/lql.md "Knowledge edits")
one edit lost 6-10% of them; with it, 0.4% (docs/BENCHMARKS.md "MODE SUBJECT"). And the edits must
leave the session: the 8 in one patch compiled with COMPILE CURRENT INTO MODEL answer in llama.cpp
(the project's peer, loading that GGUF; issue 31 asks >= 90% of the facts).
"""
from __future__ import annotations

import json
import subprocess

import pytest

import peer
from test_edit_eval import insert as insert_as, lql_str
from test_edit_targets import SUBSET, probes, run_script, score, top1

N_FACTS = 8


def insert(f, extra=""):
    return insert_as(f, "SUBJECT") + extra


@pytest.fixture(scope="module")
def facts_real():
    recs = [json.loads(line) for line in SUBSET.read_text().splitlines() if line.strip()]
    facts, seen = [], set()
    for r in recs:  # the first fact of each of the first N_FACTS relations
        if r["type"] == "fact" and r["relation"] not in seen and len(facts) < N_FACTS:
            seen.add(r["relation"])
            facts.append(r)
    return facts


@pytest.fixture(scope="module")
def real_prompts():
    recs = [json.loads(line) for line in SUBSET.read_text().splitlines() if line.strip()]
    return [r for r in recs if r["type"] == "real"][::6][:40]


@pytest.fixture(scope="module")
def runs(larql_bin, inference_vindex, facts_real, real_prompts, tmp_path_factory):
    facts = facts_real
    tmp = tmp_path_factory.mktemp("subject")
    check = [f"INFER {lql_str(p)} TOP 5" for p in ("The capital of France is", facts[0]["prompt"])]
    real = [f"INFER {lql_str(r['prompt'])} TOP 1" for r in real_prompts]
    lines = list(check)
    for i, f in enumerate(facts):  # each alone
        name = lql_str(str(tmp / f"one{i}.vlp"))
        lines += [f"BEGIN PATCH {name}", insert(f)] + probes(f) + real + [f"REMOVE PATCH {name}"]
    name = lql_str(str(tmp / "all.vlp"))  # the 8 in one patch
    gguf = tmp / "edited.gguf"
    lines += [f"BEGIN PATCH {name}"] + [insert(f) for f in facts] + [p for f in facts for p in probes(f)] + real
    lines += [f"COMPILE CURRENT INTO MODEL {lql_str(str(gguf))}", f"REMOVE PATCH {name}"] + check
    docs, secs = run_script(larql_bin, inference_vindex, tmp, lines)
    it = iter(docs)
    take = lambda n: [next(it) for _ in range(n)]  # noqa: E731
    kept = lambda docs_: [top1(d) == r["answer_id"] for d, r in zip(docs_, real_prompts)]  # noqa: E731
    base_check = take(len(check))
    alone, real_alone = [], []
    for f in facts:
        _, ins = take(2)
        assert ins["rows"][0][4] == "subject"
        alone.append(score(f, take(1 + len(f["paraphrases"]) + len(f["neighbourhood"]))))
        real_alone += kept(take(len(real)))
        take(1)
    take(1 + len(facts))  # BEGIN PATCH, the INSERTs
    together = [score(f, take(1 + len(f["paraphrases"]) + len(f["neighbourhood"]))) for f in facts]
    real_together = kept(take(len(real)))
    take(2)  # COMPILE, REMOVE PATCH
    after_check = take(len(check))
    assert next(it, None) is None

    def rates(scores):
        para = [p for _, ps, _ in scores for p in ps]
        neigh = [n for _, _, ns in scores for n in ns]
        return {"efficacy": sum(e for e, _, _ in scores) / len(scores), "paraphrase": sum(para) / len(para),
                "neighbourhood": sum(neigh) / len(neigh)}

    got = rates(alone)
    got["real"] = sum(real_alone) / len(real_alone)
    one_patch = rates(together)
    one_patch["real"] = sum(real_together) / len(real_together)
    print(f"\n[MODE SUBJECT, {len(facts)} facts, {secs:.0f} s] alone {got}; in one patch {one_patch}")
    return got, base_check, after_check, one_patch, gguf  # the GGUF: test_the_compiled_gguf_answers_in_llama_cpp


def test_each_fact_alone_answers_its_paraphrases(runs):
    got = runs[0]
    # Measured here (2026-12-07, L-BFGS): 8 of 8, paraphrase 20 of 24 (22 with Adam), neighbourhood
    # 39 of 40. The issue's floors (99 / 85 / 95 / 98%) on all 100 facts are `make bench-edit-eval`'s
    # (7 min): 100 / 94.7 / 97.6 / 99.0%. COMPOSE answers 16.7% of the subset's paraphrases.
    assert got["efficacy"] >= 7 / 8, got
    assert got["paraphrase"] >= 0.75, got
    assert got["neighbourhood"] >= 0.925, got


def test_real_facts_keep_their_answers(runs):
    got, one_patch = runs[0], runs[3]
    # Measured 0.978 alone and 1.0 in one patch here (2026-12-07); 0.90-0.94 per edit before the scale.
    assert got["real"] >= 0.97, got
    assert one_patch["real"] >= 0.9, one_patch
    # In one patch: 8 of 8, neighbourhood 39 of 40 (before the scale, 8 facts of 24 in one patch kept 62.5%).
    assert one_patch["efficacy"] >= 6 / 8, one_patch
    assert one_patch["neighbourhood"] >= 0.85, one_patch


def test_remove_patch_gives_the_base_back(runs):
    _, base_check, after_check, _, _ = runs
    assert [d["rows"] for d in after_check] == [d["rows"] for d in base_check]


def test_a_layer_with_nothing_after_it_is_refused(larql_bin, inference_vindex, tmp_path, facts_real):
    f = facts_real[0]
    script = tmp_path / "s.lql"
    script.write_text(insert(f, " AT LAYER 17") + ";\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "-t", str(peer.THREADS), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "layer must be at most 16" in (r.stdout + r.stderr), (r.stdout[-1000:], r.stderr[-1000:])


def test_a_value_that_does_not_take_is_refused(larql_bin, inference_vindex, tmp_path, facts_real):
    # One layer after layer 16 cannot carry the value (P(target) ends near 1e-6): an error, and
    # nothing is installed (with --keep-going the INFER after it runs and does not answer the target).
    f = facts_real[0]
    script = tmp_path / "s.lql"
    script.write_text(insert(f, " AT LAYER 16") + ";\n" + f"INFER {lql_str(f['prompt'])} TOP 1;\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "--keep-going", "-t", str(peer.THREADS), "-f",
                        str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "did not make the target likely" in (r.stdout + r.stderr), (r.stdout[-1000:], r.stderr[-1000:])
    docs = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    infer = [d for d in docs if "rows" in d]
    assert len(infer) == 1 and top1(infer[0]) != f["target_id"], docs


def test_a_later_name_with_the_same_last_token_does_not_undo_an_earlier_fact(larql_bin, inference_vindex, tmp_path):
    # "Feldrouvova" (capital -> Manila) then "Krotrindova" (official language -> Norwegian): both
    # names end in the same token, so a gate that only avoided the decoys opened on both, and the
    # second INSERT took Feldrouvova's prompt from Manila (0.995) to " a" (0.118). The second gate
    # is now kept off the earlier entity's rows.
    recs = {r["id"]: r for r in map(json.loads, SUBSET.read_text().splitlines()) if r.get("type") == "fact"}
    first, second = recs["capital-0000"], recs["official-language-0001"]
    lines = [insert(first), insert(second), f"INFER {lql_str(first['prompt'])} TOP 1", f"INFER {lql_str(second['prompt'])} TOP 1",
             insert(first)]
    docs, _ = run_script(larql_bin, inference_vindex, tmp_path, lines)
    assert top1(docs[2]) == first["target_id"], docs[2]
    assert top1(docs[3]) == second["target_id"], docs[3]
    # The same subject and relation again: a second feature, and a note naming the first.
    first_feature = docs[0]["rows"][0][6]
    assert any("already inserted" in n and f"feature {first_feature}" in n for n in docs[4].get("notes", [])), docs[4]


def test_the_compiled_gguf_answers_in_llama_cpp(runs, facts_real, llama_cpp_mod):
    # The 8 facts in one patch, COMPILE CURRENT INTO MODEL: llama.cpp loading that GGUF answers the
    # canonical prompts as larql's session did (issue 31: >= 90% of the facts). The scaled up row
    # and down column (docs/lql.md "Knowledge edits", step 5) must survive the GGUF's types.
    import numpy as np
    gguf = runs[4]
    assert gguf.is_file()
    llm = peer.load_llama(n_ctx=64, logits_all=False, model=gguf)
    hits = 0
    for f in facts_real:
        llm.reset()
        llm.eval(peer.llama_tokenize(llm, f["prompt"]))
        hits += int(int(np.argmax(peer._last_logits(llm))) == f["target_id"])
    del llm
    print(f"\n[MODE SUBJECT compiled to GGUF] llama.cpp answers {hits}/{len(facts_real)}")
    assert hits >= 7, hits


def test_unrelated_text_keeps_its_logits_in_the_compiled_gguf(runs, llama_cpp_mod):
    # The 8 features must stay shut off their subjects, at BOS above all: its row is the same in
    # every prompt and every position attends to it, so any activation there moves every logit of
    # every prompt (docs/lql.md "Knowledge edits", MODE SUBJECT). Before the gate was shut there,
    # one edit moved this text's logits by up to 1.0-1.4 (llama.cpp and larql alike); with it they
    # are the base's bit for bit. llama.cpp, the peer, runs both GGUFs.
    import numpy as np
    text = ("The history of the river valley begins with the first farmers, who cleared the forest "
            "and planted wheat along the banks. Their villages grew into small towns.")
    out = {}
    for name, model in (("base", None), ("edited", runs[4])):
        llm = peer.load_llama(n_ctx=64, logits_all=True, model=model)
        ids = peer.llama_tokenize(llm, text)
        out[name] = np.array(peer.llama_logits(llm, ids))
        del llm
    diff = np.abs(out["edited"] - out["base"]).max(axis=1)
    print(f"\n[MODE SUBJECT, 8 facts compiled] unrelated text: max |logit change| per position {np.round(diff, 4).tolist()}")
    assert float(diff.max()) < 1e-3, diff


def test_patches_made_apart_keep_both_facts_and_delete_reaches_an_appended_feature(larql_bin, inference_vindex, tmp_path, facts_real):
    # Each fresh session appends its first fact at the same feature (docs/lql.md "Knowledge edits", MODE SUBJECT:
    # 2050 at layer 3 of the default model), so two patches made apart name one slot. Applied
    # together, the second's feature moves to a free one (a note says so) and both facts answer;
    # DELETE ... WHERE layer = L AND feature = F reaches the moved one, and DIFF refuses a session
    # with appended features (it would compare only the vindex's own).
    a, b = facts_real[0], facts_real[1]
    made = []
    for name, f in (("a", a), ("b", b)):
        d = tmp_path / name
        d.mkdir()
        docs, _ = run_script(larql_bin, inference_vindex, d, [f"BEGIN PATCH {lql_str(str(tmp_path / (name + '.vlp')))}", insert(f), "SAVE PATCH"])
        made.append((docs[1]["rows"][0][5], docs[1]["rows"][0][6]))  # (layer, feature)
    assert made[0] == made[1], made  # the clash this test is about
    layer, feature = made[0]
    d = tmp_path / "both"
    d.mkdir()
    lines = [f"APPLY PATCH {lql_str(str(tmp_path / 'a.vlp'))}", f"APPLY PATCH {lql_str(str(tmp_path / 'b.vlp'))}",
             f"INFER {lql_str(a['prompt'])} TOP 1", f"INFER {lql_str(b['prompt'])} TOP 1"]
    docs, _ = run_script(larql_bin, inference_vindex, d, lines)
    moved = [n for n in docs[1].get("notes", []) if "moved to free ones" in n]
    assert moved and f"feature {feature} -> " in moved[0], docs[1]
    new_feature = int(moved[0].split(" -> ")[1].rstrip(")"))
    assert top1(docs[2]) == a["target_id"], docs[2]
    assert top1(docs[3]) == b["target_id"], docs[3]
    docs, _ = run_script(larql_bin, inference_vindex, d,
                         lines[:2] + [f"DELETE FROM EDGES WHERE layer = {layer} AND feature = {new_feature}",
                                      f"INFER {lql_str(a['prompt'])} TOP 1", f"INFER {lql_str(b['prompt'])} TOP 1"])
    assert top1(docs[3]) == a["target_id"], docs[3]
    assert top1(docs[4]) != b["target_id"], docs[4]
    script = d / "diff.lql"
    script.write_text(lines[0] + f";\nDIFF CURRENT {lql_str(str(inference_vindex))};\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "-t", "1", "-f", str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "which DIFF does not compare" in r.stderr, (r.stdout[-500:], r.stderr[-500:])


def test_a_second_fact_with_the_same_target_starts_from_the_first_ones_value(larql_bin, inference_vindex, tmp_path):
    # The value learned for a target at a layer is the next INSERT of that target's start (issue 31:
    # INSERT within 1.5 s; docs/BENCHMARKS.md "MODE SUBJECT"). Measured (2026-12-07): Drususkara
    # -> Buddhism alone 6 L-BFGS evaluations, after Stondboskova -> Buddhism 1; the other three
    # pairs of subset100 with a shared target likewise 5-7 -> 1.
    recs = {r["id"]: r for r in map(json.loads, SUBSET.read_text().splitlines()) if r.get("type") == "fact"}
    first, second = recs["religion-0001"], recs["religion-0003"]
    assert first["target_id"] == second["target_id"]
    (tmp_path / "cold").mkdir()
    (tmp_path / "warm").mkdir()
    cold, _ = run_script(larql_bin, inference_vindex, tmp_path / "cold", [insert(second)])
    warm, _ = run_script(larql_bin, inference_vindex, tmp_path / "warm",
                         [insert(first), insert(second), f"INFER {lql_str(second['prompt'])} TOP 1"])
    cold_steps, warm_steps = cold[0]["rows"][0][8], warm[1]["rows"][0][8]
    assert warm_steps <= 2 and warm_steps < cold_steps, (cold_steps, warm_steps)
    assert top1(warm[2]) == second["target_id"], warm[2]


def test_a_refusal_at_the_default_layer_tries_the_layer_before(larql_bin, inference_vindex, tmp_path):
    # Without AT LAYER a refusal at layer 3 is tried again at layer 2 (after ~750 inserts at one
    # layer the new entities stop standing out there; docs/BENCHMARKS.md "MODE SUBJECT"). "Japan"
    # does not stand out from ordinary text at either (its token is in the text): the error gives
    # both reasons, and nothing is installed.
    script = tmp_path / "s.lql"
    script.write_text('INSERT INTO EDGES (entity, relation, target) VALUES ("Japan", "currency", "euro") MODE SUBJECT;\n'
                      'SHOW PATCHES;\n')
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "--keep-going", "-t", str(peer.THREADS), "-f",
                        str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "at layer 3:" in r.stderr and "at layer 2 too:" in r.stderr and r.stderr.count("does not stand out") == 2, r.stderr[-2000:]
    docs = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    assert [d.get("rows") for d in docs if d.get("statement") == "SHOW"] == [[]], docs
