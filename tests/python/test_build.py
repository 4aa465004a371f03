"""`larql build` from a Vindexfile (docs/vindexfile.md).

- The 10 made-up facts of test_lql_edit.py as a Vindexfile on the default model's inference vindex
  (conftest.py `inference_vindex`): INFER on the built vindex gives the tokens and logits that the
  same INSERT statements typed into one `larql lql` session give, bit for bit; a second build with
  nothing changed takes every step from the cache ("cached": true in --json) and gives the same
  SHA-256s.
- Reproducible (a tiny Llama 3 fixture of tests/model/data/families: extract, INSERT, DELETE,
  LABELS): two builds of one Vindexfile in two directories, with 1 and with 2 threads, give the
  same bytes — every file's SHA-256 computed here with hashlib, not taken from larql's report.
- The cache: a second build reruns nothing; a changed INSERT reruns the edits, not the extract; a
  damaged cache entry is redone.
- kill -9 at random points of a build leaves the old vindex or the new one at the output, and the
  build after it (on what the killed ones left in the cache) gives the new one.
- LABELS from a feature_labels.json file gives the labeller's bytes back; one that names a
  feature the vindex lacks is refused at its line.
- A syntax error names line:column, and no output is written; build errors name their directive.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import peer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
TINY = FIXTURES / "llama3" / "llama3-f32.gguf"
FACTS = [  # test_lql_edit.py's: entity, relation, target
    ("Zorblax", "capital", "Berlin"), ("Quenthar", "language", "Spanish"), ("Vellmora", "currency", "yen"),
    ("Drakonis", "capital", "Madrid"), ("Mirthwald", "language", "Russian"), ("Ostrevia", "capital", "Cairo"),
    ("Pelagorn", "currency", "euro"), ("Xanthuria", "language", "Swedish"), ("Brimcastle", "capital", "Lisbon"),
    ("Tolvenis", "currency", "dollar"),
]
RELATIONS = {"version": 1, "relations": [
    {"name": "capital-of", "template": "The capital of {} is", "facts": [["France", "Paris"], ["Spain", "Madrid"], ["Italy", "Rome"]]},
    {"name": "colour-of", "template": "The colour of {} is", "facts": [["grass", "green"], ["snow", "white"], ["coal", "black"]]},
]}


def tree_digest(path: Path) -> dict[str, str] | None:
    """Every file of a directory -> its SHA-256 (hashlib); None when the directory is not there."""
    path = Path(path)
    if not path.is_dir():
        return None
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir()) if f.is_file()}


def build(larql_bin, d: Path, *extra, check=True, timeout=1800):
    r = subprocess.run([str(larql_bin), "build", str(d), "--json", *map(str, extra)], capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout), r.stderr
    return r


def steps(report) -> dict[str, bool]:
    return {s["step"]: s["cached"] for s in report["steps"]}


@pytest.fixture(scope="module")
def tiny_patch(larql_bin, tmp_path_factory) -> Path:
    """A patch made in LQL on the tiny model's vindex as the recipe extracts it (one INSERT)."""
    d = tmp_path_factory.mktemp("patch")
    subprocess.run([str(larql_bin), "extract", str(TINY), "-o", str(d / "tiny.vindex"), "--level", "inference", "--dtype",
                    "f32", "--down-top-k", "5"], check=True, capture_output=True, timeout=600)
    patch = d / "facts.vlp"
    subprocess.run([str(larql_bin), "lql", str(d / "tiny.vindex"), "-e",
                    f'BEGIN PATCH "{patch}"; INSERT INTO EDGES (entity, relation, target) VALUES ("Vellmora", "currency", '
                    f'"yen") AT LAYER 0; SAVE PATCH'],
                   check=True, capture_output=True, timeout=600)
    return patch


def tiny_vindexfile(d: Path, patch: Path, target="Berlin") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "relations.json").write_text(json.dumps(RELATIONS))
    shutil.copyfile(patch, d / "facts.vlp")
    (d / "Vindexfile").write_text(
        "# a tiny recipe: every kind of step\n"
        f"FROM {TINY}\n"
        "LEVEL inference\n"
        "DTYPE f32\n"
        "DOWN_TOP_K 5\n"
        "PATCH facts.vlp\n"
        f'INSERT ("Zorblax", "capital", "{target}") AT LAYER 1\n'
        "INSERT INTO EDGES (entity, relation, target)\n"
        '    VALUES ("Quenthar", "language", "Spanish") MODE KNN AT LAYER 1\n'
        "DELETE FROM EDGES WHERE layer = 0 AND feature = 3\n"
        "LABELS relations.json\n")
    return d


