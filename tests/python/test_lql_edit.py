"""Knowledge edits in LQL (docs/lql.md "Knowledge edits") on the default model's inference vindex
(conftest.py `inference_vindex`). Each phase is one `larql lql -f SCRIPT --json` process.

- COMPOSE: 10 made-up facts (entities the model has never seen) INSERTed in one patch; INFER's
  top-1 on each canonical prompt must be the target's first token (the tokenizers package's id) for
  >= 8 of 10, and the top-1 of >= 95% of the 200 unrelated prompts of data/unrelated_prompts.json
  must be what it was before (the figures are printed; docs/BENCHMARKS.md records them).
- REMOVE PATCH gives the base logits bit for bit; SAVE PATCH then APPLY PATCH in a fresh session
  gives the patched logits bit for bit; COMPILE CURRENT INTO VINDEX gives a vindex that `larql
  verify` accepts and whose INFER equals base + patch.
- KNN: the same 10 facts answer; a prompt about another entity (same relation) is refused by the
  entity check, and answered with VERIFY OFF.
- kill -9 during COMPILE at 5 random points leaves the source intact and no output that loads.
- COMPILE CURRENT INTO MODEL (after APPLY PATCH): llama.cpp, loading the GGUF, answers >= 8 of the
  10 facts.
"""
from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

import peer

DATA = Path(__file__).resolve().parent / "data"
FACTS = [  # entity, relation, target: made-up entities, real one-token targets
    ("Zorblax", "capital", "Berlin"), ("Quenthar", "language", "Spanish"), ("Vellmora", "currency", "yen"),
    ("Drakonis", "capital", "Madrid"), ("Mirthwald", "language", "Russian"), ("Ostrevia", "capital", "Cairo"),
    ("Pelagorn", "currency", "euro"), ("Xanthuria", "language", "Swedish"), ("Brimcastle", "capital", "Lisbon"),
    ("Tolvenis", "currency", "dollar"),
]


def canonical(rel, ent):
    return f"The {rel} of {ent} is"


def run_script(larql_bin, vindex, lines, tmp_path, name, check=True, timeout=1200):
    script = tmp_path / f"{name}.lql"
    script.write_text(";\n".join(lines) + ";\n")
    cmd = [str(larql_bin), "lql", "--threads", str(peer.THREADS), "--json"] + ([str(vindex)] if vindex else []) + ["-f", str(script)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()], time.time() - t0


def rows(doc):
    names = [c["name"] for c in doc["columns"]]
    return [dict(zip(names, r)) for r in doc["rows"]]


def infer_lines(prompts, top=1, extra=""):
    return [f'INFER "{p}" TOP {top}{extra}' for p in prompts]


def top1(doc):
    return rows(doc)[0]["token_id"]


def logits(doc):
    return [(r["token_id"], r["logit"]) for r in rows(doc)]


@pytest.fixture(scope="module")
def target_ids(inference_vindex):
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(inference_vindex / "tokenizer.json"))
    return [tok.encode(" " + t, add_special_tokens=False).ids[0] for _, _, t in FACTS]


@pytest.fixture(scope="module")
def unrelated():
    p = json.loads((DATA / "unrelated_prompts.json").read_text())
    assert len(p) == 200
    return p


