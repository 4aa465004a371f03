"""The `larql` Python package (docs/python.md), installed from a wheel into a fresh venv
(`make test-python-package` builds the wheel, makes the venv, pip-installs it and runs this file
there). Every expected value comes from the CLI on the same file — an independent front end over
the same engine — or from arithmetic:

  * generate() == `larql run --json` token for token (greedy), the streamed pieces == its text;
  * logits() == `larql perplexity --logits-out` bit for bit; trace().residual ==
    `larql perplexity --residuals-out` bit for bit; the last layer's residual through the logit
    lens == the logits; perplexity() == the CLI's;
  * Vindex.lql() rows == `larql lql --json` rows;
  * zero copy: two reads of one Trace's array share one buffer address;
  * no leak: 1,000 generate() calls grow the RSS by < 10 MB;
  * concurrency: 4 threads on 4 sessions of one model (1 compute thread each) give their alone
    tokens, in < 2.5x the wall time of one alone (the GIL is released);
  * bad input: wrong types, a missing file, a bad engine spec, a closed model — an exception of
    the documented kind with a message, never a crash (the subprocess runs with -X faulthandler);
    loose types (a float max_tokens, a bool token id, mode="knnn") and out-of-range ints
    (2**70) are refused naming the Python parameter (never a CLI flag, an LQL position or the
    private `_stream`), a lone surrogate as "not valid Unicode";
  * stopping: Ctrl-C (SIGINT from a timer thread) stops a long logits() call, a prompt and a
    generation within a fraction of the time they take, as KeyboardInterrupt, the model still
    usable; Model.close() stops a generation and a logits() call in other threads and every later
    call says "the model is closed"; Session.close() and `with` stop and release a session;
  * a state file of another engine or model is larql.InvalidArgument; Vindex.lql("A; B") keeps
    A's result on B's exception; the stub (__init__.pyi) says what the package does, and help()
    shows no private names.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import pydoc
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import peer

import larql  # noqa: E402  (the installed package: a missing install fails, never skips)

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
PROMPT = "The capital of France is"
TEXT = ("The old bridge at Lowfield was built in 1887 by a small crew of engineers. Every spring the river "
        "rose, and every spring the town argued about whether the stones would hold.")


@pytest.fixture(scope="module")
def model(model_path):
    m = larql.Model(model_path, threads=peer.THREADS)
    yield m
    m.close()


def test_the_package_is_the_installed_one():
    # Imported from the venv's site-packages, not from the source tree.
    assert "site-packages" in larql.__file__, larql.__file__
    assert larql.__version__ == "0.1.0"
    assert issubclass(larql.InvalidArgument, larql.Error) and issubclass(larql.InvalidArgument, ValueError)
    assert issubclass(larql.NotFound, FileNotFoundError)


def test_generate_equals_larql_run(model, model_path):
    cli = peer.larql_generate(PROMPT, 24, model=model_path)
    g = model.generate(PROMPT, max_tokens=24, temperature=0)
    pieces = list(g)
    r = g.result
    assert r["prompt_ids"] == cli["prompt_ids"]
    assert r["ids"] == cli["ids"]
    assert "".join(pieces) == r["text"] == cli["text"]
    assert model.complete(PROMPT, max_tokens=24, temperature=0)["ids"] == cli["ids"]


def test_logits_and_residuals_equal_the_cli_bit_for_bit(model, model_path, tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text(TEXT, encoding="utf-8")
    out = peer.larql_perplexity(txt, logits_out=tmp_path / "l.npy", model=model_path)
    want = np.load(tmp_path / "l.npy")
    got = model.logits(TEXT)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert model.tokenize(TEXT) == out["ids"]
    assert model.perplexity(TEXT) == pytest.approx(out["perplexity"], rel=1e-9)
    n_layers = model.config["n_layers"]
    layers = [0, 5, n_layers - 1]
    peer.run_larql(["perplexity", model_path, txt, "--residuals-out", tmp_path / "r.npy", "--layers",
                    ",".join(map(str, layers)), "-t", peer.THREADS])
    tr = model.trace(TEXT, layers=layers)
    np.testing.assert_array_equal(tr.residual, np.load(tmp_path / "r.npy"))
    np.testing.assert_array_equal(tr.logits, want)
    assert tr.residual.shape == (3, len(out["ids"]), model.config["hidden"])
    # Arithmetic: the residual is what entered the layer plus attention plus FFN, and the last
    # layer's residual through the logit lens is the model's own logits at that position.
    lens = tr.logit_lens(top=3)
    assert [x["layer"] for x in lens] == layers
    assert lens[-1]["ids"][0] == int(np.argmax(want[-1]))
    assert lens[-1]["logits"][0] == pytest.approx(float(want[-1].max()), rel=1e-5)
    full = model.trace(TEXT, layers=[4, 5])
    np.testing.assert_allclose(full.residual[1], full.residual[0] + full.attn[1] + full.ffn[1], atol=2e-3, rtol=1e-4)


def test_trace_arrays_are_views_not_copies(model):
    tr = model.trace(PROMPT, layers=[2, 3])
    a, b = tr.residual, tr.residual
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    assert tr.logits.__array_interface__["data"][0] == tr.logits.__array_interface__["data"][0]
    assert not a.flags["OWNDATA"]
    del tr  # the arrays keep their owner alive
    assert np.isfinite(a).all()


@pytest.fixture(scope="module")
def mixtral_vindex(larql_bin, tmp_path_factory) -> Path:
    vx = tmp_path_factory.mktemp("vx") / "mixtral.vindex"
    peer.run_larql(["extract", FIXTURES / "mixtral" / "mixtral-f32.gguf", "-o", vx, "--level", "inference"])
    return vx


def test_lql_equals_larql_lql_json(larql_bin, mixtral_vindex):
    vx = mixtral_vindex
    stmts = ['DESCRIBE "river" RAW', 'WALK "The river rose" TOP 3', "SELECT * FROM FEATURES WHERE layer = 1 LIMIT 7",
             'INFER "The river rose" TOP 3']
    r = subprocess.run([str(larql_bin), "lql", "--json", str(vx), "-e", "; ".join(stmts)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    cli = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    with larql.Vindex(vx) as v:
        got = v.lql("; ".join(stmts))
        assert [t.doc["rows"] for t in got] == [d["rows"] for d in cli]
        assert [t.columns for t in got] == [[c["name"] for c in d["columns"]] for d in cli]
        assert got[0].columns[:6] == ["band", "token", "gate", "layer", "feature", "expert"]
        assert v.describe("river", raw=True).doc["rows"] == cli[0]["rows"]
        ins = v.insert("Atlantis", "capital", "town")
        assert ins[0]["mode"] == "compose"
        assert v.infer("The capital of Atlantis is", top=1)[0]["token"].strip() == "town"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_thousand_generations_do_not_leak(model):
    for _ in range(50):  # warm-up: allocator pools and caches reach their size
        model.complete("Hello", max_tokens=2, temperature=0)
    before = rss_bytes()
    for i in range(1000):
        r = model.complete("Hello", max_tokens=2, temperature=0)
        assert len(r["ids"]) <= 2
    grown = rss_bytes() - before
    print(f"\n[leak] RSS grew {grown / 1e6:.2f} MB over 1,000 generate() calls")
    assert grown < 10e6


def test_four_threads_on_four_sessions(model_path):
    m = larql.Model(model_path, threads=1)
    prompts = ["The capital of France is", "Once upon a time", "The best way to learn", "Water boils at"]
    alone, t_alone = [], []
    for p in prompts:
        t0 = time.perf_counter()
        alone.append(m.complete(p, max_tokens=24, temperature=0)["ids"])
        t_alone.append(time.perf_counter() - t0)
    got = [None] * 4

    def work(i):
        got[i] = m.complete(prompts[i], max_tokens=24, temperature=0)["ids"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    assert got == alone
    one = sum(t_alone) / 4
    print(f"\n[threads] one alone {one:.2f} s, four at once {wall:.2f} s ({wall / one:.2f}x) on {os.cpu_count()} cores")
    assert wall < 2.5 * one
    m.close()


def test_sessions_continue_and_save_state(model, tmp_path):
    s = model.session()
    a = s.generate("The capital of France is", max_tokens=4, temperature=0).text()
    b = s.generate(" And the capital of Italy is", max_tokens=4, temperature=0).text()
    assert a and b
    s.save_state(tmp_path / "st.bin")
    s2 = model.session(resume=tmp_path / "st.bin")
    c1 = s2.generate(" Then", max_tokens=6, temperature=0).text()
    c2 = s.generate(" Then", max_tokens=6, temperature=0).text()
    assert c1 == c2


BAD = r'''
import faulthandler, sys, larql
faulthandler.enable()
model_path = sys.argv[1]
def expect(kind, fn, needle):
    try:
        fn()
    except kind as e:
        assert needle in str(e), (kind, str(e))
        print("ok", kind.__name__, "|", str(e)[:100])
        return
    raise AssertionError(f"no {kind.__name__} for {needle}")
expect(larql.NotFound, lambda: larql.Model("/nonexistent/model.gguf"), "/nonexistent/model.gguf")
expect(TypeError, lambda: larql.Model(42), "path")
expect(TypeError, lambda: larql.Model(model_path, threads="two"), "threads")
expect(larql.InvalidArgument, lambda: larql.Model(model_path, engine="no-such-engine"), "no-such-engine")
m = larql.Model(model_path, threads=1)
expect(TypeError, lambda: m.tokenize(5), "")
expect(larql.InvalidArgument, lambda: m.detokenize([10**9]), "outside the vocabulary")
expect(larql.InvalidArgument, lambda: m.generate("x", temperature=-1), "temperature")
expect(larql.InvalidArgument, lambda: m.generate("x", max_tokens=-5), "max_tokens")
expect(larql.InvalidArgument, lambda: m.trace("x", layers=[99]), "layers[0] must be an int in [0, 17], got 99")
expect(larql.EmptyPrompt, lambda: m.logits([]), "no token ids")
expect(larql.ContextOverflow, lambda: m.logits([2] * (m.config["context_length"] + 1)), "exceed")
expect(larql.InvalidArgument, lambda: list(m.generate("x", engine="standard:bogus=1", max_tokens=1)), "bogus")
m.close()
expect(larql.InvalidArgument, lambda: m.tokenize("x"), "closed")
expect(larql.InvalidArgument, lambda: m.generate("x"), "closed")
expect(larql.NotFound, lambda: larql.Vindex("/nonexistent.vindex"), "nonexistent")
print("done")
'''


def test_bad_input_raises_never_crashes(model_path, tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(BAD)
    r = subprocess.run([sys.executable, "-X", "faulthandler", str(script), str(model_path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("done"), r.stdout + r.stderr


def test_help_answers():
    assert "GGUF" in larql.Model.__doc__ and "generate" in dir(larql.Model)
    assert "Stream a continuation" in larql.Model.generate.__doc__


def test_a_model_opened_before_fork_runs_in_the_child(model):
    # The pool's workers do not survive fork(); the child runs on its calling thread instead of
    # waiting for them forever (util/thread_pool.h), and gets the parent's logits.
    want = model.logits(PROMPT)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            ok = np.array_equal(model.logits(PROMPT), want)
            os.write(w, b"same" if ok else b"diff")
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 16) == b"same" and os.WEXITSTATUS(status) == 0


def test_a_session_runs_one_generation_at_a_time(model, tmp_path):
    # A second stream on a session whose first is unfinished is refused (never two writers on one
    # K/V cache), and the session works again once the first is done.
    s = model.session()
    g1 = s.generate("Once upon a time", max_tokens=400, temperature=0, ignore_eos=True)  # seconds of work
    next(g1)
    with pytest.raises(larql.InvalidArgument, match="busy"):
        list(s.generate(" and then", max_tokens=4, temperature=0))
    with pytest.raises(larql.InvalidArgument, match="busy"):  # nor is its state saved under it
        s.save_state(tmp_path / "never-written.kv")
    g1.close()  # cancels between tokens
    assert g1.result["stop_reason"] == "cancelled"
    assert not (tmp_path / "never-written.kv").exists()
    assert s.generate(" and then", max_tokens=4, temperature=0).text()


def test_detokenize_of_a_lone_byte_token_is_replaced_not_an_error(model):
    ids = model.tokenize("caf\u00e9 \U0001F600", add_bos=False)
    pieces = [model.detokenize([i]) for i in ids]  # single bytes of a multi-byte character
    assert all(isinstance(p, str) for p in pieces)
    assert model.detokenize(ids) == "caf\u00e9 \U0001F600"


# --- stopping: Ctrl-C, close() -------------------------------------------------------------------

# Each stopping test runs in its own interpreter (-X faulthandler): a SIGINT that arrives late, or a
# close() that does not stop a generation, must fail that test, not hang or kill the test session.
STOP_PRELUDE = r'''
import faulthandler, signal, sys, threading, time
import larql
faulthandler.enable()
# Python's Ctrl-C handler, even where SIGINT came in ignored (a job started with `&` by a shell
# without job control): the user at a terminal has it.
signal.signal(signal.SIGINT, signal.default_int_handler)
model_path = sys.argv[1]
def sigint_after(seconds):
    main = threading.main_thread().ident
    t = threading.Timer(seconds, lambda: signal.pthread_kill(main, signal.SIGINT))
    t.start()
    return t
def interrupted(fn):
    """Seconds fn() ran before KeyboardInterrupt (SIGINT after 0.3 s); fails if it finished."""
    t0 = time.perf_counter()
    timer = sigint_after(0.3)
    try:
        fn()
    except KeyboardInterrupt:
        return time.perf_counter() - t0
    finally:
        timer.join()
    raise AssertionError(f"no KeyboardInterrupt: the call ran to its end ({time.perf_counter() - t0:.1f} s)")
'''

SIGINT_LOGITS = STOP_PRELUDE + r'''
m = larql.Model(model_path, threads=2)
want = m.logits("The capital of France is")
ids = [2] + [i % 5000 + 1000 for i in range(599)]   # 600 positions: seconds of work
t0 = time.perf_counter()
full = m.logits(ids)
t_full = time.perf_counter() - t0
del full
t_stop = interrupted(lambda: m.logits(ids))
print(f"logits: full {t_full:.2f} s, stopped after {t_stop:.2f} s")
assert t_stop < 0.3 + 0.4 * t_full, (t_stop, t_full)
assert (m.logits("The capital of France is") == want).all()   # still usable, same answer
t_stop = interrupted(lambda: m.perplexity(ids))
assert t_stop < 0.3 + 0.4 * t_full, (t_stop, t_full)
print("done")
'''

SIGINT_GENERATE = STOP_PRELUDE + r'''
m = larql.Model(model_path, threads=2)
want = m.complete("The capital of France is", max_tokens=6, temperature=0)["ids"]
def drain(g):
    with g:  # an interrupt that lands in this loop's own bytecode, not in the wait, closes it here
        for _ in g:
            pass
# Decoding: many tokens of work, stopped between tokens.
g = m.generate("Once upon a time", max_tokens=5000, temperature=0, ignore_eos=True)
t_stop = interrupted(lambda: drain(g))
print(f"decode stopped after {t_stop:.2f} s, {len(g.result['ids'])} tokens")
assert g.result["stop_reason"] == "cancelled" and len(g.result["ids"]) < 5000, g.result
assert t_stop < 5, t_stop
# The prompt: a long one, stopped inside the prefill (within a layer).
long_prompt = [2] + [i % 5000 + 1000 for i in range(3000)]
t0 = time.perf_counter()
r = m.complete(long_prompt, max_tokens=1, temperature=0)
t_prefill = time.perf_counter() - t0
g = m.generate(long_prompt, max_tokens=1, temperature=0)
t_stop = interrupted(lambda: next(g))   # waiting for the first piece: only the native wait sees the signal
print(f"prefill: full {t_prefill:.2f} s, stopped after {t_stop:.2f} s")
assert t_stop < 0.3 + 0.4 * t_prefill, (t_stop, t_prefill)
assert g.result["stop_reason"] == "cancelled" and g.result["ids"] == [], g.result
assert m.complete("The capital of France is", max_tokens=6, temperature=0)["ids"] == want
print("done")
'''

CLOSE_STOPS_WORK = STOP_PRELUDE + r'''
m = larql.Model(model_path, threads=1)
s = m.session()
g = m.generate("Once upon a time", max_tokens=100000, temperature=0, ignore_eos=True)
pieces, errors = [], []
def consume():
    try:
        for p in g:
            pieces.append(p)
    except Exception as e:
        errors.append(e)
t = threading.Thread(target=consume, daemon=True)
t.start()
while not pieces:
    time.sleep(0.01)
logit_errors = []
def score():
    try:
        m.logits([2] + [1000] * 400)
    except Exception as e:
        logit_errors.append(e)
t2 = threading.Thread(target=score, daemon=True)
t2.start()
time.sleep(0.3)
t0 = time.perf_counter()
m.close()
print(f"close() took {time.perf_counter() - t0:.2f} s")
t.join(timeout=60)
t2.join(timeout=60)
assert not t.is_alive() and not t2.is_alive(), "close() did not stop the work of other threads"
assert len(errors) == 1 and isinstance(errors[0], larql.Cancelled), errors
assert "the model was closed" in str(errors[0]), str(errors[0])
assert g.result["stop_reason"] == "cancelled" and len(g.result["ids"]) < 100000
assert len(logit_errors) == 1 and isinstance(logit_errors[0], larql.Cancelled), logit_errors
assert "model was closed" in str(logit_errors[0])
print("generation:", errors[0], "| logits:", logit_errors[0])
later = [lambda: m.tokenize("x"), lambda: m.detokenize([5]), lambda: m.logits("x"), lambda: m.perplexity("a b c"),
         lambda: m.trace("x"), lambda: m.generate("x"), lambda: m.complete("x"), lambda: m.session(),
         lambda: m.config, lambda: m.path, lambda: s.generate("x"), lambda: s.save_state("/tmp/never.kv"),
         lambda: s.restart()]
for fn in later:
    try:
        fn()
    except larql.InvalidArgument as e:
        assert "model is closed" in str(e), str(e)
        continue
    raise AssertionError("a closed model answered")
assert m.closed and s.closed and repr(m) == "<larql.Model (closed)>"
m.close()  # idempotent
print("done")
'''


def run_script(script: str, tmp_path, *args, timeout=300) -> str:
    p = tmp_path / "script.py"
    p.write_text(script)
    try:
        r = subprocess.run([sys.executable, "-X", "faulthandler", str(p), *map(str, args)], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the script did not finish in {timeout} s:\n{e.stdout}\n{e.stderr}") from None
    assert r.returncode == 0 and r.stdout.strip().endswith("done"), r.stdout + r.stderr
    print(r.stdout)
    return r.stdout


def test_ctrl_c_stops_a_long_logits_call_and_the_model_stays_usable(model_path, tmp_path):
    run_script(SIGINT_LOGITS, tmp_path, model_path)


def test_ctrl_c_stops_a_generation_and_a_prompt(model_path, tmp_path):
    run_script(SIGINT_GENERATE, tmp_path, model_path)


def test_close_stops_the_work_of_other_threads_and_every_later_call_says_closed(model_path, tmp_path):
    run_script(CLOSE_STOPS_WORK, tmp_path, model_path, timeout=180)


def test_a_session_closes_and_is_a_context_manager(model):
    with model.session() as s:
        assert not s.closed
        assert s.generate(PROMPT, max_tokens=3, temperature=0).text()
    assert s.closed and repr(s) == "<larql.Session (closed)>"
    with pytest.raises(larql.InvalidArgument, match="session is closed"):
        s.generate(PROMPT, max_tokens=3)
    with pytest.raises(larql.InvalidArgument, match="session is closed"):
        s.context
    s.close()  # idempotent
    # close() stops a generation running on the session; the model goes on.
    s = model.session()
    g = s.generate("Once upon a time", max_tokens=100000, temperature=0, ignore_eos=True)
    next(g)
    s.close()
    with pytest.raises(larql.Cancelled, match="the session was closed"):
        list(g)
    assert g.result["stop_reason"] == "cancelled" and len(g.result["ids"]) < 100000
    assert model.complete(PROMPT, max_tokens=3, temperature=0)["ids"]
    with larql.Model(model.path, threads=1) as m2:
        assert not m2.closed
    assert m2.closed


# --- arguments ---------------------------------------------------------------------------------


def loose_types(m, v):
    """(call, exception, words its message must hold) for arguments of the wrong type."""
    return [
        (lambda: m.generate("x", max_tokens=3.0), TypeError, ["max_tokens", "int", "float"]),
        (lambda: m.generate("x", max_tokens="5"), TypeError, ["max_tokens", "int", "str"]),
        (lambda: m.generate("x", ignore_eos="no"), TypeError, ["ignore_eos", "True or False"]),
        (lambda: m.generate("x", temperature="hot"), TypeError, ["temperature", "number"]),
        (lambda: m.generate("x", top_k=2.5), TypeError, ["top_k", "int"]),
        (lambda: m.generate("x", seed=1.5), TypeError, ["seed", "int"]),
        (lambda: m.generate("x", stop=5), TypeError, ["stop", "str"]),
        (lambda: m.generate([2, True]), TypeError, ["prompt[1]", "int token id", "bool"]),
        (lambda: m.logits([2, False]), TypeError, ["tokens[1]", "int token id", "bool"]),
        (lambda: m.logits([2, 3.0]), TypeError, ["tokens[1]", "float"]),
        (lambda: m.detokenize("abc"), TypeError, ["ids", "sequence of int token ids", "str"]),
        (lambda: m.detokenize([1.0]), TypeError, ["ids[0]", "float"]),
        (lambda: m.tokenize("x", add_bos=1), TypeError, ["add_bos", "True or False"]),
        (lambda: m.tokenize(b"x"), TypeError, ["text", "str", "bytes"]),
        (lambda: m.trace("x", layers=[1.5]), TypeError, ["layers[0]", "int"]),
        (lambda: m.session(context=1.0), TypeError, ["context", "int"]),
        (lambda: larql.Model(m.path, threads=2.0), TypeError, ["threads", "int"]),
        (lambda: v.insert("a", "b", "c", mode="knnn"), ValueError, ["mode", "'compose'", "'knn'", "'knnn'"]),
        (lambda: v.insert("a", "b", "c", mode=1), TypeError, ["mode", "str"]),
        (lambda: v.select(what="TABLES"), ValueError, ["what", "'FEATURES'", "'EDGES'", "'ENTITIES'"]),
        (lambda: v.describe("river", layer="1"), TypeError, ["layer", "int"]),
        (lambda: v.describe("river", raw="yes"), TypeError, ["raw", "True or False"]),
        (lambda: v.infer("x", top=2.0), TypeError, ["top", "int"]),
    ]


def out_of_range(m, v):
    vocab = m.config["vocab"]
    return [
        (lambda: m.generate("x", max_tokens=2**70), ValueError, ["max_tokens", "2147483647", str(2**70)]),
        (lambda: m.generate("x", seed=2**64), ValueError, ["seed", str(2**64)]),
        (lambda: m.generate("x", seed=-1), ValueError, ["seed"]),
        (lambda: m.generate("x", top_k=2**40), ValueError, ["top_k"]),
        (lambda: m.generate([2, 2**40]), ValueError, ["prompt[1]", str(2**40), f"[0, {vocab})"]),
        (lambda: m.logits([2**40]), ValueError, ["tokens[0]", str(2**40), "vocabulary"]),
        (lambda: m.logits([-1]), ValueError, ["tokens[0]", "-1", "vocabulary"]),
        (lambda: m.detokenize([2**40]), ValueError, ["ids[0]", str(2**40)]),
        (lambda: m.trace("x", layers=[2**70]), ValueError, ["layers[0]", str(2**70)]),
        (lambda: m.session(context=2**70), ValueError, ["context", str(2**70)]),
        (lambda: larql.Model(m.path, threads=2**70), ValueError, ["threads", str(2**70)]),
        (lambda: v.describe("river", layer=2**70), ValueError, ["layer", str(2**70)]),
        (lambda: v.infer("x", top=2**70), ValueError, ["top", str(2**70)]),
    ]


def python_names(m, v):
    """Range errors name the Python parameter, not the CLI's flag or an LQL position."""
    return [
        (lambda: m.generate("x", temperature=-1), ValueError, ["temperature", ">= 0"]),
        (lambda: m.generate("x", temperature=float("nan")), ValueError, ["temperature"]),
        (lambda: m.generate("x", top_p=2), ValueError, ["top_p", "(0, 1]"]),
        (lambda: m.generate("x", min_p=-0.5), ValueError, ["min_p", "[0, 1]"]),
        (lambda: m.generate("x", repeat_penalty=0), ValueError, ["repeat_penalty", "> 0"]),
        (lambda: m.generate("x", top_k=-1), ValueError, ["top_k"]),
        (lambda: v.describe("river", layer=99), ValueError, ["layer", "99", "[0, 1]"]),
        (lambda: v.insert("a", "b", "c", layer=-1), ValueError, ["layer", "-1"]),
        # A method that writes the LQL names the statement it ran, not a position in it.
        (lambda: v.select(where="layer ="), ValueError,
         ["found \"LIMIT\"", "in the LQL statement this method ran: SELECT * FROM FEATURES WHERE layer = LIMIT 20"]),
        (lambda: v.compile("/nonexistent/dir/x.vindex"), larql.NotFound, ["/nonexistent/dir", "COMPILE CURRENT INTO VINDEX"]),
    ]


