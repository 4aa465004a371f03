"""What a session shows after its edits, and the messages around edits (docs/lql.md "Knowledge
edits", "Results"), on the default model's inference vindex (conftest.py `inference_vindex`):

- down_meta follows UPDATE / DELETE in the session (FEATURES, WHERE token, DIFF) and equals what
  COMPILE writes; the expected tokens and scores are numpy's, from the compiled vindex's stored
  down columns and embedding dequantised by the `gguf` package.
- DELETE's guarantee per stored type: gate and up rows exactly 0 (numpy reads them), the down
  column 0 on Q6_K and within its reported `down_residual` on Q4_K.
- INFER with a KNN answer: one distribution (the fact mixed with the model), the KNN row without
  a logit, checked against the model's own probabilities from an INFER before the insert.
- Patch names: REMOVE PATCH finds "./p.vlp" as "p.vlp"; BEGIN / SAVE PATCH never write over a file.
- Messages: COMPILE into /proc, TRACE FOR "" and a multi-token target, INFER TOP 0, DIFF's title,
  TRACE's `who`, DESCRIBE's bands, tokens with blanks in text output.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import peer


def run(larql_bin, vindex, lines, tmp_path, name, json_out=True, check=True, cwd=None):
    script = tmp_path / f"{name}.lql"
    script.write_text(";\n".join(lines) + ";\n")
    cmd = [str(larql_bin), "lql", "--threads", str(peer.THREADS)] + (["--json"] if json_out else []) + \
          [str(vindex), "-f", str(script)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=cwd)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    if not json_out:
        return r
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()], r


def rows(doc):
    names = [c["name"] for c in doc["columns"]]
    return [dict(zip(names, x)) for x in doc["rows"]]


def tensor(vindex: Path, role: str, layer: int) -> np.ndarray:
    """A tensor of the vindex as f32, [rows, cols], from weight_manifest.json + the gguf package."""
    import gguf
    e = next(e for e in json.loads((vindex / "weight_manifest.json").read_text())
             if e["role"] == role and e["layer"] == layer)
    raw = np.fromfile(vindex / e["file"], dtype=np.uint8, count=e["length"], offset=e["offset"])
    t = gguf.GGMLQuantizationType[e["dtype"]]
    rows_, cols = e["shape"]
    if t == gguf.GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(rows_, cols)
    if t == gguf.GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32).reshape(rows_, cols)
    return np.asarray(gguf.quants.dequantize(raw.reshape(rows_, -1), t), dtype=np.float32).reshape(rows_, cols), e["dtype"]


def mat(vindex, role, layer):
    t = tensor(vindex, role, layer)
    return t[0] if isinstance(t, tuple) else t


@pytest.fixture(scope="module")
def tok(inference_vindex):
    import tokenizers
    return tokenizers.Tokenizer.from_file(str(inference_vindex / "tokenizer.json"))


@pytest.fixture(scope="module")
def edited(larql_bin, inference_vindex, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    out = tmp / "compiled.vindex"
    sel = "SELECT layer, feature, token, token_id, score FROM FEATURES WHERE layer = 12 AND feature IN (7, 8)"
    lines = [sel,
             'UPDATE EDGES SET target = "Lyon" WHERE layer = 12 AND feature = 7',
             "DELETE FROM EDGES WHERE layer = 12 AND feature = 8",
             "DELETE FROM EDGES WHERE layer = 13 AND feature = 5",
             sel,
             'SELECT layer, feature FROM FEATURES WHERE layer = 12 AND token = "Lyon"',
             "SELECT layer, feature, token FROM FEATURES WHERE layer = 13 AND feature = 5",
             f'DIFF CURRENT "{inference_vindex}" LAYER 12 LIMIT 300',
             f'COMPILE CURRENT INTO VINDEX "{out}"']
    docs, _ = run(larql_bin, inference_vindex, lines, tmp, "edit")
    cdocs, _ = run(larql_bin, out, [sel, "SELECT layer, feature, token FROM FEATURES WHERE layer = 13 AND feature = 5"],
                   tmp, "compiled")
    return dict(docs=docs, cdocs=cdocs, out=out, tmp=tmp)


def test_session_down_meta_follows_update_and_delete_as_compile_writes_it(edited, inference_vindex, tok):
    d = edited["docs"]
    before, upd, del12, del13, after, lyon, f13, diff = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
    out = edited["out"]
    # numpy: the compiled vindex's stored down columns through its own embedding (the model's).
    down = mat(out, "ffn_down", 12)  # [hidden, ffn]
    emb = mat(out, "token_embd", -1)  # [vocab, hidden]
    blank = np.array([tok.decode([i]).strip() == "" for i in range(emb.shape[0])])
    want = {}
    for f in (7, 8):
        s = emb.astype(np.float64) @ down[:, f].astype(np.float64)
        s[blank] = -np.inf
        i = int(np.argmax(s))
        want[f] = (i, float(s[i]))
    lyon_id = tok.encode(" Lyon", add_special_tokens=False).ids[0]
    assert want[7][0] == lyon_id, (want, tok.id_to_token(want[7][0]))
    got = {r["feature"]: r for r in rows(after)}
    for f in (7, 8):
        assert got[f]["token_id"] == want[f][0], (f, got[f], want[f], tok.id_to_token(want[f][0]))
        assert abs(got[f]["score"] - want[f][1]) <= 1e-3 * max(1.0, abs(want[f][1])), (f, got[f], want[f])
    assert got[7]["token"] == "Lyon"
    assert rows(before)[0]["token"] != "Lyon"
    assert (12, 7) in {(r["layer"], r["feature"]) for r in rows(lyon)}
    # The compiled vindex shows the same records (COMPILE writes what the session showed).
    assert [(r["feature"], r["token_id"], r["score"]) for r in rows(edited["cdocs"][0])] == \
           [(r["feature"], r["token_id"], r["score"]) for r in rows(after)]
    # DIFF: the CURRENT side is the edited session, in the title and in old_top.
    assert "(edited session)" in diff["title"] and f'{inference_vindex} (edited session) -> {inference_vindex}' in diff["title"]
    r7 = next(r for r in rows(diff) if r["feature"] == 7)
    assert "down" in r7["changed"] and r7["old_top"] == "Lyon" and r7["new_top"] == rows(before)[0]["token"], r7
    # DELETE on Q6_K (layer 13): an exactly zero column, no record (token null) in the session and compiled.
    assert rows(del13)[0]["down_residual"] == 0.0
    assert rows(f13)[0]["token"] is None and rows(edited["cdocs"][1])[0]["token"] is None
    assert not mat(out, "ffn_down", 13)[:, 5].any()


def test_delete_on_q4k_zeroes_gate_and_up_and_reports_the_down_residual(edited, inference_vindex):
    out = edited["out"]
    _, dtype = tensor(out, "ffn_down", 12)
    assert dtype == "Q4_K", dtype  # the case this test is about (docs/lql.md: layers 2, 3, 5, ... 12, 14)
    for role in ("ffn_gate", "ffn_up"):
        assert not mat(out, role, 12)[8].any(), role  # exactly zero: the activation is GELU(0) * 0 = 0
    col = mat(out, "ffn_down", 12)[:, 8]
    residual = rows(edited["docs"][2])[0]["down_residual"]
    print(f"\n[delete q4k] L12 F8 down residual max |v| = {np.abs(col).max():.6g} (reported {residual:.6g})")
    assert abs(residual - float(np.abs(col).max())) <= 1e-7
    # Half the largest step a Q4_K block of this layer's rows had before (hand bound: the nearest
    # value to 0 is at most half a step d*sc away).
    base = mat(inference_vindex, "ffn_down", 12)
    blk = base[:, 0:256]
    step = (blk.max(axis=1) - blk.min(axis=1)) / 15.0
    assert residual <= float(step.max()), (residual, float(step.max()))
    assert any("down column in a Q4_K block" in n for n in edited["docs"][2]["notes"])


def test_infer_with_a_knn_answer_is_one_distribution(larql_bin, inference_vindex, tmp_path, tok):
    p = "The capital of Lemuria is"
    lines = [f'INFER "{p}" TOP 3',
             'INSERT INTO EDGES (entity, relation, target) VALUES ("Lemuria", "capital", "Mu") MODE KNN AT LAYER 10 '
             'CONFIDENCE 0.6',
             f'INFER "{p}" TOP 3', f"INFER \"{p}\" TOP 0"]
    script = tmp_path / "knn.lql"
    script.write_text(";\n".join(lines) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", "--json", "--keep-going", str(inference_vindex), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    d = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    base, knn, top0 = rows(d[0]), rows(d[2]), d[3]
    mu = tok.encode(" Mu", add_special_tokens=False).ids[0]
    assert all(x["source"] == "model" for x in base)
    p_model = {x["token_id"]: x["probability"] for x in base}
    k = [x for x in knn if x["source"] == "knn"]
    assert len(k) == 1 and k[0]["token_id"] == mu and k[0]["logit"] is None, knn
    # Hand-derived: P(Mu) = 0.6 + 0.4 p_model(Mu) >= 0.6 (p_model(Mu) is tiny: Mu is not in the base top 3),
    # the model's tokens at 0.4 x their own probability, with their own logits.
    assert 0.6 <= k[0]["probability"] <= 0.6 + 0.4 * min(p_model.values())
    for x in knn:
        if x["source"] == "model":
            assert abs(x["probability"] - 0.4 * p_model[x["token_id"]]) < 1e-9, (x, p_model)
            assert x["logit"] == next(b["logit"] for b in base if b["token_id"] == x["token_id"])
    assert sum(x["probability"] for x in knn) <= 1.0
    assert [x["probability"] for x in knn] == sorted((x["probability"] for x in knn), reverse=True)
    assert top0.get("kind") == "invalid_argument" and "INFER at 4:1: TOP must be at least 1, got 0" in top0["error"], top0


def test_patch_names_match_as_paths_and_files_are_never_written_over(larql_bin, inference_vindex, tmp_path):
    """REMOVE PATCH "keep.vlp" finds the patch BEGIN PATCH "./keep.vlp" saved; BEGIN PATCH on an
    existing file is refused naming it and leaves it whole (SAVE PATCH's own refusal of a file that
    appeared since BEGIN is lql/patch_test.cc's SaveWithoutReplaceRefusesAnExistingFile)."""
    keep = tmp_path / "keep.vlp"
    knn = 'INSERT INTO EDGES (entity, relation, target) VALUES ("Lemuria", "capital", "Mu") MODE KNN'
    docs, _ = run(larql_bin, inference_vindex, ['BEGIN PATCH "./keep.vlp"', knn, "SAVE PATCH", 'REMOVE PATCH "keep.vlp"',
                                                "SHOW PATCHES"], tmp_path, "names", cwd=tmp_path)
    assert docs[3]["title"].startswith("Removed"), docs[3]
    assert any("no patches" in n for n in docs[4]["notes"]), docs[4]
    assert [op["op"] for op in json.loads(keep.read_text())["operations"]] == ["insert_knn"]
    before = keep.read_bytes()
    r = run(larql_bin, inference_vindex, ['BEGIN PATCH "keep.vlp"', "DELETE FROM EDGES WHERE layer = 12 AND feature = 8",
                                          "SAVE PATCH"], tmp_path, "over", json_out=False, check=False, cwd=tmp_path)
    assert r.returncode != 0 and "BEGIN PATCH at 1:1: keep.vlp already exists" in r.stderr, r.stderr
    assert keep.read_bytes() == before


def test_compile_into_proc_is_an_io_error_naming_the_output(larql_bin, inference_vindex, tmp_path):
    r = subprocess.run([str(larql_bin), "lql", "--json", str(inference_vindex), "-e",
                        'COMPILE CURRENT INTO VINDEX "/proc/out.vindex"'], capture_output=True, text=True, timeout=600)
    doc = json.loads(r.stdout.splitlines()[-1])
    assert r.returncode != 0 and doc["kind"] == "io", doc
    assert doc["error"].startswith("COMPILE at 1:1: cannot write /proc/out.vindex"), doc


def test_trace_target_messages_and_who(larql_bin, inference_vindex, tmp_path, tok):
    script = tmp_path / "t.lql"
    script.write_text('TRACE "The capital of France is" FOR "Paris";\nTRACE "x" FOR "";\n'
                      'TRACE "The capital of France is" FOR "zzzzqqq unusual" LAYERS 0-1;\n')
    r = subprocess.run([str(larql_bin), "lql", "--json", "--keep-going", str(inference_vindex), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    d = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    assert "TRACE ... FOR at 2:1: the target is empty" in d[1]["error"], d[1]
    ids = tok.encode(" zzzzqqq unusual", add_special_tokens=False).ids
    first = tok.decode([ids[0]])
    assert any(f'is {len(ids)} tokens; traced its first, "{first}" (id {ids[0]})' in n for n in d[2]["notes"]), d[2]["notes"]

    def who(a, f):  # docs/lql.md TRACE: same direction beyond 0.5 -> BOTH / both; else the larger |change|
        if a > 0.5 and f > 0.5:
            return "BOTH up"
        if a < -0.5 and f < -0.5:
            return "both down"
        big, part = (a, "attn") if abs(a) >= abs(f) else (f, "ffn")
        if abs(big) <= 0.5:
            return "~"
        return (part.upper() + " up") if big > 0 else (part + " down")
    tr = rows(d[0])
    assert all(x["who"] == who(x["attn"], x["ffn"]) for x in tr), [(x["layer"], x["attn"], x["ffn"], x["who"]) for x in tr]
    opposite = [x for x in tr if x["attn"] * x["ffn"] < 0 and max(abs(x["attn"]), abs(x["ffn"])) > 0.5]
    print(f"\n[trace who] rows with opposite signs: {[(x['layer'], round(x['attn'], 1), round(x['ffn'], 1), x['who']) for x in opposite]}")


def test_describe_merges_within_a_band(larql_bin, inference_vindex, tmp_path):
    docs, _ = run(larql_bin, inference_vindex, ['DESCRIBE "France"', 'DESCRIBE "France" KNOWLEDGE'], tmp_path, "describe")
    plain, know = rows(docs[0]), rows(docs[1])
    keys = [(x["band"], x["token"].lower()) for x in plain]
    assert len(keys) == len(set(keys))
    # The knowledge section of plain DESCRIBE is DESCRIBE KNOWLEDGE's (same layers, merged per band).
    assert [(x["token"], x["layer"], x["feature"]) for x in plain if x["band"] == "knowledge"] == \
           [(x["token"], x["layer"], x["feature"]) for x in know]


def test_tokens_with_blanks_are_visible_in_text_output(larql_bin, inference_vindex, tmp_path, tok):
    r = run(larql_bin, inference_vindex, ['SELECT entity, token_id FROM ENTITIES NEAREST TO "Paris" LIMIT 5'], tmp_path,
            "ents", json_out=False)
    docs, _ = run(larql_bin, inference_vindex, ['SELECT entity, token_id FROM ENTITIES NEAREST TO "Paris" LIMIT 5'],
                  tmp_path, "ents_json")
    for x in rows(docs[0]):
        piece = tok.decode([x["token_id"]])
        assert x["entity"] == piece.strip()  # JSON: as before, blanks trimmed
        line = next(l for l in r.stdout.splitlines() if l.rstrip().endswith(" " + str(x["token_id"])))
        shown = line.rsplit(None, 1)[0].strip()
        assert shown == (f'"{piece}"' if piece != piece.strip() else piece), (line, piece)
    pieces = {tok.decode([x["token_id"]]) for x in rows(docs[0])}
    assert {"Paris", " Paris"} <= pieces, pieces
