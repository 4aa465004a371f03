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
    the documented kind with a message, never a crash (the subprocess runs with -X faulthandler).
"""
from __future__ import annotations

import json
import os
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


def test_lql_equals_larql_lql_json(larql_bin, tmp_path):
    vx = tmp_path / "mixtral.vindex"
    peer.run_larql(["extract", FIXTURES / "mixtral" / "mixtral-f32.gguf", "-o", vx, "--level", "inference"])
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
expect(larql.InvalidArgument, lambda: m.trace("x", layers=[99]), "layer 99")
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


def test_a_session_runs_one_generation_at_a_time(model):
    # A second stream on a session whose first is unfinished is refused (never two writers on one
    # K/V cache), and the session works again once the first is done.
    s = model.session()
    g1 = s.generate("Once upon a time", max_tokens=400, temperature=0, ignore_eos=True)  # seconds of work
    next(g1)
    with pytest.raises(larql.InvalidArgument, match="busy"):
        list(s.generate(" and then", max_tokens=4, temperature=0))
    g1.close()  # cancels between tokens
    assert g1.result["stop_reason"] == "cancelled"
    assert s.generate(" and then", max_tokens=4, temperature=0).text()


def test_detokenize_of_a_lone_byte_token_is_replaced_not_an_error(model):
    ids = model.tokenize("caf\u00e9 \U0001F600", add_bos=False)
    pieces = [model.detokenize([i]) for i in ids]  # single bytes of a multi-byte character
    assert all(isinstance(p, str) for p in pieces)
    assert model.detokenize(ids) == "caf\u00e9 \U0001F600"
