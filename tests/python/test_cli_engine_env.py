"""Issue 9: engines read no environment variable; the CLI turns $LARQL_ARCHIVE_DIR and
$LARQL_BPL_RECORD into the spec keys `archive_dir` and `record` when the spec leaves them unset
(docs/engines.md), so the documented variables keep working from the command line.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.usefixtures("larql_bin")


def larql(larql_bin, *args, env=None):
    return subprocess.run([str(larql_bin), *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def test_bpl_record_from_the_environment_becomes_the_record_key(larql_bin, model_path, tmp_path):
    # A record named by the environment (so by the spec) must exist: an absent one is NotFound,
    # naming the path. (An absent default <model>.bpl.json runs uncalibrated: tests/kv.)
    record = tmp_path / "none.bpl.json"
    p = larql(larql_bin, "run", model_path, "Once upon a time", "-n", "1", "--temperature", "0", "--json",
              "--engine", "boundary-per-layer", env={"LARQL_BPL_RECORD": str(record)})
    assert p.returncode != 0, p.stdout
    assert f"record={record}: no such file" in p.stderr, p.stderr
    # An explicit key wins over the environment.
    other = tmp_path / "other.bpl.json"
    p = larql(larql_bin, "run", model_path, "Once upon a time", "-n", "1", "--temperature", "0", "--json",
              "--engine", f"boundary-per-layer:record={other}", env={"LARQL_BPL_RECORD": str(record)})
    assert p.returncode != 0, p.stdout
    assert f"record={other}: no such file" in p.stderr, p.stderr


def test_archive_dir_from_the_environment_becomes_the_archive_dir_key(larql_bin, model_path, tmp_path):
    archive = tmp_path / "archive"
    p = larql(larql_bin, "run", model_path, "Once upon a time there", "-n", "2", "--temperature", "0", "--json",
              "--engine", "boundary-kv:chunk_tokens=2", env={"LARQL_ARCHIVE_DIR": str(archive)})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["engine"] == f"boundary-kv:archive_dir={archive},chunk_tokens=2"
    assert len(list(archive.iterdir())) == 1
