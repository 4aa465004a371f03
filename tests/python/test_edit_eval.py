"""`larql edit-eval` (docs/cli.md "edit-eval") on a few facts of data/edit_eval/subset100.jsonl,
on the default model's inference vindex (conftest.py `inference_vindex`).

Every number edit-eval reports for those facts is recomputed here from other commands:
- one `larql lql --json` script that does by hand what edit-eval does — INFER on the base, then
  for each fact BEGIN PATCH / INSERT / INFER ... / REMOVE PATCH, then the facts INSERTed into one
  patch with INFER after each — and the metrics computed in Python from INFER's rows (top-1 ids,
  the probability column);
- `larql perplexity --json` on the vindex (base perplexity) and on the vindex the script's
  COMPILE CURRENT INTO VINDEX wrote with every edit (the edited perplexity), and `--logits-out`
  (the base logits, which the logits edit-eval writes after REMOVE PATCH must equal bit for bit);
- `larql run --temperature 0 --json` (the base's greedy continuations) and an n-gram entropy
  written here from ROME's definition.
The issue's quality targets (paraphrase >= 85% ...) are test_edit_targets.py's (MODE ROBUST, from
INFER); docs/BENCHMARKS.md "Knowledge edits (edit-eval)" records what the methods measure today.
"""
from __future__ import annotations

import json
import math
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import peer

SUBSET = peer.REPO_ROOT / "data" / "edit_eval" / "subset100.jsonl"
N_FACTS, N_REAL, N_FLUENCY, HELDOUT_WORDS = 3, 12, 2, 24


def rows(doc):
    names = [c["name"] for c in doc["columns"]]
    return [dict(zip(names, r)) for r in doc["rows"]]


def top1(doc):
    return rows(doc)[0]["token_id"]


def prob_of(doc, tid):
    """INFER's probability of token `tid` if it is among the rows, else None."""
    for r in rows(doc):
        if r["token_id"] == tid:
            return r["probability"]
    return None


def lql_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def insert(f, mode="COMPOSE"):
    return (f"INSERT INTO EDGES (entity, relation, target) VALUES ({lql_str(f['entity'])}, {lql_str(f['relation'])}, "
            f"{lql_str(f['target'])}) MODE {mode}")


def ngram_entropy(ids):
    """ROME's generation entropy (Meng et al. 2022, n_gram_entropy): mean of 2/3 H2 and 4/3 H3, H_n the
    entropy in bits of the n-gram frequencies."""
    hs = []
    for n, w in ((2, 2 / 3), (3, 4 / 3)):
        grams = Counter(tuple(ids[i:i + n]) for i in range(len(ids) - n + 1))
        tot = sum(grams.values())
        hs.append(w * -sum(c / tot * math.log2(c / tot) for c in grams.values()))
    return sum(hs) / 2


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    recs = [json.loads(line) for line in SUBSET.read_text().splitlines() if line.strip()]
    facts = [r for r in recs if r["type"] == "fact"][:N_FACTS]
    assert len({f["relation"] for f in facts}) == N_FACTS  # the subset interleaves the relations
    real = [r for r in recs if r["type"] == "real"][:N_REAL]
    flu = [r for r in recs if r["type"] == "fluency"][:N_FLUENCY]
    held = " ".join(next(r for r in recs if r["type"] == "heldout")["text"].split()[:HELDOUT_WORDS])
    tmp = tmp_path_factory.mktemp("edit_eval")
    path = tmp / "small.jsonl"
    with open(path, "w") as f:
        for r in [recs[0]] + facts + real + flu + [{"type": "heldout", "text": held}]:
            f.write(json.dumps(r) + "\n")
    (tmp / "heldout.txt").write_text(held)
    return {"path": path, "dir": tmp, "facts": facts, "real": real, "fluency": [r["prompt"] for r in flu], "heldout": held}


@pytest.fixture(scope="module")
def eval_doc(larql_bin, inference_vindex, small_set):
    npy = small_set["dir"] / "after_remove.npy"
    t0 = time.time()
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(small_set["path"]), "--every", "1",
                        "--global-sample", str(N_FACTS), "--json", "--logits-out", str(npy), "--patch-out",
                        str(small_set["dir"] / "seq-out.vlp"), "-t", str(peer.THREADS)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    s, q = doc["single"]["summary"], doc["sequential"]["summary"]
    print(f"\n[edit-eval {N_FACTS} facts, {time.time() - t0:.0f} s] single: efficacy {s['efficacy']}, paraphrase "
          f"{s['paraphrase']:.3f}, neighbourhood {s['neighbourhood']}; sequential: efficacy {q['efficacy']}, paraphrase "
          f"{q['paraphrase']:.3f}, neighbourhood {q['neighbourhood']}, real {q['real_retention']}")
    return doc, npy


