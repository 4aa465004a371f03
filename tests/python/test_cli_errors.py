"""Bad input gives a clear error and a non-zero exit, never a crash (docs/architecture.md "Errors").

Each case: exit status in 1..127 (not killed by a signal, not a shell 'signal' status >= 128),
stderr has a line starting with `error:` that names the problem, and no crash marker.
"""
from __future__ import annotations

import subprocess


import pytest

import peer

pytestmark = pytest.mark.usefixtures("larql_bin")

CRASH_MARKERS = ("Segmentation fault", "core dumped", "Aborted", "terminate called",
                 "AddressSanitizer", "Traceback (most recent call last)", "std::bad_alloc")


def _check_error(proc, *keywords, what=""):
    err = proc.stderr
    detail = f"{what}\nexit {proc.returncode}\nstderr: {err[-2000:]!r}\nstdout: {proc.stdout[-500:]!r}"
    assert proc.returncode > 0, f"expected a non-zero exit (negative = killed by signal): {detail}"
    assert proc.returncode < 128, f"exit status looks like a signal: {detail}"
    for m in CRASH_MARKERS:
        assert m not in err, f"crash marker {m!r} on stderr: {detail}"
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert lines, f"no line starting with 'error:' on stderr: {detail}"
    msg = " ".join(lines).lower()
    if keywords:
        assert any(k.lower() in msg for k in keywords), \
            f"error message does not name the problem (expected one of {keywords}): {detail}"


def _run(args, timeout=120):
    return peer.run_larql(args, timeout=timeout, check=False)


def test_missing_model_file(tmp_path):
    missing = tmp_path / "does-not-exist.gguf"
    proc = _run(["run", missing, "hello", "-n", "4"])
    _check_error(proc, "does-not-exist.gguf", "no such file", "not found", "cannot open",
                 what="missing model")


def test_missing_model_file_perplexity(tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text("hello world")
    proc = _run(["perplexity", tmp_path / "nope.gguf", txt, "--json"])
    _check_error(proc, "nope.gguf", "no such file", "not found", "cannot open",
                 what="missing model (perplexity)")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"this is not a gguf file at all\n" * 100 + bytes(range(256)) * 16)
    proc = _run(["run", bad, "hello", "-n", "4"])
    _check_error(proc, "magic", "gguf", "not a", "garbage.gguf", what="non-GGUF file")


def test_empty_file(tmp_path):
    bad = tmp_path / "empty.gguf"
    bad.write_bytes(b"")
    proc = _run(["run", bad, "hello", "-n", "4"])
    _check_error(proc, "empty", "truncated", "gguf", "too small", "magic", "empty.gguf",
                 what="empty file")


def test_truncated_gguf(model_path, tmp_path):
    trunc = tmp_path / "truncated.gguf"
    with open(model_path, "rb") as src, open(trunc, "wb") as dst:
        dst.write(src.read(1 << 20))
    proc = _run(["run", trunc, "hello", "-n", "4"])
    _check_error(proc, "truncat", "offset", "beyond", "past the end", "out of range", "size",
                 "end of file", "short", what="truncated GGUF (first 1 MiB)")


def test_truncated_gguf_header(model_path, tmp_path):
    # Cut inside the metadata (strings / arrays), not just the tensor data.
    trunc = tmp_path / "truncated-header.gguf"
    with open(model_path, "rb") as src, open(trunc, "wb") as dst:
        dst.write(src.read(4096))
    proc = _run(["run", trunc, "hello", "-n", "4"])
    _check_error(proc, what="truncated GGUF (first 4 KiB)")


def test_top_p_out_of_range(model_path):
    proc = _run(["run", model_path, "hello", "-n", "4", "--top-p", "2"])
    _check_error(proc, "top-p", "top_p", what="--top-p 2")


def test_negative_temperature(model_path):
    proc = _run(["run", model_path, "hello", "-n", "4", "--temperature", "-1"])
    _check_error(proc, "temperature", what="--temperature -1")


def test_unknown_subcommand(model_path):
    proc = _run(["frobnicate", model_path])
    # The message must name the offending word, not just say that a subcommand is required.
    _check_error(proc, "frobnicate", what="unknown subcommand")


def test_prompt_longer_than_context(model_path):
    prompt = "The quick brown fox jumps over the lazy dog. " * 40   # ~400 tokens
    proc = _run(["run", model_path, prompt, "-n", "4", "--ctx-size", "64"])
    _check_error(proc, "context", "ctx", "too long", "longer", what="prompt > --ctx-size 64")


