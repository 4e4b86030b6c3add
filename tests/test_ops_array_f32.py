"""The f32 loops of unary and binary (ref_array_ops.cc: add / sub / mul / div / min / max computed in
f32 over runs of trailing dims where each input is contiguous or one broadcast value; neg / abs /
leaky_relu / clip and the rest without the per-element dtype dispatch) give exactly the reference's
values: the result in double rounded once to f32 (bit for bit, NaN as NaN), over broadcasts that
make, break and skip runs (size-1 dims between them, an input contiguous in one trailing dim and
broadcast in the next, 0-d operands), with infinities, NaN, signed zeros and subnormals."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core

LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(41)

SHAPES = [((4, 7), (4, 7)), ((4, 7), (7,)), ((4, 7), (4, 1)), ((4, 7), ()), ((), (3, 5)), ((1,), (6, 2)),
          ((2, 3, 4), (3, 1)), ((2, 3, 4), (1, 4)), ((2, 1, 4), (2, 3, 1)), ((2, 3, 1, 4, 1), (1, 5)),
          ((1, 64, 37), (1, 64, 37)), ((1, 64, 37), (1, 1, 37)), ((1, 64, 37), (1, 64, 1)), ((5, 1, 1), (1, 1, 1)),
          ((3, 1, 2, 1, 5), (3, 4, 2, 6, 5)), ((0, 4), (4,))]
FNS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum,
       "max": np.maximum}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3.4e38, -3.4e38, 1.0, -1.0], np.float32)


def _data(shape):
    x = (RNG.standard_normal(shape) * 10.0 ** RNG.integers(-3, 4, shape)).astype(np.float32)
    if x.size:
        flat = x.reshape(-1)
        k = RNG.integers(0, flat.size, max(1, flat.size // 4))
        flat[k] = RNG.choice(SPECIAL, k.size)
    return x


def _same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, (got.shape, want.shape, got.dtype)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)  # NaN where the reference has NaN (its sign bit is no value)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # bit for bit: -0.0 too


def _double_rounded(f, a, b):
    with np.errstate(all="ignore"):
        return np.asarray(f(a.astype(np.float64), b.astype(np.float64))).astype(np.float32)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_f32_is_the_double_result_rounded_once(level, sa, sb):
    a, b = _data(sa), _data(sb)
    for fn, f in FNS.items():
        for x, y in ((a, b), (b, a)):
            got = _core.run_op("binary", [x, y], {"fn": fn}, level=level)[0]
            want = _double_rounded(f, x, y)
            if fn in ("min", "max"):  # the reference's a < b ? a : b (NaN: the second operand), not numpy's
                cmp = x.astype(np.float64) < y if fn == "min" else x.astype(np.float64) > y
                want = np.where(cmp, np.broadcast_to(x, want.shape), np.broadcast_to(y, want.shape)).astype(np.float32)
            _same(got, want)




@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fn", ["neg", "abs", "leaky_relu", "clip", "exp", "erf", "ceil", "sign"])
def test_unary_f32_is_the_double_result_rounded_once(level, fn):
    import math
    x = _data((3, 50))
    ref = {"neg": lambda v: -v, "abs": abs, "exp": math.exp, "erf": math.erf, "ceil": lambda v: float(np.ceil(np.float64(v))),
           "sign": lambda v: (v > 0) - (v < 0),
           "leaky_relu": lambda v: v if v >= 0 else float(np.float32(0.1)) * v,
           "clip": lambda v: -2.5 if v < -2.5 else (3.0 if v > 3.0 else v)}[fn]
    attrs = {"leaky_relu": {"alpha": 0.1}, "clip": {"alpha": -2.5, "beta": 3.0}}.get(fn, {})
    got = _core.run_op("unary", [x], {"fn": fn, **attrs}, level=level)[0]

    def one(v):
        v = float(v)
        if math.isnan(v):
            return 0.0 if fn == "sign" else v  # the reference's sign: neither > 0 nor < 0
        if math.isinf(v) and fn == "ceil":
            return v
        try:
            return float(ref(v))
        except OverflowError:
            return math.inf
    with np.errstate(over="ignore"):  # exp past f32's range: inf, as the kernel's rounding gives
        want = np.array([one(v) for v in x.reshape(-1)], np.float64).astype(np.float32).reshape(x.shape)
    _same(got, want)
