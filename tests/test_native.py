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


@pytest.mark.parametrize("name", ["test_core", "test_levels"])
def test_native_binary(name):
    _run(name)


def _run(name, **env):
    r = subprocess.run([str(_binary(name))], capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("OK")
    return r.stdout


# The real-model part of test_no_alloc (CYB_NO_ALLOC_MODELS, set by tools/test.sh) in two items that
# the pytest workers share: the SIMD levels, and the scalar one. The scalar level's kernels are the
# f64-accumulating reference, about a second a token on these models: there qwen05 (its 151,936-row
# output matrix: 93 of the item's 163 s here) runs in the slow tier (tests/slow/test_no_alloc_scalar.py);
# its encodings (q8_0, f32) and its biased-key attention (f32 KV cache) run at every SIMD level here.
# Without the variable the program runs its op-sequence cases only.
SCALAR_SLOW = ("qwen05",)


def _models(skip=(), only=None):
    """CYB_NO_ALLOC_MODELS without the models named in `skip` (file stems), or with only those in `only`."""
    paths = [p for p in os.environ.get("CYB_NO_ALLOC_MODELS", "").split(":") if p]
    stem = lambda p: os.path.splitext(os.path.basename(p))[0]  # noqa: E731
    return ":".join(p for p in paths if stem(p) not in skip and (only is None or stem(p) in only))


@pytest.mark.parametrize("levels", ["simd", "scalar"])
def test_no_alloc(levels):
    from cyb_llm import _core

    if levels == "scalar":
        lv, models = "scalar", _models(SCALAR_SLOW)
    else:
        lv, models = ",".join(l for l in _core.cpu_levels() if l != "scalar"), _models()
        if not lv:
            pytest.skip("this CPU runs the scalar level only")
    check_no_alloc(lv, models)


def check_no_alloc(levels: str, models: str) -> None:
    """test_no_alloc at `levels` (comma-separated) on `models` (':'-separated): it passes, and each
    model ran on both paths at each level (a line per model, path and level, and a control)."""
    out = _run("test_no_alloc", CYB_NO_ALLOC_LEVELS=levels, CYB_NO_ALLOC_MODELS=models)
    paths = [p for p in models.split(":") if p]
    for path in paths:
        assert out.count(path + ": encodings") == 1, out
    for level in levels.split(","):
        assert out.count(f"  {level:<7} ") == 2 * len(paths), out
