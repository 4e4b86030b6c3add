"""The C/C++ package: `cmake --install` of a native build, then examples/find_package (a
project outside the tree: find_package(cyb_llm), cyb_llm::core) configured and built against
the installed prefix; its C-API and C++-API programs generate the same greedy ids as Python."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import cyb_llm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _native_build_dir() -> str | None:
    for d in (os.environ.get("CYB_NATIVE_BUILD_DIR", ""), "build/native", "build/dev"):
        p = os.path.join(ROOT, d) if d and not os.path.isabs(d) else d
        if p and os.path.isfile(os.path.join(p, "cmake_install.cmake")) and os.path.isfile(os.path.join(p, "libcyb_core.a")):
            return p
    return None


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    build = _native_build_dir()
    assert build, "a native CMake build (tools/test.sh makes build/native; tools/devbuild.sh build/dev)"
    assert shutil.which("cmake") and shutil.which("ninja"), "cmake and ninja are test dependencies"
    prefix = tmp_path_factory.mktemp("prefix")
    out = tmp_path_factory.mktemp("example")

    def run(*cmd):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{cmd}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"

    run("cmake", "--install", build, "--prefix", str(prefix))
    assert os.path.isfile(prefix / "include" / "cyb_llm.h")
    assert os.path.isfile(prefix / "lib" / "cmake" / "cyb_llm" / "cyb_llmConfig.cmake")
    run("cmake", "-S", os.path.join(ROOT, "examples", "find_package"), "-B", str(out), "-G", "Ninja",
        f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release")
    run("cmake", "--build", str(out))
    return out


def _python_greedy(path: str, ids: list[int], n: int) -> list[int]:
    m = cyb_llm.load(path)
    conv = m.new_conversation(len(ids) + n + 1)
    logits = conv.forward(ids)
    got = []
    for _ in range(n):
        t = int(np.argmax(logits))
        got.append(t)
        logits = conv.forward([t])
    return got


@pytest.mark.parametrize("program", ["generate_c", "generate_cpp"])
def test_installed_package_generates_like_python(example, program, real_model):
    path = real_model("smollm2")
    m = cyb_llm.load(path)
    ids = m.tokenizer.encode("The capital of France is")
    r = subprocess.run([str(example / program), path, "8", *map(str, ids)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert [int(t) for t in r.stdout.split()] == _python_greedy(path, ids, 8)


def test_c_api_errors_are_codes_and_messages(example, tmp_path):
    r = subprocess.run([str(example / "generate_c"), str(tmp_path / "missing.model"), "2", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "error: FormatError:" in r.stderr and "missing.model" in r.stderr
