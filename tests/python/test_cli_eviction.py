"""Evicting engines on the command line (issue 8). Expected values come from the `standard`
engine, an independent path (no eviction), never from the engine under test."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def _run(larql_bin, model_path, *args, check=True):
    p = subprocess.run([str(larql_bin), "run", str(model_path), *args, "--temperature", "0", "-t", "2", "--json"],
                       capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    return p


def test_window_below_the_sliding_window_is_refused(larql_bin, model_path, tmp_path):
    # Issue 8: `run "The" --engine standard:window=1 --save-state w.kv`, then
    # `run " capital of France is" --resume w.kv --engine standard:window=1` printed "a a a a a a":
    # a window of 1 cuts the sliding layers' own 512-position span. Now the first command fails,
    # naming the window and the sliding window, and writes no state.
    state = tmp_path / "w.kv"
    p = _run(larql_bin, model_path, "The", "-n", "0", "--engine", "standard:window=1", "--save-state", str(state),
             check=False)
    assert 0 < p.returncode < 128
    assert "window=1" in p.stderr and "sliding window (512" in p.stderr, p.stderr
    assert not state.exists()


def test_smallest_window_resumes_like_standard(larql_bin, model_path, tmp_path):
    # The same sequence at the smallest accepted window: within it nothing is evicted, so the
    # resumed run continues exactly as one standard run of the whole text.
    state = tmp_path / "w.kv"
    first = _run(larql_bin, model_path, "The", "-n", "0", "--engine", "standard:window=512", "--save-state", str(state))
    resumed = _run(larql_bin, model_path, " capital of France is", "-n", "6", "--engine", "standard:window=512",
                   "--resume", str(state))
    whole = _run(larql_bin, model_path, "The capital of France is", "-n", "6")
    assert whole["prompt_ids"] == first["prompt_ids"] + resumed["prompt_ids"]
    assert resumed["ids"] == whole["ids"]


def test_unlimited_context_past_a_boundary_does_not_collapse(larql_bin, model_path, tmp_path):
    # Issue 8: unlimited-context (window 512) on a 523-token prompt of license text printed
    # "<i><i><b><i><b>..." where standard continues the text. Its global layers now keep the
    # previous window whole and its sliding layers their own span, so below two windows it is
    # standard exactly.
    prompt = tmp_path / "license.txt"
    prompt.write_text((DATA / "long_text_gpl3.txt").read_text()[:2300])
    std = _run(larql_bin, model_path, "-f", str(prompt), "-n", "16")
    unl = _run(larql_bin, model_path, "-f", str(prompt), "-n", "16", "--engine", "unlimited-context")
    assert 512 < len(std["prompt_ids"]) < 1024
    assert unl["ids"] == std["ids"]
