"""The index and data-dependent-shape ops of graph v2 (op.h tags 60-79: gather, gather_elements,
gather_nd, scatter_nd, scatter_elements, nonzero, range, cumsum, constant_of_shape, expand, tile,
random_normal_like, argmax) on the cpu backend against numpy (or a plain-Python reference where numpy
has no such op): odd shapes, negative indices and axes, empty dims, every element type an op takes,
and hostile values (indices out of range, outputs of 2^40 elements) that must be structured errors
before anything is allocated. Index ops move bytes, so results are exact; cumsum's float sums are
within `op-f32` (docs/runtime.md)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch, UnsupportedOp
from tolerances import tolerance

TOL = tolerance("op-f32")
LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(60)
BIG = 1 << 40


def _run(op, inputs, attrs=None, level="auto"):
    return _core.run_op(op, inputs, attrs or {}, level=level)


def _data(shape, dtype):
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-100, 100, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _same(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (got, want)


# ------------------------------------------------------------------ gather

GATHER_CASES = [((5,), (3,), 0), ((4, 3), (2, 2), 0), ((4, 3), (5,), 1), ((4, 3), (5,), -1),
                ((2, 3, 4), (), 1), ((2, 3, 4), (0,), 2), ((3, 0, 2), (4,), 0), ((2, 1, 3, 1, 2), (2, 3), -2)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.bool_, np.int8])
@pytest.mark.parametrize("xs,is_,axis", GATHER_CASES)
def test_gather(level, dtype, xs, is_, axis):
    x = _data(xs, dtype)
    dim = xs[axis]
    idx = RNG.integers(-dim, dim, is_) if dim else np.zeros(is_, np.int64)
    for it in (np.int64, np.int32):
        got = _run("gather", [x, idx.astype(it)], {"axis": axis}, level)[0]
        _same(got, np.take(x, idx, axis=axis))


def test_gather_errors():
    x = _data((4, 3), np.float32)
    with pytest.raises(InvalidConfig, match=r"gather\.indices.*index 4 at position 1.*\[-4, 4\)"):
        _run("gather", [x, np.array([0, 4], np.int64)])
    with pytest.raises(InvalidConfig, match="index -4 at position 0"):
        _run("gather", [x, np.array([-4], np.int64)], {"axis": 1})
    with pytest.raises(InvalidConfig, match="attrs.axis"):
        _run("gather", [x, np.array([0], np.int64)], {"axis": 2})
    with pytest.raises(UnsupportedOp):  # float indices
        _run("gather", [x, np.array([0.0], np.float32)])
    with pytest.raises(InvalidConfig, match="index 0 at position 0"):  # gathering from an empty dim
        _run("gather", [np.zeros((0, 3), np.float32), np.array([0], np.int64)])
    with pytest.raises(ShapeMismatch, match="more than 8 dims"):
        _run("gather", [np.zeros((1,) * 5, np.float32), np.zeros((1,) * 5, np.int64)])


# ------------------------------------------------------------------ gather_elements / scatter_elements


def _elements_ref(x, idx, axis):
    # data cut to indices' dims off the axis, then numpy's take_along_axis
    sl = tuple(slice(None) if d == axis % x.ndim else slice(0, idx.shape[d]) for d in range(x.ndim))
    return np.take_along_axis(x[sl], idx, axis=axis)


ELEM_CASES = [((5,), (7,), 0), ((4, 3), (2, 3), 0), ((4, 3), (4, 5), 1), ((4, 3), (3, 2), -1),
              ((2, 3, 4), (2, 2, 1), -2), ((2, 3, 4), (0, 3, 4), 0), ((2, 1, 3, 1, 2), (2, 1, 4, 1, 2), 2)]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
@pytest.mark.parametrize("xs,is_,axis", ELEM_CASES)
def test_gather_elements(dtype, xs, is_, axis):
    x = _data(xs, dtype)
    dim = xs[axis]
    idx = RNG.integers(-dim, dim, is_)
    for it in (np.int64, np.int32):
        got = _run("gather_elements", [x, idx.astype(it)], {"axis": axis})[0]
        _same(got, _elements_ref(x, idx, axis))


@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("xs,is_,axis", ELEM_CASES)
def test_scatter_elements(reduction, dtype, xs, is_, axis):
    x = _data(xs, dtype)
    dim = xs[axis]
    ax = axis % len(xs)
    # none: distinct targets along the axis (a repeated one is undefined in ONNX); add: repeats allowed
    if reduction == "none":
        if is_[ax] > dim:
            is_ = tuple(dim if d == ax else n for d, n in enumerate(is_))
        perm = np.argsort(RNG.random(is_[:ax] + (dim,) + is_[ax + 1:]), axis=ax)
        idx = np.take(perm, np.arange(is_[ax]), axis=ax) - dim * RNG.integers(0, 2, is_)
    else:
        idx = RNG.integers(-dim, dim, is_)
    upd = _data(is_, dtype)
    want = x.copy()
    for pos in itertools.product(*[range(n) for n in is_]):
        tgt = list(pos)
        tgt[ax] = idx[pos] % dim
        if reduction == "add":
            want[tuple(tgt)] += upd[pos]
        else:
            want[tuple(tgt)] = upd[pos]
    got = _run("scatter_elements", [x, idx, upd], {"axis": axis, "reduction": reduction})[0]
    if dtype == np.float32 and reduction == "add":
        assert got.shape == want.shape and np.abs(got - want).max() <= TOL * max(1, np.abs(want).max())
    else:
        _same(got, want)


def test_elements_errors():
    x = _data((4, 3), np.float32)
    with pytest.raises(InvalidConfig, match=r"gather_elements\.indices.*index 3 at position 3"):
        _run("gather_elements", [x, np.array([[0, 1], [2, 3]], np.int64)], {"axis": 1})
    with pytest.raises(ShapeMismatch, match="indices"):  # rank differs
        _run("gather_elements", [x, np.array([0, 1], np.int64)])
    with pytest.raises(ShapeMismatch, match="indices"):  # a dim larger than data's off the axis
        _run("gather_elements", [x, np.zeros((2, 4), np.int64)])
    with pytest.raises(InvalidConfig, match="index -5"):
        _run("scatter_elements", [x, np.array([[-5]], np.int64), np.ones((1, 1), np.float32)])
    with pytest.raises(ShapeMismatch, match="updates"):
        _run("scatter_elements", [x, np.zeros((1, 1), np.int64), np.ones((1, 2), np.float32)])
    with pytest.raises(InvalidConfig, match="updates"):
        _run("scatter_elements", [x, np.zeros((1, 1), np.int64), np.ones((1, 1), np.int64)])
    with pytest.raises(InvalidConfig, match="reduction"):
        _run("scatter_elements", [x, np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32)], {"reduction": "max"})


# ------------------------------------------------------------------ gather_nd / scatter_nd


def _gather_nd_ref(x, idx, b):
    bshape = idx.shape[:b]
    m = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[b + m:], x.dtype)
    for bi in itertools.product(*[range(n) for n in bshape]):
        for t in itertools.product(*[range(n) for n in idx.shape[b:-1]]):
            out[bi + t] = x[bi + tuple(int(v) for v in idx[bi + t])]
    return out


ND_CASES = [((5,), (3, 1), 0), ((4, 3), (2, 2), 0), ((4, 3), (5, 1), 0), ((2, 3, 4), (2, 2, 2), 0),
            ((2, 3, 4), (2, 1), 1), ((2, 3, 4), (2, 5, 2), 1), ((3, 2, 2, 3), (3, 2, 1, 1), 2), ((4, 3), (0, 2), 0),
            ((3, 0, 2), (2, 1), 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("xs,is_,b", ND_CASES)
def test_gather_nd(dtype, xs, is_, b):
    x = _data(xs, dtype)
    m = is_[-1]
    idx = np.stack([RNG.integers(-xs[b + k], xs[b + k], is_[:-1]) for k in range(m)], axis=-1).reshape(is_)
    for it in (np.int64, np.int32):
        got = _run("gather_nd", [x, idx.astype(it)], {"batch_dims": b})[0]
        _same(got, _gather_nd_ref(x, idx, b))


@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("xs,is_", [((5,), (3, 1)), ((4, 3), (2, 2)), ((4, 3), (3, 1)), ((2, 3, 4), (2, 2, 2)),
                                     ((2, 3, 4), (0, 1)), ((6,), (2, 2, 1))])
def test_scatter_nd(reduction, dtype, xs, is_):
    x = _data(xs, dtype)
    m = is_[-1]
    n = int(np.prod(is_[:-1]))
    # none: distinct targets (ONNX leaves repeats undefined); add: repeats on purpose
    cells = list(itertools.product(*[range(d) for d in xs[:m]]))
    pick = RNG.permutation(len(cells))[:n] if reduction == "none" else RNG.integers(0, len(cells), n)
    idx = np.array([cells[p] for p in pick], np.int64).reshape(is_) - np.array(xs[:m]) * RNG.integers(0, 2, is_)
    upd = _data(is_[:-1] + xs[m:], dtype)
    want = x.copy()
    for t in itertools.product(*[range(d) for d in is_[:-1]]):
        tgt = tuple(int(v) for v in idx[t])
        want[tgt] = want[tgt] + upd[t] if reduction == "add" else upd[t]
    got = _run("scatter_nd", [x, idx, upd], {"reduction": reduction})[0]
    if dtype == np.float32 and reduction == "add":
        assert got.shape == want.shape and np.abs(got - want).max() <= TOL * max(1, np.abs(want).max())
    else:
        _same(got, want)


def test_scatter_nd_repeated_index_keeps_the_last_update():
    got = _run("scatter_nd", [np.zeros(3, np.float32), np.array([[1], [1]], np.int64), np.array([5, 7], np.float32)])[0]
    assert got.tolist() == [0, 7, 0]


def test_nd_errors():
    x = _data((4, 3), np.float32)
    with pytest.raises(InvalidConfig, match=r"gather_nd\.indices.*index 3 at position 1.*dim 1"):
        _run("gather_nd", [x, np.array([[0, 3]], np.int64)])
    with pytest.raises(ShapeMismatch, match="last dim"):
        _run("gather_nd", [x, np.zeros((2, 3), np.int64)])
    with pytest.raises(InvalidConfig, match="batch_dims"):
        _run("gather_nd", [x, np.zeros((4, 1), np.int64)], {"batch_dims": 2})
    with pytest.raises(ShapeMismatch, match="batch dims"):
        _run("gather_nd", [x, np.zeros((3, 1), np.int64)], {"batch_dims": 1})
    with pytest.raises(InvalidConfig, match=r"scatter_nd\.indices.*index -5"):
        _run("scatter_nd", [x, np.array([[-5]], np.int64), np.ones((1, 3), np.float32)])
    with pytest.raises(ShapeMismatch, match="updates"):
        _run("scatter_nd", [x, np.array([[1]], np.int64), np.ones((1, 2), np.float32)])


# ------------------------------------------------------------------ nonzero


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.bool_, np.uint8])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 1, 3, 2), (0, 3), (4, 0, 2)])
def test_nonzero(dtype, shape):
    x = _data(shape, dtype)
    if x.size:
        x.flat[:: 2] = 0
    got = _run("nonzero", [x])[0]
    _same(got, np.array(np.nonzero(x), np.int64).reshape(len(shape), -1))


def test_nonzero_float_zeros_and_scalars():
    x = np.array([0.0, -0.0, np.nan, 1e-45, -2.0], np.float32)
    _same(_run("nonzero", [x])[0], np.array([[2, 3, 4]], np.int64))
    _same(_run("nonzero", [np.array(3.0, np.float32)])[0], np.zeros((1, 1), np.int64))  # a scalar: [1, n]
    _same(_run("nonzero", [np.array(0, np.int64)])[0], np.zeros((1, 0), np.int64))


# ------------------------------------------------------------------ range


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("s,l,d", [(0, 10, 1), (3, -7, -2), (5, 5, 1), (5, 3, 1), (-4, 9, 5), (0, 1, 7)])
def test_range_int(dtype, s, l, d):
    got = _run("range", [np.array(s, dtype), np.array(l, dtype), np.array(d, dtype)])[0]
    _same(got, np.arange(s, l, d, dtype=dtype))


@pytest.mark.parametrize("s,l,d", [(0.0, 10.0, 0.5), (3.0, -7.0, -0.25), (1.5, 1.5, 1.0), (-2.0, 3.0, 2.0)])
def test_range_f32_exact_steps(s, l, d):
    got = _run("range", [np.float32(s), np.float32(l), np.float32(d)])[0]
    _same(got, np.arange(s, l, d, dtype=np.float32))


def test_range_f32_accumulates_like_onnxruntime():
    got = _run("range", [np.float32(0.1), np.float32(7.3), np.float32(0.1)])[0]
    want, v = [], np.float32(0.1)
    n = int(np.ceil(np.float64(np.float32(7.3) - np.float32(0.1)) / np.float64(np.float32(0.1))))
    for _ in range(n):
        want.append(v)
        v = np.float32(v + np.float32(0.1))
    _same(got, np.array(want, np.float32))


def test_range_int64_extremes_exact():
    lo, hi = -(1 << 63), (1 << 63) - 1
    got = _run("range", [np.array(lo, np.int64), np.array(hi, np.int64), np.array(1 << 62, np.int64)])[0]
    assert got.tolist() == [lo, lo + (1 << 62), 0, 1 << 62]


def test_range_errors():
    i = lambda v: np.array(v, np.int64)  # noqa: E731
    with pytest.raises(InvalidConfig, match=r"range\.limit.*2\^31"):
        _run("range", [i(0), i(BIG), i(1)])
    with pytest.raises(InvalidConfig, match=r"range\.limit"):
        _run("range", [i(-(1 << 63)), i((1 << 63) - 1), i(1)])
    with pytest.raises(InvalidConfig, match=r"range\.limit"):
        _run("range", [np.float32(0), np.float32(1e12), np.float32(1)])
    with pytest.raises(InvalidConfig, match="delta"):
        _run("range", [i(0), i(5), i(0)])
    with pytest.raises(InvalidConfig, match="delta"):
        _run("range", [np.float32(0), np.float32(np.inf), np.float32(1)])
    with pytest.raises(InvalidConfig, match="one dtype"):
        _run("range", [i(0), np.array(5, np.int32), i(1)])
    with pytest.raises(ShapeMismatch, match="scalar"):
        _run("range", [i(0), np.array([5, 6], np.int64), i(1)])


# ------------------------------------------------------------------ cumsum


def _cumsum_ref(x, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    acc = np.cumsum(y.astype(np.float64) if x.dtype.kind == "f" else y, axis=axis)
    if exclusive:
        acc = acc - (y.astype(np.float64) if x.dtype.kind == "f" else y)
    acc = np.flip(acc, axis) if reverse else acc
    return acc.astype(x.dtype)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float16])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 1, 3, 4), 2), ((0, 3), 0), ((3, 0), 1)])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(level, dtype, shape, axis, exclusive, reverse):
    x = _data(shape, dtype)
    got = _run("cumsum", [x], {"axis": axis, "exclusive": exclusive, "reverse": reverse}, level)[0]
    want = _cumsum_ref(x, axis, exclusive, reverse)
    if dtype == np.float32:
        assert got.dtype == want.dtype and got.shape == want.shape
        assert (np.abs(got.astype(np.float64) - want).max() if want.size else 0) <= TOL * max(1.0, np.abs(want).max(initial=0))
    elif dtype == np.float16:
        assert got.dtype == want.dtype and np.allclose(got, want, rtol=tolerance("op-f16"), atol=1e-2)
    else:
        _same(got, want)


def test_cumsum_errors():
    with pytest.raises(InvalidConfig, match="cumsum.attrs.axis"):
        _run("cumsum", [np.ones((2, 3), np.float32)], {"axis": 2})
    with pytest.raises(UnsupportedOp):
        _run("cumsum", [np.ones(3, bool)], {"axis": 0})


# ------------------------------------------------------------------ constant_of_shape, expand, tile


@pytest.mark.parametrize("shape", [[3], [2, 0, 4], [], [1, 2, 3, 1, 2]])
@pytest.mark.parametrize("to,value,npdt", [("f32", 0.0, np.float32), ("f32", -1.5, np.float32), ("i64", 7, np.int64),
                                            ("i64", (1 << 53) - 1, np.int64), ("bool", 1, np.bool_), ("i32", -3, np.int32),
                                            ("f16", 0.25, np.float16)])
def test_constant_of_shape(shape, to, value, npdt):
    got = _run("constant_of_shape", [np.array(shape, np.int64)], {"value": value, "to": to})[0]
    _same(got, np.full(shape, value, npdt))


def test_constant_of_shape_defaults_to_f32_zeros():
    _same(_run("constant_of_shape", [np.array([2, 3], np.int64)])[0], np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("shape", [[BIG], [1 << 20, 1 << 20], [1 << 31, 2], [(1 << 62), (1 << 62)], [1 << 62, 4, 4]])
def test_constant_of_shape_hostile_sizes(shape):
    with pytest.raises(InvalidConfig, match=r"constant_of_shape\.shape.*2\^31"):
        _run("constant_of_shape", [np.array(shape, np.int64)])


def test_constant_of_shape_errors():
    with pytest.raises(InvalidConfig, match="negative"):
        _run("constant_of_shape", [np.array([2, -1], np.int64)])
    with pytest.raises(ShapeMismatch, match="1-D"):
        _run("constant_of_shape", [np.ones((9,), np.int64)])
    with pytest.raises(UnsupportedOp):
        _run("constant_of_shape", [np.array([2], np.int32)])


EXPAND_CASES = [((3, 1), [2, 1, 6]), ((1,), [4, 3]), ((2, 3), [3]), ((2, 3), [1, 1]), ((4, 1, 2), [1, 5, 1]),
                ((), [2, 2]), ((3, 1), [3, 0]), ((1, 1, 1, 1, 2), [2, 1, 3, 1, 1, 1]),
                # past the x86 kernel's chunk of a run (2^14 elements), rows and columns broadcast
                ((1, 1, 160, 1), [3, 1, 160, 130]), ((3, 1, 1, 130), [3, 1, 160, 130]), ((1, 20000), [2, 20000])]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
@pytest.mark.parametrize("xs,shape", EXPAND_CASES)
def test_expand(dtype, xs, shape, level):
    x = _data(xs, dtype)
    want = np.broadcast_to(x, np.broadcast_shapes(xs, tuple(shape)))
    _same(_run("expand", [x, np.array(shape, np.int64)], level=level)[0], np.ascontiguousarray(want))


def test_expand_errors():
    x = np.ones((3, 2), np.float32)
    with pytest.raises(ShapeMismatch, match="broadcast"):
        _run("expand", [x, np.array([4, 2], np.int64)])
    with pytest.raises(InvalidConfig, match="negative"):
        _run("expand", [x, np.array([-1, 2], np.int64)])
    with pytest.raises(InvalidConfig, match=r"expand\.shape.*2\^31"):
        _run("expand", [x, np.array([BIG, 3, 2], np.int64)])
    with pytest.raises(ShapeMismatch, match="1-D"):
        _run("expand", [x, np.ones(9, np.int64)])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.int8])
@pytest.mark.parametrize("xs,reps", [((3,), [2]), ((2, 3), [2, 1]), ((2, 3), [1, 3]), ((2, 1, 3), [2, 2, 0]),
                                      ((0, 2), [3, 2]), ((1, 2, 1, 2, 1), [1, 2, 3, 1, 2])])
def test_tile(dtype, xs, reps):
    x = _data(xs, dtype)
    _same(_run("tile", [x, np.array(reps, np.int64)])[0], np.tile(x, reps))


def test_tile_errors():
    x = np.ones((3, 2), np.float32)
    with pytest.raises(ShapeMismatch, match="one per dim"):
        _run("tile", [x, np.array([2], np.int64)])
    with pytest.raises(InvalidConfig, match="negative"):
        _run("tile", [x, np.array([2, -1], np.int64)])
    with pytest.raises(InvalidConfig, match=r"tile\.repeats.*2\^31"):
        _run("tile", [x, np.array([BIG, 1], np.int64)])
    with pytest.raises(InvalidConfig, match=r"tile\.repeats.*2\^31"):
        _run("tile", [x, np.array([1 << 62, 1 << 62], np.int64)])


# ------------------------------------------------------------------ random_normal_like

M64 = (1 << 64) - 1


def _mix(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _normals(seed, n):
    """The generator of core/counter_rng.h, in Python integers (exact) and numpy doubles."""
    key = _mix(seed & M64)
    a = np.array([_mix(key ^ (2 * i)) for i in range(n)], np.uint64)
    b = np.array([_mix(key ^ (2 * i + 1)) for i in range(n)], np.uint64)
    u1 = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) / 2.0**53
    u2 = (b >> np.uint64(11)).astype(np.float64) / 2.0**53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)


@pytest.mark.parametrize("seed", [0, 1, -7, (1 << 62) + 5])
@pytest.mark.parametrize("shape,dtype", [((4, 5), np.float32), ((3, 0), np.float32), ((2, 3, 7), np.float16)])
def test_random_normal_like_is_the_documented_generator(seed, shape, dtype):
    x = np.zeros(shape, dtype)
    got = _run("random_normal_like", [x], {"seed": seed, "mean": 0.5, "scale": 2.0})[0]
    want = (0.5 + 2.0 * _normals(seed, x.size)).astype(dtype).reshape(shape)
    assert got.dtype == dtype and got.shape == shape
    assert np.allclose(got, want, rtol=TOL if dtype == np.float32 else tolerance("op-f16"), atol=0)


def test_random_normal_like_statistics_and_seeds():
    x = np.zeros((200, 500), np.float32)
    a = _run("random_normal_like", [x], {"seed": 3})[0]
    moments = tolerance("rng-moments/100000")  # 200 x 500 draws
    assert abs(a.mean()) < moments and abs(a.std() - 1) < moments
    assert np.array_equal(a, _run("random_normal_like", [x], {"seed": 3})[0])  # deterministic
    assert not np.array_equal(a, _run("random_normal_like", [x], {"seed": 4})[0])
    # element i depends on (seed, i) only: a prefix of a longer draw
    assert np.array_equal(a.reshape(-1)[:1000], _run("random_normal_like", [np.zeros(1000, np.float32)], {"seed": 3})[0])
    with pytest.raises(UnsupportedOp):
        _run("random_normal_like", [np.zeros(3, np.int64)])


# ------------------------------------------------------------------ argmax


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float16])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 1, 3, 4), 2), ((0, 3), 1)])
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("last", [False, True])
def test_argmax(level, dtype, shape, axis, keepdims, last):
    x = RNG.integers(-3, 3, shape).astype(dtype)  # ties on purpose
    got = _run("argmax", [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, level)[0]
    if last:
        n = shape[axis]
        want = n - 1 - np.argmax(np.flip(x, axis), axis=axis, keepdims=keepdims)
    else:
        want = np.argmax(x, axis=axis, keepdims=keepdims)
    _same(got, want.astype(np.int64))


def test_argmax_nan_and_errors():
    x = np.array([[1.0, np.nan, 5.0, np.nan]], np.float32)
    _same(_run("argmax", [x], {"axis": 1})[0], np.array([[1]], np.int64))  # numpy: the first NaN
    with pytest.raises(ShapeMismatch, match="empty dim"):
        _run("argmax", [np.zeros((3, 0), np.float32)], {"axis": 1})
    with pytest.raises(InvalidConfig, match="argmax.attrs.axis"):
        _run("argmax", [np.zeros((3, 2), np.float32)], {"axis": -3})


def test_index_ops_are_in_the_schema():
    names = _core.op_names()
    for name, tag in [("gather", 60), ("gather_elements", 61), ("gather_nd", 62), ("scatter_nd", 63),
                      ("scatter_elements", 64), ("nonzero", 65), ("range", 66), ("cumsum", 67),
                      ("constant_of_shape", 68), ("expand", 69), ("tile", 70), ("random_normal_like", 71),
                      ("argmax", 72)]:
        assert names[name] == tag


# ------------------------------------------------------------------ through a version-2 graph


def _graph_model(tmp_path, nodes, constants, outputs):
    import cyb_llm
    from cyb_llm.writer import write_model

    graph = {"version": 2, "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}],
             "outputs": outputs, "constants": constants, "nodes": nodes}
    path = str(tmp_path / "g.model")
    write_model(path, name="g", config={"model_type": "onnx-graph"}, tensors=[], graph=graph)
    return cyb_llm.load(path, backend="cpu")


def test_data_dependent_shapes_through_the_graph_executor(tmp_path):
    """nonzero -> gather -> cumsum and range / constant_of_shape / expand sized by values at run time,
    through the executor (shapes inferred node by node from the host arrays)."""
    nodes = [
        {"name": "nz", "op": "nonzero", "inputs": ["x"], "outputs": ["nz"]},
        {"name": "g", "op": "gather", "inputs": ["x", "nz"], "outputs": ["g"], "attrs": {"axis": 0}},
        {"name": "cs", "op": "cumsum", "inputs": ["g"], "outputs": ["cs"], "attrs": {"axis": 1, "reverse": True}},
        {"name": "r", "op": "range", "inputs": ["zero", "five", "two"], "outputs": ["r"]},
        {"name": "rf", "op": "cast", "inputs": ["r"], "outputs": ["rf"], "attrs": {"to": "f32"}},
        {"name": "k", "op": "constant_of_shape", "inputs": ["shp"], "outputs": ["k"], "attrs": {"value": 1.5}},
        {"name": "e", "op": "expand", "inputs": ["k", "shp3"], "outputs": ["e"]},
    ]
    i64 = lambda name, shape, values: {"name": name, "dtype": "i64", "shape": shape, "values": values}  # noqa: E731
    constants = [i64("zero", [], [0]), i64("five", [], [5]), i64("two", [], [2]), i64("shp", [2], [2, 1]),
                 i64("shp3", [3], [4, 1, 3])]
    outputs = [{"name": "cs", "dtype": "f32", "shape": [1, "k"]}, {"name": "rf", "dtype": "f32", "shape": ["m"]},
               {"name": "e", "dtype": "f32", "shape": [4, 2, 3]}]
    m = _graph_model(tmp_path, nodes, constants, outputs)
    x = np.array([0, 2, 0, -1, 3, 0], np.float32)
    out = dict(m.run({"x": x}))
    np.testing.assert_array_equal(out["cs"], np.array([[4, 2, 3]], np.float32))
    np.testing.assert_array_equal(out["rf"], np.array([0, 2, 4], np.float32))
    np.testing.assert_array_equal(out["e"], np.full((4, 2, 3), 1.5, np.float32))
    out = dict(m.run({"x": np.zeros(4, np.float32)}))  # nothing nonzero: empty arrays flow on
    assert out["cs"].shape == (1, 0)


def test_hostile_sizes_in_a_graph_name_the_node(tmp_path):
    nodes = [{"name": "huge", "op": "constant_of_shape", "inputs": ["shp"], "outputs": ["k"]}]
    constants = [{"name": "shp", "dtype": "i64", "shape": [2], "values": [1 << 20, 1 << 20]}]
    # its shape is fixed by the file: refused at load, by the shape inference (docs/graph.md "Shapes
    # and the memory plan")
    with pytest.raises(InvalidConfig, match=r"huge\.shape.*2\^31"):
        _graph_model(tmp_path, nodes, constants, [{"name": "k", "dtype": "f32", "shape": ["a", "b"]}])
