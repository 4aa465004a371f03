"""Pipeline mode (docs/sharding.md "Pipeline"): `--pipeline remote:...` clients and `larql router
--pipeline` holding only the embedding and lm_head, the layers (and their K/V) on shards, on
loopback.

The reference is the same binary in one process on the same file (test_generation.py and
test_parity.py hold it to llama.cpp): greedy tokens, `perplexity --logits-out` logits and a
multi-turn chat (a continued sequence) must be the same bit for bit over 2 and 3 shards. Faults:
a shard killed mid-generation ends the run with an error naming it within the deadline; the
router answers 503 naming it and runs again once it is back; an engine that keeps host state is
refused by name.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import peer
from test_shard import PROMPT, Shard, _complete, _health, _http_server, eight_concurrent_equal_one_process, kill_mid_generation, remote
# The 2- and 3-shard layer splits (module fixtures: this module starts its own shards).
from test_shard import three, two  # noqa: F401


def run(model, *args, check=True, timeout=600):
    return peer.run_larql(["run", str(model), PROMPT, "-n", "24", "--temperature", "0", "-t", "1", *map(str, args)],
                          check=check, timeout=timeout)


@pytest.mark.parametrize("split", ["two", "three"])
def test_a_pipeline_generates_what_one_process_does(model_path, split, request):
    shards = request.getfixturevalue(split)
    alone = run(model_path)
    piped = run(model_path, "--pipeline", remote(*shards))
    assert piped.stdout == alone.stdout
    assert len(alone.stdout) > len(PROMPT) + 10


def test_a_pipeline_gives_the_same_logits_bit_for_bit(model_path, two, three, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Paris is the capital of France. Berlin is the capital of Germany. " * 6)
    outs = {}
    for name, spec in (("alone", None), ("two", remote(*two)), ("three", remote(*three))):
        out = tmp_path / f"{name}.npy"
        args = ["perplexity", str(model_path), str(text), "--logits-out", str(out), "-t", "1"]
        if spec:
            args += ["--pipeline", spec]
        peer.run_larql(args)
        outs[name] = np.load(out)
    assert outs["alone"].shape[0] > 60
    assert np.array_equal(outs["alone"], outs["two"])
    assert np.array_equal(outs["alone"], outs["three"])


def test_a_chat_continues_its_sequence_over_a_pipeline(larql_bin, model_path, two):
    turns = "What is the capital of France?\nAnd of Germany?\n"

    def chat(*flags):
        r = subprocess.run([str(larql_bin), "chat", str(model_path), "-n", "16", "--temperature", "0", "-t", "1", *flags],
                           input=turns, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    alone = chat()
    assert chat("--pipeline", remote(*two)) == alone
    assert len(alone) > 20


def test_eight_concurrent_sequences_through_a_pipeline_server_answer_as_one_process(larql_bin, model_path, three):
    eight_concurrent_equal_one_process(larql_bin, model_path, "--pipeline", remote(*three))


def test_engines_that_keep_host_state_are_refused(model_path, two):
    r = run(model_path, "--engine", "markov-rs", "--pipeline", remote(*two), check=False)
    assert r.returncode != 0
    assert "markov-rs" in r.stderr and "--pipeline" in r.stderr and "--ffn" in r.stderr, r.stderr
    r = run(model_path, "--ffn", remote(*two), "--pipeline", remote(*two), check=False)
    assert r.returncode != 0 and "do not go together" in r.stderr, r.stderr


def test_pipeline_shards_are_checked_at_connect(larql_bin, model_path, two):
    a, _ = two
    r = run(model_path, "--pipeline", remote(a), check=False)
    assert r.returncode != 0 and "layer(s) 9-17" in r.stderr, r.stderr
    ffn_only = Shard(larql_bin, model_path, "--layers", "9-17", "--ffn-only")
    try:
        r = run(model_path, "--pipeline", remote(a, ffn_only), check=False)
        assert r.returncode != 0 and "--ffn-only" in r.stderr, r.stderr
    finally:
        ffn_only.stop()
    other = Shard(larql_bin, peer.REPO_ROOT / "tests/model/data/families/llama3/llama3-f32.gguf")
    try:
        r = run(model_path, "--pipeline", remote(a, other), check=False)
        assert r.returncode != 0 and "another model" in r.stderr, r.stderr
    finally:
        other.stop()


def test_a_shard_killed_mid_generation_ends_the_run_with_an_error(larql_bin, model_path):
    a, b = Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")
    try:
        kill_mid_generation(larql_bin, model_path, a, b, "--pipeline")
    finally:
        a.stop()
        b.stop()


def test_a_router_over_a_pipeline_answers_as_one_process_and_reports_a_dead_shard(larql_bin, model_path):
    a, b = Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")
    local, lurl = _http_server(larql_bin, model_path)
    try:
        want = _complete(lurl, PROMPT)
    finally:
        local.terminate()
        local.wait(timeout=30)
    srv, url = _http_server(larql_bin, model_path, "--pipeline", "--shards", f"{a.address},{b.address}",
                            "--shard-timeout-ms", "5000", verb="router")
    try:
        status, h = _health(url)
        assert status == 200 and [s["layers"] for s in h["shards"]] == ["0-8", "9-17"], h
        assert _complete(url, PROMPT) == want
        # Embeddings need the layers here: refused, naming where they are.
        req = urllib.request.Request(url + "/v1/embeddings", data=json.dumps({"model": "x", "input": "hi"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        assert e.value.code == 503 and "pipeline" in e.value.read().decode()
        b.proc.kill()
        b.proc.wait()
        body = json.dumps({"model": "x", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        assert time.monotonic() - t0 < 15
        assert e.value.code == 503
        assert b.address in e.value.read().decode()
        status, h = _health(url)
        assert status == 503 and h["status"] == "down", h
        b2 = Shard(larql_bin, model_path, "--layers", "9-17", port=b.port)
        try:
            deadline = time.monotonic() + 20
            while _health(url)[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _complete(url, PROMPT) == want
        finally:
            b2.stop()
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        a.stop()
        b.stop()
