"""The op matrix rows of the element-wise array ops of graph v2 (op.h tags 40-44: unary, binary,
where, cast, reduce) on the cpu backend at each of its levels, against numpy: every function, float
and integer and bool element types, numpy broadcasting (a scalar, a row, a column, 1 against n,
rank differences), negative and empty axes, empty dims, keepdims. Floats within `op-f32`
(docs/runtime.md), integers, booleans and casts exact."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch, UnsupportedOp
from tolerances import tolerance

TOL = tolerance("op-f32")
LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(40)


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    ref = ref.astype(np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) if ref.size else 0.0


def _run(op, inputs, attrs=None, level="auto"):
    return _core.run_op(op, inputs, attrs or {}, level=level)


_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "erf": _erf, "sin": np.sin, "cos": np.cos,
    "ceil": np.ceil, "floor": np.floor, "round": np.round, "sign": np.sign, "reciprocal": lambda x: 1 / x,
    "softplus": lambda x: np.logaddexp(0, x), "leaky_relu": lambda x: np.where(x >= 0, x, 0.2 * x),
    "clip": lambda x: np.clip(x, -0.5, 1.25),
}
ATTRS = {"leaky_relu": {"alpha": 0.2}, "clip": {"alpha": -0.5, "beta": 1.25}}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fn", sorted(UNARY))
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 1, 3, 2, 5), (0, 3)])
def test_unary_float(level, fn, shape):
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    if fn in ("log",):
        x = np.abs(x) + 0.01
    if fn == "reciprocal":
        x = np.where(np.abs(x) < 0.1, 0.5, x).astype(np.float32)
    got = _run("unary", [x], {"fn": fn, **ATTRS.get(fn, {})}, level)[0]
    assert got.dtype == np.float32
    assert _err(UNARY[fn](x.astype(np.float64)), got) <= TOL


@pytest.mark.parametrize("fn", ["neg", "abs", "sign", "clip"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_unary_int(fn, dtype):
    x = RNG.integers(-50, 50, (4, 9)).astype(dtype)
    got = _run("unary", [x], {"fn": fn, "alpha": -7.0, "beta": 11.0})[0]
    want = np.clip(x, -7, 11) if fn == "clip" else UNARY[fn](x)
    assert got.dtype == dtype and np.array_equal(got, want)


def test_unary_not_and_dtype_errors():
    b = RNG.integers(0, 2, (3, 4)).astype(bool)
    got = _run("unary", [b], {"fn": "not"})[0]
    assert got.dtype == np.bool_ and np.array_equal(got, ~b)
    f = np.array([0.0, np.nan, np.inf, -np.inf, -1.5, np.nan], np.float32)
    for fn, want in (("isnan", np.isnan(f)), ("isinf", np.isinf(f))):
        got = _run("unary", [f], {"fn": fn})[0]
        assert got.dtype == np.bool_ and np.array_equal(got, want), fn
    with pytest.raises(UnsupportedOp):
        _run("unary", [np.ones(3, np.float32)], {"fn": "not"})
    with pytest.raises(UnsupportedOp):
        _run("unary", [np.ones(3, np.int64)], {"fn": "exp"})
    with pytest.raises(InvalidConfig):
        _run("unary", [np.ones(3, np.float32)], {"fn": "cube"})


BROADCAST = [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 5), (3, 1)), ((3, 5), ()), ((1,), (4, 2)),
             ((2, 1, 4), (3, 1)), ((2, 3, 1, 4, 1), (1, 5)), ((0, 4), (4,)), ((4, 1), (1, 6)), ((0, 3), (0, 3))]
ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
         "min": np.minimum, "max": np.maximum, "mod": np.mod}
COMPARE = {"equal": np.equal, "less": np.less, "less_equal": np.less_equal, "greater": np.greater,
           "greater_equal": np.greater_equal}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("sa,sb", BROADCAST)
def test_binary_float(level, sa, sb):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    for fn, f in ARITH.items():
        aa, bb = (np.abs(a) + 0.5, b) if fn == "pow" else (a, b)
        bb = np.where(np.abs(bb) < 0.1, 0.7, bb).astype(np.float32) if fn in ("div", "mod") else bb
        got = _run("binary", [aa, bb], {"fn": fn}, level)[0]
        assert got.dtype == np.float32
        assert _err(f(aa.astype(np.float64), bb.astype(np.float64)), got) <= TOL, fn
    for fn, f in COMPARE.items():
        bq = np.round(b)  # ties, so equal / less_equal see equal values
        got = _run("binary", [np.round(a), bq.astype(np.float32)], {"fn": fn}, level)[0]
        assert got.dtype == np.bool_ and np.array_equal(got, f(np.round(a), bq)), fn


# The x86 levels' f32 kernel of add / sub / mul / div / min / max (nn_x86.inc): broadcast dims collapsed
# into runs where each input steps by 1 or 0, in vectors; each f32 result rounds as the reference's
# double result, so the levels agree with the scalar level bit for bit. Runs longer than a work item,
# vector tails, NaN (min / max pick as the reference).
FAST_BROADCAST = [((2, 3, 33, 40), (2, 3, 33, 40)), ((2, 3, 33, 40), (3, 1, 1)), ((2, 3, 33, 40), (40,)),
                  ((), (2, 3, 33, 40)), ((2, 3, 33, 40), ()), ((1, 3, 1, 40), (2, 1, 33, 1)),
                  ((70001,), (70001,)), ((5, 20003), (5, 1)), ((3, 1), (3, 20003))]


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv != "scalar"])
@pytest.mark.parametrize("sa,sb", FAST_BROADCAST, ids=str)
def test_binary_f32_fast_matches_scalar(level, sa, sb):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    for x, step in ((a, 7), (b, 11)):
        if x.size > 1:
            x.reshape(-1)[::step] = np.nan
    for fn in ("add", "sub", "mul", "div", "min", "max"):
        want = _run("binary", [a, b], {"fn": fn}, "scalar")[0]
        got = _run("binary", [a, b], {"fn": fn}, level)[0]
        assert np.array_equal(got, want, equal_nan=True), fn


@pytest.mark.parametrize("sa,sb", BROADCAST)
def test_binary_int_and_bool(sa, sb):
    a = RNG.integers(-40, 40, sa).astype(np.int64)
    b = RNG.integers(1, 9, sb).astype(np.int64) * RNG.choice([-1, 1], sb).astype(np.int64)
    for fn in ("add", "sub", "mul", "min", "max", "mod"):
        got = _run("binary", [a, b], {"fn": fn})[0]
        assert got.dtype == np.int64 and np.array_equal(got, ARITH[fn](a, b)), fn
    got = _run("binary", [a, b], {"fn": "div"})[0]  # truncation toward zero, as ONNX
    assert np.array_equal(got, np.trunc(a / b).astype(np.int64))
    got = _run("binary", [a, np.abs(b) % 4], {"fn": "pow"})[0]
    assert np.array_equal(got, np.power(a, np.abs(b) % 4))
    for fn, f in COMPARE.items():
        assert np.array_equal(_run("binary", [a, b], {"fn": fn})[0], f(a, b)), fn
    x, y = a > 0, b > 0
    for fn, f in {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.items():
        got = _run("binary", [x, y], {"fn": fn})[0]
        assert got.dtype == np.bool_ and np.array_equal(got, f(x, y)), fn


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("sa,sb", BROADCAST + [((1, 1, 150, 1), (3, 1, 1, 150)), ((2, 20000), (1, 20000))])
def test_binary_bool_levels(sa, sb, level):
    # and / or / xor on bool at every level (the x86 levels' broadcast runs)
    x, y = RNG.random(sa) > 0.5, RNG.random(sb) > 0.3
    for fn, f in {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.items():
        got = _run("binary", [x, y], {"fn": fn}, level)[0]
        assert got.dtype == np.bool_ and np.array_equal(got, f(x, y)), fn


def test_binary_errors():
    with pytest.raises(ShapeMismatch):
        _run("binary", [np.ones((3, 4), np.float32), np.ones((2, 4), np.float32)], {"fn": "add"})
    with pytest.raises(InvalidConfig):  # one dtype for both inputs
        _run("binary", [np.ones(3, np.float32), np.ones(3, np.int64)], {"fn": "add"})
    with pytest.raises(InvalidConfig, match="division by zero"):
        _run("binary", [np.ones(3, np.int64), np.zeros(3, np.int64)], {"fn": "div"})
    with pytest.raises(UnsupportedOp):
        _run("binary", [np.ones(3, np.float32), np.ones(3, np.float32)], {"fn": "and"})


@pytest.mark.parametrize("sc,sx,sy", [((3, 5), (3, 5), (3, 5)), ((3, 1), (5,), ()), ((2, 1, 4), (3, 1), (1,)),
                                      ((0, 2), (2,), (2,)), ((), (), ()), ((2, 0), (1,), (0,)),
                                      ((1, 1, 7, 7), (1,), (1, 2, 7, 7))])  # Piper's attention mask fill
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_where(sc, sx, sy, dtype):
    c = RNG.integers(0, 2, sc).astype(bool)
    x = (RNG.standard_normal(sx) * 9).astype(dtype)
    y = (RNG.standard_normal(sy) * 9).astype(dtype)
    got = _run("where", [c, x, y])[0]
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, np.where(c, x, y))


@pytest.mark.parametrize("to,np_to", [("f32", np.float32), ("f16", np.float16), ("i32", np.int32),
                                      ("i64", np.int64), ("u8", np.uint8), ("i8", np.int8), ("bool", np.bool_)])
def test_cast(to, np_to):
    f = np.array([-3.7, -0.5, 0.0, 0.4, 2.5, 100.9], np.float32)
    i = np.array([-3, 0, 1, 7, 100, 127], np.int64)
    b = np.array([True, False, True], np.bool_)
    for x in (f, i, b):
        if np_to in (np.uint8,) and x.dtype != np.bool_ and (x < 0).any():
            x = np.abs(x)
        got = _run("cast", [x], {"to": to})[0]
        assert got.dtype == np.dtype(np_to)
        want = x.astype(np_to) if np_to != np.bool_ else x != 0
        assert np.array_equal(got, want), (x.dtype, to)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,axes", [((3, 5), [1]), ((3, 5), [-1]), ((3, 5), []), ((2, 3, 4), [0, 2]),
                                        ((2, 3, 4, 5, 2), [1, -2]), ((4, 0, 3), [2]), ((1, 7), [0])])
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce(level, shape, axes, keepdims):
    x = RNG.standard_normal(shape).astype(np.float32)
    ax = tuple(axes) if axes else None
    for fn, f in {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}.items():
        if fn in ("max", "min", "mean") and 0 in shape:
            continue
        got = _run("reduce", [x], {"fn": fn, "axes": axes, "keepdims": keepdims}, level)[0]
        assert got.dtype == np.float32
        assert _err(f(x.astype(np.float64), axis=ax, keepdims=keepdims), got) <= TOL, fn
    xi = RNG.integers(-9, 9, shape).astype(np.int64)
    got = _run("reduce", [xi], {"fn": "sum", "axes": axes, "keepdims": keepdims}, level)[0]
    assert got.dtype == np.int64 and np.array_equal(got, np.sum(xi, axis=ax, keepdims=keepdims))


def test_reduce_errors():
    with pytest.raises(InvalidConfig):
        _run("reduce", [np.ones((2, 3), np.float32)], {"fn": "sum", "axes": [2]})
    with pytest.raises(ShapeMismatch):
        _run("reduce", [np.ones((2, 0), np.float32)], {"fn": "max", "axes": [1]})
