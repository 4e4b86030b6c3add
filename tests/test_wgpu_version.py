"""The wgpu+rs backend loads only the libwgpu_native release it was built against
(docs/install.md): another version is refused with BackendInit naming both versions
and how to install the right one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cyb_llm import _core

PROBE = r"""
import sys, cyb_llm
try:
    cyb_llm.load(sys.argv[1], backend="wgpu+rs")
except cyb_llm.BackendInit as e:
    print("BackendInit:", e)
    raise SystemExit(0)
raise SystemExit("loaded")
"""


def test_other_libwgpu_version_is_refused(tmp_path, real_model):
    if not _core.wgpu_compiled():
        pytest.skip("not supported [wgpu+rs]: this build has no wgpu+rs backend")
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (test dependency) builds the stand-in library"
    src = tmp_path / "fake.c"
    src.write_text("unsigned wgpuGetVersion(void) { return (1u << 24) | (2u << 16) | (3u << 8) | 4u; }\n")
    lib = tmp_path / "libfake_wgpu.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    env = dict(os.environ, CYB_WGPU_LIB=str(lib))
    r = subprocess.run([sys.executable, "-c", PROBE, real_model("smollm2")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "version 1.2.3.4" in r.stdout and "cyb_llm[gpu]" in r.stdout