@pytest.fixture(scope="module")
def compose_run(larql_bin, inference_vindex, tmp_path_factory, unrelated):
    tmp = tmp_path_factory.mktemp("edit")
    patch = tmp / "facts.vlp"
    out = tmp / "compiled.vindex"
    canon = [canonical(r, e) for e, r, _ in FACTS]
    probe = canon + unrelated[:20]
    lines = (infer_lines(canon + unrelated) + infer_lines(probe, 10) + [f'BEGIN PATCH "{patch}"'] +
             [f'INSERT INTO EDGES (entity, relation, target) VALUES ("{e}", "{r}", "{t}") MODE COMPOSE' for e, r, t in FACTS] +
             infer_lines(canon + unrelated) + infer_lines(probe, 10) + ["SAVE PATCH", f'COMPILE CURRENT INTO VINDEX "{out}"',
                                                                        f'REMOVE PATCH "{patch}"'] + infer_lines(probe, 10))
    docs, secs = run_script(larql_bin, inference_vindex, lines, tmp, "compose")
    n = len(canon) + len(unrelated)
    k = len(probe)
    res = {"base_top1": [top1(d) for d in docs[:n]], "base_logits": [logits(d) for d in docs[n:n + k]]}
    docs = docs[n + k:]
    res["inserts"] = [rows(d)[0] for d in docs[1:1 + len(FACTS)]]
    docs = docs[1 + len(FACTS):]
    res["edit_top1"] = [top1(d) for d in docs[:n]]
    res["edit_logits"] = [logits(d) for d in docs[n:n + k]]
    docs = docs[n + k:]
    res["removed_logits"] = [logits(d) for d in docs[3:3 + k]]
    res.update(patch=patch, out=out, tmp=tmp, probe=probe, secs=secs)
    return res


def test_compose_facts_answer_and_others_keep_their_top1(compose_run, target_ids):
    r = compose_run
    hits = sum(1 for got, want in zip(r["edit_top1"][:len(FACTS)], target_ids) if got == want)
    same = sum(1 for a, b in zip(r["base_top1"][len(FACTS):], r["edit_top1"][len(FACTS):]) if a == b)
    ms = [round(i["ms"]) for i in r["inserts"]]
    print(f"\n[compose] facts answered {hits}/10; unrelated top-1 unchanged {same}/200; "
          f"INSERT ms {ms}; layers {sorted({i['layer'] for i in r['inserts']})}; script {r['secs']:.1f} s")
    base_hits = sum(1 for got, want in zip(r["base_top1"][:len(FACTS)], target_ids) if got == want)
    assert base_hits <= 2, "the made-up facts must not be answered before the edit"
    assert hits >= 8
    assert same >= 190


def test_remove_patch_restores_logits_bit_exactly(compose_run):
    r = compose_run
    assert r["edit_logits"] != r["base_logits"]  # the edit did change something
    assert r["removed_logits"] == r["base_logits"]


def test_saved_patch_applies_in_a_fresh_session(compose_run, larql_bin, inference_vindex):
    r = compose_run
    patch = json.loads(Path(r["patch"]).read_text())
    assert patch["version"] == 1 and len(patch["operations"]) == 10
    assert all(op["op"] == "insert" for op in patch["operations"])
    docs, _ = run_script(larql_bin, inference_vindex, [f'APPLY PATCH "{r["patch"]}"'] + infer_lines(r["probe"], 10),
                         r["tmp"], "apply")
    assert [logits(d) for d in docs[1:]] == r["edit_logits"]


def test_compiled_vindex_verifies_and_infers_as_base_plus_patch(compose_run, larql_bin):
    r = compose_run
    v = subprocess.run([str(larql_bin), "verify", str(r["out"])], capture_output=True, text=True, timeout=600)
    assert v.returncode == 0, v.stdout + v.stderr
    docs, _ = run_script(larql_bin, r["out"], infer_lines(r["probe"], 10), r["tmp"], "compiled")
    assert [logits(d) for d in docs] == r["edit_logits"]