def lone_surrogates(m, v):
    return [
        (lambda: m.generate("\ud800"), ValueError, ["prompt", "not valid Unicode", "U+D800"]),
        (lambda: m.tokenize("ab\udfff"), ValueError, ["text", "not valid Unicode", "U+DFFF", "index 2"]),
        (lambda: m.logits("\ud800"), ValueError, ["tokens", "not valid Unicode"]),
        (lambda: m.generate("x", stop=["\ud800"]), ValueError, ["stop[0]", "not valid Unicode"]),
        (lambda: v.describe("\ud800"), ValueError, ["entity", "not valid Unicode"]),
        (lambda: v.lql('DESCRIBE "\ud800"'), ValueError, ["text", "not valid Unicode"]),
    ]


@pytest.mark.parametrize("cases", [loose_types, out_of_range, python_names, lone_surrogates])
def test_bad_arguments_name_the_python_parameter(model, mixtral_vindex, cases):
    with larql.Vindex(mixtral_vindex) as v:
        for fn, kind, words in cases(model, v):
            with pytest.raises(kind) as ei:
                fn()
            msg = str(ei.value)
            for w in words:
                assert w in msg, (w, msg)
            # Never a CLI flag, nanobind's signature dump of a private function, an LQL position
            # or C++'s std::bad_cast.
            for leak in ("--", "_stream", "_larql", "incompatible function arguments", "bad_cast", " at 1:"):
                assert leak not in msg, (leak, msg)
        assert model.complete(PROMPT, max_tokens=2, temperature=0)["ids"]  # nothing broke
        assert v.info["num_layers"] == 2  # the fixture's, which the layer ranges above name


