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

pytestmark = pytest.mark.skipif(
    os.environ.get("CYB_HOSTILE") != "1",
    reason="hostile-input slice off by default until the input-validation fixes it checks have all landed; "
           "CYB_HOSTILE=1 runs it")


def test_hostile_slice(tmp_path):
    out = tmp_path / "hostile"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "hostile.py"), "--seed", "1", "--limit", "20",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    summary = [ln for ln in r.stdout.splitlines() if ln.startswith("hostile:")]
    assert summary and "20 cases" in summary[0], r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
