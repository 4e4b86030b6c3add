"""Runs the native test binaries (csrc/tests/*.cc, built by tools/devbuild.sh into
build/dev, or into $CYB_NATIVE_BUILD_DIR)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("CYB_NATIVE_BUILD_DIR", ROOT / "build" / "dev"))


def _binary(name: str) -> Path:
    exe = BUILD / (name + (".exe" if os.name == "nt" else ""))
    if not exe.exists():
        pytest.skip(f"{exe} not built (run tools/devbuild.sh)")
    return exe


@pytest.mark.parametrize("name", ["test_core", "test_no_alloc", "test_levels"])
def test_native_binary(name):
    r = subprocess.run([str(_binary(name))], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("OK")
