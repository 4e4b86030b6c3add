"""Matmul outputs per CPU level computed in a subprocess under given environment variables (the
ones the native core reads once per process, e.g. CYB_AVX512_WIDTH, CYB_DECODE_STREAMS), and the
error of a child given an invalid value of one."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

_SCRIPT = r"""
import sys, ast, numpy as np
sys.path.insert(0, sys.argv[1])
from test_ops import random_weight
from cyb_llm import _core
cases, levels, seed = ast.literal_eval(sys.argv[3])
out = {}
for i, (enc, n, k, t) in enumerate(cases):
    rng = np.random.default_rng(seed + i)
    w, _ = random_weight(enc, n, k, rng)
    x = rng.standard_normal((t, k)).astype(np.float32)
    for lvl in levels:
        (y,) = _core.run_op("matmul", [x, w], {}, None, lvl, "cpu")
        out[f"{i}-{lvl}"] = np.asarray(y)
np.savez(sys.argv[2], **out)
"""


def matmul_outputs(path, env: dict, cases, levels, seed: int):
    """{f"{i}-{level}": y} for cases (encoding, rows, k, tokens): random weights and activations
    from seed + i, y = x @ w.T by run_op at each level, in a child with os.environ + env."""
    spec = repr((list(cases), list(levels), seed))
    subprocess.run([sys.executable, "-c", _SCRIPT, HERE, str(path), spec], env=dict(os.environ, **env),
                   check=True, timeout=300)
    return np.load(path)


def child_error(env: dict, code: str) -> str:
    """Runs `code` in a child with os.environ + env (tests/ on its path), asserts that it failed,
    and returns its stderr."""
    r = subprocess.run([sys.executable, "-c", code],
                       env=dict(os.environ, **env, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout[-2000:]
    return r.stderr
