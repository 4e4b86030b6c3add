"""sys.path for the tools that import cyb_llm: this checkout's python/ comes first only when a
development build put the native core there (tools/devbuild.sh; or CYB_LLM_CORE_DIR names one),
otherwise the installed package is used (CI: `pip install .` then the tools on a clean checkout,
whose python/cyb_llm has no _core). tests/ is added for the test helpers."""
from __future__ import annotations

import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup() -> None:
    src = os.path.join(ROOT, "python")
    built = [f for f in glob.glob(os.path.join(src, "cyb_llm", "_core*")) if f.endswith((".so", ".pyd"))] \
        or os.environ.get("CYB_LLM_CORE_DIR")
    paths = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tools")] + ([src] if built else [])
    for p in paths:
        if p not in sys.path:
            sys.path.insert(0, p)
