"""CYB_GFNI (docs/cpu-backend.md, "Decode at avx512"): on CPUs with GFNI the avx512 Q6_K decode dot
assembles its codes with vgf2p8affineqb and multiplies them on the split activations; CYB_GFNI=0
takes the plain dot (Avx512K::dot_row). The variable is read once per process, so each setting runs
in a subprocess. tests/test_ops.py checks the default path against the reference; here the other
path must give the same rows within f32 rounding (the two sum the same exact integer products,
grouped differently), and an invalid value is an error naming it.
"""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from level_outputs import child_error, matmul_outputs
from tolerances import tolerance

pytestmark = pytest.mark.skipif("avx512" not in _core.cpu_levels(), reason="no avx512 level on this CPU")

# (encoding, rows, k, tokens): Q6_K decode alone and next to Q4_K (the split activations of both)
CASES = [("q6_k", 37, 1024, 1), ("q6_k", 301, 256, 1), ("q4_k", 33, 768, 1)]


def test_both_paths_give_the_same_rows(tmp_path):
    on = matmul_outputs(tmp_path / "on.npz", {"CYB_GFNI": "1"}, CASES, ["avx512"], 5)
    off = matmul_outputs(tmp_path / "off.npz", {"CYB_GFNI": "0"}, CASES, ["avx512"], 5)
    for i, case in enumerate(CASES):
        a, b = on[f"{i}-avx512"], off[f"{i}-avx512"]
        assert np.all(np.isfinite(a)), case
        assert np.max(np.abs(a - b)) <= tolerance("gfni-vs-plain") * np.max(np.abs(b)), case


def test_invalid_value_is_an_error():
    code = ("import numpy as np; from cyb_llm import _core; from test_ops import random_weight; "
            "w, _ = random_weight('q6_k', 8, 256, np.random.default_rng(0)); "
            "_core.run_op('matmul', [np.ones((1, 256), np.float32), w], {}, None, 'avx512', 'cpu')")
    err = child_error({"CYB_GFNI": "yes"}, code)
    assert "CYB_GFNI" in err and "'yes'" in err, err[-2000:]
