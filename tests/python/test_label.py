"""`larql label` on the default model's vindex (a copy of conftest.py's `inference_vindex` whose
files are links, with its own index.json), checked against the shipped relation set
data/relations.json (read here with the json module, not through larql):
- feature_labels.json lists exactly the shipped relations (names, templates, subject counts);
  every label names one of them, its examples are subjects of that relation, fires <= of = the
  relation's subject count, and the rule's thresholds hold (fires / of >= 0.5, score >= 0.3);
  layers and features are inside the model (18 x 2048);
- index.json lists the file with its SHA-256 (hashlib) and `larql verify` exits 0;
- SHOW RELATIONS's per-relation counts equal the counts tallied here from the file;
  RELATIONS ONLY and `WHERE relation = ...` return only labelled features.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

import peer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def labelled(larql_bin, inference_vindex, tmp_path_factory):
    out = tmp_path_factory.mktemp("label") / "gemma-labelled.vindex"
    out.mkdir()
    for f in inference_vindex.iterdir():
        if f.name == "index.json":
            (out / f.name).write_bytes(f.read_bytes())
        else:
            (out / f.name).symlink_to(f)
    t0 = time.time()
    r = subprocess.run([str(larql_bin), "label", str(out), "-t", str(peer.THREADS)], capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stderr
    print(f"\n[label] {time.time() - t0:.1f} s: {r.stdout.strip()}")
    return out


def shipped():
    return json.loads((REPO / "data" / "relations.json").read_text())["relations"]


def test_labels_agree_with_the_shipped_facts(larql_bin, labelled):
    labels = json.loads((labelled / "feature_labels.json").read_text())
    rels = shipped()
    assert labels["version"] == 1
    assert [(r["name"], r["template"], r["subjects"]) for r in labels["relations"]] == \
        [(r["name"], r["template"], len(r["facts"])) for r in rels]
    subjects = {r["name"]: {s for s, _ in r["facts"]} for r in rels}
    seen = set()
    for f in labels["features"]:
        assert f["relation"] in subjects
        assert 0 <= f["layer"] < 18 and 0 <= f["feature"] < 2048
        assert (f["layer"], f["feature"]) not in seen
        seen.add((f["layer"], f["feature"]))
        assert f["of"] == len(subjects[f["relation"]])
        assert 0 < f["fires"] <= f["of"]
        assert f["fires"] / f["of"] >= 0.5 - 1e-9
        assert 0.3 - 1e-9 <= f["score"] <= 1.0
        assert set(f["examples"]) <= subjects[f["relation"]], f
        assert 1 <= len(f["examples"]) <= 3
    per = Counter(f["relation"] for f in labels["features"])
    print(f"\n[label] {len(labels['features'])} labelled features: {dict(per)}")
    # Each relation's template differs from the others: most relations get features of their own.
    assert sum(1 for r in rels if per[r["name"]] > 0) >= 6, per
    # The checksum and verify.
    ix = json.loads((labelled / "index.json").read_text())
    digest = hashlib.sha256((labelled / "feature_labels.json").read_bytes()).hexdigest()
    assert ix["checksums"]["feature_labels.json"] == digest
    v = subprocess.run([str(larql_bin), "verify", str(labelled)], capture_output=True, text=True, timeout=600)
    assert v.returncode == 0, v.stdout + v.stderr


def run_json(larql_bin, vindex, script):
    r = subprocess.run([str(larql_bin), "lql", "--threads", str(peer.THREADS), str(vindex), "--json", "-e", script],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_show_relations_and_relations_only_use_the_labels(larql_bin, labelled):
    labels = json.loads((labelled / "feature_labels.json").read_text())
    per = Counter(f["relation"] for f in labels["features"])
    show, = run_json(larql_bin, labelled, "SHOW RELATIONS")
    cols = [c["name"] for c in show["columns"]]
    got = {row[cols.index("relation")]: row[cols.index("features")] for row in show["rows"]}
    assert got == {r["name"]: per[r["name"]] for r in shipped()}
    labelled_pairs = {(f["layer"], f["feature"]) for f in labels["features"]}
    layer = Counter(f["layer"] for f in labels["features"]).most_common(1)[0][0]
    raw, = run_json(larql_bin, labelled, f"SHOW RELATIONS AT LAYER {layer} RAW")
    assert len(raw["rows"]) == sum(1 for f in labels["features"] if f["layer"] == layer)
    d, e, s = run_json(larql_bin, labelled,
                       'DESCRIBE "France" RELATIONS ONLY; EXPLAIN INFER "The capital of France is" TOP 32 RELATIONS ONLY; '
                       'SELECT layer, feature, relation FROM FEATURES WHERE relation = "capital-of" LIMIT 5000')
    for doc in (d, e):
        c = [x["name"] for x in doc["columns"]]
        for row in doc["rows"]:
            assert (row[c.index("layer")], row[c.index("feature")]) in labelled_pairs
            assert row[c.index("relation")] is not None
    assert len(s["rows"]) == per["capital-of"]
    assert all(row[2] == "capital-of" and (row[0], row[1]) in labelled_pairs for row in s["rows"])
