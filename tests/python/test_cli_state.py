"""`larql run --save-state` / `--resume`: a sequence saved to a file and continued in a new process
generates exactly what one uninterrupted process generates for the same text (the expected ids
come from that uninterrupted run, an independent path through prefill)."""
from __future__ import annotations

import json
import subprocess

import pytest

PROMPT = "Once upon a time, in a small village by the sea,"
MORE = " And then"


def _run(larql_bin, model_path, *args):
    p = subprocess.run([str(larql_bin), "run", str(model_path), *args, "--temperature", "0", "-t", "2", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_resume_continues_like_one_process(larql_bin, model_path, tmp_path):
    state = tmp_path / "seq.kv"
    first = _run(larql_bin, model_path, PROMPT, "-n", "12", "--save-state", str(state))
    assert state.stat().st_size > 0
    resumed = _run(larql_bin, model_path, MORE, "-n", "12", "--resume", str(state))
    whole = _run(larql_bin, model_path, PROMPT + first["text"] + MORE, "-n", "12")
    # The uninterrupted run must have tokenized into the same ids for the comparison to hold.
    assert whole["prompt_ids"] == first["prompt_ids"] + first["ids"] + resumed["prompt_ids"]
    assert resumed["ids"] == whole["ids"]


def test_resume_refuses_other_engine_config(larql_bin, model_path, tmp_path):
    state = tmp_path / "seq.kv"
    _run(larql_bin, model_path, PROMPT, "-n", "2", "--save-state", str(state))
    p = subprocess.run([str(larql_bin), "run", str(model_path), MORE, "-n", "2", "--engine", "standard:window=1024",
                        "--resume", str(state)], capture_output=True, text=True, timeout=300)
    assert 0 < p.returncode < 128
    assert "error:" in p.stderr and "config" in p.stderr


def test_resume_refuses_garbage(larql_bin, model_path, tmp_path):
    bad = tmp_path / "bad.kv"
    bad.write_bytes(b"LARQLKV\x00" + b"\x01\x00\x00\x00" + b"\xff" * 5)
    p = subprocess.run([str(larql_bin), "run", str(model_path), MORE, "--resume", str(bad)],
                       capture_output=True, text=True, timeout=300)
    assert 0 < p.returncode < 128 and "error:" in p.stderr


def test_resume_keeps_the_repetition_penalty_history(larql_bin, model_path, tmp_path):
    """Issue 8: `run "The dog" -n 4 --repeat-penalty 1.5 --save-state`, then `run " and" --resume`
    repeated " symbol of", which the penalty forbids: the state did not carry the token history.
    Expected: one uninterrupted run over the same ids (the penalty then sees the whole text)."""
    state = tmp_path / "dog.kv"
    pen = ("--repeat-penalty", "1.5")
    first = _run(larql_bin, model_path, "The dog", "-n", "4", *pen, "--save-state", str(state))
    resumed = _run(larql_bin, model_path, " and", "-n", "8", *pen, "--resume", str(state))
    whole = _run(larql_bin, model_path, "The dog" + first["text"] + " and", "-n", "8", *pen)
    assert whole["prompt_ids"] == first["prompt_ids"] + first["ids"] + resumed["prompt_ids"]
    assert resumed["ids"] == whole["ids"]


def test_resume_continues_seeded_sampling_and_an_empty_prompt(larql_bin, model_path, tmp_path):
    """Seeded sampling, saved after 5 tokens and resumed with no new prompt, draws what one run of
    10 tokens draws (the sampler's random state travels in the state file)."""
    state = tmp_path / "seeded.kv"
    flags = ("--temperature", "1.0", "--seed", "77", "--ignore-eos")

    def run(*args):
        p = subprocess.run([str(larql_bin), "run", str(model_path), *args, *flags, "-t", "2", "--json"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    whole = run(PROMPT, "-n", "10")
    first = run(PROMPT, "-n", "5", "--save-state", str(state))
    p = subprocess.run([str(larql_bin), "run", str(model_path), "--resume", str(state), "-n", "5",
                        "--temperature", "1.0", "--ignore-eos", "-t", "2", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert first["ids"] + json.loads(p.stdout)["ids"] == whole["ids"]
