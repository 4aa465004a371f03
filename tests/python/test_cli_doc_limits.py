"""docs/cli.md's "Limits" table matches the behaviour: for every documented flag and verb, a value
just outside the documented range is a command-line error (exit 2) whose message names the flag
and the documented range, and the verb's --help prints the same range."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("larql_bin")

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def limits_table():
    text = DOC.read_text()
    section = text[text.index("## Limits"):]
    section = section[:section.index("\n## ", 5)]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        flags = re.findall(r"`([^`]+)`", cells[0])
        verbs = [v.strip() for v in cells[1].split(",")]
        rng = re.match(r"([\[(])(.+?), (.+?)([\])])", cells[2])
        assert rng, f"unparsable range in docs/cli.md: {cells[2]!r}"
        rows.append((flags, verbs, rng.group(0), rng))
    assert len(rows) >= 20, "the Limits table went missing"
    return rows


def number(s: str) -> float:
    return float(s.replace(",", ""))


def outside(rng) -> list[str]:
    """Values just outside a documented range."""
    lo_open, lo, hi, hi_open = rng.group(1) == "(", number(rng.group(2)), number(rng.group(3)), rng.group(4) == ")"
    is_int = "." not in rng.group(2) + rng.group(3) and "e" not in rng.group(3) and lo == int(lo) and hi == int(hi) \
        and not lo_open and hi > 100
    if is_int:
        return [str(int(lo) - 1), str(int(hi) + 1)]
    return [repr(lo) if lo_open else repr(lo - max(1e-3, abs(lo) * 1e-3)), repr(hi * 1.001 + 0.001)]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("limits")
    text = d / "t.txt"
    text.write_text("Some text to read. " * 20)
    questions = d / "q.jsonl"
    questions.write_text('{"question": "What is read?", "answer": " text", "evidence": "text"}\n')
    base = {
        "run": ["run", model_path, "hi", "-n", "1"],
        "chat": ["chat", model_path],
        "perplexity": ["perplexity", model_path, text],
        "bench": ["bench", model_path],
        "accuracy": ["accuracy", model_path, "--quick"],
        "calibrate": ["calibrate", model_path, "--budget", "0.01", "-o", d / "r.json", "--corpus", text],
        "apollo build": ["apollo", "build", text, "-o", d / "s.store", "-m", model_path],
        "apollo eval": ["apollo", "eval", text, questions, "-m", model_path, "--no-standard"],
        "extract": ["extract", model_path, "-o", d / "x.vindex"],
        "label": ["label", d / "none.vindex"],  # flags are checked before the vindex is opened
        "shannon": ["shannon", model_path, "--corpus", text],
        "compare": ["compare", d / "a.vindex", d / "b.vindex"],
        "compile": ["compile", d / "none.vindex", "-o", d / "out"],
        "edit-eval": ["edit-eval", d / "none.vindex", "--set", d / "none.jsonl"],
    }
    return base


@pytest.mark.parametrize("row", limits_table(), ids=lambda r: r[0][0])
def test_documented_range_is_enforced(larql_bin, fixtures, row):
    flags, verbs, range_text, rng = row
    flag = flags[-1] if flags[-1].startswith("--") else flags[0]
    for verb in verbs:
        assert verb in fixtures, f"docs/cli.md names verb {verb!r} that this test does not know"
        for value in outside(rng):
            base = [str(a) for a in fixtures[verb]]
            for f in flags:  # the flag under test replaces the fixture's own value for it
                if f in base:
                    i = base.index(f)
                    del base[i:i + 2]
            args = base + [f"{flag}={value}"]
            p = subprocess.run([str(larql_bin), *args], capture_output=True, text=True, timeout=120, input="")
            assert p.returncode == 2, f"{verb} {flag}={value}: exit {p.returncode}: {p.stderr[-800:]}"
            assert range_text in p.stderr or (flag == "--ctx-size" and "context length" in p.stderr), \
                f"{verb} {flag}={value}: the message does not give the documented range {range_text}: {p.stderr}"
        if flag != "--ctx-size":
            helptext = subprocess.run([str(larql_bin), *verb.split(), "--help"], capture_output=True, text=True).stdout
            assert range_text in helptext, f"`larql {verb} --help` does not print {flag}'s range {range_text}"
