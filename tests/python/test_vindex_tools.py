"""`larql slice` and the local cache (`larql list`, `link`, `rm`) on the session's inference vindex
(conftest.py `inference_vindex`).

Expected values are hand-derived from docs/vindex-format.md's preset table: which files each
preset keeps, the level those files support and whether they hold model weights; the sliced
files must be byte-identical to the source's (their SHA-256 equal the source index.json's) and
the sliced manifest the source's entries whose file is kept.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

TOK = {"tokenizer.json", "tokenizer_config.json", "tokenizer.gguf"}
# preset -> (files kept, extract_level, has_model_weights), from docs/vindex-format.md.
PRESETS = {
    "client": ({"embeddings.bin", "embed_weights.bin", "norms.bin", "attn_weights.bin", "weight_manifest.json"} | TOK,
               "attention", True),
    "server": ({"embeddings.bin", "norms.bin", "gate_vectors.bin", "down_meta.bin", "ffn_weights.bin",
                "weight_manifest.json"} | TOK, "browse", True),
    "attn": ({"norms.bin", "attn_weights.bin", "weight_manifest.json"}, "attention", True),
    "embed": ({"embeddings.bin", "embed_weights.bin"} | TOK, "browse", False),
    "browse": ({"embeddings.bin", "gate_vectors.bin", "down_meta.bin"} | TOK, "browse", False),
}


def larql(larql_bin, *args, env=None, cwd=None, timeout=600):
    return subprocess.run([str(larql_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_slice_preset(larql_bin, inference_vindex, tmp_path, preset):
    files, level, weights = PRESETS[preset]
    out = tmp_path / f"{preset}.vindex"
    dry = larql(larql_bin, "slice", inference_vindex, "--preset", preset, "-o", out, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    d = json.loads(dry.stdout)
    assert list(tmp_path.iterdir()) == [], "a dry run writes nothing"
    assert {f["name"] for f in d["files"]} == files
    assert all(f["bytes"] == (inference_vindex / f["name"]).stat().st_size for f in d["files"]
               if f["name"] != "weight_manifest.json")
    r = larql(larql_bin, "slice", inference_vindex, "--preset", preset, "-o", out)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [out.name], "the staging directory is gone"
    assert larql(larql_bin, "verify", out).returncode == 0
    src = json.loads((inference_vindex / "index.json").read_text())
    idx = json.loads((out / "index.json").read_text())
    assert set(idx["checksums"]) == files and {p.name for p in out.iterdir()} == files | {"index.json"}
    assert idx["extract_level"] == level and idx["has_model_weights"] is weights
    assert (len(idx["layers"]) == 18) == ("gate_vectors.bin" in files)
    for name in files - {"weight_manifest.json"}:
        assert idx["checksums"][name] == src["checksums"][name], name
    if "weight_manifest.json" in files:
        want = [e for e in json.loads((inference_vindex / "weight_manifest.json").read_text()) if e["file"] in files]
        assert json.loads((out / "weight_manifest.json").read_text()) == want
    # No slice runs a model: the verbs say why.
    run = larql(larql_bin, "run", out, "Hello", "-n", "1", timeout=120)
    assert run.returncode != 0 and f"was extracted at level {level}" in run.stderr, run.stderr


def test_slice_refuses_bad_requests(larql_bin, inference_vindex, tmp_path):
    r = larql(larql_bin, "slice", inference_vindex, "--preset", "nope", "-o", tmp_path / "x.vindex")
    assert r.returncode == 2
    r = larql(larql_bin, "slice", inference_vindex, "--preset", "attn", "-o", inference_vindex / "inner.vindex")
    assert r.returncode == 1 and "inside the source vindex" in r.stderr
    r = larql(larql_bin, "slice", inference_vindex, "--preset", "attn", "-o", inference_vindex)
    assert r.returncode == 1
    r = larql(larql_bin, "slice", tmp_path / "none.vindex", "--preset", "attn", "-o", tmp_path / "y.vindex")
    assert r.returncode == 1 and "not found" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_browse_slice_is_refused_with_the_level(larql_bin, inference_vindex, tmp_path):
    out = tmp_path / "b.vindex"
    assert larql(larql_bin, "slice", inference_vindex, "--preset", "browse", "-o", out).returncode == 0
    r = larql(larql_bin, "chat", out, timeout=120)
    assert r.returncode != 0
    assert (f"{out} was extracted at level browse: it holds gate vectors, embeddings and down_meta for browsing; "
            f"chat needs level inference \u2014 re-extract with --level inference") in r.stderr, r.stderr


def test_cache_list_link_rm(larql_bin, inference_vindex, tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, LARQL_MODELS=str(cache))

    def c(*args):
        return larql(larql_bin, *args, env=env, cwd=work, timeout=120)

    assert c("link", inference_vindex, "gx").returncode == 0
    assert os.path.islink(cache / "gx.vindex")
    listed = {e["name"]: e for e in json.loads(c("list", "--json").stdout)}
    assert listed["gx"]["kind"] == "vindex" and listed["gx"]["level"] == "inference"
    assert "gx" in c("list").stdout
    r = c("show", "gx", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["vindex"]["path"].endswith("gx.vindex"), r.stderr
    assert c("link", inference_vindex, "gx").returncode == 1, "a name already taken"
    assert c("link", work, "w").returncode == 1, "a directory without index.json is not a vindex"
    assert c("link", inference_vindex, "../evil").returncode == 1
    # Removing a link removes only the link.
    r = c("rm", "gx")
    assert r.returncode == 0 and not os.path.lexists(cache / "gx.vindex"), r.stderr
    assert (inference_vindex / "index.json").is_file()
    # A real vindex in the cache: --yes needed when there is no terminal to ask.
    assert larql(larql_bin, "slice", inference_vindex, "--preset", "attn", "-o", cache / "small.vindex").returncode == 0
    r = c("rm", "small")
    assert r.returncode == 1 and "--yes" in r.stderr and (cache / "small.vindex" / "index.json").is_file()
    r = c("rm", "small", "--yes")
    assert r.returncode == 0 and not (cache / "small.vindex").exists()
    # Nothing outside the cache.
    (work / "keep.vindex").mkdir()
    for name in ("keep", "../work/keep", str(work / "keep.vindex"), "nothing"):
        assert c("rm", name, "--yes").returncode == 1, name
    assert (work / "keep.vindex").is_dir()
