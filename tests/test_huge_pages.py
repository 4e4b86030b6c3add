"""Weights in huge pages (docs/runtime.md, "Weights in memory"): on Linux, a model file larger than
64 MiB has its weights copied at load into anonymous memory backed by transparent huge pages
(where the kernel offers them), CYB_HUGE_PAGES=0 keeps them in the read-only mapping. The variable
is read once per process, so each setting runs in a subprocess: the logits must be bit-identical
(the same bytes, another address), the huge pages must be there (AnonHugePages of the process),
and an invalid value is an error naming it.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from level_outputs import child_error

THP = "/sys/kernel/mm/transparent_hugepage/enabled"

_SCRIPT = r"""
import sys, numpy as np, cyb_llm
m = cyb_llm.load(sys.argv[1], threads=2)
lg = m.new_conversation(16).forward([1, 2, 3, 4])
huge = 0
for line in open("/proc/self/smaps_rollup"):
    if line.startswith("AnonHugePages:"):
        huge = int(line.split()[1]) * 1024
np.savez(sys.argv[2], logits=np.asarray(lg), huge=huge)
"""


def _run(path, out, value):
    subprocess.run([sys.executable, "-c", _SCRIPT, path, str(out)], env=dict(os.environ, CYB_HUGE_PAGES=value),
                   check=True, timeout=300)
    return np.load(out)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists(THP)
                    or "[never]" in open(THP).read(), reason="no transparent huge pages")
def test_huge_pages_hold_the_weights_and_change_nothing(real_model, tmp_path):
    path = real_model("smollm2")
    size = os.path.getsize(path)
    assert size > 64 << 20  # mapped, not read (docs/errors.md)
    on = _run(path, tmp_path / "on.npz", "1")
    off = _run(path, tmp_path / "off.npz", "0")
    assert np.array_equal(on["logits"], off["logits"])
    assert int(on["huge"]) >= (size // 2 >> 21) << 21, int(on["huge"])  # most of the weights
    assert int(off["huge"]) < (size // 2 >> 21) << 21, int(off["huge"])


def test_invalid_value_is_an_error(real_model):
    err = child_error({"CYB_HUGE_PAGES": "2"}, f"import cyb_llm; cyb_llm.load({real_model('smollm2')!r})")
    assert "CYB_HUGE_PAGES" in err and "'2'" in err, err[-2000:]
