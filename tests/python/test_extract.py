"""`larql extract` on the default model, checked against independent readers.

One extract (level inference: the browse files plus every weight in its GGUF blocks; f16 side
channels) is shared by the test session (conftest.py `inference_vindex`). Expected values come
from the `gguf` package's dequantisation and numpy, the `tokenizers` package and llama.cpp's golden ids:
- gate_vectors.bin / embeddings.bin rows equal the GGUF tensors dequantised and rounded to f16;
- down_meta.bin (read with numpy from the layout in docs/vindex-format.md) equals numpy's float64
  top-10 of embed · W_down[:, f] for 50 sampled features of two layers, tokens that decode to
  nothing skipped (ids equal, scores to 1e-3 relative);
- tokenizer.json, loaded by the `tokenizers` package, gives llama.cpp's ids;
- `larql verify` catches a flipped byte in each file, a missing or unlisted file, a truncated
  index.json and a checksum key outside the directory;
- the vindex runs: `larql perplexity` on it gives logits bit-identical to the GGUF's;
- `kill -9` at random points of an extract (5 times, level attention, each started with --resume)
  leaves nothing at the target that verify accepts, and `--resume` then completes to a vindex whose
  files equal the uninterrupted extract's (checksums); the verbs refuse that attention vindex
  naming its level; `larql show` prints it.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import peer
from gguf_table import dequantize_tensor, read_gguf

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "tokenizer" / "data" / "llama_cpp_cases.jsonl"
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_BYTE = 1, 3, 4, 6

pytestmark = pytest.mark.usefixtures("larql_bin", "model_path")


@pytest.fixture(scope="module")
def vindex(inference_vindex):
    return inference_vindex


@pytest.fixture(scope="module")
def gguf(model_path):
    return read_gguf(model_path, arrays=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"))


def test_index_describes_the_model(vindex):
    idx = json.loads((vindex / "index.json").read_text())
    assert idx["vindex_spec_version"] == 1 and idx["family"] == "gemma3" and idx["extract_level"] == "inference"
    assert idx["quant"] == "keep" and idx["has_model_weights"] is True
    assert idx["num_layers"] == 18 and idx["hidden_size"] == 640 and idx["intermediate_size"] == 2048
    assert idx["vocab_size"] == 262144 and idx["dtype"] == "f16"
    assert abs(idx["embed_scale"] - 640 ** 0.5) < 1e-4
    files = {p.name for p in vindex.iterdir()} - {"index.json"}
    assert set(idx["checksums"]) == files
    assert files == {"gate_vectors.bin", "embeddings.bin", "down_meta.bin", "tokenizer.json", "tokenizer_config.json", "tokenizer.gguf",
                     "attn_weights.bin", "ffn_weights.bin", "norms.bin", "embed_weights.bin", "weight_manifest.json"}


def test_the_vindex_runs_with_the_ggufs_logits(larql_bin, model_path, vindex, tmp_path):
    text = peer.DATA_DIR / "long_text_gpl3.txt"
    a, b = tmp_path / "gguf.npy", tmp_path / "vindex.npy"
    ra = peer.larql_perplexity(text, logits_out=a, max_tokens=96, model=model_path)
    rb = peer.larql_perplexity(text, logits_out=b, max_tokens=96, model=vindex)
    assert ra["ids"] == rb["ids"]
    np.testing.assert_array_equal(np.load(a), np.load(b))
    # Weights in the GGUF's own blocks, byte for byte.
    mm, _, table = read_gguf(model_path)
    manifest = json.loads((vindex / "weight_manifest.json").read_text())
    assert len(manifest) == len(table)
    for e in manifest:
        ttype, dims, offset = table[e["key"]]
        assert e["dtype"] == ttype.name
        raw = (vindex / e["file"]).open("rb")
        raw.seek(e["offset"])
        assert raw.read(e["length"]) == bytes(mm[offset:offset + e["length"]]), e["key"]


def test_gate_vectors_and_embeddings_are_the_weights(vindex, gguf):
    mm, _, table = gguf
    idx = json.loads((vindex / "index.json").read_text())
    gates = np.memmap(vindex / "gate_vectors.bin", dtype="<f2", mode="r")
    for layer in (0, 11, 17):
        slot = idx["layers"][layer]
        got = gates[slot["offset"] // 2:(slot["offset"] + slot["length"]) // 2].reshape(slot["num_features"], 640)
        want = dequantize_tensor(mm, table, f"blk.{layer}.ffn_gate.weight").astype(np.float16)
        np.testing.assert_array_equal(got, want)
    emb = np.memmap(vindex / "embeddings.bin", dtype="<f2", mode="r").reshape(262144, 640)
    want = dequantize_tensor(mm, table, "token_embd.weight")
    rows = np.random.default_rng(1).choice(262144, 200, replace=False)
    np.testing.assert_array_equal(emb[rows], want[rows].astype(np.float16))


def read_down_meta(path: Path):
    data = path.read_bytes()
    magic, version, layers, k = struct.unpack_from("<4sIII", data, 0)
    assert magic == b"TEMD" and version == 1
    pos, out = 16, []
    for _ in range(layers):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        rec = np.frombuffer(data, dtype=np.dtype([("top", "<u4"), ("c", "<f4"), ("k", [("t", "<u4"), ("s", "<f4")], k)]),
                            count=n, offset=pos)
        out.append(rec)
        pos += n * (8 + 8 * k)
    assert pos == len(data)
    return k, out


def silent_tokens(tokens, types) -> np.ndarray:
    """Tokens whose text, as a reader shows it (special tokens skipped), is empty after trimming."""
    skip = np.zeros(len(tokens), dtype=bool)
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == TOKEN_CONTROL:
            skip[i] = True
        elif ty == TOKEN_BYTE:
            skip[i] = bytes([int(t[3:5], 16)]).strip() == b""
        elif ty == TOKEN_NORMAL:
            skip[i] = t.replace("\u2581", " ").strip() == ""
        elif ty == TOKEN_USER_DEFINED:
            skip[i] = t.strip() == ""
    return skip


@pytest.mark.parametrize("layer", [3, 14])
def test_down_meta_matches_numpy(vindex, gguf, layer):
    mm, meta, table = gguf
    k, layers = read_down_meta(vindex / "down_meta.bin")
    assert k == 10 and len(layers) == 18 and all(len(r) == 2048 for r in layers)
    embed = dequantize_tensor(mm, table, "token_embd.weight").astype(np.float64)
    down = dequantize_tensor(mm, table, f"blk.{layer}.ffn_down.weight").astype(np.float64)
    skip = silent_tokens(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"])
    sample = np.random.default_rng(layer).choice(2048, 50, replace=False)
    scores = embed @ down[:, sample]
    scores[skip] = -np.inf
    for col, f in enumerate(sample):
        s = scores[:, col]
        order = np.lexsort((np.arange(s.size), -s))[:k]
        rec = layers[layer][f]
        assert [int(t) for t in rec["k"]["t"]] == [int(i) for i in order], (layer, int(f))
        np.testing.assert_allclose(rec["k"]["s"], s[order], rtol=1e-3)
        assert rec["top"] == order[0] and rec["c"] == rec["k"]["s"][0]


def test_tokenizer_json_gives_llama_cpp_ids(vindex):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(vindex / "tokenizer.json"))
    wrong, checked = [], 0
    for line in GOLDEN.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if "text" not in rec:
            continue
        checked += 1
        if tok.encode(rec["text"]).ids != rec["ids_special"]:
            wrong.append(rec["name"])
    assert checked >= 200 and not wrong, wrong


def verify(larql_bin, path):
    return subprocess.run([str(larql_bin), "verify", str(path)], capture_output=True, text=True, timeout=600)


def test_verify_catches_damage(larql_bin, vindex):
    assert verify(larql_bin, vindex).returncode == 0
    for name in sorted(p.name for p in vindex.iterdir()):
        if name == "index.json":
            continue
        p = vindex / name
        at = p.stat().st_size // 2
        with open(p, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 1]))
        try:
            r = verify(larql_bin, vindex)
            assert r.returncode != 0 and f"{name}: SHA-256" in r.stdout, (name, r.stdout)
        finally:
            with open(p, "r+b") as f:
                f.seek(at)
                f.write(b)
    assert verify(larql_bin, vindex).returncode == 0


def test_verify_reports_bad_directories(larql_bin, vindex, tmp_path):
    small = tmp_path / "small.vindex"
    small.mkdir()
    for name in ("index.json", "tokenizer_config.json", "down_meta.bin", "norms.bin", "weight_manifest.json"):
        shutil.copy(vindex / name, small / name)
    r = verify(larql_bin, small)
    assert r.returncode != 0 and "embeddings.bin: missing" in r.stdout and "gate_vectors.bin: missing" in r.stdout
    (small / "stray.txt").write_text("x")
    assert "stray.txt: not listed" in verify(larql_bin, small).stdout
    idx = json.loads((vindex / "index.json").read_text())
    idx["checksums"]["../x"] = "a" * 64
    (small / "index.json").write_text(json.dumps(idx))
    r = verify(larql_bin, small)
    assert r.returncode == 1 and '"../x"' in r.stderr and "not a file of the directory" in r.stderr, r.stderr
    (small / "index.json").write_text((vindex / "index.json").read_text()[:300])
    r = verify(larql_bin, small)
    assert r.returncode == 1 and "not valid JSON" in r.stderr, r.stderr
    r = verify(larql_bin, tmp_path / "nothing.vindex")
    assert r.returncode == 1 and "index.json" in r.stderr


def test_extract_refuses_to_overwrite_and_bad_flags(larql_bin, model_path, vindex):
    r = subprocess.run([str(larql_bin), "extract", str(model_path), "-o", str(vindex)], capture_output=True, text=True)
    assert r.returncode == 1 and "already exists (use --force" in r.stderr
    r = subprocess.run([str(larql_bin), "extract", str(model_path), "-o", str(vindex) + "2", "--level", "inference",
                        "--quant", "q3k"], capture_output=True, text=True)
    assert r.returncode == 2  # --quant none and q4k: test_vindex_float.py
    r = subprocess.run([str(larql_bin), "extract", str(model_path), "-o", "/nonexistent/dir/x.vindex"], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = subprocess.run([str(larql_bin), "extract", str(model_path), "-o", "x.vindex", "--dtype", "f8"], capture_output=True,
                       text=True)
    assert r.returncode == 2


ATTENTION_FILES = {"gate_vectors.bin", "embeddings.bin", "down_meta.bin", "tokenizer.json", "tokenizer_config.json", "tokenizer.gguf",
                   "attn_weights.bin", "norms.bin", "weight_manifest.json"}


@pytest.fixture(scope="module")
def resumed_attention(larql_bin, model_path, tmp_path_factory):
    """An attention-level extract killed (SIGKILL) 5 times at random points, each run started with
    --resume, then completed with --resume. Returns (the vindex, what each kill left at the target)."""
    base = tmp_path_factory.mktemp("kill")
    target = base / "k.vindex"
    cmd = [str(larql_bin), "extract", str(model_path), "-o", str(target), "--level", "attention", "--resume",
           "-t", str(peer.THREADS)]
    rng = random.Random(5)
    left = []
    for trial in range(5):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 8.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        left.append((target.exists(), target.exists() and verify(larql_bin, target).returncode == 0))
    staged = [p.name for p in base.iterdir() if ".partial-" in p.name]
    r = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    return target, left, staged, json.loads(r.stdout), sorted(p.name for p in base.iterdir())


def test_killed_extracts_leave_nothing_verify_accepts(resumed_attention):
    _, left, staged, _, _ = resumed_attention
    assert left == [(False, False)] * 5, "a killed extract must not have renamed its staging directory into place"
    assert staged, "the kills should have left a staging directory to resume"


def test_resume_completes_to_the_uninterrupted_vindex(larql_bin, resumed_attention, vindex):
    """The resumed attention vindex equals the uninterrupted inference extract (same dtype and
    top-k) on every file the two levels share, and its manifest is the inference manifest's
    attention and norm entries."""
    target, _, _, info, names = resumed_attention
    assert names == ["k.vindex"], "the staging directories must be gone"
    assert info["resumed"]["from"] and info["resumed"]["kept"], info
    assert verify(larql_bin, target).returncode == 0
    got = json.loads((target / "index.json").read_text())
    full = json.loads((vindex / "index.json").read_text())
    assert got["extract_level"] == "attention" and got["has_model_weights"] is True and got["quant"] == "keep"
    assert set(got["checksums"]) == ATTENTION_FILES
    for name in ATTENTION_FILES - {"weight_manifest.json"}:
        assert got["checksums"][name] == full["checksums"][name], name
    want = [e for e in json.loads((vindex / "weight_manifest.json").read_text())
            if e["file"] in ("attn_weights.bin", "norms.bin")]
    assert json.loads((target / "weight_manifest.json").read_text()) == want
    roles = {e["role"] for e in want}
    assert {"attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "attn_q_norm", "output_norm"} <= roles
    assert not roles & {"ffn_gate", "ffn_up", "ffn_down", "token_embd"}


@pytest.mark.parametrize("verb", [["run", "Hello", "-n", "1"], ["chat"], ["bench"], ["perplexity", str(peer.DATA_DIR / "long_text_gpl3.txt")]])
def test_verbs_refuse_an_attention_vindex(larql_bin, resumed_attention, verb):
    target = resumed_attention[0]
    r = subprocess.run([str(larql_bin), verb[0], str(target), *verb[1:]], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert (f"{target} was extracted at level attention: it holds" in r.stderr
            and f"{verb[0]} needs level inference" in r.stderr and "re-extract with --level inference" in r.stderr), r.stderr


def test_show_prints_the_vindex(larql_bin, resumed_attention, vindex):
    target = resumed_attention[0]
    r = subprocess.run([str(larql_bin), "show", str(target), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["vindex"]
    idx = json.loads((target / "index.json").read_text())
    assert v["extract_level"] == "attention" and v["runnable"] is False and v["dtype"] == "f16" and v["quant"] == "keep"
    assert v["num_layers"] == 18 and v["layer_bands"] == idx["layer_bands"]
    assert v["source"]["fingerprint"] == idx["source"]["fingerprint"]
    assert {k: f["bytes"] for k, f in v["files"].items()} == {n: (target / n).stat().st_size for n in ATTENTION_FILES}
    text = subprocess.run([str(larql_bin), "show", str(target)], capture_output=True, text=True, timeout=120).stdout
    assert "level          attention" in text and "attn_weights.bin" in text
    # A runnable vindex: the vindex section and the model's.
    r = subprocess.run([str(larql_bin), "show", str(vindex), "--json"], capture_output=True, text=True, timeout=120)
    j = json.loads(r.stdout)
    assert j["vindex"]["runnable"] is True and j["layers"] == 18 and j["vindex"]["extract_level"] == "inference"


def test_a_damaged_manifest_is_a_clear_error(larql_bin, vindex, tmp_path):
    bad = tmp_path / "bad.vindex"
    bad.mkdir()
    for p in vindex.iterdir():
        if p.name != "weight_manifest.json":
            os.symlink(p, bad / p.name)
    manifest = json.loads((vindex / "weight_manifest.json").read_text())

    def run_with(entries, needle):
        (bad / "weight_manifest.json").write_text(json.dumps(entries))
        r = subprocess.run([str(larql_bin), "run", str(bad), "Hello", "-n", "1"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and needle in r.stderr, r.stderr

    e = [dict(x) for x in manifest]
    e[3]["file"] = "../x"
    run_with(e, "entry 3: file \"../x\" is not a checksummed file of the vindex")
    e = [dict(x) for x in manifest]
    e[5]["offset"] = 10 ** 12
    run_with(e, "entry 5: bytes 1000000000000+")
    e = [dict(x) for x in manifest]
    e[7]["length"] += 1
    run_with(e, "entry 7: length")
    e = [dict(x) for x in manifest] + [dict(manifest[0])]
    run_with(e, "given twice")
    run_with(manifest[:-1], "tensor 'post_ffn_norm[17]' is missing")  # Model::load names it
    (bad / "weight_manifest.json").write_text("[{")
    r = subprocess.run([str(larql_bin), "run", str(bad), "Hello", "-n", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "weight_manifest.json: not valid JSON" in r.stderr, r.stderr
