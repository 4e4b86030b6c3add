"""Adding a pipeline (docs/architecture.md, "Adding a pipeline"): the toy "identity" pipeline is a
committed patch (tests/data/toy_pipeline.patch). It touches exactly the files the walk-through
names; applied to a copy of the tree it builds, and a toy model loads through the registries as the
toy class and runs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "tests" / "data" / "toy_pipeline.patch"
#: what the copy needs to build the module (the patch touches csrc/ and python/ only)
COPIED = ("CMakeLists.txt", "pyproject.toml", "csrc/", "shaders/", "python/", "tools/")


def walkthrough_files() -> list[str]:
    """The files the walk-through says a new pipeline touches (its ```text block of paths)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Adding a pipeline", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "docs/architecture.md's 'Adding a pipeline' has no ```text block of files"
    return sorted(line.split()[0] for line in block.group(1).splitlines() if line.strip())


def patch_files() -> list[str]:
    out = subprocess.run(["git", "apply", "--numstat", str(PATCH)], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split("\t")[2] for line in out.splitlines() if line.strip())


def test_the_patch_touches_exactly_the_files_the_walkthrough_names():
    assert patch_files() == walkthrough_files()


def test_the_toy_pipeline_builds_loads_and_runs(tmp_path):
    pytest.importorskip("pybind11")
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        if rel.startswith(COPIED) and (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    # -C1: one line of context each side, so rows and includes added since (other pipelines) do not break it
    subprocess.run(["git", "apply", "-C1", str(PATCH)], cwd=src, check=True)
    build = src / "build" / "toy"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CYB_")}
    env["CCACHE_BASEDIR"] = str(src)  # the copy's paths relative: repeated runs hit ccache
    pybind11_dir = subprocess.run([sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True,
                                  text=True, check=True).stdout.strip()
    for cmd in (["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DCYB_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11_dir}"],
                ["ninja", "-C", str(build), "-j", "2", "_core"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{cmd[0]} failed:\n" + (r.stdout + r.stderr)[-4000:]
    script = """
import numpy as np, cyb_llm
from cyb_llm.writer import write_model
write_model("toy.model", name="toy", config={"model_type": "identity"}, tensors=[])
m = cyb_llm.load("toy.model")
assert type(m).__name__ == "IdentityModel" and isinstance(m, cyb_llm.Model), type(m)
x = np.arange(6, dtype=np.float32).reshape(2, 3)
out = m.run({"x": x, "n": np.array([7], dtype=np.int64)})
assert list(out) == ["x", "n"] and np.array_equal(out["x"], x) and out["n"].dtype == np.int64
try:
    m.create_chat_completion
except AttributeError as e:
    assert "TextModel" in str(e), e
else:
    raise AssertionError("an identity model has create_chat_completion")
from cyb_llm.serve.app import create_app
try:
    create_app({"toy": m})
except cyb_llm.errors.InvalidConfig as e:
    assert "does not serve" in str(e), e
else:
    raise AssertionError("the server took a pipeline without an engine")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(src / "python")))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