@pytest.fixture(scope="module")
def infer_docs(larql_bin, inference_vindex, small_set):
    """The same edits and measurements as one LQL script; returns the parsed documents by phase."""
    facts, real, tmp = small_set["facts"], small_set["real"], small_set["dir"]

    def probe(f, top=10):  # canonical (TOP 10: the target's and the old answer's probabilities), paraphrases, neighbours
        return ([f"INFER {lql_str(f['prompt'])} TOP {top}"] + [f"INFER {lql_str(p)} TOP 1" for p in f["paraphrases"]] +
                [f"INFER {lql_str(n['prompt'])} TOP 1" for n in f["neighbourhood"]])

    real_lines = [f"INFER {lql_str(r['prompt'])} TOP 1" for r in real]
    lines = [x for f in facts for x in probe(f)] + real_lines
    for i, f in enumerate(facts):
        name = lql_str(str(tmp / f"single{i}.vlp"))
        lines += [f"BEGIN PATCH {name}", insert(f)] + probe(f) + real_lines + [f"REMOVE PATCH {name}"]
    seq = lql_str(str(tmp / "seq.vlp"))
    lines.append(f"BEGIN PATCH {seq}")
    for k, f in enumerate(facts):
        lines += [insert(f), f"INFER {lql_str(f['prompt'])} TOP 1"]
        lines += [x for g in facts[:k + 1] for x in probe(g)] + real_lines
    # The accumulated edits baked into a vindex: `larql perplexity` on it checks the edited perplexity.
    lines += [f"COMPILE CURRENT INTO VINDEX {lql_str(str(tmp / 'seq.vindex'))}", f"REMOVE PATCH {seq}"]
    script = tmp / "manual.lql"
    script.write_text(";\n".join(lines) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "-t", str(peer.THREADS), "-f", str(script)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    it = iter(docs)
    take = lambda n: [next(it) for _ in range(n)]  # noqa: E731
    per = lambda f: 1 + len(f["paraphrases"]) + len(f["neighbourhood"])  # noqa: E731
    out = {"base": [take(per(f)) for f in facts], "base_real": take(len(real)), "single": [], "seq": []}
    for f in facts:
        _, _ = take(2)  # BEGIN, INSERT
        out["single"].append((take(per(f)), take(len(real))))
        take(1)  # REMOVE
    take(1)  # BEGIN
    for k, f in enumerate(facts):
        _, at = take(2)
        out["seq"].append((top1(at), [take(per(g)) for g in facts[:k + 1]], take(len(real))))
    take(2)  # COMPILE, REMOVE
    assert next(it, None) is None
    out["compiled"] = tmp / "seq.vindex"
    return out


def measured(f, docs, base_old):
    """A fact's record recomputed from its INFER documents (canonical, paraphrases, neighbours)."""
    canon, rest = docs[0], docs[1:]
    np_ = len(f["paraphrases"])
    p_t, p_o = prob_of(canon, f["target_id"]), prob_of(canon, base_old)
    return {"top1": top1(canon), "p_target": p_t, "p_old": p_o, "last_p": rows(canon)[-1]["probability"],
            "paraphrase_top1": [top1(d) for d in rest[:np_]], "neighbourhood_top1": [top1(d) for d in rest[np_:]]}


def check_fact(mine, got, f):
    assert got["top1"] == mine["top1"], f["id"]
    assert got["paraphrase_top1"] == mine["paraphrase_top1"], f["id"]
    assert got["neighbourhood_top1"] == mine["neighbourhood_top1"], f["id"]
    # INFER's probability column and edit-eval's are one computation: equal to the last bit.
    for key in ("p_target", "p_old"):
        if mine[key] is not None:
            assert got[key] == mine[key], (f["id"], key)
        else:  # outside INFER's top 10: below its last row
            assert got[key] < mine["last_p"], (f["id"], key)


def summary_of(records, facts, base_neigh):
    n = len(records)
    eff = sum(r["top1"] == f["target_id"] for r, f in zip(records, facts)) / n
    eff_p = sum(r["p_target"] is not None and (r["p_old"] is None or r["p_target"] > r["p_old"])
                for r, f in zip(records, facts)) / n
    para = [t == f["target_id"] for r, f in zip(records, facts) for t in r["paraphrase_top1"]]
    neigh = [a == b for r, bn in zip(records, base_neigh) for a, b in zip(r["neighbourhood_top1"], bn)]
    return {"efficacy": eff, "efficacy_prob": eff_p, "paraphrase": sum(para) / len(para), "neighbourhood": sum(neigh) / len(neigh)}


def test_base_measures_equal_infer(eval_doc, infer_docs, small_set):
    doc, _ = eval_doc
    facts = small_set["facts"]
    base_old = [top1(d[0]) for d in infer_docs["base"]]
    base_neigh = [[top1(x) for x in d[1 + len(f["paraphrases"]):]] for d, f in zip(infer_docs["base"], facts)]
    assert [r["old_id"] for r in doc["single"]["facts"]] == base_old
    assert [r["neighbourhood_base"] for r in doc["single"]["facts"]] == base_neigh
    # The set's neighbourhood and real prompts were filtered on this model: all answered.
    assert doc["base"]["neighbourhood_answered"] == 1.0
    assert [n["answer_id"] for f in facts for n in f["neighbourhood"]] == [t for b in base_neigh for t in b]
    assert doc["base"]["real_answered"] == 1.0
    assert [top1(d) for d in infer_docs["base_real"]] == [r["answer_id"] for r in small_set["real"]]
    assert doc["base"]["facts_already_answered"] == sum(o == f["target_id"] for o, f in zip(base_old, facts)) == 0


def test_single_edit_measures_equal_infer(eval_doc, infer_docs, small_set):
    doc, _ = eval_doc
    facts = small_set["facts"]
    base_old = [r["old_id"] for r in doc["single"]["facts"]]
    base_real = [top1(d) for d in infer_docs["base_real"]]
    mine = []
    for f, got, (docs, real_docs), old in zip(facts, doc["single"]["facts"], infer_docs["single"], base_old):
        m = measured(f, docs, old)
        check_fact(m, got, f)
        mine.append(m)
    # Every single edit was a sampled state (--global-sample = the facts): real-fact retention.
    for g, (_, real_docs) in zip(doc["single"]["global"], infer_docs["single"]):
        changed = [i for i, d in enumerate(real_docs) if top1(d) != base_real[i]]
        assert g["real_changed"] == changed
        assert g["real_retention"] == 1 - len(changed) / len(base_real)
    want = summary_of(mine, facts, [r["neighbourhood_base"] for r in doc["single"]["facts"]])
    for k, v in want.items():
        assert doc["single"]["summary"][k] == pytest.approx(v, abs=1e-12), k


def test_sequential_measures_equal_infer(eval_doc, infer_docs, small_set, larql_bin):
    doc, _ = eval_doc
    facts = small_set["facts"]
    seq = doc["sequential"]
    base_old = [r["old_id"] for r in seq["facts"]]
    base_neigh = [r["neighbourhood_base"] for r in seq["facts"]]
    base_real = [top1(d) for d in infer_docs["base_real"]]
    assert [p["edits"] for p in seq["curve"]] == list(range(1, N_FACTS + 1))
    for k, (point, (at_insert, per_fact, real_docs)) in enumerate(zip(seq["curve"], infer_docs["seq"])):
        assert seq["facts"][k]["at_insert_top1"] == at_insert
        mine = [measured(f, d, o) for f, d, o in zip(facts, per_fact, base_old)]
        want = summary_of(mine, facts[:k + 1], base_neigh)
        for key, v in want.items():
            assert point[key] == pytest.approx(v, abs=1e-12), (k, key)
        changed = [i for i, d in enumerate(real_docs) if top1(d) != base_real[i]]
        assert point["real_changed"] == changed
    # The perplexity of the held-out text with every edit: `larql perplexity` on the compiled vindex.
    r = subprocess.run([str(larql_bin), "perplexity", str(infer_docs["compiled"]), str(small_set["dir"] / "heldout.txt"),
                        "--json", "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert seq["curve"][-1]["perplexity"] == pytest.approx(json.loads(r.stdout)["perplexity"], rel=1e-12)
    assert seq["curve"][-1]["perplexity_change"] == pytest.approx(
        json.loads(r.stdout)["perplexity"] / doc["base"]["perplexity"] - 1, rel=1e-9)
    # The final re-test, fact by fact.
    for f, got, d, o in zip(facts, seq["facts"], infer_docs["seq"][-1][1], base_old):
        check_fact(measured(f, d, o), got, f)


def test_patch_out_holds_the_sequential_edits(eval_doc, larql_bin, inference_vindex, small_set):
    # --patch-out: the sequential phase's patch, one insert per fact in order; applied in a fresh
    # `larql lql` session it gives the canonical prompts the last re-test's answers.
    doc, _ = eval_doc
    facts, path = small_set["facts"], small_set["dir"] / "seq-out.vlp"
    assert doc["sequential"]["patch_out"] == str(path)
    patch = json.loads(path.read_text())
    ops = [o for o in patch["operations"] if o["op"] == "insert"]
    assert [(o["entity"], o["target_id"]) for o in ops] == [(f["entity"], f["target_id"]) for f in facts]
    lines = [f"APPLY PATCH {lql_str(str(path))}"] + [f"INFER {lql_str(f['prompt'])} TOP 1" for f in facts]
    script = small_set["dir"] / "apply-out.lql"
    script.write_text(";\n".join(lines) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "--json", "-t", str(peer.THREADS), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert [top1(d) for d in docs[1:]] == [g["top1"] for g in doc["sequential"]["facts"]]


def test_remove_patch_restores_base_bit_for_bit(eval_doc, larql_bin, inference_vindex, small_set):
    doc, npy = eval_doc
    base_npy = small_set["dir"] / "base.npy"
    r = subprocess.run([str(larql_bin), "perplexity", str(inference_vindex), str(small_set["dir"] / "heldout.txt"),
                        "--logits-out", str(base_npy), "--json", "-t", str(peer.THREADS)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    base, after = np.load(base_npy), np.load(npy)
    assert after.shape == base.shape == (doc["base"]["heldout_tokens"], base.shape[1])
    assert np.array_equal(after, base)  # every logit, bit for bit (float32 ==)
    assert after.tobytes() == base.tobytes()
    b = doc["base"]["logits_xxh3"]
    assert doc["single"]["remove_patch_logits_xxh3"] == b and doc["single"]["remove_patch_bit_identical"]
    assert doc["sequential"]["remove_patch_logits_xxh3"] == b and doc["sequential"]["remove_patch_bit_identical"]
    assert doc["sequential"]["edited_logits_xxh3"] != b  # the edits did change the held-out logits
    # Base perplexity: `larql perplexity`'s own number.
    assert doc["base"]["perplexity"] == pytest.approx(json.loads(r.stdout)["perplexity"], rel=1e-12)


def test_fluency_is_the_entropy_of_greedy_continuations(eval_doc, larql_bin, inference_vindex, small_set):
    doc, _ = eval_doc
    conts = doc["base"]["fluency"]["continuations"]
    assert len(conts) == N_FLUENCY and all(len(c) == 32 for c in conts)
    for prompt, c in zip(small_set["fluency"], conts):
        r = subprocess.run([str(larql_bin), "run", str(inference_vindex), prompt, "-n", "32", "--temperature", "0", "--json",
                            "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        ids = json.loads(r.stdout)["ids"]
        assert c[:len(ids)] == ids  # `larql run` stops at an end-of-generation token; edit-eval does not
    for state in [doc["base"]] + doc["single"]["global"] + doc["sequential"]["curve"]:
        fl = state["fluency"]
        assert fl["entropy"] == pytest.approx(sum(ngram_entropy(c) for c in fl["continuations"]) / len(fl["continuations"]),
                                              abs=1e-12)
    assert ngram_entropy([1, 2, 3, 4]) == pytest.approx((2 / 3 * math.log2(3) + 4 / 3 * 1.0) / 2)  # hand-derived


@pytest.mark.parametrize("line, message", [
    ("{not json", "small.jsonl:2: not a JSON object"),
    ('{"type": "fact", "id": "x"}', "small.jsonl:2: relation: missing"),
    ('{"type": "rumour", "prompt": "p"}', 'type: "rumour" is not one of'),
    ('{"type": "real", "prompt": "Paris is the capital of", "answer": "France", "answer_id": "7"}', "real.answer_id"),
])
def test_a_bad_set_is_refused_naming_the_line(larql_bin, inference_vindex, small_set, tmp_path, line, message):
    lines = small_set["path"].read_text().splitlines()
    bad = tmp_path / "small.jsonl"
    bad.write_text("\n".join([lines[0], line] + lines[1:]) + "\n")
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(bad)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_a_set_for_another_tokenizer_is_refused(larql_bin, inference_vindex, small_set, tmp_path):
    recs = [json.loads(x) for x in small_set["path"].read_text().splitlines()]
    recs[1]["target_id"] += 1
    bad = tmp_path / "other.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(bad), "--facts", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "other.jsonl:2: target" in r.stderr and "another tokenizer" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(small_set["path"]), "--facts", "9"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "--facts 9" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(small_set["path"]), "--mode", "rome"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--mode rome" in r.stderr, r.stderr


def test_a_refused_insert_counts_as_not_learned_and_the_run_goes_on(larql_bin, inference_vindex, small_set):
    """ROBUST at layer 0 makes no fact top-1 at any scale: every INSERT is refused (nothing installed),
    each fact counts as not learned, the phase ends, and the model is still the base's."""
    r = subprocess.run([str(larql_bin), "edit-eval", str(inference_vindex), "--set", str(small_set["path"]), "--mode", "robust",
                        "--clauses", "AT LAYER 0", "--facts", "2", "--sequential", "0", "--global-sample", "1", "--json",
                        "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    single = json.loads(r.stdout)["single"]
    assert single["summary"]["refused"] == 2 and single["summary"]["efficacy"] == 0, single["summary"]
    assert all("nothing was installed" in f["refused"] and f["top1"] == f["old_id"] for f in single["facts"]), single["facts"]
    assert single["global"][0]["real_retention"] == 1 and single["remove_patch_bit_identical"]
