"""Hostile requests to `larql serve` (issue 13's list): each gets a clear 4xx or a closed
connection, and the server goes on serving others. Expected statuses are HTTP's and OpenAI's
conventions (400 for a bad field, 413 for a body over the limit), not the server's own output.
"""
from __future__ import annotations

import http.client
import json
import socket

import pytest

from test_serve import PROMPT, Server

pytest.importorskip("openai")


@pytest.fixture(scope="module")
def hostile(larql_bin, model_path):
    s = Server(larql_bin, model_path, "--max-body", str(4 << 20))
    yield s
    assert s.stop() == 0, s.proc.stderr.read()


def post(s: Server, path: str, body: bytes, timeout: float = 60) -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, {"raw": data.decode("latin-1")}
    finally:
        c.close()


def still_serves(s: Server) -> None:
    status, body = post(s, "/v1/completions", json.dumps({"prompt": PROMPT, "max_tokens": 2, "temperature": 0}).encode())
    assert status == 200 and body["choices"][0]["finish_reason"] in ("length", "stop"), body


def error_of(status: int, body: dict, want_status: int, param: str | None = None) -> str:
    assert status == want_status, (status, body)
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    return err["message"]


def test_malformed_and_deeply_nested_json(hostile):
    error_of(*post(hostile, "/v1/completions", b'{"prompt": "x", "max_tokens": 2,'), 400)
    deep = b'{"prompt": "x", "a": ' + b"[" * 10000 + b"]" * 10000 + b"}"
    msg = error_of(*post(hostile, "/v1/completions", deep), 400)
    assert "deep" in msg or "nest" in msg, msg
    deep_obj = b'{"prompt": "x", "a": ' + b'{"a":' * 10000 + b"1" + b"}" * 10000 + b"}"
    error_of(*post(hostile, "/v1/completions", deep_obj), 400)
    # NaN is not JSON (RFC 8259): a temperature of NaN can only arrive as bad JSON.
    error_of(*post(hostile, "/v1/completions", b'{"prompt": "x", "temperature": NaN}'), 400)
    still_serves(hostile)


def test_body_over_the_limit_is_413(hostile):
    body = b'{"prompt": "' + b"a" * (20 << 20) + b'"}'
    c = http.client.HTTPConnection("127.0.0.1", hostile.port, timeout=60)
    try:
        c.putrequest("POST", "/v1/completions")
        c.putheader("Content-Type", "application/json")
        c.putheader("Content-Length", str(len(body)))
        c.endheaders()
        try:
            c.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading it all
        r = c.getresponse()
        assert r.status == 413, r.status
    finally:
        c.close()
    still_serves(hostile)


def test_invalid_utf8(hostile):
    status, body = post(hostile, "/v1/completions", b'{"prompt": "caf\xe9 \xff\xfe", "max_tokens": 2}')
    msg = error_of(status, body, 400)
    assert "UTF-8" in msg or "utf-8" in msg.lower(), msg
    still_serves(hostile)


@pytest.mark.parametrize("field,value", [("max_tokens", -1), ("max_tokens", 10**12), ("n", 0), ("n", 100),
                                         ("top_p", 1.5), ("top_k", -3), ("logprobs", 50), ("seed", "x"),
                                         ("presence_penalty", 9)])
def test_out_of_range_fields(hostile, field, value):
    body = {"prompt": PROMPT, "max_tokens": 2, field: value}
    msg = error_of(*post(hostile, "/v1/completions", json.dumps(body).encode()), 400, param=field)
    assert field in msg, msg


def test_max_tokens_zero(hostile):
    # OpenAI's own API refuses max_tokens 0 (it must be at least 1); so does larql.
    error_of(*post(hostile, "/v1/completions", json.dumps({"prompt": PROMPT, "max_tokens": 0}).encode()), 400,
             param="max_tokens")


def test_messages_hostile(hostile):
    chat = "/v1/chat/completions"
    error_of(*post(hostile, chat, json.dumps({"messages": []}).encode()), 400, param="messages")
    msg = error_of(*post(hostile, chat, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode()), 400)
    assert "wizard" in msg or "role" in msg, msg
    error_of(*post(hostile, chat, json.dumps({"messages": "hello"}).encode()), 400, param="messages")
    error_of(*post(hostile, chat, json.dumps({"messages": [1, 2]}).encode()), 400)
    still_serves(hostile)


def test_many_stop_strings_and_long_prompt(hostile):
    body = {"prompt": PROMPT, "max_tokens": 2, "stop": [f"s{i}" for i in range(1000)]}
    error_of(*post(hostile, "/v1/completions", json.dumps(body).encode()), 400, param="stop")
    body = {"prompt": "word " * 40000, "max_tokens": 2}
    status, err = post(hostile, "/v1/completions", json.dumps(body).encode())
    error_of(status, err, 400)
    assert err["error"]["code"] == "context_length_exceeded"
    still_serves(hostile)


def test_garbage_on_the_wire(hostile):
    """Not HTTP at all, a bad request line, a huge header: a 4xx or a closed connection."""
    for raw in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello to a plain port
                b"GET / HTTP/9.9\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"):
        s = socket.create_connection(("127.0.0.1", hostile.port), timeout=30)
        try:
            s.sendall(raw)
        except OSError:
            pass
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        s.close()
        assert got == b"" or got.startswith(b"HTTP/1.1 4"), got[:200]
    still_serves(hostile)


def test_huge_json_schema_is_refused_before_compiling(hostile):
    """50,000 properties: refused by size at once (it used to take ~27 s of CPU to reach a 400)."""
    props = {f"p{i}": {"type": "integer"} for i in range(50000)}
    body = {"prompt": PROMPT, "max_tokens": 2, "response_format": {
        "type": "json_schema", "json_schema": {"name": "big", "schema": {"type": "object", "properties": props}}}}
    msg = error_of(*post(hostile, "/v1/completions", json.dumps(body).encode()), 400,
                   param="response_format.json_schema.schema")
    assert "50000 object properties" in msg, msg
    still_serves(hostile)
