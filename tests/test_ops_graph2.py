"""The op matrix rows of the graph-v2 ops (op.h tags 33..39: sigmoid, tanh, sqrt, transpose, slice,
pad, lstm) on the cpu backend at each of its levels, against numpy in float64: odd shapes, 1 to 4
dims, negative axes and ONNX-style slice bounds (negative, past the end), the three pad modes, an
LSTM over several steps and batch rows with and without initial state. Tolerance `op-f32`
(docs/runtime.md). Their wgpu+rs kernels are tested in tests/test_wgpu_graph2.py; nox runs them
with the same kernels under its own math (tests/test_nox_graph2.py)."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch
from tolerances import tolerance

TOL = tolerance("op-f32")
LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(33)


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) if ref.size else 0.0


def _run(op, inputs, attrs=None, level="auto"):
    return _core.run_op(op, inputs, attrs or {}, level=level)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 17), (2, 1, 3, 33)])
def test_unary(level, shape):
    x = RNG.standard_normal(shape).astype(np.float32) * 4
    x64 = x.astype(np.float64)
    assert _err(1 / (1 + np.exp(-x64)), _run("sigmoid", [x], level=level)[0]) <= TOL
    assert _err(np.tanh(x64), _run("tanh", [x], level=level)[0]) <= TOL
    a = np.abs(x)
    assert _err(np.sqrt(a.astype(np.float64)), _run("sqrt", [a], level=level)[0]) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,perm", [((3, 5), [1, 0]), ((2, 3, 7), [0, 2, 1]), ((2, 3, 7), [1, 2, 0]),
                                        ((2, 1, 3, 5), [3, 1, 0, 2]), ((9,), [0]),
                                        # trailing dims kept in place: copied as runs (x86 levels)
                                        ((3, 5, 4), [1, 0, 2]), ((4, 7, 3, 8), [0, 2, 1, 3]),
                                        ((2, 3, 4, 5, 6), [2, 0, 1, 3, 4]), ((4, 128, 12, 32), [0, 2, 1, 3]),
                                        ((3, 2, 5, 1, 2), [1, 0, 2, 3, 4])])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_transpose(level, shape, perm, dtype):
    x = (RNG.standard_normal(shape) * 1000).astype(dtype)
    assert np.array_equal(_run("transpose", [x], {"perm": perm}, level)[0], x.transpose(perm))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,axis,rng", [
    ((4, 7), 1, [1, 6, 2]), ((4, 7), -1, [-3, 2 ** 62, 1]), ((4, 7), 0, [-100, -1, 1]), ((2, 5, 3), -2, [3, 2, 1]),
    ((2, 5, 3), 2, [0, 3, 5]), ((3, 2, 4, 5), -4, [1, 3, 1]), ((6,), 0, [5, 100, 3])])
def test_slice(level, shape, axis, rng):
    x = RNG.standard_normal(shape).astype(np.float32)
    idx = [slice(None)] * len(shape)
    idx[axis] = slice(max(rng[0], -shape[axis]) if rng[0] < 0 else rng[0], rng[1], rng[2])
    want = x[tuple(idx)]
    assert np.array_equal(_run("slice", [x], {"axis": axis, "range": rng}, level)[0], want)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("shape,pads", [((5,), [2, 3]), ((4, 7), [0, 3, 1, 2]), ((2, 3, 5), [1, 0, 4, 0, 2, 1])])
def test_pad(level, mode, shape, pads):
    x = RNG.standard_normal(shape).astype(np.float32)
    n = len(shape)
    width = [(pads[i], pads[n + i]) for i in range(n)]
    attrs = {"pads": pads, "mode": mode}
    if mode == "constant":
        attrs["value"] = 1.5
        want = np.pad(x, width, mode="constant", constant_values=1.5)
    else:
        want = np.pad(x, width, mode="reflect" if mode == "reflect" else "edge")
    assert np.array_equal(_run("pad", [x], attrs, level)[0], want)


def _lstm_ref(x, W, R, b, h, c):
    x, W, R, b = (a.astype(np.float64) for a in (x, W, R, b))
    H = R.shape[1]
    h, c = h.astype(np.float64), c.astype(np.float64)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    ys = []
    for s in range(x.shape[0]):
        g = x[s] @ W.T + h @ R.T + b[:4 * H] + b[4 * H:]
        i, o, f, cc = sig(g[:, :H]), sig(g[:, H:2 * H]), sig(g[:, 2 * H:3 * H]), np.tanh(g[:, 3 * H:])
        # the kernel carries the state in f32 between steps (as a caller carrying hn / cn sees it)
        c = (f * c + i * cc).astype(np.float32).astype(np.float64)
        h = (o * np.tanh(c)).astype(np.float32).astype(np.float64)
        ys.append(h)
    return np.stack(ys), h, c


@pytest.mark.parametrize("level", LEVELS)
# the last two: the SIMD kernels' lanes and tails (I, H not multiples of 8 or 16) and Silero's size
@pytest.mark.parametrize("S,B,I,H,init", [(1, 1, 3, 2, True), (5, 2, 7, 5, True), (4, 3, 16, 8, False),
                                          (3, 2, 37, 19, True), (1, 1, 128, 128, True)])
def test_lstm(level, S, B, I, H, init):
    x = RNG.standard_normal((S, B, I)).astype(np.float32)
    W = (RNG.standard_normal((4 * H, I)) * 0.5).astype(np.float32)
    R = (RNG.standard_normal((4 * H, H)) * 0.5).astype(np.float32)
    b = (RNG.standard_normal(8 * H) * 0.3).astype(np.float32)
    h0 = RNG.standard_normal((B, H)).astype(np.float32) if init else np.zeros((B, H), np.float32)
    c0 = RNG.standard_normal((B, H)).astype(np.float32) if init else np.zeros((B, H), np.float32)
    ins = [x, W, R, b, h0, c0] if init else [x, W, R, b]
    Y, hn, cn = _run("lstm", ins, {}, level)
    rY, rh, rc = _lstm_ref(x, W, R, b, h0, c0)
    for ref, got in ((rY, Y), (rh, hn), (rc, cn)):
        assert _err(ref, got) <= TOL, _err(ref, got)


def test_bad_attrs():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(InvalidConfig, match="perm"):
        _run("transpose", [x], {"perm": [0, 0]})
    with pytest.raises(InvalidConfig, match="axis"):
        _run("slice", [x], {"axis": -3, "range": [0, 1, 1]})
    with pytest.raises(InvalidConfig, match="step"):
        _run("slice", [x], {"axis": 0, "range": [0, 1, 0]})
    with pytest.raises(InvalidConfig, match="reflect"):
        _run("pad", [x], {"pads": [0, 3, 0, 0], "mode": "reflect"})
    with pytest.raises(ShapeMismatch):
        _run("lstm", [np.zeros((2, 1, 3), np.float32), np.zeros((8, 4), np.float32), np.zeros((8, 2), np.float32),
                      np.zeros(16, np.float32)])
