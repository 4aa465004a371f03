"""Issue 7, kinds 1 and 3: no write destroys data, and damaged state is never loaded silently.

Each case reproduces an instance found by trying larql with hostile input; every one of them
destroyed or silently accepted data before the shared AtomicWriter, the input registry and the
state-file checksum.
"""
from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("larql_bin")

TEXT = "The quick brown fox jumps over the lazy dog. " * 8


def sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def larql(larql_bin, *args, timeout=300, **kw):
    return subprocess.run([str(larql_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def refused(p, *words):
    assert 0 < p.returncode < 128, f"exit {p.returncode}: {p.stderr[-1500:]}"
    assert "error:" in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, f"{w!r} not in {p.stderr[-1500:]!r}"


@pytest.fixture(scope="module")
def model_copy(model_path, tmp_path_factory):
    """A copy of the model: the tests aim writes at it, so the real one is never at risk."""
    d = tmp_path_factory.mktemp("model")
    p = d / "copy.gguf"
    shutil.copyfile(model_path, p)
    return p


def test_logits_out_onto_the_model_is_refused(larql_bin, model_copy, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    before = sha(model_copy)
    p = larql(larql_bin, "perplexity", model_copy, text, "--logits-out", model_copy)
    refused(p, "the model")
    assert sha(model_copy) == before
    # A hard link to the model is the same file by identity.
    link = tmp_path / "link.npy"
    os.link(model_copy, link)
    p = larql(larql_bin, "perplexity", model_copy, text, "--logits-out", link)
    refused(p, "the model")
    assert sha(model_copy) == before


def test_logits_out_onto_the_input_text_is_refused(larql_bin, model_path, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    p = larql(larql_bin, "perplexity", model_path, text, "--logits-out", text)
    refused(p, "the text file")
    assert text.read_text() == TEXT


def test_calibrate_output_onto_model_or_corpus_is_refused(larql_bin, model_copy, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 20)
    before = sha(model_copy)
    for target, what in ((model_copy, "the model"), (corpus, "the corpus")):
        p = larql(larql_bin, "calibrate", model_copy, "--budget", "0.02", "--corpus", corpus, "--tokens", "200",
                  "--steps", "2", "-o", target)
        refused(p, what)
    assert sha(model_copy) == before
    assert corpus.read_text() == TEXT * 20


def test_save_state_onto_the_calibration_record_in_use_is_refused(larql_bin, model_copy, tmp_path):
    record = Path(str(model_copy) + ".bpl.json")
    p = larql(larql_bin, "calibrate", model_copy, "--budget", "0.05", "--window", "16", "--tokens", "120",
              "--steps", "2", "-t", "2")
    assert p.returncode == 0, p.stderr
    assert "measurement noise" in p.stdout  # a calibration reports its noise
    before = sha(record)
    try:
        p = larql(larql_bin, "run", model_copy, "Hello", "-n", "2", "--engine", "boundary-per-layer",
                  "--save-state", record)
        refused(p, "calibration record")
        assert sha(record) == before
    finally:
        record.unlink()


def test_failed_save_keeps_the_previous_state(larql_bin, model_path, tmp_path):
    """`--resume s.kv --save-state s.kv` on a nearly full disk used to truncate the good s.kv.
    A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the write fail the way ENOSPC does."""
    state = tmp_path / "s.kv"
    p = larql(larql_bin, "run", model_path, "Once upon a time", "-n", "4", "--temperature", "0",
              "--save-state", state)
    assert p.returncode == 0, p.stderr
    before = sha(state)
    limit = state.stat().st_size + 1000  # the resumed, longer state does not fit

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = larql(larql_bin, "run", model_path, " there was", "-n", "40", "--temperature", "0", "--resume", state,
              "--save-state", state, preexec_fn=small_disk)
    refused(p, "write failed")
    assert sha(state) == before
    assert not [f for f in tmp_path.iterdir() if f.name != "s.kv"], "temporary file left behind"
    p = larql(larql_bin, "run", model_path, " there was", "-n", "2", "--temperature", "0", "--resume", state)
    assert p.returncode == 0, p.stderr


def test_boundary_kv_sequences_do_not_share_an_archive(larql_bin, model_path, tmp_path):
    """Every run used `./larql-archive/default`, so a second sequence corrupted the first's resume."""
    env = dict(os.environ, LARQL_ARCHIVE_DIR=str(tmp_path / "archive"))
    a, b = tmp_path / "a.kv", tmp_path / "b.kv"
    for state, prompt in ((a, "The first story begins"), (b, "A different second story")):
        p = larql(larql_bin, "run", model_path, prompt, "-n", "3", "--temperature", "0", "--engine",
                  "boundary-kv:chunk_tokens=4", "--save-state", state, env=env)
        assert p.returncode == 0, p.stderr
    archives = sorted((tmp_path / "archive").iterdir())
    assert len(archives) == 2, archives
    for state in (a, b):
        p = larql(larql_bin, "run", model_path, " and", "-n", "2", "--temperature", "0", "--engine",
                  "boundary-kv:chunk_tokens=4", "--resume", state, env=env)
        assert p.returncode == 0, p.stderr
    # A state whose archive was replaced by another sequence is refused, not resumed.
    victim = archives[0]
    other = archives[1]
    shutil.copyfile(other, victim)
    results = [larql(larql_bin, "run", model_path, " and", "-n", "2", "--engine", "boundary-kv:chunk_tokens=4",
                     "--resume", s, env=env) for s in (a, b)]
    assert any(r.returncode != 0 and "not the one" in r.stderr for r in results), [r.stderr for r in results]


@pytest.fixture()
def saved_state(larql_bin, model_path, tmp_path):
    state = tmp_path / "s.kv"
    p = larql(larql_bin, "run", model_path, "The dog", "-n", "4", "--temperature", "0", "--save-state", state)
    assert p.returncode == 0, p.stderr
    return state


def test_bit_flips_in_a_state_are_refused(larql_bin, model_path, saved_state):
    data = bytearray(saved_state.read_bytes())
    import random
    rng = random.Random(7)
    for _ in range(50):
        i = rng.randrange(200, len(data) - 8)  # the payload, past the header
        data[i] ^= 1 << rng.randrange(8)
    saved_state.write_bytes(bytes(data))
    p = larql(larql_bin, "run", model_path, " and", "-n", "2", "--resume", saved_state)
    refused(p, "checksum")


def test_overwritten_k_rows_are_refused(larql_bin, model_path, saved_state):
    import numpy as np
    data = bytearray(saved_state.read_bytes())
    end = len(data) - 8            # the checksum follows the payload
    start = end - (len(data) // 2) // 4 * 4  # the K/V rows fill the second half of the file
    data[start:end] = np.full((end - start) // 4, 1e30, dtype="<f4").tobytes()
    saved_state.write_bytes(bytes(data))
    p = larql(larql_bin, "run", model_path, " and", "-n", "2", "--resume", saved_state)
    refused(p, "checksum")


def test_truncated_state_is_refused(larql_bin, model_path, saved_state):
    data = saved_state.read_bytes()
    saved_state.write_bytes(data[:len(data) // 2])
    p = larql(larql_bin, "run", model_path, " and", "-n", "2", "--resume", saved_state)
    refused(p)


def test_unwritable_save_state_is_reported_before_generation(larql_bin, model_path, tmp_path):
    # /proc accepts no new files, whoever we are: the OS reason must be in the message.
    p = larql(larql_bin, "run", model_path, "Once upon a time", "-n", "64", "--save-state", "/proc/larql-state.kv")
    refused(p, "--save-state")
    assert p.stdout == "", "generation started before the unwritable path was reported"
    assert any(r in p.stderr for r in ("Permission denied", "No such file", "Read-only", "not permitted")), p.stderr
