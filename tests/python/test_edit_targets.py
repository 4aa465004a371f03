"""Issue 31's quality targets for knowledge edits, on the 100 facts of data/edit_eval/subset100.jsonl
and the default model's inference vindex (conftest.py `inference_vindex`), with INSERT ... MODE
ROBUST (docs/lql.md "Knowledge edits"). The targets are not reached yet: they are asserted in
tests marked xfail (an XPASS says they now hold), and floors a little under what ROBUST measures
today guard against regressions.

The numbers are not edit-eval's: they are recomputed here from `larql lql --json` INFER rows (the
target's and the answers' token ids come from the set, made by scripts/make_edit_eval.py through
`larql tokenize`). test_edit_eval.py checks that edit-eval's numbers are these same computations;
docs/BENCHMARKS.md "Knowledge edits (edit-eval)" records the full runs (`make bench-edit-eval`).

- single edits: each fact alone (BEGIN PATCH, INSERT, INFER, REMOVE PATCH): targets: efficacy (the target is
  the canonical prompt's top-1) >= 99%, paraphrase (top-1 over all paraphrase prompts) >= 85%,
  neighbourhood (the base answer kept over all neighbourhood prompts) >= 95%, real-fact retention
  (the set's real prompts keep their answer, measured after 5 edits spread over the facts) >= 98%;
- REMOVE PATCH restores the base: INFER's rows (token ids, logits, probabilities) equal the base's;
Accumulated edits (many facts in one patch, the 1,000-edit benchmark's targets) are measured by
`make bench-edit-eval` / `make bench-edit-eval-1000` (edit-eval's sequential phase), not here: they
take minutes, and do not meet the targets yet.
"""
from __future__ import annotations

import json
import subprocess
import time

import pytest

import peer
from test_edit_eval import insert as insert_as, lql_str

SUBSET = peer.REPO_ROOT / "data" / "edit_eval" / "subset100.jsonl"
REAL_AT = (0, 25, 50, 75, 99)  # the single edits after which the real-fact prompts are re-run
# MODE ROBUST measured 100% / 76.0% / 92.2% / 98.2% on this subset (edit-eval, docs/BENCHMARKS.md
# "The up row reads the relation"; 100 / 76.7 / 90.0 / 94.7% before it), and here 100 / 76.0 / 92.2
# / 95.3% (real-fact retention after other edits than edit-eval's five).
FLOOR = {"efficacy": 0.97, "paraphrase": 0.72, "neighbourhood": 0.89, "real_retention": 0.92}


def insert(f):
    return insert_as(f, "ROBUST")


def top1(doc):
    names = [c["name"] for c in doc["columns"]]
    return dict(zip(names, doc["rows"][0]))["token_id"]


@pytest.fixture(scope="module")
def subset():
    recs = [json.loads(line) for line in SUBSET.read_text().splitlines() if line.strip()]
    facts = [r for r in recs if r["type"] == "fact"]
    real = [r for r in recs if r["type"] == "real"]
    assert len(facts) == 100 and len(real) >= 200
    return facts, real


