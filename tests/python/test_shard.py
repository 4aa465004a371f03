"""A model split over processes (docs/sharding.md): `larql serve MODEL --layers A-B --grpc-port P`
shards and `--ffn remote:...` clients, on loopback.

The reference for every output is the same binary run in one process on the same file (which
test_generation.py and test_parity.py hold to llama.cpp): a split run must equal it token for
token and logit for logit (the shards run the same kernels on the same rows). Faults: a shard
killed mid-generation ends the run with an error naming it (no hang), a shard of another model
file is refused, a slow shard is cut off at the deadline, a shard requiring client certificates
refuses a client without one.
"""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import peer

PROMPT = "The capital of France is"
LAYERS = 18  # Gemma 3 270M


class Shard:
    def __init__(self, larql_bin: Path, model: Path, *flags: str, port: int = 0):
        self.proc = subprocess.Popen(
            [str(larql_bin), "serve", str(model), "--grpc-port", str(port), "-t", "1", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on grpc://(\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"shard did not start: {line!r} {self.proc.stderr.read()}")
        self.address = m.group(1)
        self.port = int(self.address.rsplit(":", 1)[1])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def remote(*shards: Shard) -> str:
    return "remote:" + ",".join(s.address for s in shards)


@pytest.fixture(scope="module")
def two(larql_bin, model_path):
    shards = [Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")]
    yield shards
    for s in shards:
        s.stop()


@pytest.fixture(scope="module")
def three(larql_bin, model_path):
    shards = [Shard(larql_bin, model_path, "--layers", r) for r in ("0-5", "6-11", "12-17")]
    yield shards
    for s in shards:
        s.stop()


def run(model, *args, check=True, timeout=600):
    return peer.run_larql(["run", str(model), PROMPT, "-n", "24", "--temperature", "0", *map(str, args)],
                          check=check, timeout=timeout)


@pytest.mark.parametrize("split", ["two", "three"])
@pytest.mark.parametrize("engine", ["standard", "markov-rs"])
def test_a_layer_split_generates_what_one_process_does(model_path, split, engine, request):
    shards = request.getfixturevalue(split)
    alone = run(model_path, "--engine", engine)
    split_run = run(model_path, "--engine", engine, "--ffn", remote(*shards))
    assert split_run.stdout == alone.stdout
    assert len(alone.stdout) > len(PROMPT) + 10


def test_a_layer_split_gives_the_same_logits_bit_for_bit(model_path, two, three, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Paris is the capital of France. Berlin is the capital of Germany. " * 6)
    outs = {}
    for name, ffn in (("alone", None), ("two", remote(*two)), ("three", remote(*three))):
        out = tmp_path / f"{name}.npy"
        args = ["perplexity", str(model_path), str(text), "--logits-out", str(out)]
        if ffn:
            args += ["--ffn", ffn]
        peer.run_larql(args)
        outs[name] = np.load(out)
    assert outs["alone"].shape[0] > 60
    assert np.array_equal(outs["alone"], outs["two"])
    assert np.array_equal(outs["alone"], outs["three"])


def _complete(url: str, prompt: str) -> str:
    body = json.dumps({"model": "x", "prompt": prompt, "max_tokens": 12, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["text"]


def _http_server(larql_bin, model_path, *flags, verb="serve"):
    p = subprocess.Popen([str(larql_bin), verb, str(model_path), "--port", "0", "-t", "1", *flags],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.match(r"listening on (http://\S+)", p.stdout.readline())
    assert m, p.stderr.read()
    return p, m.group(1)


def eight_concurrent_equal_one_process(larql_bin, model_path, *flags):
    """Eight prompts sent at once to a server started with `flags` (--slots 8) answer what one
    process answers them one at a time."""
    prompts = [f"Item {i}: the colour of the sky is" if i % 2 else f"Question {i}: two plus two is" for i in range(8)]
    local, lurl = _http_server(larql_bin, model_path)
    try:
        want = [_complete(lurl, p) for p in prompts]  # one at a time, one process
    finally:
        local.terminate()
        local.wait(timeout=30)
    split, surl = _http_server(larql_bin, model_path, *flags, "--slots", "8")
    try:
        got = [None] * 8

        def ask(i):
            got[i] = _complete(surl, prompts[i])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        split.terminate()
        split.wait(timeout=30)
    assert got == want


def kill_mid_generation(larql_bin, model_path, a, b, flag):
    """A long `larql run` over shards a, b (`flag`: --ffn or --pipeline); b is killed once tokens
    flow: the run must fail within 10 s, naming b's address and layers."""
    p = subprocess.Popen([str(larql_bin), "run", str(model_path), "Count from one to a thousand: one, two,", "-n", "4000",
                          "--ignore-eos", "-t", "1", flag, remote(a, b), "--shard-timeout-ms", "5000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.read(40)  # generation is under way
    b.proc.kill()
    t0 = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert p.returncode != 0
    assert time.monotonic() - t0 < 10
    assert b.address in err and "layers 9-17" in err, err


def test_a_server_batching_eight_sequences_over_shards_answers_as_one_process(larql_bin, model_path, two):
    eight_concurrent_equal_one_process(larql_bin, model_path, "--ffn", remote(*two))


def test_a_shard_killed_mid_generation_ends_the_run_with_an_error(larql_bin, model_path):
    a, b = Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")
    try:
        kill_mid_generation(larql_bin, model_path, a, b, "--ffn")
        # The same port back with another model file: the client refuses it by fingerprint.
        other = peer.REPO_ROOT / "tests/model/data/families/llama3/llama3-f32.gguf"
        b2 = Shard(larql_bin, other, port=b.port)
        try:
            r = run(model_path, "--ffn", remote(a, b2), check=False)
            assert r.returncode != 0 and "another model" in r.stderr, r.stderr
        finally:
            b2.stop()
        # And with the right model back, it runs again.
        b3 = Shard(larql_bin, model_path, "--layers", "9-17", port=b.port)
        try:
            assert run(model_path, "--ffn", remote(a, b3)).stdout == run(model_path).stdout
        finally:
            b3.stop()
    finally:
        a.stop()
        b.stop()


def test_a_slow_shard_is_cut_off_at_the_deadline(larql_bin, model_path):
    s = Shard(larql_bin, model_path, "--debug-delay-ms", "20000")
    try:
        t0 = time.monotonic()
        r = run(model_path, "--ffn", remote(s), "--shard-timeout-ms", "500", check=False)
        assert r.returncode != 0 and "DEADLINE_EXCEEDED" in r.stderr, r.stderr
        assert time.monotonic() - t0 < 15
    finally:
        s.stop()


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=cwd)


def _ca(d: Path, name: str):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "1", "-subj", f"/CN={name}", cwd=d)


def _issue(d: Path, ca: str, name: str, san: str):
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
             cwd=d)
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=d)


def test_mutual_tls_refuses_a_client_without_the_routers_certificate(larql_bin, model_path, tmp_path):
    _ca(tmp_path, "ca")
    _ca(tmp_path, "rogue")
    _issue(tmp_path, "ca", "shard", "IP:127.0.0.1,DNS:localhost")
    _issue(tmp_path, "ca", "router", "DNS:router")
    _issue(tmp_path, "rogue", "intruder", "DNS:router")
    t = lambda f: str(tmp_path / f)  # noqa: E731
    s = Shard(larql_bin, model_path, "--grpc-cert", t("shard.pem"), "--grpc-key", t("shard.key"),
              "--grpc-client-ca", t("ca.pem"))
    try:
        ok = run(model_path, "--ffn", remote(s), "--shard-ca", t("ca.pem"), "--shard-cert", t("router.pem"),
                 "--shard-key", t("router.key"))
        assert ok.stdout == run(model_path).stdout
        for extra in ([], ["--shard-cert", t("intruder.pem"), "--shard-key", t("intruder.key")]):
            r = run(model_path, "--ffn", remote(s), "--shard-ca", t("ca.pem"), *extra, "--shard-timeout-ms", "5000",
                    check=False)
            assert r.returncode != 0 and "UNAVAILABLE" in r.stderr, r.stderr
        plain = run(model_path, "--ffn", remote(s), "--shard-timeout-ms", "5000", check=False)
        assert plain.returncode != 0, plain.stderr
    finally:
        s.stop()


def test_tls_file_mistakes_are_named_before_grpc_starts(larql_bin, model_path, tmp_path):
    _ca(tmp_path, "ca")
    _issue(tmp_path, "ca", "shard", "IP:127.0.0.1")
    _issue(tmp_path, "ca", "router", "DNS:router")
    (tmp_path / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    (tmp_path / "empty.pem").write_text("")
    t = lambda f: str(tmp_path / f)  # noqa: E731

    def serve(*flags):
        return subprocess.run([str(larql_bin), "serve", str(model_path), "--grpc-port", "0", "--layers", "0-17", *flags],
                              capture_output=True, text=True, timeout=120)

    cases = [
        (["--grpc-cert", t("shard.pem"), "--grpc-key", t("router.key")], ["router.key", "shard.pem", "not the private key"]),
        (["--grpc-cert", t("shard.pem"), "--grpc-key", t("shard.pem")], ["shard.pem", "no PEM private key"]),
        (["--grpc-cert", t("shard.key"), "--grpc-key", t("shard.key")], ["shard.key", "no PEM certificate"]),
        (["--grpc-cert", t("shard.pem"), "--grpc-key", t("shard.key"), "--grpc-client-ca", t("garbage.pem")],
         ["garbage.pem", "does not parse"]),
        (["--grpc-cert", t("shard.pem"), "--grpc-key", t("shard.key"), "--grpc-client-ca", t("empty.pem")],
         ["empty.pem", "no PEM certificate"]),
    ]
    for flags, says in cases:
        r = serve(*flags)
        assert r.returncode != 0, flags
        assert all(w in r.stderr for w in says), (flags, r.stderr)
        assert "listening" not in r.stdout
    # The client's side: the same checks, naming its files.
    r = run(model_path, "--ffn", "remote:127.0.0.1:1", "--shard-ca", t("ca.pem"), "--shard-cert", t("router.pem"),
            "--shard-key", t("shard.key"), check=False)
    assert r.returncode != 0 and "shard.key" in r.stderr and "not the private key" in r.stderr, r.stderr
    r = run(model_path, "--ffn", "remote:127.0.0.1:1", "--shard-ca", t("garbage.pem"), check=False)
    assert r.returncode != 0 and "garbage.pem" in r.stderr, r.stderr


def test_bad_shard_flags_are_refused(larql_bin, model_path):
    r = subprocess.run([str(larql_bin), "serve", str(model_path), "--grpc-port", "0", "--grpc-host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "without TLS" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "serve", str(model_path), "--layers", "0-3"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "--grpc-port" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "serve", str(model_path), "--grpc-port", "0", "--layers", "3-40"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "18 layers" in r.stderr, r.stderr
    r = run(model_path, "--ffn", "remote:nohost", check=False)
    assert r.returncode != 0 and "HOST:PORT" in r.stderr, r.stderr


def _health(url: str):
    try:
        with urllib.request.urlopen(url + "/health", timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_a_server_over_shards_reports_a_dead_shard_and_recovers(larql_bin, model_path):
    a, b = Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")
    srv, url = _http_server(larql_bin, model_path, "--shards", f"{a.address},{b.address}", "--shard-timeout-ms", "5000",
                            verb="router")
    try:
        status, h = _health(url)
        assert status == 200 and h["status"] == "ok" and [s["layers"] for s in h["shards"]] == ["0-8", "9-17"], h
        want = _complete(url, PROMPT)
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
        assert [r["address"] for s in h["shards"] for r in s["replicas"] if not r["serving"]] == [b.address], h
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


def test_a_request_while_health_knows_a_shard_is_down_fails_fast(larql_bin, model_path):
    import signal

    a, b = Shard(larql_bin, model_path, "--layers", "0-8"), Shard(larql_bin, model_path, "--layers", "9-17")
    srv, url = _http_server(larql_bin, model_path, "--shards", f"{a.address},{b.address}", "--shard-timeout-ms", "20000",
                            verb="router")
    try:
        want = _complete(url, PROMPT)
        b.proc.send_signal(signal.SIGSTOP)  # hung: the connection stays open, nothing answers
        status, h = _health(url)
        assert status == 503 and h["status"] == "down", h
        body = json.dumps({"model": "x", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        took = time.monotonic() - t0
        assert e.value.code == 503 and b.address in e.value.read().decode()
        assert took < 5, f"{took:.1f} s: waited for the 20 s deadline instead of failing fast"
        b.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 20
        while _health(url)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _complete(url, PROMPT) == want
    finally:
        if b.proc.poll() is None:
            b.proc.send_signal(signal.SIGCONT)
        srv.terminate()
        srv.wait(timeout=30)
        a.stop()
        b.stop()


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_expert_shards_generate_what_one_process_does(larql_bin, family):
    model = peer.REPO_ROOT / f"tests/model/data/families/{family}/{family}-q8_0.gguf"
    shards = [Shard(larql_bin, model, "--experts", "0-1"), Shard(larql_bin, model, "--experts", "2-3")]
    try:
        args = ["run", str(model), "The capital of France is", "-n", "16", "--temperature", "0", "--ignore-eos"]
        alone = peer.run_larql(args)
        split = peer.run_larql([*args, "--ffn", remote(*shards)])
        assert split.stdout == alone.stdout and len(alone.stdout) > 10
        lone = peer.run_larql([*args, "--ffn", remote(shards[0])], check=False)
        assert lone.returncode != 0 and "2 experts" in lone.stderr, lone.stderr
    finally:
        for s in shards:
            s.stop()


def test_router_topology_file_and_api_key(larql_bin, model_path, two, tmp_path):
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps({"shards": [{"address": two[0].address, "layers": "0-8"}, two[1].address]}))
    srv, url = _http_server(larql_bin, model_path, "--topology", str(topo), "--api-key", "k", verb="router")
    try:
        for path in ("/v1/models", "/v1/completions", "/metrics"):
            req = urllib.request.Request(url + path, data=b"{}" if "compl" in path else None)
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            assert e.value.code == 401, path
        body = json.dumps({"model": "x", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert len(json.load(r)["choices"][0]["text"]) > 0
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    # A stated part the shard does not hold, and no shards at all, are refused at start.
    topo.write_text(json.dumps({"shards": [{"address": two[0].address, "layers": "0-5"}, two[1].address]}))
    r = subprocess.run([str(larql_bin), "router", str(model_path), "--topology", str(topo), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "should hold layers 0-5" in r.stderr, r.stderr
    r = subprocess.run([str(larql_bin), "router", str(model_path), "--port", "0"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "--shards or --topology" in r.stderr, r.stderr
    topo.write_text("{not json")
    r = subprocess.run([str(larql_bin), "router", str(model_path), "--topology", str(topo), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "not valid JSON" in r.stderr, r.stderr


def test_a_shard_restarted_on_another_file_between_requests_is_refused(larql_bin, model_path):
    """A shard stopped cleanly and started again on another file on the same port: the channel
    reconnects without any call failing, so the request itself must carry what it expects."""
    fx = peer.REPO_ROOT / "tests/model/data/families/llama3"
    s = Shard(larql_bin, fx / "llama3-f32.gguf")
    srv, url = _http_server(larql_bin, fx / "llama3-f32.gguf", "--shards", s.address, "--shard-timeout-ms", "5000",
                            verb="router")
    try:
        _complete(url, "Hello")
        s.stop()
        s2 = Shard(larql_bin, fx / "llama3-q8_0.gguf", port=s.port)
        try:
            body = json.dumps({"model": "x", "prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=60)
            assert e.value.code == 503
            msg = e.value.read().decode()
            assert s.address in msg and "refused" in msg, msg
            status, h = _health(url)
            assert status == 503 and h["status"] == "down", h
        finally:
            s2.stop()
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        s.stop()


def test_shard_flags_and_addresses_are_checked(larql_bin, model_path):
    fx = peer.REPO_ROOT / "tests/model/data/families/llama3/llama3-f32.gguf"
    s = Shard(larql_bin, fx)
    try:
        # A second shard on a port in use does not start (no silent twin sharing the port).
        r = subprocess.run([str(larql_bin), "serve", str(fx), "--grpc-port", str(s.port)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "cannot listen" in r.stderr, r.stderr
    finally:
        s.stop()
    r = subprocess.run([str(larql_bin), "serve", str(fx), "--grpc-port", "0", "--api-key", "k"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--grpc-client-ca" in r.stderr, r.stderr
    for bad in ("remote:127.0.0.1:72637", "remote:127.0.0.1:0", "remote:127.0.0.1:7001,,127.0.0.1:7002"):
        r = peer.run_larql(["run", str(fx), "Hi", "-n", "2", "--ffn", bad], check=False)
        assert r.returncode != 0 and ("1 to 65535" in r.stderr or "empty entry" in r.stderr), (bad, r.stderr)
