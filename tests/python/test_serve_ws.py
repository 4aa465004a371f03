"""`larql serve`'s WebSocket endpoint /v1/stream (docs/server.md, "WebSocket"), driven by the
`websocket-client` package. Expected values: the same calls over plain HTTP (the socket is a
transport for the routes, so a greedy generation must give the same text), RFC 6455's close, and
the server's own /metrics for the freed slot.
"""
from __future__ import annotations

import json
import time
import urllib.request

import pytest

from test_serve import PROMPT, Server

websocket = pytest.importorskip("websocket")
pytest.importorskip("openai")

KEY = "ws-key"
COUNT = "Count from 1 to 1000: 1, 2, 3, 4, 5,"  # greedy counting does not stop early


@pytest.fixture(scope="module")
def srv(larql_bin, model_path):
    s = Server(larql_bin, model_path, "--api-key", KEY)
    yield s
    assert s.stop() == 0, s.proc.stderr.read()


def connect(s: Server, **kw) -> "websocket.WebSocket":
    return websocket.create_connection(s.url.replace("http", "ws") + "/v1/stream", timeout=60, **kw)


def frames_until(ws, call_id, last_type=("done", "result", "error")):
    out = []
    while True:
        f = json.loads(ws.recv())
        if f.get("id") == call_id:
            out.append(f)
            if f["type"] in last_type:
                return out


def send_together(ws, *messages):
    """The messages as client frames (masked, RFC 6455 §5.3) in ONE write: they reach the server
    in one read of its socket."""
    data = b"".join(websocket.ABNF.create_frame(json.dumps(m), websocket.ABNF.OPCODE_TEXT).format()
                    for m in messages)
    ws.sock.sendall(data)


def cancelled_and_left(srv, before):
    """/metrics once no sequence runs and more than `before` jobs were cancelled (or 3 s passed).
    Both, since the gauge is updated after the step that emits a chunk, and a cancelled call's
    "done" may come before its job has even been admitted."""
    deadline = time.time() + 3
    while time.time() < deadline and ((m := srv.metrics(KEY))["larql_active_sequences"] != 0 or
                                      m["larql_jobs_cancelled_total"] < before + 1):
        time.sleep(0.02)
    return m


def test_generate_equals_http_and_streams(srv):
    ws = connect(srv, header=[f"Authorization: Bearer {KEY}"])
    ws.send(json.dumps({"id": 1, "type": "generate", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}))
    frames = frames_until(ws, 1)
    assert frames[-1]["type"] == "done"
    chunks = [f["data"] for f in frames if f["type"] == "chunk"]
    assert len(chunks) >= 2  # streamed, not one whole answer
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    want = srv.client(KEY).completions.create(model="x", prompt=PROMPT, max_tokens=12, temperature=0).choices[0].text
    assert text == want
    # Chat, on the same socket.
    ws.send(json.dumps({"id": "c", "type": "generate", "messages": [{"role": "user", "content": "Hi"}],
                        "max_tokens": 4, "temperature": 0}))
    frames = frames_until(ws, "c")
    assert frames[0]["data"]["choices"][0]["delta"]["role"] == "assistant"
    # Any route through "http".
    ws.send(json.dumps({"id": 3, "type": "http", "method": "GET", "path": "/v1/models"}))
    (f,) = frames_until(ws, 3)
    assert f["type"] == "result" and f["status"] == 200 and f["data"]["object"] == "list"
    ws.close()


def test_cancel_frees_the_slot(srv):
    ws = connect(srv, subprotocols=["larql", f"bearer.{KEY}"])  # how a browser sends its key
    ws.send(json.dumps({"id": 7, "type": "generate", "prompt": PROMPT, "max_tokens": 3000, "temperature": 1}))
    got = 0
    while got < 3:
        f = json.loads(ws.recv())
        got += f["type"] == "chunk"
    ws.send(json.dumps({"id": 7, "type": "cancel"}))
    frames = frames_until(ws, 7)
    assert frames[-1]["type"] == "done"
    m = cancelled_and_left(srv, 0)  # the scheduler drops the job at its next step
    assert m["larql_active_sequences"] == 0
    assert m["larql_jobs_cancelled_total"] >= 1
    # The socket still serves after the cancel.
    ws.send(json.dumps({"id": 8, "type": "generate", "prompt": PROMPT, "max_tokens": 2, "temperature": 0}))
    assert frames_until(ws, 8)[-1]["type"] == "done"
    ws.close()


def test_closing_the_socket_frees_the_slot(srv):
    ws = connect(srv, header=[f"Authorization: Bearer {KEY}"])
    before = srv.metrics(KEY)["larql_jobs_cancelled_total"]
    ws.send(json.dumps({"id": 1, "type": "generate", "prompt": PROMPT, "max_tokens": 3000, "temperature": 1}))
    while json.loads(ws.recv())["type"] != "chunk":
        pass
    ws.sock.close()  # gone without a close frame
    m = cancelled_and_left(srv, before)
    assert m["larql_active_sequences"] == 0 and m["larql_jobs_cancelled_total"] >= before + 1


