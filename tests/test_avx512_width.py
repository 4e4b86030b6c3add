"""CYB_AVX512_WIDTH (docs/cpu-backend.md, "AVX-512 vector width"): the avx512 level's kernels at
512 or 256 bits. The variable is read once per process, so each width runs in a subprocess.

That the choice takes effect: at 256 the avx512 level runs the 256-bit kernels the avx2 level
runs for these cases (the avx2 K-quant matmul, the 256-bit packed float GEMM), so its outputs are
bit-identical to the avx2 level's; at 512 (the default) it runs its 512-bit K-quant kernel,
whose sums are ordered differently, so its outputs differ. That both widths are correct: the op matrix
(tests/test_ops.py) at the avx512 and amx levels passes under CYB_AVX512_WIDTH=256 (512 is the
default every other run takes).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from cyb_llm import _core
from level_outputs import matmul_outputs

pytestmark = pytest.mark.skipif("avx512" not in _core.cpu_levels(), reason="this CPU lacks the avx512 level")

HERE = os.path.dirname(os.path.abspath(__file__))

# (encoding, rows, k, tokens): K-quant prefill and decode, the packed float GEMM (64 tokens)
CASES = [("q4_k", 37, 1024, 19), ("q6_k", 37, 1024, 19), ("q4_k", 301, 512, 1), ("f32", 40, 256, 64)]

def _outputs(tmp_path, width):
    return matmul_outputs(tmp_path / f"w{width}.npz", {"CYB_AVX512_WIDTH": str(width)}, CASES, ("avx2", "avx512"), 5)


def test_width_256_runs_the_256_bit_kernels(tmp_path):
    o256, o512 = _outputs(tmp_path, 256), _outputs(tmp_path, 512)
    for i, case in enumerate(CASES):
        # the avx2 level does not depend on the variable
        assert np.array_equal(o256[f"{i}-avx2"], o512[f"{i}-avx2"]), case
        assert np.array_equal(o256[f"{i}-avx512"], o256[f"{i}-avx2"]), case
    # at 512 the avx512 level's own kernels ran: bit-identical results in every case would mean
    # the variable changed nothing
    assert any(not np.array_equal(o512[f"{i}-avx512"], o512[f"{i}-avx2"]) for i in range(len(CASES)))
    # the K-quant prefills take the 512-bit kernel of their own (the packed f32 GEMM sums each
    # output over k in the same order at either width: equal bits there are no evidence)
    for i in (0, 1):
        assert not np.array_equal(o512[f"{i}-avx512"], o512[f"{i}-avx2"]), CASES[i]


def test_width_invalid_value_is_an_error():
    code = ("import numpy as np; from cyb_llm import _core; "
            "_core.run_op('matmul', [np.ones((2, 256), np.float32), np.ones((3, 256), np.float32)], {}, None, "
            "'avx512', 'cpu')")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, CYB_AVX512_WIDTH="384"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "CYB_AVX512_WIDTH" in r.stderr and "384" in r.stderr


def test_op_matrix_at_width_256():
    env = dict(os.environ, CYB_AVX512_WIDTH="256")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                        os.path.join(HERE, "test_ops.py"), "-k", "cpu:avx512 or cpu:amx"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1]