def verify(larql_bin, path):
    v = subprocess.run([str(larql_bin), "verify", str(path)], capture_output=True, text=True, timeout=600)
    assert v.returncode == 0, v.stdout + v.stderr


# ---- reproducibility and the cache (tiny fixture) -------------------------------------------------

def test_two_builds_give_the_same_bytes(larql_bin, tmp_path, tiny_patch):
    a, b = tiny_vindexfile(tmp_path / "a", tiny_patch), tiny_vindexfile(tmp_path / "b", tiny_patch)
    ra, _ = build(larql_bin, a, "-t", "1")
    rb, _ = build(larql_bin, b, "-t", "2")
    da, db = tree_digest(a / "build" / "vindex"), tree_digest(b / "build" / "vindex")
    print(f"\n[build] {len(da)} files; steps {[(s['step'], round(s['seconds'], 2)) for s in ra['steps']]}")
    assert da == db
    assert set(da) >= {"index.json", "gate_vectors.bin", "ffn_weights.bin", "down_meta.bin", "edits.json",
                       "knn_facts.vlp", "feature_labels.json", "tokenizer.json", "embeddings.bin"}
    # larql's report agrees with hashlib, and the vindex is whole.
    assert ra["files"] == {k: v for k, v in da.items() if k != "index.json"}
    assert ra["index_sha256"] == da["index.json"] == rb["index_sha256"]
    verify(larql_bin, a / "build" / "vindex")
    ix = json.loads((a / "build" / "vindex" / "index.json").read_text())
    assert ix["source"]["extracted_at"] == "1970-01-01T00:00:00Z"
    assert str(tmp_path) not in (a / "build" / "vindex" / "index.json").read_text()
    assert str(tmp_path) not in (a / "build" / "vindex" / "knn_facts.vlp").read_text()
    assert steps(ra) == {"extract": False, "edits": False, "labels": False}


def test_the_cache_reruns_only_what_changed(larql_bin, tmp_path, tiny_patch):
    d = tiny_vindexfile(tmp_path / "c", tiny_patch)
    first, _ = build(larql_bin, d)
    out = d / "build" / "vindex"
    want = tree_digest(out)
    # Nothing changed: every step from the cache (the last one's vindex verified), the same bytes.
    again, log = build(larql_bin, d)
    assert steps(again) == {"extract": True, "edits": True, "labels": True}, log
    assert all(s["seconds"] == 0 for s in again["steps"])
    assert [s["key"] for s in again["steps"]] == [s["key"] for s in first["steps"]]
    assert tree_digest(out) == want
    # Spacing and comments are not inputs.
    text = (d / "Vindexfile").read_text().replace("AT LAYER 1\n", "at  layer 1   -- the last layer\n", 1)
    (d / "Vindexfile").write_text("# edited\n" + text)
    assert steps(build(larql_bin, d)[0]) == {"extract": True, "edits": True, "labels": True}
    # A patch file with other content (same name): the edits are redone.
    (d / "facts.vlp").write_text((d / "facts.vlp").read_text() + "\n")  # JSON with one more blank
    assert steps(build(larql_bin, d)[0]) == {"extract": True, "edits": False, "labels": False}
    shutil.copyfile(tiny_patch, d / "facts.vlp")
    assert steps(build(larql_bin, d)[0]) == {"extract": True, "edits": False, "labels": False}
    assert tree_digest(out) == want  # the same inputs again: the same bytes
    # A changed fact: the extract is reused, the edits and the labels after them are redone.
    tiny_vindexfile(d, tiny_patch, target="Madrid")
    changed, _ = build(larql_bin, d)
    assert steps(changed) == {"extract": True, "edits": False, "labels": False}
    assert tree_digest(out) != want
    # Only this build's steps are kept.
    entries = sorted(p.name for p in (d / ".larql-cache").iterdir() if not p.name.startswith("."))
    assert entries == sorted(f"{s['step']}-{s['key'][:32]}" for s in changed["steps"])
    # A damaged entry (the last step's) is said and redone; the output is the same bytes.
    good = tree_digest(out)
    labels_entry = d / ".larql-cache" / f"labels-{changed['steps'][-1]['key'][:32]}"
    with open(labels_entry / "feature_labels.json", "r+b") as f:
        f.write(b"X")
    redo, log = build(larql_bin, d)
    assert steps(redo) == {"extract": True, "edits": True, "labels": False}
    assert "damaged" in log
    assert tree_digest(out) == good


