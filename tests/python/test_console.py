"""The web console (docs/console.md) end to end: headless Chromium (Debian's package, driven by
playwright-core from web/node_modules) against real `larql serve` processes on the default model.

One node run (web/e2e/console.e2e.mjs) does every check in one browser; the tests below read its
results. Expected values are the server's own observable behaviour, never the console's: tokens
arriving at distinct times, /metrics' active sequences back to 0 after stop, rows in a table,
coloured canvas pixels, a different INFER top token after INSERT, 401 without the key.
Screenshots of each page land in build/console-screenshots/ (README links them).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import peer
from test_serve import Server

WEB = peer.REPO_ROOT / "web"
SHOTS = Path(os.environ.get("LARQL_BUILD_DIR", str(peer.REPO_ROOT / "build"))) / "console-screenshots"
KEY = "console-test-key-7d1c"


@pytest.fixture(scope="module")
def e2e(larql_bin, model_path, inference_vindex, tmp_path_factory):
    for need, why in [(shutil.which("node"), "node (Node.js >= 20)"), (Path("/usr/bin/chromium").exists(), "chromium"),
                      ((WEB / "node_modules" / "playwright-core").is_dir(), "web/node_modules (npm ci)")]:
        if not need:
            pytest.fail(f"{why} is missing: run `make setup`", pytrace=False)
    # The vindex (the default model extracted, shared with test_lql) serves chat and LQL; the
    # GGUF with a key serves the key checks. Both start at once.
    # The Edit page records its insert into a patch and saves it: inside a directory of its own.
    patches = tmp_path_factory.mktemp("console-patches")
    plain = Server(larql_bin, inference_vindex, "--lql-allow-files", str(patches))
    keyed = Server(larql_bin, model_path, "--api-key", KEY)
    SHOTS.mkdir(parents=True, exist_ok=True)
    results = SHOTS / "results.json"
    results.unlink(missing_ok=True)
    try:
        env = dict(os.environ, LARQL_URL=plain.url, LARQL_KEY_URL=keyed.url, LARQL_KEY=KEY, SHOTS_DIR=str(SHOTS),
                   RESULTS=str(results), LARQL_ALLOW_FILES="1")
        r = subprocess.run(["node", "e2e/console.e2e.mjs"], cwd=WEB, env=env, capture_output=True, text=True,
                           timeout=600)
        print(r.stdout, r.stderr)
        assert results.is_file(), f"the e2e run wrote no results (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
        out = {c["name"]: c for c in json.loads(results.read_text())}
    finally:
        assert plain.stop() == 0
        assert keyed.stop() == 0
    return out


def _check(e2e, name):
    c = e2e.get(name)
    assert c is not None, f"{name} did not run (the browser run ended early?)"
    if c.get("skipped"):
        pytest.skip(c["detail"])
    assert c["ok"], c["detail"]
    print(name, c["detail"])


def test_chat_streams_tokens_one_by_one(e2e):
    _check(e2e, "chat_streams_tokens_one_by_one")


def test_engine_picker_shows_measured_memory(e2e):
    _check(e2e, "engine_memory_measured")


def test_stop_ends_generation_and_frees_the_slot(e2e):
    _check(e2e, "chat_stop_frees_the_slot")


def test_narrow_window(e2e):
    _check(e2e, "narrow_window_readable")


def test_lql_describe_table(e2e):
    _check(e2e, "lql_describe_table")


def test_explain_infer_heatmap_is_drawn(e2e):
    _check(e2e, "explain_infer_heatmap_drawn")


def test_insert_changes_infer(e2e):
    _check(e2e, "insert_changes_infer")


def test_lql_error_cursor_counts_code_points(e2e):
    _check(e2e, "lql_error_cursor_code_points")


def test_lql_error_cursor_code_points_on_the_server(e2e):
    _check(e2e, "lql_error_cursor_code_points_server")


def test_logit_lens_plots_traces_rank(e2e):
    _check(e2e, "logit_lens_rank_is_traces")


def test_inputs_are_quoted_as_lql_strings(e2e):
    _check(e2e, "inputs_quoted_as_lql")


def test_every_page_fits_a_narrow_window(e2e):
    _check(e2e, "narrow_window_every_page")


def test_edit_tables_are_not_cut_off(e2e):
    _check(e2e, "edit_tables_fit_their_box")


def test_page_loads_cleanly(e2e):
    _check(e2e, "page_loads_cleanly")


def test_api_key_prompt_and_401(e2e):
    _check(e2e, "api_key_prompt")


def test_screenshots_saved(e2e):
    names = {p.name for p in SHOTS.glob("*.png")}
    for n in ["chat.png", "chat-narrow.png", "api-key.png"]:
        assert n in names, f"{n} missing from {SHOTS}: {sorted(names)}"


def test_no_ui_turns_the_console_off(larql_bin, model_path):
    import urllib.error
    import urllib.request
    s = Server(larql_bin, model_path, "--no-ui")
    try:
        for path in ["/", "/index.html", "/assets/x.js"]:
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(s.url + path, timeout=10)
            assert e.value.code == 404, path
        with urllib.request.urlopen(s.url + "/health", timeout=10) as r:
            assert r.status == 200
    finally:
        assert s.stop() == 0
