"""kill -9 at random points of every writing command (issue 7): the target is the old file or the
complete new one, never a mix; inputs are never touched. Harness: crash_harness.py."""
from __future__ import annotations

import subprocess

import pytest

from crash_harness import kill9_trials

pytestmark = pytest.mark.usefixtures("larql_bin")

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
        "of foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 6


@pytest.fixture()
def text_file(tmp_path):
    p = tmp_path / "input.txt"
    p.write_text(TEXT)
    return p


def test_save_state(larql_bin, model_path, tmp_path):
    state = tmp_path / "s.kv"
    subprocess.run([str(larql_bin), "run", str(model_path), "Hello", "-n", "1", "--seed", "3", "-t", "2",
                    "--save-state", str(state)], check=True, capture_output=True)
    r = kill9_trials([larql_bin, "run", model_path, TEXT[:400], "-n", "24", "--seed", "3", "-t", "2",
                      "--save-state", state], state, [model_path], trials=10, seed=1)
    assert r.killed >= 3, r.summary()


def test_logits_out(larql_bin, model_path, tmp_path, text_file):
    out = tmp_path / "logits.npy"
    out.write_bytes(b"previous logits")
    r = kill9_trials([larql_bin, "perplexity", model_path, text_file, "--max-tokens", "48", "-t", "2",
                      "--logits-out", out], out, [model_path, text_file], trials=10, seed=2)
    assert r.killed >= 3, r.summary()


def test_calibration_record(larql_bin, model_path, tmp_path, text_file):
    out = tmp_path / "record.json"
    out.write_text("{}")
    r = kill9_trials([larql_bin, "calibrate", model_path, "--budget", "0.05", "--corpus", text_file, "--window", "16",
                      "--tokens", "100", "--steps", "2", "-t", "2", "-o", out],
                     out, [model_path, text_file], trials=10, seed=3)
    assert r.killed >= 3, r.summary()


def test_apollo_store(larql_bin, model_path, tmp_path, text_file):
    out = tmp_path / "doc.store"
    out.write_bytes(b"an older store")
    r = kill9_trials([larql_bin, "apollo", "build", text_file, "-o", out, "-m", model_path, "--window", "64",
                      "--stride", "48"], out, [model_path, text_file], trials=10, seed=4)
    assert r.killed >= 3, r.summary()