def test_no_cache_keeps_nothing(larql_bin, tmp_path, tiny_patch):
    d = tiny_vindexfile(tmp_path / "n", tiny_patch)
    r, _ = build(larql_bin, d, "--no-cache", "-o", tmp_path / "n.vindex")
    assert not any(s["cached"] for s in r["steps"])
    assert not (d / ".larql-cache").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n", "n.vindex"]  # no scratch directory left
    verify(larql_bin, tmp_path / "n.vindex")


def test_kill9_leaves_the_old_vindex_or_the_new(larql_bin, tmp_path, tiny_patch):
    # The new vindex, made once on its own.
    fresh = tiny_vindexfile(tmp_path / "fresh", tiny_patch, target="Madrid")
    build(larql_bin, fresh)
    new = tree_digest(fresh / "build" / "vindex")
    # The old one at the output, kept aside to restore before each trial.
    d = tiny_vindexfile(tmp_path / "k", tiny_patch)
    build(larql_bin, d)
    out = d / "build" / "vindex"
    old = tree_digest(out)
    assert old != new
    backup = tmp_path / "old-backup"
    shutil.copytree(out, backup)
    tiny_vindexfile(d, tiny_patch, target="Madrid")
    cmd = [str(larql_bin), "build", str(d), "-q"]
    runs = []
    for _ in range(3):  # the shortest of three full runs (each from an empty cache)
        shutil.rmtree(d / ".larql-cache", ignore_errors=True)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        runs.append(time.monotonic() - t0)
    duration = min(runs)
    rng = random.Random(5)
    killed, outcomes = 0, []
    for trial in range(24):  # at least 9 trials, and on until 4 of them were killed mid-build
        if trial >= 9 and killed >= 4:
            break
        shutil.rmtree(out)
        shutil.copytree(backup, out)
        shutil.rmtree(d / ".larql-cache", ignore_errors=True)  # each trial does the work again
        # Most kills land anywhere in the run (the steps, the links, the rename); every third run is
        # let finish, so both outcomes are seen.
        delay = 3 * max(runs) if trial % 3 == 2 else rng.uniform(0.05 * duration, 0.9 * duration)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            killed += 1
        now = tree_digest(out)
        assert now in (old, new), f"trial {trial}: killed after {delay:.2f} s of {duration:.2f} s: a torn output"
        outcomes.append("old" if now == old else "new")
    print(f"\n[kill -9] {killed} of {len(outcomes)} killed mid-build in {duration:.2f} s runs: {outcomes}")
    assert killed >= 4 and "new" in outcomes
    # The next build, on whatever the killed ones left in the cache, gives the new vindex; no
    # staging directory is left beside the output.
    r, _ = build(larql_bin, d)
    assert tree_digest(out) == new
    assert sorted(p.name for p in out.parent.iterdir()) == ["vindex"]
    verify(larql_bin, out)


# ---- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,where,what", [
    (f"FROM {TINY}\nLEVEL inference\nDTYPE  f64\n", "3:8", 'DTYPE "f64" is not one of f32, f16, bf16'),
    (f"FROM {TINY}\nINSERT (\"Zorblax\", \"capital\")\n", "2:1", "at 2:29"),
    (f"FROM {TINY}\nINSRT (\"a\", \"b\", \"c\")\n", "2:1", 'unknown directive "INSRT"'),
    ("LEVEL inference\n", "1:1", "comes before FROM"),
])
def test_a_syntax_error_names_line_and_column(larql_bin, tmp_path, text, where, what):
    (tmp_path / "Vindexfile").write_text(text)
    r = build(larql_bin, tmp_path, check=False)
    assert r.returncode == 1, r.stderr
    assert f"Vindexfile:{where}: " in r.stderr and what in r.stderr, r.stderr
    assert not (tmp_path / "build").exists()


