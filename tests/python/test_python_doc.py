"""docs/python.md's walkthrough runs: every ```python block, in order, in one namespace, on the
default model and a vindex of it (the installed package, as test_python_api.py). A block that
raises fails the test naming the block."""
from __future__ import annotations

import re
from pathlib import Path

import larql  # noqa: F401  (the installed package)

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_walkthrough_runs(model_path, inference_vindex, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 6
    ns = {"MODEL": str(model_path), "VINDEX": str(inference_vindex)}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"docs/python.md block {i + 1}", "exec"), ns)
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"docs/python.md block {i + 1} failed: {e!r}\n{code}") from e
    out = capsys.readouterr().out
    assert "Poseidonia" in out or "Pose" in out, out
