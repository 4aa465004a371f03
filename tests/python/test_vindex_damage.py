"""A vindex whose index.json or vocabulary lies about its files is refused, not run or browsed
into wrong answers; and the verbs around the vindex refuse what they cannot do.

Each damaged vindex is a copy of the session's inference vindex (conftest.py `inference_vindex`):
index.json and the small files copied and edited, the large files symbolic links. Expected values
come from docs/vindex-format.md (what index.json declares: vocab_size x hidden_size x dtype for
embeddings.bin, down_top_k for down_meta.bin's header, the files each extract_level holds) and
from the GGUF tokenizer's ids for the same text.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SMALL = {"index.json", "weight_manifest.json", "tokenizer_config.json", "norms.bin"}


def larql(larql_bin, *args, timeout=600):
    return subprocess.run([str(larql_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def copy_vindex(src: Path, dst: Path, edit=None, drop=()) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name in drop:
            continue
        if f.name in SMALL:
            shutil.copy(f, dst / f.name)
        else:
            (dst / f.name).symlink_to(f)
    if edit:
        idx = json.loads((dst / "index.json").read_text())
        edit(idx)
        (dst / "index.json").write_text(json.dumps(idx))
    return dst


def verify_problems(larql_bin, d: Path) -> str:
    r = larql(larql_bin, "verify", d)
    assert r.returncode != 0, ("verify accepted a damaged vindex", r.stdout)
    return r.stdout + r.stderr


def test_verify_catches_a_vocab_size_that_does_not_match_embeddings(larql_bin, inference_vindex, tmp_path):
    d = copy_vindex(inference_vindex, tmp_path / "v.vindex", edit=lambda x: x.update(vocab_size=1000))
    assert "embeddings.bin" in verify_problems(larql_bin, d)


def test_verify_catches_a_down_top_k_that_does_not_match_down_meta(larql_bin, inference_vindex, tmp_path):
    d = copy_vindex(inference_vindex, tmp_path / "v.vindex", edit=lambda x: x.update(down_top_k=5))
    assert "down_meta.bin: top_k 10" in verify_problems(larql_bin, d)


def test_verify_catches_a_level_its_files_do_not_hold(larql_bin, inference_vindex, tmp_path):
    def drop_ffn(x):
        del x["checksums"]["ffn_weights.bin"]
    d = copy_vindex(inference_vindex, tmp_path / "v.vindex", edit=drop_ffn, drop={"ffn_weights.bin"})
    assert "extract_level inference needs ffn_weights.bin" in verify_problems(larql_bin, d)


def test_a_vocabulary_of_another_size_is_refused_before_running(larql_bin, inference_vindex, tmp_path):
    gguf = pytest.importorskip("gguf")
    d = copy_vindex(inference_vindex, tmp_path / "v.vindex", drop={"tokenizer.gguf"})
    w = gguf.GGUFWriter(str(d / "tokenizer.gguf"), "gemma3")
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(1000)])
    w.add_token_scores([0.0] * 1000)
    w.add_token_types([1] * 1000)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = larql(larql_bin, "run", d, "Paris is the capital of", "-n", "4")
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout)
    assert "tokenizer.gguf" in r.stderr and "1000 tokens" in r.stderr, r.stderr
    r = larql(larql_bin, "lql", d, "-e", 'DESCRIBE "France" AT LAYER 9;')
    assert r.returncode != 0 and "1000 tokens" in r.stderr, (r.returncode, r.stdout, r.stderr)


def test_lql_refuses_a_listed_down_meta_that_is_missing(larql_bin, inference_vindex, tmp_path):
    d = copy_vindex(inference_vindex, tmp_path / "v.vindex", drop={"down_meta.bin"})
    r = larql(larql_bin, "lql", d, "-e", 'DESCRIBE "France" AT LAYER 9;')
    assert r.returncode != 0 and "down_meta.bin" in r.stderr, (r.returncode, r.stdout, r.stderr)


def test_extract_refuses_an_output_inside_its_source(larql_bin, inference_vindex):
    r = larql(larql_bin, "extract", inference_vindex, "-o", inference_vindex / "sub.vindex", "--level", "browse")
    assert r.returncode != 0 and "inside it" in r.stderr, r.stderr
    assert not any(p.name.startswith("sub.vindex") for p in inference_vindex.iterdir())


def test_link_refuses_a_file_that_is_not_gguf(larql_bin, tmp_path, monkeypatch):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a model\n")
    monkeypatch.setenv("LARQL_MODELS", str(tmp_path / "cache"))
    r = subprocess.run([str(larql_bin), "link", str(junk), "junk"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "GGUF magic" in r.stderr, r.stderr
    assert not (tmp_path / "cache" / "junk.gguf").exists()


def test_tokenize_reads_a_vindex_as_the_gguf(larql_bin, model_path, inference_vindex):
    text = "The capital of France is Paris, état 日本"
    a = larql(larql_bin, "tokenize", model_path, text, "--json")
    b = larql(larql_bin, "tokenize", inference_vindex, text, "--json")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert json.loads(a.stdout)["ids"] == json.loads(b.stdout)["ids"]


@pytest.mark.parametrize("stmt", ['SELECT * FROM EDGES NEAREST TO "Paris" AT LAYER 9 LIMIT 2147483648;',
                                  'WALK "x" TOP 4294967297 LAYERS 0;'])
def test_lql_counts_beyond_int32_are_refused(larql_bin, inference_vindex, stmt):
    r = larql(larql_bin, "lql", inference_vindex, "-e", stmt)
    assert r.returncode != 0 and "larger than 2147483647" in r.stderr, (r.stdout, r.stderr)