def test_build_errors_name_the_directive(larql_bin, tmp_path):
    (tmp_path / "Vindexfile").write_text(f"FROM {TINY}\nPATCH missing.vlp\n")
    r = build(larql_bin, tmp_path, check=False)
    assert r.returncode == 1 and "Vindexfile:2:1: PATCH missing.vlp" in r.stderr, r.stderr
    (tmp_path / "Vindexfile").write_text("FROM no-such-model-here\n")
    r = build(larql_bin, tmp_path, check=False)
    assert r.returncode == 1 and "Vindexfile:1:1: FROM no-such-model-here" in r.stderr, r.stderr
    # An output that is not a vindex is never replaced.
    (tmp_path / "Vindexfile").write_text(f"FROM {TINY}\n")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    r = build(larql_bin, tmp_path, "-o", tmp_path / "keep", check=False)
    assert r.returncode == 1 and "is not a vindex" in r.stderr, r.stderr
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"
    # A missing parent directory is refused by name (as compile does), and nothing is created.
    r = build(larql_bin, tmp_path, "-o", tmp_path / "no" / "x" / "y", check=False)
    assert r.returncode == 1 and f"directory {tmp_path / 'no' / 'x'} does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "no").exists()


# ---- the 10 facts on the default model ----------------------------------------------------------

def lql_json(larql_bin, vindex, lines, tmp_path, name):
    script = tmp_path / f"{name}.lql"
    script.write_text(";\n".join(lines) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", "--threads", str(peer.THREADS), "--json", str(vindex), "-f", str(script)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


def answers(doc):
    names = [c["name"] for c in doc["columns"]]
    return [(row[names.index("token_id")], row[names.index("logit")]) for row in doc["rows"]]


def test_ten_facts_build_as_typed_by_hand(larql_bin, inference_vindex, tmp_path):
    d = tmp_path / "facts"
    d.mkdir()
    (d / "Vindexfile").write_text(f"FROM {inference_vindex}\n" +
                                  "".join(f'INSERT ("{e}", "{r}", "{t}")\n' for e, r, t in FACTS))
    report, log = build(larql_bin, d, "-t", str(peer.THREADS))
    assert steps(report) == {"edits": False}  # a vindex FROM without settings is used as it is
    built = d / "build" / "vindex"
    verify(larql_bin, built)
    infers = [f'INFER "The {r} of {e} is" TOP 5' for e, r, _ in FACTS]
    by_hand = lql_json(larql_bin, inference_vindex,
                       [f'INSERT INTO EDGES (entity, relation, target) VALUES ("{e}", "{r}", "{t}")' for e, r, t in FACTS] +
                       infers, tmp_path, "hand")[len(FACTS):]
    from_build = lql_json(larql_bin, built, infers, tmp_path, "built")
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(inference_vindex / "tokenizer.json"))
    want = [tok.encode(" " + t, add_special_tokens=False).ids[0] for _, _, t in FACTS]
    hits = sum(1 for doc, w in zip(from_build, want) if answers(doc)[0][0] == w)
    print(f"\n[build 10 facts] edits step {report['steps'][0]['seconds']:.1f} s; facts answered {hits}/10")
    assert [answers(x) for x in from_build] == [answers(x) for x in by_hand]
    assert hits >= 8
    # Nothing changed: the second build takes the step from the cache and writes the same bytes.
    digest = tree_digest(built)
    again, _ = build(larql_bin, d, "-t", str(peer.THREADS))
    print(f"[build 10 facts] again, from the cache: {again['seconds']:.1f} s")
    assert steps(again) == {"edits": True}
    assert again["seconds"] < report["seconds"]
    assert tree_digest(built) == digest


def test_labels_from_a_feature_labels_file(larql_bin, tmp_path, tiny_patch):
    a = tiny_vindexfile(tmp_path / "a", tiny_patch)
    build(larql_bin, a)
    labelled = (a / "build" / "vindex" / "feature_labels.json").read_text()
    assert json.loads(labelled)["relations"], "the probe set's relations are recorded"
    # The labeller's output given back as a file: the same labels, byte for byte.
    b = tiny_vindexfile(tmp_path / "b", tiny_patch)
    (b / "labels.json").write_text(labelled)
    (b / "Vindexfile").write_text((b / "Vindexfile").read_text().replace("LABELS relations.json", "LABELS labels.json"))
    build(larql_bin, b)
    assert (b / "build" / "vindex" / "feature_labels.json").read_text() == labelled
    # A label for a feature the vindex lacks (the tiny model has 128 per layer) names the directive.
    doc = json.loads(labelled)
    doc["features"] = [{"layer": 1, "feature": 500, "relation": doc["relations"][0]["name"], "score": 0.5, "fires": 1,
                        "of": 1, "examples": []}]
    (b / "labels.json").write_text(json.dumps(doc))
    r = build(larql_bin, b, check=False)
    assert r.returncode == 1 and "Vindexfile:11:1: LABELS: " in r.stderr and "500" in r.stderr, r.stderr
