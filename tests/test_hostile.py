"""A small slice of the hostile-input tier (tools/hostile.py): 20 cases spread over
every group, each in a child process under the tier's time and memory limits.
Fails on any crash, hang or unstructured exception; the summary and the failing
cases are in the assertion message. The whole tier is `python tools/hostile.py --seed 1`."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def test_hostile_slice(tmp_path):
    out = tmp_path / "hostile"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "hostile.py"), "--seed", "1", "--limit", "20",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    summary = [ln for ln in r.stdout.splitlines() if ln.startswith("hostile:")]
    assert summary and "20 cases" in summary[0], r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_hostile_tool_reports_crashes_hangs_and_unstructured_errors():
    """The tier's own check (tools/hostile.py --selftest runs planted cases): a segfault and an
    abort count as crashes, a sleep as a hang, a ValueError as unstructured, logits holding a NaN
    as non-finite, and the run fails."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "hostile.py"), "--selftest"],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr[-2000:]
    assert r.returncode != 0, out
    assert "crashes 2, hangs 1, unstructured 1, non-finite 1" in out, out
    for line in ("CRASH        selftest/segv", "CRASH        selftest/abort", "HANG         selftest/hang",
                 "UNSTRUCTURED selftest/unstructured", "NONFINITE    selftest/nonfinite"):
        assert line in out, out
