"""Slow tier: the arm64 build (NEON kernels) under qemu-user, via tools/arm64_check.sh."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_arm64_native_tests_under_qemu():
    for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64", "cmake", "ninja"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (apt-get install g++-aarch64-linux-gnu qemu-user)")
    r = subprocess.run([str(ROOT / "tools" / "arm64_check.sh")], capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("\nOK") + r.stdout.startswith("OK") >= 3, r.stdout[-2000:]