def run_script(larql_bin, vindex, tmp_path, lines):
    script = tmp_path / "s.lql"
    script.write_text(";\n".join(lines) + ";\n")
    t0 = time.time()
    r = subprocess.run([str(larql_bin), "lql", str(vindex), "--json", "-t", str(peer.THREADS), "-f", str(script)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()], time.time() - t0


def probes(f):
    return ([f"INFER {lql_str(f['prompt'])} TOP 1"] + [f"INFER {lql_str(p)} TOP 1" for p in f["paraphrases"]] +
            [f"INFER {lql_str(n['prompt'])} TOP 1" for n in f["neighbourhood"]])


def score(f, docs):
    """(efficacy, paraphrase hits, neighbourhood kept) of one fact from its INFER documents."""
    np_ = len(f["paraphrases"])
    para = [top1(d) == f["target_id"] for d in docs[1:1 + np_]]
    neigh = [top1(d) == n["answer_id"] for d, n in zip(docs[1 + np_:], f["neighbourhood"])]
    return top1(docs[0]) == f["target_id"], para, neigh


@pytest.fixture(scope="module")
def single(larql_bin, inference_vindex, subset, tmp_path_factory):
    """Every fact alone: the metrics recomputed from INFER, and the base / after-REMOVE check rows."""
    facts, real = subset
    tmp_path = tmp_path_factory.mktemp("targets_single")
    real_lines = [f"INFER {lql_str(r['prompt'])} TOP 1" for r in real]
    check = [f"INFER {lql_str(p)} TOP 5" for p in ("The capital of France is", facts[0]["prompt"], facts[1]["paraphrases"][0])]
    lines = check + real_lines
    for i, f in enumerate(facts):
        name = lql_str(str(tmp_path / f"single{i}.vlp"))
        lines += [f"BEGIN PATCH {name}", insert(f)] + probes(f) + (real_lines if i in REAL_AT else []) + [f"REMOVE PATCH {name}"]
    lines += check
    docs, secs = run_script(larql_bin, inference_vindex, tmp_path, lines)
    it = iter(docs)
    take = lambda n: [next(it) for _ in range(n)]  # noqa: E731
    base_check, base_real = take(len(check)), take(len(real))
    # The set's real prompts are ones the base model answers (its filter): all kept before any edit.
    assert [top1(d) for d in base_real] == [r["answer_id"] for r in real]
    eff, para, neigh, kept, ms = [], [], [], [], []
    for i, f in enumerate(facts):
        _, ins = take(2)
        assert ins["rows"][0][4] == "robust"
        ms.append(ins["elapsed_ms"])
        e, p, n = score(f, take(1 + len(f["paraphrases"]) + len(f["neighbourhood"])))
        eff.append(e), para.extend(p), neigh.extend(n)
        if i in REAL_AT:
            kept.extend(top1(d) == r["answer_id"] for d, r in zip(take(len(real)), real))
        take(1)  # REMOVE
    after_check = take(len(check))
    assert next(it, None) is None
    got = {"efficacy": sum(eff) / len(eff), "paraphrase": sum(para) / len(para), "neighbourhood": sum(neigh) / len(neigh),
           "real_retention": sum(kept) / len(kept)}
    print(f"\n[100 single edits, {secs:.0f} s, INSERT median {sorted(ms)[50]:.0f} ms] {got}")
    return got, base_check, after_check


def test_remove_patch_gives_the_base_back(single):
    _, base_check, after_check = single
    # Every row (ids, logits, probabilities) as before any edit.
    assert [d["rows"] for d in after_check] == [d["rows"] for d in base_check]


def test_single_edits_keep_what_robust_measures(single):
    """Regression floors a little under what MODE ROBUST measured (docs/BENCHMARKS.md), and above
    what COMPOSE, the default INSERT, measures (paraphrase 16.7%)."""
    got, _, _ = single
    assert got["efficacy"] >= FLOOR["efficacy"], got
    assert got["paraphrase"] >= FLOOR["paraphrase"], got
    assert got["neighbourhood"] >= FLOOR["neighbourhood"], got
    assert got["real_retention"] >= FLOOR["real_retention"], got


@pytest.mark.xfail(reason="issue 31's targets are not reached yet: docs/BENCHMARKS.md 'Knowledge edits (edit-eval)'",
                   strict=False)
def test_single_edits_meet_issue_31s_targets(single):
    got, _, _ = single
    assert got["efficacy"] >= 0.99, got
    assert got["paraphrase"] >= 0.85, got
    assert got["neighbourhood"] >= 0.95, got
    assert got["real_retention"] >= 0.98, got


def test_a_fact_that_no_scale_makes_top1_is_refused_and_changes_nothing(larql_bin, inference_vindex, tmp_path):
    """At layer 0 the invented fact never becomes the top prediction (P ~ 1e-6 at every scale): the
    INSERT is an error and the model is the base's, where it once kept the feature at the largest
    scale tried and every prompt answered "\\n\\n"."""
    script = tmp_path / "s.lql"
    probe = 'INFER "The capital of France is" TOP 5'
    script.write_text(";\n".join([probe, 'INSERT INTO EDGES (entity, relation, target) VALUES ("Velmora", "capital", "Zenda") '
                                          'MODE ROBUST AT LAYER 0', probe]) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "--keep-going", "-t", str(peer.THREADS), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    docs = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert r.returncode != 0 and len(docs) == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "error" in docs[1] and "nothing was installed" in docs[1]["error"], docs[1]
    assert docs[2]["rows"] == docs[0]["rows"]
