"""slice_dyn and pad_dyn (op.h tags 73-74): ONNX Slice and Pad whose bounds / pads are run-time
i32 / i64 inputs, on the cpu backend against numpy (Python slicing has ONNX Slice's clamping rules,
negative steps included, but for one corner: _onnx_slice; a negative pad is a crop). They move bytes, so results are exact; hostile
values (step 0, repeated axes, crops past the dim, pads of 2^40) are structured errors before anything
is allocated."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch, UnsupportedOp

LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(73)
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min
DTYPES = [np.float32, np.float16, np.int64, np.int32, np.int8, np.bool_]


from test_ops_index import _data, _run, _same  # noqa: E402  (the array-op test helpers, defined once)


# ------------------------------------------------------------------ slice_dyn


def _onnx_slice(b, e, s, dim):
    """The slice of Python's slicing, but for a negative step a start before the dim's first element
    reads element 0 (ONNX clamps the start to [0, dim - 1]; Python gives nothing; onnxruntime 1.32
    follows ONNX)."""
    if s < 0 and b < 0 and b + dim < 0:
        b = 0
    return slice(b, e, s)


def _slice_ref(x, starts, ends, axes, steps):
    sl = [slice(None)] * x.ndim
    for b, e, a, s in zip(starts, ends, axes, steps):
        sl[int(a)] = _onnx_slice(int(b), int(e), int(s), x.shape[int(a)])
    return x[tuple(sl)]


def _bound(dim):
    r = RNG.integers(0, 8)
    if r == 0:
        return int(RNG.choice([I64_MAX, -I64_MAX, I64_MIN, I64_MAX - 1]))
    return int(RNG.integers(-dim - 3, dim + 4))


SHAPES = [(7,), (4, 5), (3, 1, 6), (2, 3, 4, 5), (5, 0, 3), (2, 1, 2, 1, 3)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dyn_random(level, shape, dtype):
    x = _data(shape, dtype)
    nd = len(shape)
    for trial in range(12):
        k = int(RNG.integers(1, nd + 1))
        axes = RNG.permutation(nd)[:k]
        neg = RNG.integers(0, 2, k).astype(bool)
        axes_in = np.where(neg, axes - nd, axes)  # negative axes count from the end
        starts = np.array([_bound(shape[a]) for a in axes], np.int64)
        ends = np.array([_bound(shape[a]) for a in axes], np.int64)
        steps = RNG.choice([1, 2, 3, -1, -2, -3, 7, -I64_MAX], k).astype(np.int64)
        want = _slice_ref(x, starts, ends, axes, steps)
        it = np.int64 if trial % 3 else np.int32
        if it == np.int32:
            starts, ends = np.clip(starts, -2 ** 31, 2 ** 31 - 1), np.clip(ends, -2 ** 31, 2 ** 31 - 1)
            steps = np.clip(steps, -2 ** 31, 2 ** 31 - 1)
            want = _slice_ref(x, starts, ends, axes, steps)
        got = _run("slice_dyn", [x, starts.astype(it), ends.astype(it), axes_in.astype(it), steps.astype(it)],
                   level=level)[0]
        _same(got, want)


def test_slice_dyn_defaults_and_reversal():
    x = _data((4, 6), np.float32)
    # no axes / steps: the leading dims, step 1
    got = _run("slice_dyn", [x, np.array([1], np.int64), np.array([-1], np.int64)])[0]
    _same(got, x[1:-1])
    got = _run("slice_dyn", [x, np.array([1, 2], np.int64), np.array([3, 5], np.int64)])[0]
    _same(got, x[1:3, 2:5])
    # no steps input, axes given
    got = _run("slice_dyn", [x, np.array([2], np.int64), np.array([I64_MAX], np.int64), np.array([-1], np.int64)])[0]
    _same(got, x[:, 2:])
    # reversal as torch.flip exports it: start -1, end -INT64_MAX, step -1
    rev = [np.array([-1], np.int64), np.array([-I64_MAX], np.int64), np.array([1], np.int64),
           np.array([-1], np.int64)]
    _same(_run("slice_dyn", [x] + rev)[0], x[:, ::-1])
    # INT64_MIN step: at most one element
    got = _run("slice_dyn", [x, np.array([5], np.int64), np.array([-I64_MAX], np.int64), np.array([1], np.int64),
                             np.array([I64_MIN], np.int64)])[0]
    _same(got, x[:, 5:None:-(2 ** 62)])
    # empty results
    got = _run("slice_dyn", [x, np.array([3], np.int64), np.array([1], np.int64)])[0]
    assert got.shape == (0, 6)
    got = _run("slice_dyn", [x, np.array([1], np.int64), np.array([3], np.int64), np.array([0], np.int64),
                             np.array([-1], np.int64)])[0]
    assert got.shape == (0, 6)


def test_slice_dyn_errors():
    x = _data((4, 6), np.float32)
    one = np.array([0], np.int64)
    with pytest.raises(InvalidConfig, match=r"slice_dyn\.steps.*step 0 is 0"):
        _run("slice_dyn", [x, one, one + 2, one, one * 0])
    with pytest.raises(InvalidConfig, match=r"slice_dyn\.axes.*appears twice"):
        _run("slice_dyn", [x, np.zeros(2, np.int64), np.ones(2, np.int64), np.array([1, -1], np.int64)])
    with pytest.raises(InvalidConfig, match=r"slice_dyn\.axes.*2 is not an axis"):
        _run("slice_dyn", [x, one, one + 1, one + 2])
    with pytest.raises(ShapeMismatch, match="ends: a 1-D array of 1 values"):
        _run("slice_dyn", [x, one, np.zeros(2, np.int64)])
    with pytest.raises(ShapeMismatch, match="steps: a 1-D array of 1 values"):
        _run("slice_dyn", [x, one, one + 1, one, np.ones((1, 1), np.int64)])
    with pytest.raises(InvalidConfig, match=r"slice_dyn\.axes.*2 is not an axis"):  # more bounds than dims
        _run("slice_dyn", [x, np.zeros(3, np.int64), np.ones(3, np.int64)])
    with pytest.raises(UnsupportedOp):  # float bounds
        _run("slice_dyn", [x, np.zeros(1, np.float32), np.ones(1, np.float32)])


# ------------------------------------------------------------------ pad_dyn


def _pad_ref(x, pads, mode, value, axes):
    nd = x.ndim
    axes = list(range(nd)) if axes is None else [a % nd for a in axes]
    na = len(axes)
    sl, widths = [slice(None)] * nd, [(0, 0)] * nd
    for i, a in enumerate(axes):
        b, e = int(pads[i]), int(pads[na + i])
        sl[a] = slice(-b if b < 0 else 0, x.shape[a] + e if e < 0 else None)
        widths[a] = (max(b, 0), max(e, 0))
    y = x[tuple(sl)]
    if mode == "constant":
        return np.pad(y, widths, mode="constant", constant_values=np.array(value).astype(x.dtype))
    return np.pad(y, widths, mode=mode)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 5), (1, 2, 3, 4)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_dyn_random(level, shape, dtype, mode):
    x = _data(shape, dtype)
    nd = len(shape)
    for trial in range(8):
        use_axes = trial % 2 == 1
        axes = [int(a) - (nd if RNG.integers(0, 2) else 0) for a in RNG.permutation(nd)[:RNG.integers(1, nd + 1)]] \
            if use_axes else None
        dims = [shape[a % nd] for a in (axes if use_axes else range(nd))]
        lo = [-(d // 2) for d in dims]  # crops keep at least half
        b = [int(RNG.integers(lo[i], 5)) for i in range(len(dims))]
        e = [int(RNG.integers(lo[i], 5)) for i in range(len(dims))]
        if mode == "reflect":  # pads smaller than what the crops leave (onnxruntime's rule)
            for i, d in enumerate(dims):
                kept = d - max(-b[i], 0) - max(-e[i], 0)
                b[i], e[i] = min(b[i], kept - 1), min(e[i], kept - 1)
        pads = np.array(b + e, np.int64)
        value = 0.0 if dtype == np.bool_ else float(RNG.integers(-5, 6))
        attrs = {"mode": mode}
        if value:
            attrs["value"] = value
        if use_axes:
            attrs["axes"] = axes
        it = np.int32 if trial % 3 == 0 else np.int64
        got = _run("pad_dyn", [x, pads.astype(it)], attrs, level)[0]
        _same(got, _pad_ref(x, pads, mode, value, axes))


def test_pad_dyn_errors():
    x = _data((3, 4), np.float32)
    with pytest.raises(ShapeMismatch, match="pads: a 1-D array of 2 values per padded axis"):
        _run("pad_dyn", [x, np.zeros(2, np.int64)])
    with pytest.raises(ShapeMismatch, match="pads"):
        _run("pad_dyn", [x, np.zeros(4, np.int64)], {"axes": [0]})
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads.*reflect pads must be smaller.*\(3\).*axis 0, dim 3"):
        _run("pad_dyn", [x, np.array([3, 0, 0, 0], np.int64)], {"mode": "reflect"})
    # as onnxruntime: the crops come first, reflect pads must fit what is left
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads.*reflect pads must be smaller.*\(2\).*axis 1, dim 4"):
        _run("pad_dyn", [x, np.array([0, -2, 0, 2], np.int64)], {"mode": "reflect"})
    _same(_run("pad_dyn", [x, np.array([0, -2, 0, 1], np.int64)], {"mode": "reflect"})[0],
          np.pad(x[:, 2:], [(0, 0), (0, 1)], mode="reflect"))
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads.*leave no valid dim.*axis 1"):
        _run("pad_dyn", [x, np.array([0, -3, 0, -2], np.int64)])
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads"):
        _run("pad_dyn", [x, np.array([0, 0, 1 << 40, 0], np.int64)])
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads.*2\^31"):
        _run("pad_dyn", [x, np.array([1 << 30, 1 << 30, 0, 0], np.int64)])
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.attrs\.axes.*appears twice"):
        _run("pad_dyn", [x, np.zeros(4, np.int64)], {"axes": [1, -1]})
    with pytest.raises(InvalidConfig, match=r"pad_dyn\.pads.*edge pads of an empty dim"):
        _run("pad_dyn", [np.zeros((0, 2), np.float32), np.array([1, 0, 0, 0], np.int64)], {"mode": "edge"})
    with pytest.raises(UnsupportedOp):  # float pads
        _run("pad_dyn", [x, np.zeros(4, np.float32)])


# ------------------------------------------------------------------ slice (static), by runs


@pytest.mark.parametrize("dtype", DTYPES)
def test_static_slice_moves_runs_of_any_dtype(dtype):
    """The static slice copies runs of the dims after its axis (one run per row at step 1): the same
    bytes as numpy's slicing for every element size, axes first / middle / last, steps > 1, empty."""
    x = _data((3, 5, 4, 2), dtype)
    for axis, rng in ((0, [1, 3, 1]), (1, [0, 5, 2]), (1, [-4, -1, 1]), (2, [1, 100, 3]), (3, [1, 2, 1]),
                      (-3, [4, 2, 1]), (2, [0, 4, 1])):
        idx = [slice(None)] * 4
        idx[axis] = slice(rng[0], rng[1], rng[2])
        _same(_run("slice", [x], {"axis": axis, "range": rng})[0], x[tuple(idx)])


# ------------------------------------------------------------------ transpose, by output rows


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_rows_of_any_dtype(dtype):
    """transpose walks output rows, each read with its source dim's stride: numpy's bytes for every
    element size, permutations keeping or moving the last dim, size-1 and empty dims, 0-d."""
    for shape, perm in (((3, 5), (1, 0)), ((2, 3, 4), (0, 2, 1)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 1, 2)),
                        ((1, 4, 1, 3), (3, 2, 1, 0)), ((2, 0, 3), (2, 1, 0)), ((2, 1, 3, 2, 2), (4, 0, 3, 1, 2)),
                        ((), ())):
        x = _data(shape, dtype)
        _same(_run("transpose", [np.asarray(x)], {"perm": list(perm)})[0], np.array(np.transpose(x, perm)))