def test_numpy_arguments_are_accepted(model):
    ids = model.tokenize(PROMPT)
    want = model.logits(ids)
    np.testing.assert_array_equal(model.logits(np.array(ids, dtype=np.int64)), want)
    assert model.detokenize(np.array(ids[1:], dtype=np.int32)) == PROMPT
    r = model.complete(PROMPT, max_tokens=np.int64(3), temperature=np.float32(0), ignore_eos=np.bool_(False))
    assert r["ids"] == model.complete(PROMPT, max_tokens=3, temperature=0)["ids"]
    with pytest.raises(TypeError, match="1-D array of integer"):
        model.logits(np.array(ids, dtype=np.float32))


def test_a_state_file_of_another_engine_or_model_is_invalid_argument(model, tmp_path):
    s = model.session()
    s.generate(PROMPT, max_tokens=2, temperature=0).text()
    s.save_state(tmp_path / "std.kv")
    with pytest.raises(larql.InvalidArgument, match="saved by engine 'standard'"):
        model.session(engine="markov-rs", resume=tmp_path / "std.kv")
    with larql.Model(FIXTURES / "mixtral" / "mixtral-f32.gguf", threads=1) as other:
        with pytest.raises(larql.InvalidArgument, match="another model"):
            other.session(resume=tmp_path / "std.kv")
    assert issubclass(larql.InvalidArgument, ValueError)


