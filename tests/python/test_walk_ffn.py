"""POST /v1/walk-ffn on `larql serve` (docs/server.md "Remote FFN"), over real HTTP on loopback.

The reference is numpy on the GGUF's own weights (read with the `gguf` package, not larql):
llama's FFN, down · (silu(gate · x) * (up · x)), for each layer asked. Bit-identity with the
shard's gRPC WalkFfn and the local FFN is held in tests/server/walk_ffn_route_test.cc; here the
route's wire formats, the API key and hostile bodies on a running server.
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest

import peer

FIXTURE = peer.REPO_ROOT / "tests/model/data/families/llama3/llama3-f32.gguf"
KEY = "walk-ffn-test-key"


def _weights():
    import gguf

    r = gguf.GGUFReader(str(FIXTURE))
    t = {x.name: np.array(x.data, dtype=np.float32) for x in r.tensors}
    return [(t[f"blk.{i}.ffn_gate.weight"], t[f"blk.{i}.ffn_up.weight"], t[f"blk.{i}.ffn_down.weight"]) for i in range(2)]


def _ffn(w, x):  # x [n, hidden] float64
    gate, up, down = (m.astype(np.float64) for m in w)
    g = x @ gate.T
    return ((g / (1 + np.exp(-g))) * (x @ up.T)) @ down.T


@pytest.fixture(scope="module")
def server(larql_bin):
    p = subprocess.Popen([str(larql_bin), "serve", str(FIXTURE), "--port", "0", "-t", "1", "--api-key", KEY],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.match(r"listening on (http://\S+)", p.stdout.readline())
    assert m, p.stderr.read()
    yield m.group(1)
    p.terminate()
    p.wait(timeout=30)


def _post(url, body: bytes, ctype="application/json", accept=None, key=KEY):
    h = {"Content-Type": ctype}
    if key:
        h["Authorization"] = f"Bearer {key}"
    if accept:
        h["Accept"] = accept
    req = urllib.request.Request(url + "/v1/walk-ffn", data=body, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_walk_ffn_json_and_binary_match_numpy(server):
    w = _weights()
    hidden = w[0][0].shape[1]
    rng = np.random.default_rng(29)
    x = rng.standard_normal((3, hidden)).astype(np.float32)
    status, ctype, body = _post(server, json.dumps(
        {"layers": [0, 1], "residual": x.ravel().tolist(), "seq_len": 3, "full_output": True, "model_id": "ignored"}).encode())
    assert status == 200, body
    j = json.loads(body)
    assert j["seq_len"] == 3 and [r["layer"] for r in j["results"]] == [0, 1]
    outs = {}
    for r in j["results"]:
        got = np.array(r["output"], dtype=np.float32).reshape(3, hidden)
        want = _ffn(w[r["layer"]], x.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        outs[r["layer"]] = got
    # The binary layout: the same f32 values as the JSON answer, bit for bit.
    b = struct.pack("<4I", 1, 3, 1, 0) + x.tobytes()
    status, ctype, body = _post(server, b, "application/x-larql-ffn")
    assert status == 200 and ctype == "application/x-larql-ffn"
    layer, seq_len = struct.unpack_from("<2I", body)
    got = np.frombuffer(body[12:], dtype="<f4").reshape(3, hidden)
    assert (layer, seq_len) == (1, 3)
    assert np.array_equal(got, outs[1])
    # f16 answers: the f32 values rounded to binary16.
    status, ctype, body = _post(server, b, "application/x-larql-ffn", accept="application/x-larql-ffn-f16")
    assert status == 200 and ctype == "application/x-larql-ffn-f16"
    assert np.array_equal(np.frombuffer(body[12:], dtype="<f2").reshape(3, hidden), outs[1].astype(np.float16))


def test_walk_ffn_wants_the_api_key(server):
    status, _, body = _post(server, b'{"layer":0,"residual":[],"full_output":true}', key=None)
    assert status == 401, body
    status, _, body = _post(server, b'{"layer":0,"residual":[],"full_output":true}', key="wrong")
    assert status == 401, body


@pytest.mark.parametrize("body,ctype,says", [
    (b"{", "application/json", "JSON"),
    (b'{"layer":0,"residual":[1,2],"full_output":true}', "application/json", "2 values"),
    (b'{"layer":5,"residual":[1],"full_output":true}', "application/json", "layer 5"),
    (b'{"layer":0,"residual":[1]}', "application/json", "full_output"),
    (b'{"layer":0,"seq_len":-3,"residual":[1],"full_output":true}', "application/json", "seq_len"),
    (b'{"layers":[0,0,0,0,0,0,0,0],"residual":[1],"full_output":true}', "application/json", "8 layers"),
    (b"\x00" * 3, "application/x-larql-ffn", "16 bytes"),
    (struct.pack("<4I", 0, 0xFFFFFFFF, 1, 0) + b"\x00" * 64, "application/x-larql-ffn", "seq_len"),
    (struct.pack("<4I", 0xFFFFFFFF, 0xFFFFFFFF, 0, 0), "application/x-larql-ffn", "batch"),
    (struct.pack("<4I", 0, 1, 1, 0) + b"\x00" * 255, "application/x-larql-ffn", "whole number"),
    (struct.pack("<4I", 0, 1, 1, 0) + b"\x00" * 256, "application/x-larql-ffn-f16", "f32"),
])
def test_hostile_walk_ffn_bodies_are_refused_and_the_server_stays_up(server, body, ctype, says):
    status, _, answer = _post(server, body, ctype)
    assert 400 <= status < 500, (status, answer)
    assert says in json.loads(answer)["error"]["message"], answer
    with urllib.request.urlopen(server + "/health", timeout=30) as r:
        assert r.status == 200