def test_compiled_gguf_answers_the_edits_in_llama_cpp(compose_run, larql_bin, inference_vindex, target_ids,
                                                      llama_cpp_mod):
    """COMPILE CURRENT INTO MODEL after APPLY PATCH: a GGUF whose plain forward pass — llama.cpp's —
    carries the facts."""
    r = compose_run
    gguf = r["tmp"] / "edited.gguf"
    docs, _ = run_script(larql_bin, inference_vindex, [f'APPLY PATCH "{r["patch"]}"', f'COMPILE CURRENT INTO MODEL "{gguf}"'],
                         r["tmp"], "compile_model")
    assert gguf.is_file()
    assert "(" not in docs[1]["title"], docs[1]["title"]  # no stray statement position
    # The GGUF holds the compiled vindex's bytes: every tensor equal (tests/python/gguf_table.py reads
    # it, not larql; gguf.GGUFReader would spend ~40 s on the vocabulary).
    import numpy as np
    from gguf_table import read_tensor_table, tensor_bytes
    by_key = {e["key"]: e for e in json.loads((r["out"] / "weight_manifest.json").read_text())}
    mm, table = read_tensor_table(gguf)
    differ = [name for name in table
              if tensor_bytes(mm, table, name) != np.fromfile(r["out"] / by_key[name]["file"], dtype=np.uint8, count=by_key[name]["length"],
                                          offset=by_key[name]["offset"]).tobytes()]
    assert differ == [] and len(table) == len(by_key), differ[:5]
    del mm
    llm = peer.load_llama(n_ctx=64, logits_all=False, model=gguf)
    hits = 0
    gaps = []
    for (e, rel, _), want in zip(FACTS, target_ids):
        prompt = canonical(rel, e)
        ids = peer.llama_tokenize(llm, prompt)
        llm.reset()
        llm.eval(ids)
        lg = peer._last_logits(llm).astype(np.float64)
        hits += int(int(lg.argmax()) == want)
        # larql on the GGUF and on the compiled vindex: the same logits, bit for bit.
        text = r["tmp"] / "p.txt"
        text.write_text(prompt)
        mine = []
        for model in (gguf, r["out"]):
            npy = r["tmp"] / "lg.npy"
            subprocess.run([str(larql_bin), "perplexity", str(model), str(text), "--logits-out", str(npy), "-t",
                            str(peer.THREADS)], check=True, capture_output=True, timeout=600)
            mine.append(np.load(npy)[-1].astype(np.float64))
        assert np.array_equal(mine[0], mine[1]), prompt
        p = lambda x: float(np.exp(x[want] - x.max()) / np.exp(x - x.max()).sum())  # noqa: E731
        gaps.append((round(p(mine[0]), 4), round(p(lg), 4)))
    print(f"\n[compile into model] llama.cpp answers {hits}/10 edited facts; P(target) larql vs llama.cpp {gaps}")
    assert hits >= 8
    # Same bytes, yet the engines' probabilities of a composed fact scatter: its steep gate, balanced
    # to P just >= 0.5 in larql's arithmetic, is sensitive to how each engine rounds activations
    # (docs/lql.md "COMPILE INTO MODEL and llama.cpp": measured |P_larql - P_llama.cpp| median 0.06,
    # max 0.45 on Ostrevia, where numpy float64 gives 0.018). The bound: the median, with margin.
    d = sorted(abs(a - b) for a, b in gaps)
    assert (d[4] + d[5]) / 2 <= 0.15, gaps
    del llm


def test_knn_facts_answer_and_the_entity_check_refuses_others(larql_bin, inference_vindex, tmp_path, target_ids):
    canon = [canonical(r, e) for e, r, _ in FACTS]
    # Another made-up entity with the first fact's relation: its key is close, its entity is not named.
    other = canonical(FACTS[0][1], "Wexmoor")
    lines = ([f'INSERT INTO EDGES (entity, relation, target) VALUES ("{e}", "{r}", "{t}") MODE KNN' for e, r, t in FACTS] +
             infer_lines(canon) + infer_lines([other]) + infer_lines([other], 1, " VERIFY OFF"))
    docs, _ = run_script(larql_bin, inference_vindex, lines, tmp_path, "knn")
    got = [top1(d) for d in docs[10:20]]
    hits = sum(1 for a, b in zip(got, target_ids) if a == b)
    print(f"\n[knn] facts answered {hits}/10")
    assert hits == 10
    refused, unverified = docs[20], docs[21]
    assert any("does not mention" in n for n in refused["notes"]), refused
    assert top1(refused) != target_ids[0] or not any("KNN store" in n for n in refused["notes"])
    assert any("KNN store" in n for n in unverified["notes"]), unverified


