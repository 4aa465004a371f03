"""A mixture-of-experts vindex (docs/vindex-format.md "Experts", docs/lql.md "Mixtures of experts").

The two MoE fixtures of tests/model/data/families (Mixtral: 4 experts, top-2, renormalised;
Qwen2-MoE: 4 experts, top-2, plus a sigmoid-gated shared expert), each extracted once from the
f32 GGUF that llama.cpp's converter wrote. Expected values come from transformers' own
safetensors (the per-expert w1/gate_proj and w2/down_proj, lm_head), read here with numpy:

  * index.json: per layer num_experts, num_features_per_expert = config.json's, num_features =
    experts x expert width + the shared expert's width; verify passes;
  * gate_vectors.bin = every expert's gate rows in expert order, then the shared expert's, bit
    for bit; down_meta.bin's records = the top tokens of lm_head . down column, exact scores;
  * the vindex runs with the GGUF's logits bit for bit (quant keep);
  * LQL: every feature row's `expert` cell is the expert its number says; WALK keeps the routed
    experts' features (and the shared expert's);
  * INSERT then INFER: the fact's target becomes top-1 and unrelated prompts keep theirs; COMPILE
    INTO MODEL changes exactly one row of one expert's gate and up matrices; DELETE zeroes an
    expert feature's gate row, up row and down column and nothing else;
  * damaged index.json / manifest / model_config: a clear error naming the field.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import peer
from gguf_table import read_gguf

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
# name -> (HF key of expert e's gate / down matrix at layer l, shared expert's, lm_head)
MOE = {
    "mixtral": ("model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight",
                "model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight", None),
    "qwen2_moe": ("model.layers.{l}.mlp.experts.{e}.gate_proj.weight",
                  "model.layers.{l}.mlp.experts.{e}.down_proj.weight", "model.layers.{l}.mlp.shared_expert.{w}.weight"),
}
FACT = ("Atlantis", "capital", "town")
UNRELATED = ["The river rose and the town", "The old bridge at Lowfield", "Every spring the"]


def moe_shape(cfg):
    """(n_experts, expert width, shared width) from a transformers config.json."""
    n = cfg.get("num_local_experts") or cfg.get("num_experts")
    width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    return n, width, cfg.get("shared_expert_intermediate_size", 0)


@pytest.fixture(scope="module", params=sorted(MOE))
def moe(request, larql_bin, tmp_path_factory):
    from safetensors.numpy import load_file
    name = request.param
    d = FIXTURES / name
    out = tmp_path_factory.mktemp(name) / f"{name}.vindex"
    peer.run_larql(["extract", d / f"{name}-f32.gguf", "-o", out, "--level", "inference", "--dtype", "f32"])
    return {"name": name, "dir": d, "vindex": out, "st": load_file(d / "model.safetensors"),
            "cfg": json.loads((d / "config.json").read_text())}


def lql(larql_bin, vindex, lines, tmp_path, check=True):
    script = tmp_path / "s.lql"
    script.write_text(";\n".join(lines) + ";\n")
    r = subprocess.run([str(larql_bin), "lql", "--json", "--threads", str(peer.THREADS), str(vindex), "-f", str(script)],
                       capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()], r


def rows(doc):
    names = [c["name"] for c in doc["columns"]]
    return [dict(zip(names, r)) for r in doc["rows"]]


def expert_label(f, n, width):
    return f"E{f // width}" if f < n * width else "shared"


def gate_rows(m, layer):
    """[features, hidden]: the layer's expert gate matrices in expert order, then the shared one."""
    key, _, shared = MOE[m["name"]]
    n, _, sw = moe_shape(m["cfg"])
    parts = [m["st"][key.format(l=layer, e=e)] for e in range(n)]
    if sw:
        parts.append(m["st"][shared.format(l=layer, w="gate_proj")])
    return np.concatenate(parts, axis=0)


def down_cols(m, layer):
    """[features, hidden]: every feature's down column, in the same order."""
    _, key, shared = MOE[m["name"]]
    n, _, sw = moe_shape(m["cfg"])
    parts = [m["st"][key.format(l=layer, e=e)].T for e in range(n)]
    if sw:
        parts.append(m["st"][shared.format(l=layer, w="down_proj")].T)
    return np.concatenate(parts, axis=0)


