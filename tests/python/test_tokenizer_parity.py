"""The committed tokenizer golden file must still be what llama.cpp produces.

tests/tokenizer/data/llama_cpp_cases.jsonl holds llama.cpp's token ids for ~240 strings; the C++
test tests/tokenizer/parity_test.cc requires larql to reproduce them exactly. This test
regenerates every record live with llama-cpp-python (scripts/gen_tokenizer_cases.py) and fails
if the file is stale (a changed case list, or a llama.cpp whose tokenizer behaves differently).
It skips loudly, through the `llama_cpp_mod` fixture, only when llama_cpp is not importable.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "tokenizer" / "data" / "llama_cpp_cases.jsonl"


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_tokenizer_cases",
                                                  REPO / "scripts" / "gen_tokenizer_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # no llama_cpp import at module level
    return mod


def _committed() -> list[dict]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line]


def test_golden_file_lists_the_generator_cases():
    gen = _gen_module()
    committed = _committed()
    assert len(committed) >= 200
    listed = [(r["name"], r["text"] if "text" in r else bytes.fromhex(r["text_hex"]))
              for r in committed]
    assert listed == gen.cases(), (
        "case list changed: rerun scripts/gen_tokenizer_cases.py")


def test_golden_file_matches_live_llama_cpp(llama_cpp_mod, model_path):
    gen = _gen_module()
    llm = gen.load_vocab_llama(model_path)
    stale = []
    for rec in _committed():
        text = rec["text"] if "text" in rec else bytes.fromhex(rec["text_hex"])
        live = gen.record(llm, rec["name"], text)
        if live != rec:
            stale.append(rec["name"])
    assert not stale, (f"{len(stale)} golden records differ from live llama.cpp "
                       f"(first: {stale[:5]}); rerun scripts/gen_tokenizer_cases.py")

