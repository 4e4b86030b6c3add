"""The `--backend wgpu+rs` error names the paths searched at run time (issue 42, item 8).

The core remembers the `wgpu` package folder it was configured against (CYB_WGPU_BUILD_DIR); for
a wheel that is pip's temporary build environment, gone once the wheel is built. The test makes
that folder vanish for one child process (an empty tmpfs mounted over it in a mount namespace of
its own, `unshare -m`; the rest of the machine still sees it): the BackendInit of the missing
library must name the installed layout's path (wgpu/resources next to the cyb_llm package), never
the vanished one."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import cyb_llm
from cyb_llm import _core

CODE = ("import cyb_llm\nfrom cyb_llm import _core\n"
        "try:\n    print('loaded', _core.wgpu_info(True)['library'])\n"
        "except cyb_llm.BackendInit as e:\n    print(e)\n")


def test_missing_library_error_names_only_run_time_paths():
    if not _core.wgpu_compiled():
        pytest.skip("the wgpu+rs backend is compiled out of this build")
    pkg = os.path.dirname(cyb_llm.__file__)
    so = next(os.path.join(pkg, f) for f in os.listdir(pkg) if f.startswith("_core.") and f.endswith(".so"))
    with open(so, "rb") as f:
        baked = re.search(rb"(/[\x21-\x7e]*/wgpu)/resources\x00", f.read())
    if not baked:
        pytest.skip("the module does not hold its configure-time wgpu folder as a string (stripped)")
    wgpu_dir = baked.group(1).decode()
    if not os.path.isdir(wgpu_dir):
        pytest.skip(f"{wgpu_dir} is already gone")
    env = {k: v for k, v in os.environ.items() if k not in ("CYB_WGPU_LIB", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = os.path.dirname(pkg) + os.pathsep + env.get("PYTHONPATH", "")
    hide = f'mount -t tmpfs none "{wgpu_dir}" && exec "{sys.executable}" -c "$0"'
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c", hide, CODE], env=env, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no unshare")
    if r.returncode != 0 and ("mount" in r.stderr or "unshare" in r.stderr):
        pytest.skip(f"no private mount namespace here: {r.stderr.strip()[:200]}")
    msg = r.stdout
    assert r.returncode == 0 and "not found" in msg, (r.returncode, msg, r.stderr[-2000:])
    assert wgpu_dir + "/resources" not in msg, msg
    installed = os.path.join(os.path.dirname(pkg), "wgpu", "resources")
    assert installed in msg, msg