def test_index_declares_the_experts(moe, larql_bin):
    x = json.loads((moe["vindex"] / "index.json").read_text())
    n, width, sw = moe_shape(moe["cfg"])
    assert x["intermediate_size"] == n * width + sw
    for slot in x["layers"]:
        assert (slot["num_experts"], slot["num_features_per_expert"], slot["num_features"]) == (n, width, n * width + sw)
    m = x["model_config"]["moe"]
    assert (m["n_experts"], m["n_experts_used"], m["expert_ffn"], m["shared_expert_ffn"]) == (
        n, moe["cfg"]["num_experts_per_tok"], width, sw)
    # Mixtral renormalises the chosen experts' weights; Qwen2-MoE here does not (norm_topk_prob).
    assert m["expert_weights_norm"] == moe["cfg"].get("norm_topk_prob", moe["name"] == "mixtral")
    peer.run_larql(["verify", moe["vindex"]])


def test_gate_vectors_are_the_experts_gate_rows(moe):
    x = json.loads((moe["vindex"] / "index.json").read_text())
    hidden = x["hidden_size"]
    gv = np.fromfile(moe["vindex"] / "gate_vectors.bin", dtype="<f4")
    for slot in x["layers"]:
        got = gv[slot["offset"] // 4:(slot["offset"] + slot["length"]) // 4].reshape(slot["num_features"], hidden)
        np.testing.assert_array_equal(got, gate_rows(moe, slot["layer"]))


def read_down_meta(path: Path):
    data = path.read_bytes()
    magic, version, layers, k = np.frombuffer(data[:16], dtype="<u4")
    assert magic == 0x444D4554 and version == 1
    pos, out = 16, []
    for _ in range(int(layers)):
        n = int(np.frombuffer(data[pos:pos + 4], dtype="<u4")[0])
        pos += 4
        rec = np.frombuffer(data, dtype=np.dtype([("top", "<u4"), ("c", "<f4"), ("k", [("t", "<u4"), ("s", "<f4")], int(k))]),
                            count=n, offset=pos)
        out.append(rec)
        pos += n * (8 + 8 * int(k))
    assert pos == len(data)
    return int(k), out


def test_down_meta_is_lm_head_times_each_experts_down_column(moe):
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(moe["dir"] / "tokenizer.json"))
    lm_head = moe["st"]["lm_head.weight"].astype(np.float64)
    vocab = lm_head.shape[0]
    # What a reader shows nothing for: blank after trimming C isspace (not Python's wider set).
    silent = np.array([tok.decode([i], skip_special_tokens=True).strip(" \t\n\v\f\r") == "" for i in range(vocab)])
    k, layers = read_down_meta(moe["vindex"] / "down_meta.bin")
    for layer, recs in enumerate(layers):
        cols = down_cols(moe, layer).astype(np.float64)
        assert len(recs) == cols.shape[0]
        scores = cols @ lm_head.T  # [features, vocab]
        for f, rec in enumerate(recs):
            ids = [int(t) for t in rec["k"]["t"]]
            np.testing.assert_allclose(rec["k"]["s"], scores[f, ids], rtol=1e-4, atol=1e-6)
            assert not silent[ids].any()
            # No token that shows something scores above the record's last entry unless listed.
            above = set(np.nonzero((scores[f] > rec["k"]["s"][-1] + 1e-5) & ~silent)[0].tolist())
            assert above <= set(ids), (layer, f)
            assert rec["top"] == ids[0]


