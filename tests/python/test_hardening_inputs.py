"""Issue 7, kinds 2, 4, 5, 6, 7 and 10: values that cannot be honoured are refused (exit 2 naming
the flag and its range), output failures are errors, inputs are bounded and must be text,
interaction (Ctrl-C in chat, long prompts, stop reasons), defaults that work, prompt hygiene.
"""
from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("larql_bin")


def larql(larql_bin, *args, timeout=300, **kw):
    return subprocess.run([str(larql_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def usage_error(p, *words):
    assert p.returncode == 2, f"exit {p.returncode}, want 2: {p.stderr[-1500:]}"
    assert "error:" in p.stderr
    for w in words:
        assert w in p.stderr, f"{w!r} not in {p.stderr!r}"


# --- Kind 2: one parsing layer for numeric flags --------------------------------------------

@pytest.mark.parametrize("seed", ["1180591620717411303424", "99999999999999999999999", "2^70", "-1", "1e3"])
def test_seed_out_of_range_or_not_an_integer(larql_bin, model_path, seed):
    usage_error(larql(larql_bin, "run", model_path, "hi", "-n", "1", "--seed", seed), "--seed", seed)


def test_seed_at_the_top_of_the_range_is_accepted(larql_bin, model_path):
    p = larql(larql_bin, "run", model_path, "hi", "-n", "1", "--seed", "18446744073709551615", "--json")
    assert p.returncode == 0, p.stderr


def test_n_overflow(larql_bin, model_path):
    usage_error(larql(larql_bin, "run", model_path, "hi", "-n", "99999999999999999999999"), "-n", "[0, ")


@pytest.mark.parametrize("n", ["0", "-1"])
def test_chat_n_must_be_positive(larql_bin, model_path, n):
    p = larql(larql_bin, "chat", model_path, "-n", n, input="hello\n")
    usage_error(p, "-n", "[1, ")
    assert "no longer fits" not in p.stderr


def test_calibrate_budget_inf_and_tokens_negative(larql_bin, model_path, tmp_path):
    out = tmp_path / "r.json"
    usage_error(larql(larql_bin, "calibrate", model_path, "--budget", "inf", "-o", out), "--budget", "(0, 100]")
    usage_error(larql(larql_bin, "calibrate", model_path, "--budget", "nan", "-o", out), "--budget")
    usage_error(larql(larql_bin, "calibrate", model_path, "--budget", "0.01", "--tokens", "-1", "-o", out), "--tokens")
    assert not out.exists()


def test_ctx_size_both_ends_give_the_same_exit_and_the_real_range(larql_bin, model_path):
    low = larql(larql_bin, "run", model_path, "hi", "-n", "1", "-c", "0")
    high = larql(larql_bin, "run", model_path, "hi", "-n", "1", "-c", "40000")
    usage_error(low, "--ctx-size")
    usage_error(high, "--ctx-size", "[1, 32,768]")
    helptext = larql(larql_bin, "run", "--help").stdout
    assert "1073741824" not in helptext.replace(",", "") and "32,768" in helptext


def test_threads_above_the_cores_warns(larql_bin, model_path):
    cores = os.cpu_count() or 1
    p = larql(larql_bin, "run", model_path, "hi", "-n", "1", "-t", str(cores * 4), "--json")
    assert p.returncode == 0, p.stderr
    assert "warning:" in p.stderr and "cores" in p.stderr
    assert "slower" in larql(larql_bin, "run", "--help").stdout


@pytest.mark.parametrize("flag,value", [("--temperature", "nan"), ("--top-p", "0"), ("--top-p", "inf"),
                                        ("--min-p", "1.5"), ("--repeat-penalty", "0"), ("--top-k", "-3")])
def test_sampler_values_out_of_range(larql_bin, model_path, flag, value):
    usage_error(larql(larql_bin, "run", model_path, "hi", "-n", "1", flag, value), flag)


# --- Kind 4: output that fails ----------------------------------------------------------------

def test_stdout_to_a_full_device_is_an_error(larql_bin, model_path):
    with open("/dev/full", "w") as full:
        p = subprocess.run([str(larql_bin), "run", str(model_path), "Once", "-n", "8"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert "stdout" in p.stderr and "No space left" in p.stderr


def test_closed_pipe_stops_generation_with_sigpipe_ignored(larql_bin, model_path):
    def ignore_sigpipe():
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    proc = subprocess.Popen([str(larql_bin), "run", str(model_path), "Once upon a time", "-n", "100", "--ignore-eos"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ignore_sigpipe)
    proc.stdout.read(10)  # like `| head -c 10`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=300)
    assert rc == 1, err
    assert "stdout" in err and "Broken pipe" in err
    assert "generated" not in err  # it stopped at the failed write: no end-of-run statistics


# --- Kind 5: bounded, text-only inputs ----------------------------------------------------------

@pytest.mark.parametrize("verb", ["run", "perplexity", "apollo"])
def test_dev_zero_is_not_read_to_exhaustion(larql_bin, model_path, verb, tmp_path):
    args = {"run": ["run", model_path, "-f", "/dev/zero"],
            "perplexity": ["perplexity", model_path, "/dev/zero"],
            "apollo": ["apollo", "build", "/dev/zero", "-o", tmp_path / "s.store", "-m", model_path]}[verb]
    p = larql(larql_bin, *args, timeout=60)
    assert p.returncode == 1 and "not text" in p.stderr, p.stderr


def test_binary_file_does_not_build_a_store(larql_bin, model_path, tmp_path):
    elf = tmp_path / "prog"
    elf.write_bytes(Path(larql_bin).read_bytes()[:100_000])
    p = larql(larql_bin, "apollo", "build", elf, "-o", tmp_path / "s.store", "-m", model_path)
    assert p.returncode == 1 and "not text" in p.stderr, p.stderr
    assert not (tmp_path / "s.store").exists()


def test_input_limit_and_how_to_raise_it(larql_bin, model_path, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * (600 * 1024))  # 3 MiB
    p = larql(larql_bin, "perplexity", model_path, big, "--max-input-mb", "1")
    assert p.returncode == 1 and "--max-input-mb" in p.stderr, p.stderr


def test_directory_as_corpus_says_so(larql_bin, model_path, tmp_path):
    p = larql(larql_bin, "calibrate", model_path, "--budget", "0.01", "--corpus", tmp_path, "-o", tmp_path / "r.json")
    assert p.returncode == 1 and "is a directory" in p.stderr, p.stderr


# --- Kind 6: interaction -------------------------------------------------------------------------

def test_stop_reason_is_context_when_the_context_stops_generation(larql_bin, model_path):
    p = larql(larql_bin, "run", model_path, "Once upon a time", "-c", "8", "-n", "100", "--ignore-eos", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["stop_reason"] == "context", out
    assert len(out["prompt_ids"]) + len(out["ids"]) == 8


def _read_until(fd, needle: bytes, timeout: float) -> bytes:
    buf = b""
    end = time.time() + timeout
    while needle not in buf:
        left = end - time.time()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {needle!r}; got {buf[-400:]!r}")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_chat_ctrl_c_stops_the_reply_and_returns_to_the_prompt(larql_bin, model_path):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(larql_bin), [str(larql_bin), "chat", str(model_path), "-n", "400", "--temperature", "0.9",
                                  "--seed", "1", "-t", "2"])
    try:
        _read_until(fd, b"> ", 120)
        os.write(fd, b"Tell me a very long story about a dragon.\r")
        _read_until(fd, b"\n", 60)  # the reply starts streaming
        time.sleep(1.0)
        os.kill(pid, signal.SIGINT)
        out = _read_until(fd, b"> ", 60)  # back at the prompt, not gone
        assert b"[stopped]" in out, out[-400:]
        done, status = os.waitpid(pid, os.WNOHANG)
        assert done == 0, "chat quit on the first Ctrl-C"
        os.write(fd, b"\x04")  # Ctrl-D quits cleanly
        end = time.time() + 30
        while time.time() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            try:
                os.read(fd, 4096)
            except OSError:
                pass
            time.sleep(0.1)
        assert done == pid and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


def test_long_prompt_shows_progress_on_a_terminal(larql_bin, model_path, tmp_path):
    prompt = tmp_path / "long.txt"
    prompt.write_text("The committee met again to discuss the budget for the new library. " * 100)  # ~1,400 tokens
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(larql_bin), [str(larql_bin), "run", str(model_path), "-f", str(prompt), "-n", "1", "-t", "2"])
    out = b""
    try:
        end = time.time() + 300
        while time.time() < end:
            r, _, _ = select.select([fd], [], [], 1.0)
            if r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, out[-500:]
    assert b"prompt [" in out and b"/1" in out, out[-800:]


# --- Kind 7: defaults that do something ----------------------------------------------------------

def test_empty_engine_spec_is_an_error(larql_bin, model_path):
    p = larql(larql_bin, "run", model_path, "hi", "-n", "1", "--engine", "")
    assert p.returncode != 0 and "engine" in p.stderr.lower(), p.stderr


def test_markov_rs_codec_default_window_is_bounded(larql_bin):
    engines = json.loads(larql(larql_bin, "engines", "--json").stdout)
    codec = next(e for e in engines if e["name"] == "markov-rs-codec")
    window = next(k for k in codec["keys"] if k["name"] == "window")
    assert window["default"] not in ("", "0"), window


def test_boundary_per_layer_runs_without_a_record_and_says_how_to_calibrate(larql_bin, model_path, tmp_path):
    model = tmp_path / "m.gguf"
    os.symlink(model_path, model)  # no record next to this name
    p = larql(larql_bin, "run", model, "Once upon a time", "-n", "4", "--engine", "boundary-per-layer", "--json")
    assert p.returncode == 0, p.stderr
    assert "larql calibrate" in p.stderr and "note:" in p.stderr


# --- Kind 10: prompt hygiene -------------------------------------------------------------------

def test_no_second_bos(larql_bin, model_path):
    p = larql(larql_bin, "run", model_path, "<bos>hello", "-n", "0", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["prompt_ids"] == [2, 23391]
    assert "note:" in p.stderr and "BOS" in p.stderr


def test_end_of_generation_ids_match_llama_cpp(larql_bin, model_path, llama_cpp_mod):
    llm = llama_cpp_mod.Llama(str(model_path), n_ctx=64, verbose=False)
    vocab = llama_cpp_mod.llama_model_get_vocab(llm.model)
    eog = sorted(i for i in range(llm.n_vocab()) if llama_cpp_mod.llama_vocab_is_eog(vocab, i))
    show = json.loads(larql(larql_bin, "show", model_path, "--json").stdout)
    assert sorted(show["tokenizer"]["eog_ids"]) == eog
