"""CYB_DECODE_STREAMS (docs/cpu-backend.md, "Decode"): how many interleaved row streams each
thread of the K-quant decode reads (default 1 on AMD CPUs, 4 elsewhere; paired, rounded up to
even, where the level has a two-row dot). The variable is read once per process, so each setting
runs in a subprocess.

Every row is one dot whatever stream reads it, so the outputs of a decode (one token) must be
bit-identical at every setting, and equal to the op matrix's checked result (tests/test_ops.py
runs the default). Row counts are chosen so that the streams split unevenly and some work items
get fewer rows than streams.
"""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from level_outputs import child_error, matmul_outputs

LEVELS = [lvl for lvl in ("avx2", "avx512") if lvl in _core.cpu_levels()]
pytestmark = pytest.mark.skipif(not LEVELS, reason="no x86 SIMD level on this CPU")

# (encoding, rows, k): one token each
CASES = [("q4_k", 301, 512), ("q6_k", 37, 1024), ("q5_k", 7, 256), ("q4_k", 3, 2048)]

def _outputs(tmp_path, streams):
    cases = [(enc, n, k, 1) for enc, n, k in CASES]
    return matmul_outputs(tmp_path / f"s{streams}.npz", {"CYB_DECODE_STREAMS": str(streams)}, cases, LEVELS, 11)


def test_every_stream_count_gives_the_same_rows(tmp_path):
    outs = {s: _outputs(tmp_path, s) for s in (1, 2, 4, 8)}
    for i, case in enumerate(CASES):
        for lvl in LEVELS:
            key = f"{i}-{lvl}"
            assert np.all(np.isfinite(outs[1][key])), (case, lvl)
            for s in (2, 4, 8):
                assert np.array_equal(outs[s][key], outs[1][key]), (case, lvl, s)


def test_invalid_stream_count_is_an_error():
    code = ("import numpy as np; from cyb_llm import _core; from test_ops import random_weight; "
            "w, _ = random_weight('q4_k', 8, 256, np.random.default_rng(0)); "
            f"_core.run_op('matmul', [np.ones((1, 256), np.float32), w], {{}}, None, '{LEVELS[0]}', 'cpu')")
    err = child_error({"CYB_DECODE_STREAMS": "3"}, code)
    assert "CYB_DECODE_STREAMS" in err and "'3'" in err, err[-2000:]


def test_two_row_dot_gives_each_row_the_one_row_bits():
    """A matrix of 9 rows is read as pairs (row i with row i + len) and a leftover row; each row
    alone (one row: the one-row dot) must give the same bits: the two-row dot forms each row's sum
    as the one-row dot does (kquant_x86.h kq_decode_rows)."""
    from test_ops import random_weight

    for enc, k in (("q4_k", 2304), ("q5_k", 2048), ("q6_k", 2560)):
        rng = np.random.default_rng(5)
        (raw, _, (n, _)), _ = random_weight(enc, 9, k, rng)
        x = rng.standard_normal((1, k)).astype(np.float32)
        rows = raw.reshape(n, -1)
        for lvl in LEVELS:
            (y,) = _core.run_op("matmul", [x, (raw, enc, (n, k))], {}, None, lvl, "cpu")
            y = np.asarray(y)
            assert np.all(np.isfinite(y)), (enc, lvl)
            for i in range(n):
                (yi,) = _core.run_op("matmul", [x, (rows[i].copy(), enc, (1, k))], {}, None, lvl, "cpu")
                assert np.array_equal(np.asarray(yi)[0, 0], y[0, i]), (enc, lvl, i)