def test_lql_keeps_the_results_before_a_failing_statement(mixtral_vindex):
    with larql.Vindex(mixtral_vindex) as v:
        alone = v.lql('DESCRIBE "river" RAW; WALK "The river rose" TOP 3')
        with pytest.raises(larql.Error) as ei:
            v.lql('DESCRIBE "river" RAW; WALK "The river rose" TOP 3; DESCRIBE "river" AT LAYER 99')
        assert "99" in str(ei.value)
        got = ei.value.results
        assert [t.doc["rows"] for t in got] == [t.doc["rows"] for t in alone]
        assert all(isinstance(t, larql.Table) for t in got)
        with pytest.raises(larql.Error) as ei:  # a syntax error in the second statement
            v.lql('DESCRIBE "river" RAW; DESCRIBE river river')
        assert [t.doc["rows"] for t in ei.value.results] == [alone[0].doc["rows"]]
        with pytest.raises(larql.Error) as ei:  # the first fails: nothing before it
            v.lql("SELECT * FROM NOWHERE")
        assert ei.value.results == []


# --- the stub and help() -----------------------------------------------------------------------


def stub_tree() -> ast.Module:
    stub = Path(larql.__file__).with_suffix(".pyi")
    assert stub.is_file(), f"the wheel has no stub at {stub}"
    return ast.parse(stub.read_text(encoding="utf-8"))


