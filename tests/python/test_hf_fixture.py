"""The Hugging Face directory scripts/hf_from_gguf.py makes from the default GGUF (the vindex's
independent fixture) is the same model:

- its tokenizer.json, run by the `tokenizers` package, gives llama.cpp's ids (the committed golden
  file tests/tokenizer/data/llama_cpp_cases.jsonl, regenerated live by test_tokenizer_parity.py)
  for every case that is valid UTF-8 (a Hugging Face tokenizer takes Unicode text only);
- its f32 weights and config.json, run by the numpy reference forward (tests/python/gemma3_numpy.py),
  give exactly the logits of the same reference on the GGUF (norms stored without Gemma's +1 and
  names mapped back: any slip changes the logits).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="tokenizers missing: run `make setup` (venv)")
pytest.importorskip("safetensors", reason="safetensors missing: run `make setup` (venv)")
import gemma3_numpy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "tokenizer" / "data" / "llama_cpp_cases.jsonl"


def test_tokenizer_json_gives_llama_cpp_ids(hf_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    checked, wrong = 0, []
    for line in GOLDEN.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if "text" not in rec:  # invalid UTF-8 bytes: not expressible as a Python str
            continue
        checked += 1
        if tok.encode(rec["text"]).ids != rec["ids_special"]:
            wrong.append(rec["name"])
    assert checked >= 200
    assert not wrong, wrong


def test_hf_weights_are_the_gguf_weights(hf_dir, model_path):
    ids = [2, 818, 5279, 529, 7001, 563, 236743, 107, 9259, 1902]
    from_gguf = gemma3_numpy.forward(gemma3_numpy.load_gguf(model_path), ids)
    from_hf = gemma3_numpy.forward(gemma3_numpy.load_hf(hf_dir), ids)
    np.testing.assert_array_equal(from_hf, from_gguf)
    cfg = json.loads((hf_dir / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and cfg["num_hidden_layers"] == 18
    assert (hf_dir / "model.safetensors.index.json").is_file()
