"""Shared pytest fixtures for the Python-driven tests.

- `larql_bin`: the larql binary (env LARQL_BIN, default build/larql). Missing -> the test FAILS
  (CI always builds it; a silently skipped parity suite would hide a broken build).
- `model_path`: the GGUF (env LARQL_MODEL, default models/gemma-3-270m-q4_k_m.gguf). Missing ->
  skip with a loud reason (run `make setup`).
- `llama_cpp_mod`: the llama-cpp-python module. Missing -> skip with a loud reason.
- `hf_dir`: the Hugging Face directory scripts/hf_from_gguf.py makes from the GGUF (f32, two
  shards), made once per session (~40 s) for the tests that read it.

Only tests that request a fixture are affected, so tests that need none of these (e.g. the
dequantisation tests that use only `gguf`) keep running.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer  # noqa: E402


def _loud(msg: str) -> str:
    bar = "!" * 78
    return f"\n{bar}\n!! {msg}\n{bar}"


@pytest.fixture(scope="session")
def model_path() -> Path:
    p = peer.model_path()
    if not p.is_file() or p.stat().st_size == 0:
        reason = _loud(f"model not found at {p} (set LARQL_MODEL or run `make setup`)")
        warnings.warn(reason)
        pytest.skip(reason)
    return p


@pytest.fixture(scope="session")
def larql_bin() -> Path:
    p = peer.larql_bin()
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(f"larql binary not found or not executable at {p} "
                    f"(set LARQL_BIN or run `make build`)", pytrace=False)
    return p


@pytest.fixture(scope="session")
def llama_cpp_mod():
    try:
        return peer.import_llama_cpp()
    except ImportError as e:
        reason = _loud(f"llama-cpp-python is not importable ({e}); the llama.cpp peer tests "
                       f"are SKIPPED. Run `make setup` to build it into .venv")
        warnings.warn(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def inference_vindex(larql_bin, model_path, tmp_path_factory) -> Path:
    """The default model extracted once per session at level inference (f16 side channels,
    down_top_k 10, --quant keep): shared by test_extract.py, test_vindex_tools.py and test_lql.py. Tests may
    damage a file only if they restore it."""
    import json
    import subprocess
    out = tmp_path_factory.mktemp("vx") / "gemma.vindex"
    r = subprocess.run([str(larql_bin), "extract", str(model_path), "-o", str(out), "--level", "inference", "--json",
                        "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    print(f"\n[extract] {json.loads(r.stdout)}")
    return out


@pytest.fixture(scope="session")
def hf_dir(model_path, tmp_path_factory) -> Path:
    pytest.importorskip("tokenizers", reason="tokenizers missing: run `make setup` (venv)")
    pytest.importorskip("safetensors", reason="safetensors missing: run `make setup` (venv)")
    out = tmp_path_factory.mktemp("hf")
    r = subprocess.run([sys.executable, str(peer.REPO_ROOT / "scripts" / "hf_from_gguf.py"), str(model_path), str(out),
                        "--shards", "2"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def f32_vindex(larql_bin, hf_dir, tmp_path_factory):
    """The Hugging Face fixture extracted once per session at level inference with every matrix in
    f32 (`--quant none --dtype f32`): (path, extract's --json report). Shared by
    test_vindex_float.py and test_export.py; read only."""
    import json
    out = tmp_path_factory.mktemp("vf") / "hf-f32.vindex"
    r = subprocess.run([str(larql_bin), "extract", str(hf_dir), "-o", str(out), "--level", "inference", "--quant", "none",
                        "--dtype", "f32", "--json", "-t", str(peer.THREADS)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    print(f"\n[extract none/f32 from {hf_dir.name}] {info['seconds']:.1f} s, {info['bytes'] / 2**20:.0f} MiB")
    return out, info


@pytest.fixture(scope="session")
def results_dir() -> Path:
    return peer.results_dir()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path = peer.results_dir(create=False) / "parity-results.json"
    if path.exists():
        terminalreporter.write_line(f"parity/generation numbers: {path}")
