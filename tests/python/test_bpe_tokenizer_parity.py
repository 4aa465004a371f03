"""The committed byte-level BPE fixtures and golden files must still be what the peers produce.

tests/tokenizer/data/bpe/<name>/ (llama3, qwen2, gpt2) holds a small vocabulary trained with the
Hugging Face `tokenizers` package (tokenizer.json), the same vocabulary as a GGUF (vocab.gguf), and
the ids llama.cpp and `tokenizers` give for 300+ strings each; tests/tokenizer/bpe_test.cc requires
larql to reproduce them. This test reruns scripts/gen_bpe_tokenizer_cases.py live (training,
GGUF writing, llama-cpp-python and `tokenizers`) and fails if any committed byte differs (a changed
case list, a peer whose tokenizer behaves differently, training that stopped being deterministic).
It skips loudly, through the `llama_cpp_mod` fixture, only when llama_cpp is not importable.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "tokenizer" / "data" / "bpe"


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_bpe_tokenizer_cases",
                                                  REPO / "scripts" / "gen_bpe_tokenizer_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # no llama_cpp / tokenizers import at module level
    return mod


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("name", ["llama3", "qwen2", "gpt2"])
def test_golden_files_list_the_generator_cases(name):
    gen = _gen_module()
    want = gen.cases(name)
    for fname in ("llama_cpp_cases.jsonl", "tokenizers_cases.jsonl"):
        recs = _records(DATA / name / fname)
        assert len(recs) >= 200
        assert [r["name"] for r in recs] == [n for n, _ in want], f"{name}/{fname}: rerun the generator"
    listed = [(r["name"], r["text"] if "text" in r else bytes.fromhex(r["text_hex"]))
              for r in _records(DATA / name / "llama_cpp_cases.jsonl")]
    assert listed == want


@pytest.mark.parametrize("name", ["llama3", "qwen2", "gpt2"])
def test_only_invalid_utf8_differs_between_the_peers(name):
    """llama.cpp and `tokenizers` agree on every valid UTF-8 case (differences.json lists the rest)."""
    diffs = json.loads((DATA / name / "differences.json").read_text(encoding="utf-8"))
    llama = {r["name"]: r for r in _records(DATA / name / "llama_cpp_cases.jsonl")}
    for d in diffs:
        assert "text_hex" in llama[d["name"]], f"{name}: {d['name']} differs but is valid UTF-8"


@pytest.mark.parametrize("name", ["llama3", "qwen2", "gpt2"])
def test_golden_files_match_live_peers(llama_cpp_mod, name, tmp_path):
    pytest.importorskip("tokenizers", reason="the `tokenizers` package is not installed (run `make setup`)")
    gen = _gen_module()
    # From the committed tokenizer.json (training again would make this test depend on the trainer
    # and its corpus): the GGUF written from it, and both peers' ids on every case.
    files = gen.generate_from(name, (DATA / name / "tokenizer.json").read_text(encoding="utf-8"), tmp_path / name)
    stale = [f for f, data in files.items() if (DATA / name / f).read_bytes() != data]
    assert not stale, (f"{name}: {stale} differ from live llama.cpp / tokenizers output; "
                       f"rerun scripts/gen_bpe_tokenizer_cases.py")
