"""run_op with too few or too many inputs, for every op of the schema (docs/errors.md): a
structured error naming the op, never a read past the inputs given (before the fix, shape
inference ran before the count check: `where` with one input crashed the process). Each op runs
in one child process, so that a crash fails the test instead of the run."""
from __future__ import annotations

import json
import subprocess
import sys

from serve_proc import child_env

_CHILD = r"""
import json
import numpy as np
from cyb_llm import _core, errors
out = {}
x = np.ones((1, 2, 3, 3), np.float32)
for name in sorted(_core.op_names()):
    s = _core.op_schema(name)
    lo = s["min_inputs"] - (1 if s["positions"] else 0)
    hi = s["max_inputs"] - (1 if s["positions"] else 0)
    for n in sorted({max(0, lo - 1), 0, hi + 1}):
        if lo <= n <= hi:
            continue
        try:
            _core.run_op(name, [x] * n, {})
            out[f"{name}/{n}"] = "ran"
        except errors.Error as e:
            out[f"{name}/{n}"] = "ok" if name in str(e) or "inputs" in str(e) else f"unnamed: {e}"
        except Exception as e:
            out[f"{name}/{n}"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_every_op_rejects_a_wrong_number_of_inputs():
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=child_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(res) > 50, res
    bad = {k: v for k, v in res.items() if v != "ok"}
    assert not bad, bad