def test_vindex_runs_with_the_ggufs_logits(moe, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(json.loads((moe["dir"] / "reference.json").read_text())["eval_text"], encoding="utf-8")
    a = peer.larql_perplexity(text, logits_out=tmp_path / "a.npy", model=moe["dir"] / f"{moe['name']}-f32.gguf")
    b = peer.larql_perplexity(text, logits_out=tmp_path / "b.npy", model=moe["vindex"])
    assert a["ids"] == b["ids"]
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def test_lql_labels_features_with_their_expert_and_walk_keeps_the_routed_ones(moe, larql_bin, tmp_path):
    n, width, _ = moe_shape(moe["cfg"])
    docs, _ = lql(larql_bin, moe["vindex"], ['DESCRIBE "river" RAW', 'SELECT * FROM FEATURES WHERE layer = 1 LIMIT 500',
                                             'WALK "The river rose and the town" TOP 20'], tmp_path)
    describe, select, walk = docs
    for doc in (describe, select, walk):
        assert "expert" in [c["name"] for c in doc["columns"]]
        rs = rows(doc)
        assert rs
        for r in rs:
            assert r["expert"] == expert_label(r["feature"], n, width), r
    assert len(rows(select)) == n * width + moe_shape(moe["cfg"])[2]
    # WALK: a note per layer names the chosen experts; every row is of one of them (or shared).
    routed = {}
    for note in walk["notes"]:
        if " routes to " in note:
            layer = int(note.split()[0][1:])
            routed[layer] = {p.split()[0] for p in note.split(" routes to ")[1].replace(" + the shared expert", "").split(", ")}
    assert sorted(routed) == [0, 1]
    assert all(len(v) == moe["cfg"]["num_experts_per_tok"] for v in routed.values())
    for r in rows(walk):
        assert r["expert"] == "shared" or r["expert"] in routed[r["layer"]], r


def test_insert_then_infer_and_compile_into_model_write_one_expert_row(moe, larql_bin, tmp_path):
    n, width, _ = moe_shape(moe["cfg"])
    ent, rel, target = FACT
    prompt = f"The {rel} of {ent} is"
    out_gguf = tmp_path / "edited.gguf"
    docs, _ = lql(larql_bin, moe["vindex"],
                  [f'INFER "{prompt}" TOP 1'] + [f'INFER "{p}" TOP 1' for p in UNRELATED] +
                  [f'INSERT INTO EDGES (entity, relation, target) VALUES ("{ent}", "{rel}", "{target}")',
                   f'INFER "{prompt}" TOP 1'] + [f'INFER "{p}" TOP 1' for p in UNRELATED] +
                  [f'COMPILE CURRENT INTO MODEL "{out_gguf}"'], tmp_path)
    before, after = rows(docs[0])[0], rows(docs[5])[0]
    ins = rows(docs[4])[0]
    assert ins["expert"] == expert_label(ins["feature"], n, width) and ins["expert"] != "shared"
    assert ins["mode"] == "compose" and ins["probability"] >= 0.5
    assert after["token"].strip() == target and before["token_id"] != after["token_id"]
    for i in range(len(UNRELATED)):
        assert rows(docs[1 + i])[0]["token_id"] == rows(docs[6 + i])[0]["token_id"], UNRELATED[i]
    # The exported model: of the stacked gate and up tensors, only that expert's row changed.
    e, i, layer = ins["feature"] // width, ins["feature"] % width, ins["layer"]
    orig = read_gguf(moe["dir"] / f"{moe['name']}-f32.gguf")
    new = read_gguf(out_gguf)
    for name in (f"blk.{layer}.ffn_gate_exps.weight", f"blk.{layer}.ffn_up_exps.weight", f"blk.{layer}.ffn_down_exps.weight"):
        (ta, da, oa), (tb, db, ob) = orig[2][name], new[2][name]
        assert list(da) == list(db) and int(ta) == int(tb) == 0  # F32, [cols, rows, n_experts]
        size = int(np.prod(da))
        a = np.frombuffer(orig[0], dtype="<f4", count=size, offset=oa).reshape(da[2], da[1], da[0])
        b = np.frombuffer(new[0], dtype="<f4", count=size, offset=ob).reshape(db[2], db[1], db[0])
        changed = {tuple(x) for x in np.argwhere(a != b)}
        if "down" in name:  # [n_experts, hidden, width]: column i of expert e
            assert changed and {(x[0], x[2]) for x in changed} == {(e, i)}, name
        else:
            assert changed and {(x[0], x[1]) for x in changed} == {(e, i)}, name
    # And llama.cpp's reader runs it: larql on the exported file answers the target.
    gen = peer.larql_generate(prompt, 1, model=out_gguf)
    assert gen["ids"][0] == after["token_id"]


def test_delete_zeroes_one_expert_feature(moe, larql_bin, tmp_path):
    n, width, sw = moe_shape(moe["cfg"])
    f = 2 * width + 5  # expert E2's feature 5
    out = tmp_path / "deleted.vindex"
    docs, _ = lql(larql_bin, moe["vindex"],
                  [f"DELETE FROM EDGES WHERE layer = 0 AND feature = {f}", f'COMPILE CURRENT INTO VINDEX "{out}"'], tmp_path)
    [r] = rows(docs[0])
    assert (r["layer"], r["feature"], r["expert"], r["down_residual"]) == (0, f, "E2", 0.0)
    peer.run_larql(["verify", out])
    x = json.loads((out / "index.json").read_text())
    hidden = x["hidden_size"]
    gv = np.fromfile(out / "gate_vectors.bin", dtype="<f4")
    slot = x["layers"][0]
    got = gv[slot["offset"] // 4:(slot["offset"] + slot["length"]) // 4].reshape(-1, hidden)
    want = gate_rows(moe, 0).copy()
    want[f] = 0
    np.testing.assert_array_equal(got, want)
    man = {(m["role"], m["layer"]): m for m in json.loads((out / "weight_manifest.json").read_text())}
    ffn = (out / "ffn_weights.bin").read_bytes()

    def tensor(role, layer):
        m = man[(role, layer)]
        assert m["dtype"] == "F32"
        return np.frombuffer(ffn, dtype="<f4", count=m["length"] // 4, offset=m["offset"]).reshape(m["shape"])

    gate, up, down = tensor("ffn_gate_exps", 0), tensor("ffn_up_exps", 0), tensor("ffn_down_exps", 0)
    assert gate.shape == (n, width, hidden) and down.shape == (n, hidden, width)
    key_g, key_d, _ = MOE[moe["name"]]
    for e in range(n):
        wg, wd = moe["st"][key_g.format(l=0, e=e)].copy(), moe["st"][key_d.format(l=0, e=e)].copy()
        if e == 2:
            wg[5] = 0
            wd[:, 5] = 0
        np.testing.assert_array_equal(gate[e], wg)
        np.testing.assert_array_equal(down[e], wd)
    assert not up[2, 5].any() and up[2, 4].any() and up[1, 5].any()


def test_q4k_moe_vindex_keeps_the_router_and_runs(moe, larql_bin, tmp_path):
    out = tmp_path / "q.vindex"
    peer.run_larql(["extract", moe["dir"] / f"{moe['name']}-f32.gguf", "-o", out, "--level", "inference", "--quant", "q4k"])
    peer.run_larql(["verify", out])
    man = {(m["role"], m["layer"]): m for m in json.loads((out / "weight_manifest.json").read_text())}
    assert man[("ffn_gate_inp", 0)]["dtype"] == "F16"  # the router: never block-quantised
    # Expert rows of 64 (not a multiple of 256): gate/up fall back to Q5_0, down (32 wide) to Q8_0.
    assert man[("ffn_gate_exps", 0)]["dtype"] == "Q5_0" and man[("ffn_down_exps", 0)]["dtype"] == "Q8_0"
    assert len(man[("ffn_gate_exps", 0)]["shape"]) == 3
    gen = peer.larql_generate("The river rose and the town", 4, model=out)
    assert len(gen["ids"]) == 4


def damaged(moe, tmp_path, edit):
    out = tmp_path / "bad.vindex"
    shutil.copytree(moe["vindex"], out)
    edit(out)
    return out


def test_damaged_moe_vindex_is_refused_naming_the_field(moe, larql_bin, tmp_path):
    def drop_per_expert(d):
        x = json.loads((d / "index.json").read_text())
        del x["layers"][1]["num_features_per_expert"]
        (d / "index.json").write_text(json.dumps(x))

    def too_many_experts(d):
        x = json.loads((d / "index.json").read_text())
        x["layers"][0]["num_experts"] = 1000
        (d / "index.json").write_text(json.dumps(x))

    def top_k_above_experts(d):
        x = json.loads((d / "index.json").read_text())
        x["model_config"]["moe"]["n_experts_used"] = 99
        (d / "index.json").write_text(json.dumps(x))

    def three_d_attention(d):
        m = json.loads((d / "weight_manifest.json").read_text())
        for e in m:
            if e["role"] == "attn_q" and e["layer"] == 0:
                e["shape"] = [1] + e["shape"]
        (d / "weight_manifest.json").write_text(json.dumps(m))

    cases = [(drop_per_expert, "num_features_per_expert"), (too_many_experts, "num_experts"),
             (top_k_above_experts, "n_experts_used"), (three_d_attention, "shape")]
    for i, (edit, field) in enumerate(cases):
        d = damaged(moe, tmp_path / str(i), edit) if (tmp_path / str(i)).mkdir() is None else None
        r = peer.run_larql(["run", d, "hello", "-n", "1", "--temperature", "0"], check=False)
        assert r.returncode != 0 and field in r.stderr, (field, r.returncode, r.stderr[-500:])
        assert "Traceback" not in r.stderr and "terminate" not in r.stderr