def test_no_arguments():
    proc = _run([])
    # Usage text is fine, but it must be a clean non-zero exit with an error line.
    assert 0 < proc.returncode < 128, f"exit {proc.returncode}, stderr {proc.stderr[-500:]!r}"


def test_perplexity_missing_text_file(model_path, tmp_path):
    proc = _run(["perplexity", model_path, tmp_path / "missing.txt", "--json"])
    _check_error(proc, "missing.txt", "no such file", "not found", "cannot open",
                 what="missing text file")


# Found by trying the CLI as a new user: each must be a clear error, not a hang or a silent default.
@pytest.mark.parametrize("args, needle", [
    (["--threads", "0"], "--threads"),
    (["--threads", "100000"], "--threads"),
    (["-c", "0"], "--ctx-size"),
    (["--stop", ""], "--stop"),
    (["--seed", "-1"], "--seed"),
    (["--save-state", "/nonexistent-dir/x"], "does not exist"),
])
def test_run_rejects_bad_values(larql_bin, model_path, args, needle):
    p = subprocess.run([str(larql_bin), "run", str(model_path), "hello", "-n", "2", *args],
                       capture_output=True, text=True, timeout=60)
    assert 0 < p.returncode < 128, p.stderr
    assert "error:" in p.stderr and needle in p.stderr, p.stderr


def test_run_prompt_file_that_is_a_directory(larql_bin, model_path, tmp_path):
    p = subprocess.run([str(larql_bin), "run", str(model_path), "-f", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert 0 < p.returncode < 128 and "directory" in p.stderr, p.stderr


# The instruction set may come from --isa or from $LARQL_ISA: an unknown name is exit 2 and the
# message names the value and both places (a user who only set the variable saw just '--isa').
@pytest.mark.parametrize("how", ["flag", "env"])
def test_unknown_isa_names_the_value_and_its_sources(larql_bin, model_path, how):
    import os
    env = dict(os.environ)
    env.pop("LARQL_ISA", None)
    args = [str(larql_bin), "show", str(model_path)]
    if how == "flag":
        args[1:1] = ["--isa", "avx9"]
    else:
        env["LARQL_ISA"] = "avx9"
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2, p.stderr
    assert "error:" in p.stderr and "'avx9'" in p.stderr and "$LARQL_ISA" in p.stderr, p.stderr


def test_isa_name_in_any_case(larql_bin, model_path):
    import os
    env = {**os.environ, "LARQL_ISA": "AVX2"}
    p = subprocess.run([str(larql_bin), "bench", str(model_path), "--roofline", "-t", "1", "--prompt-tokens", "8",
                        "--decode-tokens", "2"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "(avx2)" in p.stdout, p.stdout


# A directory that is neither a vindex nor a Hugging Face model (an empty one, the models/ cache
# itself) is named as such; the verbs said '<dir>/index.json: cannot open'.
@pytest.mark.parametrize("verb", [["run"], ["show"], ["bench", "--prompt-tokens", "8"]])
def test_directory_that_is_no_model(larql_bin, tmp_path, verb):
    p = subprocess.run([str(larql_bin), verb[0], str(tmp_path), *verb[1:]], capture_output=True, text=True, timeout=60)
    assert 0 < p.returncode < 128, p.stderr
    assert "error:" in p.stderr and str(tmp_path) in p.stderr and "neither a vindex" in p.stderr, p.stderr


# `show` of a Hugging Face directory reads its config.json (it tried the directory as a vindex).
def test_show_reads_a_hugging_face_directory(larql_bin, hf_dir):
    p = subprocess.run([str(larql_bin), "show", str(hf_dir), "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json
    cfg = json.loads((hf_dir / "config.json").read_text())
    shown = json.loads(p.stdout)
    assert shown["hidden"] == cfg["hidden_size"] and shown["ffn"] == cfg["intermediate_size"], shown


def test_device_cuda_without_cuda_build(model_path, tmp_path):
    # The CPU-only build (CI's) says how to get a CUDA one; an unknown device is refused by name.
    proc = _run(["run", str(model_path), "hello", "-n", "1", "--device", "cuda"])
    if proc.returncode == 0:
        pytest.skip("this larql was built with CUDA and found a GPU")
    _check_error(proc, "-DLARQL_CUDA=ON", "no usable CUDA device", what="run --device cuda")
    _check_error(_run(["run", str(model_path), "hello", "-n", "1", "--device", "gpu"]), "cuda", "cpu",
                 what="run --device gpu")
    text = tmp_path / "t.txt"
    text.write_text("a b c d")
    _check_error(_run(["perplexity", str(model_path), str(text), "--device", "cuda"]), "cpu",
                 what="perplexity --device cuda")
