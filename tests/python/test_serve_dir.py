"""`larql serve DIR/`: every model of a directory (docs/server.md "A directory of models").

- A directory of tiny family fixtures (tests/model/data/families): a GGUF (Llama 3), a Hugging Face
  directory (Qwen2), a vindex extracted from the Llama 3 GGUF, a browse-level vindex (left out) and
  a text file (ignored). /v1/models lists the three with `loaded` false before any request; each
  answers its own name with its own continuation — the greedy text `larql run` gives on that path,
  whose ids are transformers' greedy ids (reference.json) — and is then listed as loaded; an
  unknown name is 404 listing the known ones; no name with several models is 400 naming "model";
  LQL routes take "model" too.
- The budget (--max-resident-mb 1): the default model (about 250 MB) loads over budget alone and
  is unloaded when a tiny one is asked for — the server's RSS (/proc/PID/status) falls by most of
  its size; among tiny models the least recently used one is unloaded, not the one used last.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import peer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "model" / "data" / "families"
PROMPT = "The river rose and the town"


class DirServer:
    def __init__(self, larql_bin: Path, d: Path, *flags: str):
        self.proc = subprocess.Popen([str(larql_bin), "serve", str(d), "--port", "0", "-t", str(peer.THREADS), "--no-ui", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on (http://\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"larql serve did not start: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)

    def call(self, path: str, body: dict | None = None, method: str | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method or ("POST" if data else "GET"),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def loaded(self) -> dict[str, bool]:
        status, doc = self.call("/v1/models")
        assert status == 200
        return {m["id"]: m["loaded"] for m in doc["data"]}

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> int:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


def complete(s: DirServer, model: str | None, n: int = 6) -> tuple[int, dict]:
    body = {"prompt": PROMPT, "max_tokens": n, "temperature": 0}
    if model is not None:
        body["model"] = model
    return s.call("/v1/completions", body)


@pytest.fixture(scope="module")
def model_dir(larql_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    (d / "llama3.gguf").symlink_to(FIXTURES / "llama3" / "llama3-f32.gguf")
    (d / "qwen2").symlink_to(FIXTURES / "qwen2", target_is_directory=True)
    for level, name in (("inference", "tiny.vindex"), ("browse", "browse-only.vindex")):
        subprocess.run([str(larql_bin), "extract", str(FIXTURES / "llama3" / "llama3-f32.gguf"), "-o", str(d / name),
                        "--level", level, "-t", str(peer.THREADS)], check=True, capture_output=True, timeout=600)
    (d / "notes.txt").write_text("not a model")
    return d


@pytest.fixture(scope="module")
def dir_server(larql_bin, model_dir):
    s = DirServer(larql_bin, model_dir)
    yield s
    assert s.stop() == 0, s.proc.stderr.read()


def run_text(larql_bin, path: Path, n: int = 6) -> tuple[str, list[int]]:
    r = subprocess.run([str(larql_bin), "run", str(path), PROMPT, "-n", str(n), "--temperature", "0", "--json", "-t",
                        str(peer.THREADS)], capture_output=True, text=True, timeout=600, check=True)
    doc = json.loads(r.stdout)
    return doc["text"], doc["ids"]


def test_models_lists_every_model_unloaded(dir_server):
    status, doc = dir_server.call("/v1/models")
    assert status == 200
    by_id = {m["id"]: m for m in doc["data"]}
    assert sorted(by_id) == ["llama3", "qwen2", "tiny"]  # not the browse vindex, not notes.txt
    assert {i: m["format"] for i, m in by_id.items()} == {"llama3": "gguf", "qwen2": "hugging-face", "tiny": "vindex"}
    assert not any(m["loaded"] for m in by_id.values())


def test_each_model_answers_its_own_name(dir_server, larql_bin, model_dir):
    for name, path, family in (("llama3", model_dir / "llama3.gguf", "llama3"), ("qwen2", model_dir / "qwen2", "qwen2"),
                               ("tiny", model_dir / "tiny.vindex", "llama3")):
        status, doc = complete(dir_server, name)
        assert status == 200, doc
        assert doc["model"] == name
        text, ids = run_text(larql_bin, path)
        ref = json.loads((FIXTURES / family / "reference.json").read_text())
        assert ids == ref["greedy_ids"][:len(ids)], f"{name}: larql run is not the reference's greedy continuation"
        assert doc["choices"][0]["text"] == text, name
        assert dir_server.loaded()[name]
    assert dir_server.loaded() == {"llama3": True, "qwen2": True, "tiny": True}  # no budget: all stay


def test_unknown_or_missing_names(dir_server):
    status, doc = complete(dir_server, "gpt-4")
    assert status == 404, doc
    assert doc["error"]["code"] == "model_not_found" and doc["error"]["param"] == "model"
    assert "'gpt-4'" in doc["error"]["message"] and "llama3, qwen2, tiny" in doc["error"]["message"], doc
    status, doc = complete(dir_server, None)
    assert status == 400 and doc["error"]["param"] == "model", doc
    assert "llama3, qwen2, tiny" in doc["error"]["message"]
    status, doc = dir_server.call("/v1/completions", {"model": 7, "prompt": "x"})
    assert status == 400 and doc["error"]["param"] == "model", doc


def test_lql_routes_take_the_model_field(dir_server):
    status, doc = dir_server.call("/v1/lql", {"model": "tiny", "query": "STATS"})
    assert status == 200, doc
    status, doc = dir_server.call("/v1/stats?model=tiny")
    assert status == 200, doc
    status, doc = dir_server.call("/v1/lql", {"model": "llama3", "query": "STATS"})
    assert status == 400 and doc["error"]["code"] == "lql_needs_vindex", doc


def test_the_budget_unloads_the_least_recently_used(larql_bin, model_path, tmp_path):
    d = tmp_path / "budget"
    d.mkdir()
    (d / "gemma.gguf").symlink_to(model_path)
    # Three tiny GGUFs of about 0.5 MiB: two fit in 1 MiB (llama3 + llama2: 1,043,264 bytes), three do not.
    for fam in ("llama3", "llama2", "gemma2"):
        (d / f"{fam}.gguf").symlink_to(FIXTURES / fam / f"{fam}-f32.gguf")
    s = DirServer(larql_bin, d, "--max-resident-mb", "1")
    try:
        base = s.rss_mib()
        assert complete(s, "gemma", 2)[0] == 200
        with_gemma = s.rss_mib()
        gemma_mib = model_path.stat().st_size / 2**20
        # Larger than the budget, it loads (alone) and stays while it is the last one used.
        assert s.loaded()["gemma"]
        assert complete(s, "llama3", 2)[0] == 200  # needs room: gemma, idle, goes
        after = s.rss_mib()
        loaded = s.loaded()
        print(f"\n[serve dir] RSS {base:.0f} MiB at start, {with_gemma:.0f} with gemma ({gemma_mib:.0f} MiB on disk), "
              f"{after:.0f} after it was unloaded")
        assert not loaded["gemma"] and loaded["llama3"]
        assert with_gemma - base > 0.6 * gemma_mib  # its weights were resident ...
        assert with_gemma - after > 0.6 * gemma_mib  # ... and are not any more
        assert complete(s, "llama2", 2)[0] == 200  # fits beside llama3
        assert complete(s, "llama3", 2)[0] == 200  # llama3 is now the more recently used
        assert complete(s, "gemma2", 2)[0] == 200  # no room for three: llama2, the least recent, goes
        assert s.loaded() == {"gemma": False, "gemma2": True, "llama2": False, "llama3": True}
        with urllib.request.urlopen(s.url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
        assert re.search(r"^larql_model_unloads_total 2$", metrics, re.M), metrics
        assert re.search(r"^larql_model_loads_total 4$", metrics, re.M), metrics
    finally:
        assert s.stop() == 0, s.proc.stderr.read()


def test_flags_that_do_not_fit_are_refused(larql_bin, model_dir, tmp_path):
    def serve(*args):
        return subprocess.run([str(larql_bin), "serve", *map(str, args), "--port", "0"], capture_output=True, text=True,
                              timeout=120)
    r = serve(model_dir, "--alias", "x")
    assert r.returncode == 2 and "--alias" in r.stderr, r.stderr
    r = serve(model_dir / "llama3.gguf", "--max-resident-mb", "10")
    assert r.returncode == 2 and "--max-resident-mb applies to a directory" in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = serve(tmp_path / "empty")
    assert r.returncode == 1 and "holds no model" in r.stderr, r.stderr


def test_what_cannot_load_is_left_out_at_start_with_the_reason(larql_bin, tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "junk.gguf").write_text("not a model")
    (d / "empty.gguf").write_bytes(b"")
    (d / "cut.gguf").write_bytes((FIXTURES / "llama3" / "llama3-f32.gguf").read_bytes()[:1000])
    (d / "noweights").mkdir()
    (d / "noweights" / "config.json").write_text("{}")
    (d / os.fsdecode(b"bad\xffname.gguf")).symlink_to(FIXTURES / "llama3" / "llama3-f32.gguf")
    # Nothing left: the error says why each was left out.
    r = subprocess.run([str(larql_bin), "serve", str(d), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "holds no model" in r.stderr, r.stderr
    for line in ("skipped junk.gguf: not a GGUF model", "skipped empty.gguf: not a GGUF model", "skipped cut.gguf: not a GGUF model",
                 "skipped noweights: config.json but no model.safetensors", "skipped bad\\xFFname.gguf: the name is not UTF-8"):
        assert line in r.stderr, r.stderr
    # With a good model beside them, only it is listed; each other one has its line on stderr.
    (d / "llama3.gguf").symlink_to(FIXTURES / "llama3" / "llama3-f32.gguf")
    s = DirServer(larql_bin, d)
    try:
        status, doc = s.call("/v1/models")
        assert status == 200 and [m["id"] for m in doc["data"]] == ["llama3"]
    finally:
        assert s.stop() == 0
    err = s.proc.stderr.read()
    for name in ("junk.gguf", "empty.gguf", "cut.gguf", "noweights", "bad\\xFFname.gguf"):
        assert f"larql serve: skipping {name}: " in err, err

