"""`larql compare VINDEX_A VINDEX_B` (docs/cli.md "compare") on a tiny family fixture's f32 vindex.

Facts INSERTed through LQL and compiled into a copy (COMPILE CURRENT INTO VINDEX): compare lists
exactly the (layer, feature) slots the INSERT rows name, with gate, up and down changed; the gate
rows that differ and their largest |delta| are recomputed with numpy from the two gate_vectors.bin
files; nothing outside the FFN differs; B's compiled edits are listed. A vindex against itself: no
differences, exit 0. Two models (another family; another source of the same family) are refused
with exit 1 naming what differs.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import peer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
FACTS = [("Zorblax", "capital", "Berlin"), ("Quenthar", "river", "bridge")]


def larql(*args, check=True):
    return peer.run_larql([str(a) for a in args], check=check)


def compare(a, b, *extra, check=True):
    r = larql("compare", a, b, "--json", *extra, check=check)
    return json.loads(r.stdout) if check else r


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """(base vindex, edited vindex, the INSERT rows)."""
    tmp = tmp_path_factory.mktemp("cmp")
    base, out = tmp / "base.vindex", tmp / "edited.vindex"
    larql("extract", FIXTURES / "qwen2" / "qwen2-f32.gguf", "-o", base, "--level", "inference", "-t", peer.THREADS)
    stmts = [f'INSERT INTO EDGES (entity, relation, target) VALUES ("{e}", "{r}", "{t}")' for e, r, t in FACTS]
    stmts.append(f'COMPILE CURRENT INTO VINDEX "{out}"')
    r = subprocess.run([str(peer.larql_bin()), "lql", "--threads", str(peer.THREADS), "--json", str(base), "-e",
                        ";\n".join(stmts) + ";"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    inserts = []
    for d in docs[:len(FACTS)]:
        names = [c["name"] for c in d["columns"]]
        inserts += [dict(zip(names, row)) for row in d["rows"]]
    return base, out, inserts


def gate_rows(vx: Path):
    idx = json.loads((vx / "index.json").read_text())
    dt = {"f32": np.float32, "f16": np.float16}[idx["dtype"]]
    raw = np.fromfile(vx / "gate_vectors.bin", dtype=dt).astype(np.float32)
    out, at = [], 0
    for slot in idx["layers"]:
        n = slot["num_features"] * idx["hidden_size"]
        out.append(raw[at:at + n].reshape(slot["num_features"], idx["hidden_size"]))
        at += n
    return out


def test_compare_lists_exactly_the_inserted_features(edited):
    base, out, inserts = edited
    slots = sorted({(i["layer"], i["feature"]) for i in inserts})
    assert len(slots) == len(FACTS)
    got = compare(base, out, "--limit", "1000")
    listed = sorted((f["layer"], f["feature"]) for f in got["features"])
    assert listed == slots, (listed, slots)
    assert got["summary"]["features_changed"] == len(slots) and not got["summary"]["identical"]
    for f in got["features"]:
        assert {"gate", "up", "down"} <= set(f["changed"]), f
    assert got["tensors"] == [] and got["summary"]["tensors_compared"] > 0  # attention, norms, embeddings untouched
    # The gate rows that differ, and by how much, from the files themselves.
    ga, gb = gate_rows(base), gate_rows(out)
    differ = sorted((l, int(f)) for l in range(len(ga)) for f in np.nonzero((ga[l] != gb[l]).any(axis=1))[0])
    assert differ == slots
    for f in got["features"]:
        want = np.abs(ga[f["layer"]][f["feature"]] - gb[f["layer"]][f["feature"]]).max()
        assert f["gate"]["max_abs"] == pytest.approx(float(want), rel=1e-6)
    per_layer = {l["layer"]: l for l in got["layers"]}
    for l, _ in slots:
        assert per_layer[l]["gate"] >= 1 and per_layer[l]["down_max_abs"] > 0
    assert got["a"]["edited_slots"] == []
    assert sorted((s["layer"], s["feature"], s["entity"]) for s in got["b"]["edited_slots"]) == \
        sorted((i["layer"], i["feature"], i["entity"]) for i in inserts)
    text = larql("compare", base, out).stdout
    assert f"{len(slots)} of " in text and "features differ" in text and "Zorblax" in text


def test_compare_with_itself_is_empty(edited):
    base, _, _ = edited
    r = larql("compare", base, base, "--json")
    assert r.returncode == 0
    got = json.loads(r.stdout)
    assert got["summary"]["identical"] and got["summary"]["features_changed"] == 0 and got["features"] == []
    assert "no differences" in larql("compare", base, base).stdout


def test_compare_refuses_two_models_and_bad_input(edited, tmp_path):
    base, _, _ = edited
    other = tmp_path / "llama3.vindex"
    larql("extract", FIXTURES / "llama3" / "llama3-f32.gguf", "-o", other, "--level", "inference", "-t", peer.THREADS)
    r = compare(base, other, check=False)
    assert r.returncode == 1 and "not two vindexes of one model" in r.stderr and "family" in r.stderr, r.stderr
    # The same family and shape from another source (the q8_0 GGUF): refused by fingerprint...
    q8 = tmp_path / "q8.vindex"
    larql("extract", FIXTURES / "qwen2" / "qwen2-q8_0.gguf", "-o", q8, "--level", "inference", "-t", peer.THREADS)
    r = compare(base, q8, check=False)
    assert r.returncode == 1 and "fingerprint" in r.stderr, r.stderr
    # ... and compared with --force: the Q8_0 rounding changes every up row, within its scale.
    got = compare(base, q8, "--force", "--limit", "0")
    assert got["summary"]["up"] == got["summary"]["features_compared"] and got["features"] == []
    loose = compare(base, q8, "--force", "--tolerance", "0.05", "--limit", "0")
    assert loose["summary"]["up"] == 0
    r = compare(base, FIXTURES / "qwen2" / "qwen2-f32.gguf", check=False)
    assert r.returncode == 1 and "not a vindex" in r.stderr, r.stderr
    r = compare(base, tmp_path / "missing.vindex", check=False)
    assert r.returncode == 1 and "missing.vindex" in r.stderr, r.stderr