def stub_params(fn: ast.FunctionDef) -> list[tuple[str, str | None]]:
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    out = list(zip([p.arg for p in pos], defaults))
    if a.vararg:
        out.append(("*" + a.vararg.arg, None))
    out += [(k.arg, ast.unparse(d) if d is not None else None) for k, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(("**" + a.kwarg.arg, None))
    return out


def runtime_params(fn) -> list[tuple[str, str | None]]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        name = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        out.append((name, None if p.default is p.empty else repr(p.default)))
    return out


def test_the_stub_says_what_the_package_does():
    tree = stub_tree()
    stub_all = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    assert stub_all == larql.__all__
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert set(larql.__all__) <= set(classes)
    for name in ("Model", "Session", "Generation", "Trace", "Vindex", "Table"):
        cls = getattr(larql, name)
        public = {k for k in dir(cls) if not k.startswith("_")} - set(dir(list) if name == "Table" else [])
        stubbed = set()
        for node in classes[name].body:
            if isinstance(node, ast.FunctionDef):
                stubbed.add(node.name)
                if node.name.startswith("__") and node.name not in ("__init__",):
                    continue
                if any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                    assert isinstance(inspect.getattr_static(cls, node.name), property), (name, node.name)
                    continue
                got = runtime_params(getattr(cls, node.name))
                assert got == stub_params(node), (f"{name}.{node.name}", got, stub_params(node))
            elif isinstance(node, ast.AnnAssign):
                stubbed.add(node.target.id)
        assert public - stubbed == set(), f"{name}: public names the stub lacks: {public - stubbed}"
        assert {s for s in stubbed if not s.startswith("_")} - public - {"statement", "title", "columns", "notes", "doc"} \
            == set(), f"{name}: the stub names what the class lacks"


def test_help_shows_no_private_names_and_documents_each_member():
    for cls in (larql.Model, larql.Session, larql.Generation, larql.Trace, larql.Vindex, larql.Table):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        for private in ("_session", "_native", "_make", "_generate", "_one", "_layer", "_Closing", "_Tokens", "native"):
            assert not re.search(rf"(?<!\w){private}\b", text), (cls.__name__, private)
        for name, member in vars(cls).items():
            if not name.startswith("_") and (callable(member) or isinstance(member, property)):
                assert inspect.getdoc(member), f"{cls.__name__}.{name} has no docstring"
    with pytest.raises(TypeError, match=r"Model\.trace\(\)"):
        larql.Trace()
    with pytest.raises(TypeError, match=r"Model\.session\(\)"):
        larql.Session()
    assert "made directly" in pydoc.render_doc(larql.Trace, renderer=pydoc.plaintext)