def test_bad_messages_and_auth(srv):
    for bad in ({"Authorization": "Bearer wrong"}, {}):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            connect(srv, header=[f"{k}: {v}" for k, v in bad.items()])
        assert e.value.status_code == 401
    ws = connect(srv, header=[f"Authorization: Bearer {KEY}"])
    for msg, needle in (("not json", "not valid JSON"), (json.dumps({"id": 1}), "type"),
                        (json.dumps({"id": 2, "type": "fly"}), "unknown message type"),
                        (json.dumps({"id": 3, "type": "generate", "prompt": PROMPT, "temperature": 9}), "temperature")):
        ws.send(msg)
        f = json.loads(ws.recv())
        assert f["type"] == "error" and f["status"] == 400 and needle in f["data"]["error"]["message"], f
    # A binary message is refused by name (messages are JSON text), and the socket still serves.
    ws.send_binary(json.dumps({"id": 4, "type": "http", "method": "GET", "path": "/health"}).encode())
    f = json.loads(ws.recv())
    assert f["type"] == "error" and f["status"] == 400 and "binary" in f["data"]["error"]["message"], f
    ws.send(json.dumps({"id": 5, "type": "http", "method": "GET", "path": "/health"}))
    assert frames_until(ws, 5)[-1]["status"] == 200
    ws.close()
    # Subprotocols: the server answers with one offered (RFC 6455 §4.2.2) — `larql`; an offer
    # without it (only the key, or a look-alike) is refused by name, not answered with none.
    ws = connect(srv, subprotocols=["larql", f"bearer.{KEY}"])
    assert ws.getsubprotocol() == "larql"
    ws.close()
    for offer in ([f"bearer.{KEY}"], ["larqlx", f"bearer.{KEY}"]):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            connect(srv, subprotocols=offer)
        assert e.value.status_code == 400 and b"larql" in e.value.resp_body, offer
    # WebSocket elsewhere than /v1/stream is refused.
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(srv.url.replace("http", "ws") + "/v1/models", timeout=10,
                                    header=[f"Authorization: Bearer {KEY}"])
    assert e.value.status_code == 404
    with urllib.request.urlopen(srv.url + "/health", timeout=10) as r:
        assert r.status == 200


def test_queued_calls_cancel_and_overflow_keep_their_ids(srv):
    ws = connect(srv, header=[f"Authorization: Bearer {KEY}"])
    # "a" runs long (greedy counting does not stop early) until it is cancelled at the end.
    ws.send(json.dumps({"id": "a", "type": "generate", "prompt": COUNT,
                        "max_tokens": 3000, "temperature": 0}))
    while json.loads(ws.recv())["type"] != "chunk":  # "a" is running
        pass
    # All in one write: the server reads them from its buffer, not from the socket (the burst case).
    send_together(ws, {"id": "b", "type": "generate", "prompt": PROMPT, "max_tokens": 200, "temperature": 1},
                  {"id": "b", "type": "cancel"},  # "b" waits behind "a": dropped before it runs
                  # 16 may wait; the other 4 are refused, each with its own id
                  *({"id": f"q{i}", "type": "http", "method": "GET", "path": "/health"} for i in range(20)),
                  {"id": "a", "type": "cancel"})
    seen: dict = {}
    while len([k for k in seen if k.startswith("q")]) < 20 or "a" not in seen or "b" not in seen:
        f = json.loads(ws.recv())
        seen.setdefault(f["id"], []).append(f)
    assert [f["type"] for f in seen["b"]] == ["done"]  # no chunk: it never ran
    assert seen["a"][-1]["type"] == "done"
    refused = sorted(k for k, fs in seen.items() if k.startswith("q") and fs[0]["status"] == 429)
    assert len(refused) == 4 and None not in seen, (refused, list(seen))
    ws.close()


def test_cancel_sent_with_its_generate_stops_it_within_a_step(srv):
    ws = connect(srv, header=[f"Authorization: Bearer {KEY}"])
    before = cancelled_and_left(srv, -1)["larql_jobs_cancelled_total"]
    send_together(ws, {"id": "g", "type": "generate", "prompt": COUNT, "max_tokens": 300, "temperature": 0},
                  {"id": "g", "type": "cancel"})
    frames = frames_until(ws, "g")
    assert frames[-1]["type"] == "done"
    # The cancel is read at the first wait, after the first decode step: at most that step's chunk
    # (the old server read it only after all 300 tokens).
    assert len([f for f in frames if f["type"] == "chunk"]) <= 2, len(frames)
    m = cancelled_and_left(srv, before)
    assert m["larql_active_sequences"] == 0 and m["larql_jobs_cancelled_total"] >= before + 1
    # A generate and a describe together: both answered, in order; then a burst of generate,
    # describe and the generate's cancel: the generate stops within a step, the describe is answered.
    send_together(ws, {"id": 1, "type": "generate", "prompt": PROMPT, "max_tokens": 4, "temperature": 0},
                  {"id": 2, "type": "describe", "entity": "France"})
    assert frames_until(ws, 1)[-1]["type"] == "done"
    (d,) = frames_until(ws, 2)
    assert d["type"] in ("result", "error") and d["status"] > 0
    send_together(ws, {"id": 3, "type": "generate", "prompt": COUNT, "max_tokens": 300, "temperature": 0},
                  {"id": 4, "type": "describe", "entity": "France"}, {"id": 3, "type": "cancel"})
    seen: dict = {}
    while 3 not in seen or seen[3][-1]["type"] != "done" or 4 not in seen:
        f = json.loads(ws.recv())
        seen.setdefault(f["id"], []).append(f)
    assert len([f for f in seen[3] if f["type"] == "chunk"]) <= 2
    assert [(f["type"], f["status"]) for f in seen[4]] == [(d["type"], d["status"])]  # as the one before
    ws.close()
