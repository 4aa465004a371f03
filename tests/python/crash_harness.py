"""Crash-safety harness: run a command that writes a file, kill it with SIGKILL at random points,
and check after every kill that the target is either the old file or a complete new one (never
a mix or a torn prefix) and that no input was touched.

Reused by every test of a writing command (state files, logits, calibration records, stores,
and later vindexes and patches):

    kill9_trials(cmd, target, inputs=[model, corpus], trials=10)

The complete new file is whatever one uninterrupted run of `cmd` writes (commands must be
deterministic: fixed seeds, fixed threads). Kill points are spread uniformly over that run's
duration, and at least a third of them land in its last 40% (where writing happens).
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def digest(path: Path) -> str | None:
    p = Path(path)
    if not p.exists():
        return None
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class TrialReport:
    outcomes: list[str] = field(default_factory=list)  # "old", "new" per trial
    durations: float = 0.0
    killed: int = 0

    def summary(self) -> str:
        return (f"{len(self.outcomes)} trials, {self.killed} killed mid-run: "
                f"{self.outcomes.count('old')} old, {self.outcomes.count('new')} new")


def kill9_trials(cmd: list, target: Path, inputs: list[Path], trials: int = 10, seed: int = 0,
                 env: dict | None = None, timeout: float = 600) -> TrialReport:
    """Returns a report; raises AssertionError on a torn target or a touched input."""
    target = Path(target)
    cmd = [str(c) for c in cmd]
    rng = random.Random(seed)
    inputs_before = {Path(p): digest(p) for p in inputs}
    old = digest(target)
    backup = None
    if target.exists():
        backup = target.with_name(target.name + ".harness-old")
        shutil.copyfile(target, backup)

    # One uninterrupted run: the complete new file and the run's duration.
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    duration = time.monotonic() - t0
    assert p.returncode == 0, f"the uninterrupted run failed: {p.stderr[-2000:]}"
    new = digest(target)
    assert new is not None and new != old, "the command did not write a new target"

    report = TrialReport(durations=duration)
    for i in range(trials):
        # Restore the old state of the target before each trial.
        if backup is not None:
            shutil.copyfile(backup, target)
        elif target.exists():
            target.unlink()
        late = i % 3 == 0
        delay = rng.uniform(0.6 * duration, duration) if late else rng.uniform(0.0, duration)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            report.killed += 1
        now = digest(target)
        if now == old:
            report.outcomes.append("old")
        elif now == new:
            report.outcomes.append("new")
        else:
            raise AssertionError(f"trial {i}: killed after {delay:.2f}s of {duration:.2f}s, the target "
                                 f"{target} is neither the old file nor the complete new one "
                                 f"({'missing' if now is None else 'torn: ' + str(target.stat().st_size) + ' bytes'})")
        for path, before in inputs_before.items():
            assert digest(path) == before, f"trial {i}: input {path} was modified"
    if backup is not None:
        backup.unlink()
    for stray in target.parent.glob(f".{target.name}.tmp-*"):  # temporaries of killed runs
        stray.unlink()
    return report