def test_kill9_during_compile_leaves_source_intact(compose_run, larql_bin, inference_vindex, tmp_path):
    r = compose_run
    before = subprocess.run([str(larql_bin), "verify", str(inference_vindex)], capture_output=True, text=True, timeout=600)
    assert before.returncode == 0
    script = tmp_path / "c.lql"
    rng = random.Random(11)
    for trial in range(5):
        out = tmp_path / f"k{trial}.vindex"
        script.write_text(f'APPLY PATCH "{r["patch"]}";\nCOMPILE CURRENT INTO VINDEX "{out}";\n')
        p = subprocess.Popen([str(larql_bin), "lql", "--threads", str(peer.THREADS), str(inference_vindex), "-f", str(script)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 3.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        if out.exists():  # finished before the kill: it must be whole
            v = subprocess.run([str(larql_bin), "verify", str(out)], capture_output=True, text=True, timeout=600)
            assert v.returncode == 0, f"trial {trial}: a complete-looking output that does not verify"
        else:
            l = subprocess.run([str(larql_bin), "lql", str(out), "-e", "STATS"], capture_output=True, text=True, timeout=600)
            assert l.returncode != 0
    after = subprocess.run([str(larql_bin), "verify", str(inference_vindex)], capture_output=True, text=True, timeout=600)
    assert after.returncode == 0, after.stdout


def test_compile_and_patch_paths_never_replace_what_is_there(larql_bin, inference_vindex, tmp_path):
    """COMPILE never replaces an existing directory or file, nor writes inside the vindex in use;
    BEGIN PATCH refuses a name that SAVE would write over something else."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("keep me")
    keep = tmp_path / "keep.txt"
    keep.write_text("keep me too")
    index_json = inference_vindex / "index.json"
    before = index_json.read_bytes()
    for stmt, needle in [(f'COMPILE CURRENT INTO VINDEX "{victim}"', "already exists"),
                         (f'COMPILE CURRENT INTO MODEL "{keep}"', "already exists"),
                         (f'COMPILE CURRENT INTO MODEL "{index_json}"', "already exists"),
                         (f'COMPILE CURRENT INTO MODEL "{inference_vindex}/new.gguf"', "inside the vindex in use"),
                         (f'BEGIN PATCH "{inference_vindex}/index.json"', "ends in .vlp"),
                         (f'BEGIN PATCH "{inference_vindex}/p.vlp"', "inside the vindex in use")]:
        r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "-e", stmt], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode != 0 and needle in r.stderr, (stmt, r.stderr)
    assert (victim / "notes.txt").read_text() == "keep me" and keep.read_text() == "keep me too"
    assert index_json.read_bytes() == before and not (inference_vindex / "new.gguf").exists()
    for bad in ['("Zed", "", "Oslo")', '("Zed", "capital", " ")']:
        r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "-e",
                            f"INSERT INTO EDGES (entity, relation, target) VALUES {bad}"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and "is empty" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "lql", str(inference_vindex), "-e",
                        'INSERT INTO EDGES (entity, relation, target) VALUES ("Zed", "capital", "Oslo") ALPHA 0'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "ALPHA must be in" in r.stderr


def test_options_of_the_other_mode_empty_targets_and_paths_are_refused_at_their_place(larql_bin, inference_vindex,
                                                                                      tmp_path):
    """Nothing parsed is ignored: CONFIDENCE is KNN's and ALPHA COMPOSE's; an empty UPDATE target or
    patch path is an error (as INSERT's); every error names its statement's line:column, the last
    one (an unterminated string, no final ';') included, with a JSON error document each."""
    ins = 'INSERT INTO EDGES (entity, relation, target) VALUES ("Zed", "capital", "Oslo")'
    lines = [f"{ins} CONFIDENCE 0.5",
             f"{ins} MODE KNN ALPHA 2",
             f"{ins} CONFIDENCE 2 MODE KNN",
             'UPDATE EDGES SET target = "" WHERE layer = 12 AND feature = 7',
             'UPDATE EDGES SET target = "   " WHERE layer = 12 AND feature = 7',
             'BEGIN PATCH ""',
             'APPLY PATCH "  "',
             f'APPLY PATCH "{tmp_path}/absent.vlp"',
             'WALK "The capital of France is" TOP 0',
             'DESCRIBE "France']
    script = tmp_path / "refusals.lql"
    script.write_text(";\n".join(lines))  # no final ';'
    r = subprocess.run([str(larql_bin), "lql", "--json", "--keep-going", str(inference_vindex), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr
    docs = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    assert len(docs) == len(lines) and all("error" in d for d in docs), r.stdout
    err = [d["error"] for d in docs]
    col = lambda i, needle: f"{i + 1}:{lines[i].index(needle) + 1}"
    assert f"INSERT at {col(0, '0.5')}: CONFIDENCE weighs a KNN fact" in err[0], err[0]
    assert f"INSERT at {col(1, '2')}: ALPHA scales a COMPOSE feature" in err[1], err[1]
    assert f"INSERT at {col(2, '2 MODE')}: CONFIDENCE must be in [0, 1]" in err[2], err[2]
    assert f"SET target at {col(3, chr(34))}: the target is empty" in err[3], err[3]
    assert f"SET target at {col(4, chr(34))}: the target is empty" in err[4], err[4]
    assert err[5] == "BEGIN PATCH at 6:1: the patch path is empty", err[5]
    assert err[6] == "APPLY PATCH at 7:1: the patch path is empty", err[6]
    assert err[7].startswith(f"APPLY PATCH at 8:1: {tmp_path}/absent.vlp"), err[7]
    assert err[8] == "WALK at 9:1: TOP must be at least 1, got 0", err[8]
    assert err[9] == "unterminated string at 10:10", err[9]


def test_compiled_slots_survive_a_later_insert_and_infer_compare(compose_run, larql_bin, target_ids):
    """A vindex compiled from edits records the slots they wrote (edits.json); a COMPOSE INSERT on it
    picks another slot, so the compiled facts and the new one all answer. INFER ... COMPARE: no
    edits -> both sides the same and a note; after the INSERT, base = the compiled vindex's own
    prediction, edited = the new target, and a note that top-1 changed."""
    r = compose_run
    slots = json.loads((r["out"] / "edits.json").read_text())["slots"]
    assert len(slots) == len(FACTS) and all(s["op"] == "insert" for s in slots)
    assert sorted(s["entity"] for s in slots) == sorted(e for e, _, _ in FACTS)
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(r["out"] / "tokenizer.json"))
    new = ("Quillmarsh", "capital", "Vienna")
    new_id = tok.encode(" " + new[2], add_special_tokens=False).ids[0]
    canon = [canonical(rel, e) for e, rel, _ in FACTS]
    p_new = canonical(new[1], new[0])
    lines = (infer_lines([p_new], 3) + infer_lines([p_new], 3, " COMPARE") +
             [f'INSERT INTO EDGES (entity, relation, target) VALUES ("{new[0]}", "{new[1]}", "{new[2]}")'] +
             infer_lines(canon + [p_new]) + infer_lines([p_new], 3, " COMPARE"))
    docs, _ = run_script(larql_bin, r["out"], lines, r["tmp"], "slots")
    before, cmp0, ins = docs[0], docs[1], rows(docs[2])[0]
    after = [top1(d) for d in docs[3:3 + len(FACTS) + 1]]
    cmp1 = docs[-1]
    assert (ins["layer"], ins["feature"]) not in {(s["layer"], s["feature"]) for s in slots}, ins
    answered_before = [got == want for got, want in zip(r["edit_top1"][:len(FACTS)], target_ids)]
    answered_after = [got == want for got, want in zip(after[:len(FACTS)], target_ids)]
    print(f"\n[compiled slots] new fact at L{ins['layer']} F{ins['feature']}; compiled facts answered "
          f"{sum(answered_before)} before, {sum(answered_after)} after; new fact top-1 {after[-1] == new_id}")
    assert answered_after == answered_before
    assert after[-1] == new_id
    # COMPARE without edits: the same predictions on both sides, and a note.
    b = rows(before)
    c0 = rows(cmp0)
    assert [x["base_token_id"] for x in c0] == [x["token_id"] for x in b] == [x["edited_token_id"] for x in c0]
    assert [x["base_prob"] for x in c0] == [x["probability"] for x in b]
    assert any("nothing to compare" in n or "same model" in n for n in cmp0["notes"]), cmp0["notes"]
    c1 = rows(cmp1)
    assert [x["base_token_id"] for x in c1] == [x["token_id"] for x in b]
    assert [x["base_prob"] for x in c1] == [x["probability"] for x in b]
    assert c1[0]["edited_token_id"] == new_id
    assert any(n.startswith("top-1 changed") for n in cmp1["notes"]), cmp1["notes"]


def test_diff_into_patch_reproduces_the_compiled_vindex(compose_run, larql_bin, inference_vindex, tmp_path):
    """DIFF base compiled INTO PATCH: one update op per edited feature; APPLY PATCH on the base
    gives the compiled vindex's logits bit for bit."""
    r = compose_run
    d = tmp_path / "delta.vlp"
    docs, _ = run_script(larql_bin, inference_vindex, [f'DIFF CURRENT "{r["out"]}" INTO PATCH "{d}"'], tmp_path, "diff")
    diff = docs[0]
    assert len(diff["rows"]) == len(FACTS), diff["rows"]
    assert any("byte for byte" in n for n in diff["notes"]), diff["notes"]
    ops = json.loads(d.read_text())["operations"]
    assert len(ops) == len(FACTS) and all(op["op"] == "update" for op in ops)
    docs, _ = run_script(larql_bin, inference_vindex, [f'APPLY PATCH "{d}"'] + infer_lines(r["probe"], 10), tmp_path, "apply_diff")
    assert not any("warning" in n for n in docs[0].get("notes", [])), docs[0]
    assert [logits(x) for x in docs[1:]] == r["edit_logits"]


def test_delete_where_changes_exactly_the_selected_features(larql_bin, inference_vindex, tmp_path):
    """DELETE with a general WHERE zeroes exactly the features SELECT ... FROM FEATURES returns for
    that WHERE (DIFF against the vindex on disk, which compares the stored bytes, sees those and no
    others); a WHERE over too many features is refused naming the count."""
    # Layers 15 and 16 store ffn_down as Q6_K, where an edit rewrites only its own column (a Q4_K
    # layer re-quantises the column's 256-feature block: DIFF would list the neighbours too).
    where = "layer BETWEEN 15 AND 16 AND feature IN (5, 9, 700) AND NOT (layer = 16 AND feature = 9)"
    lines = [f"SELECT layer, feature FROM FEATURES WHERE {where}", f"DELETE FROM EDGES WHERE {where}",
             f'DIFF "{inference_vindex}" CURRENT']
    docs, _ = run_script(larql_bin, inference_vindex, lines, tmp_path, "delete_where")
    want = [(15, 5), (15, 9), (15, 700), (16, 5), (16, 700)]
    assert [tuple(x) for x in docs[0]["rows"]] == want
    assert [(x["layer"], x["feature"]) for x in rows(docs[1])] == want
    diff = rows(docs[2])
    assert [(x["layer"], x["feature"]) for x in diff] == want
    assert all({"gate", "up", "down"} <= set(x["changed"].split(",")) for x in diff), diff
    docs, _ = run_script(larql_bin, inference_vindex, ["DELETE FROM EDGES WHERE layer BETWEEN 0 AND 17"], tmp_path,
                         "delete_cap", check=False)
    assert docs and "matches 36864 features; one statement changes at most 256" in docs[0]["error"], docs
