"""The array ops of graph v2 on wgpu+rs (shaders/wgsl/array.wgsl, array_nn.wgsl, inorm.wgsl, and for
index ops and integer / bool values index.wgsl, typed.wgsl): each op run through
`_core.run_op(..., backend="wgpu+rs")` against the cpu reference kernel (the f64 sums of
ref_array_*.cc), within `op-f32` (docs/runtime.md) for float sums and equal for moves, integer and
bool results, and checked to have run on wgpu+rs (not as a cpu fallback); the ops without a kernel
fall back to the cpu, visibly. Version-2 graphs end to end: the Silero VAD imported from ONNX,
loaded with backend="wgpu+rs", within `onnx-vs-onnxruntime` of onnxruntime, its dispatch records
naming the nodes that fell back; values kept on the device between nodes (submits counted). Runs on
any adapter (lavapipe in CI); skips, saying why, only when no adapter exists."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cyb_llm import _core
from placement import wgpu_skip_reason
from serve_proc import child_env
from tolerances import tolerance

REASON = wgpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
TOL = tolerance("op-f32")
RNG = np.random.default_rng(44)


def _rel(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.all(np.isfinite(got)), "non-finite output"
    ref = ref.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _both(op, inputs, attrs=None):
    """(cpu result, wgpu+rs result), asserting the second ran on wgpu+rs."""
    ref = _core.run_op(op, inputs, {**(attrs or {}), "precise": True}, level="scalar", backend="cpu")
    got = _core.run_op(op, inputs, attrs or {}, level="auto", backend="wgpu+rs")
    assert _core.last_run_op_backend() == "wgpu+rs", (op, attrs, _core.last_run_op_backend())
    return ref, got


def _check(op, inputs, attrs=None):
    ref, got = _both(op, inputs, attrs)
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        assert _rel(r, g) <= TOL, (op, attrs, _rel(r, g))


def _x(*shape, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


UNARY = ["neg", "abs", "exp", "log", "erf", "sin", "cos", "ceil", "floor", "round", "sign", "reciprocal",
         "softplus", "leaky_relu", "clip"]


@pytest.mark.parametrize("fn", UNARY)
@pytest.mark.parametrize("shape", [(7,), (2, 1, 3, 2, 5), (300, 257)])
def test_unary(fn, shape):
    x = _x(*shape)
    if fn == "log":
        x = np.abs(x) + 0.01
    if fn == "reciprocal":
        x = np.where(np.abs(x) < 0.1, 0.5, x).astype(np.float32)
    if fn in ("round",):  # halves exactly, both ways
        x.flat[:4] = [0.5, 1.5, -2.5, 2.5][: x.size]
    _check("unary", [x], {"fn": fn, "alpha": -0.5 if fn == "clip" else 0.2, "beta": 1.25})


@pytest.mark.parametrize("op", ["sigmoid", "tanh", "sqrt"])
def test_sigmoid_tanh_sqrt(op):
    x = _x(5, 33)
    _check(op, [np.abs(x) if op == "sqrt" else x])


BCAST = [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 5), (3, 1)), ((1,), (2, 3, 4)), ((2, 1, 4), (3, 1)),
         ((4, 1, 3, 1, 2), (5, 1, 1, 2))]


@pytest.mark.parametrize("fn", ["add", "sub", "mul", "div", "pow", "min", "max", "mod"])
@pytest.mark.parametrize("shapes", BCAST)
def test_binary_broadcast(fn, shapes):
    a, b = _x(*shapes[0]), _x(*shapes[1])
    if fn == "pow":
        a = np.abs(a) + 0.1
        b = (b / 3).astype(np.float32)
    if fn in ("div", "mod"):
        b = np.where(np.abs(b) < 0.2, 0.7, b).astype(np.float32)
    _check("binary", [a, b], {"fn": fn})


def test_pow_negative_base_integer_exponent():
    a = _x(4, 6)
    b = np.tile(np.array([2.0, 3.0, -1.0, 0.0, 1.0, 4.0], np.float32), (4, 1))
    _check("binary", [a, b], {"fn": "pow"})


@pytest.mark.parametrize("shapes", [((3, 5), (3, 5), (3, 5)), ((5,), (3, 1), (1, 5)), ((2, 1, 4), (3, 1), (4,))])
def test_where(shapes):
    c = RNG.random(shapes[0]) > 0.5
    _check("where", [c, _x(*shapes[1]), _x(*shapes[2])])


@pytest.mark.parametrize("perm", [[1, 0], [0, 2, 1], [2, 0, 1], [3, 1, 0, 2]])
def test_transpose(perm):
    x = _x(*[2, 3, 4, 5][: len(perm)])
    _check("transpose", [x], {"perm": perm})


@pytest.mark.parametrize("axis,rng", [(0, [1, 3, 1]), (1, [0, 100, 2]), (-1, [-4, -1, 1]), (2, [1, 5, 3])])
def test_slice(axis, rng):
    _check("slice", [_x(4, 5, 6)], {"axis": axis, "range": rng})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[0, 2, 0, 3], [1, 0, 2, 2], [0, 0, 0, 0]])
def test_pad(mode, pads):
    _check("pad", [_x(3, 5)], {"mode": mode, "pads": pads, "value": 1.5})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = [[2, 3, 4] for _ in range(3)]
    for i, s in enumerate(shapes):
        s[axis] = i + 1
    _check("concat", [_x(*s) for s in shapes], {"axis": axis})


def test_concat_many_inputs():
    _check("concat", [_x(2, 1) for _ in range(12)], {"axis": 1})  # more than the dispatcher's 8 transfer slots


@pytest.mark.parametrize("fn", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axes,keep", [([], False), ([1], True), ([0, 2], False), ([-1], True), ([1, 2], True)])
def test_reduce(fn, axes, keep):
    _check("reduce", [_x(3, 40, 7)], {"fn": fn, "axes": axes, "keepdims": keep})


def test_reduce_sum_compensated():
    """The GPU's sums are compensated (and kept so on a compiler that reassociates: lavapipe's):
    1e8 followed by 1000 ones sums to 1e8 + 1000 (a plain f32 sum drops every one)."""
    x = np.ones(1001, np.float32)
    x[0] = 1e8
    _check("reduce", [x], {"fn": "sum", "axes": []})
    _check("reduce", [np.stack([x, -x])], {"fn": "mean", "axes": [1]})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_axis(axis):
    _check("softmax_axis", [_x(4, 9, 33)], {"axis": axis})


def test_instance_norm():
    _check("instance_norm", [_x(2, 3, 50), _x(3), _x(3)], {"eps": 1e-5})
    _check("instance_norm", [_x(1, 4, 6, 7), _x(4), _x(4)], {"eps": 1e-3})
    # rows longer than one invocation may loop on lavapipe (65535 iterations): the terrain UNet's
    # decoder normalizes 32 rows of 32768 values; one workgroup a row shares each row out
    _check("instance_norm", [_x(1, 2, 70000), _x(2), _x(2)], {"eps": 1e-5})


@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)),
                                   ((7,), (7, 3)), ((5, 7), (7,)), ((4, 64), (64, 9))])
def test_matmul_nd(sa, sb):
    _check("matmul_nd", [_x(*sa), _x(*sb)])


CONV = [  # x shape, w shape, attrs
    ((1, 3, 20), (4, 3, 5), {}),
    ((2, 4, 17), (6, 2, 3), {"group": 2, "pads": [1, 2], "strides": [2], "dilations": [2]}),
    ((1, 2, 9, 8), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 7), (4, 1, 3, 2), {"group": 4, "strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 2, 0]}),
    # group 1, >= 16 output channels, K = C k0 k1 >= 32: the tiled implicit GEMM (conv_gemm.wgsl);
    # odd sizes, partial row / column / K tiles, several chunks of K and tiles of each
    ((2, 37, 11, 13), (70, 37, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 33, 17, 9), (19, 33, 3, 3), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    ((2, 64, 7, 5), (130, 64, 1, 1), {}),
    ((1, 40, 9, 10), (24, 40, 3, 2), {"strides": [2, 1], "dilations": [2, 1], "pads": [2, 1, 1, 0]}),
    ((3, 48, 29), (32, 48, 5), {"pads": [2, 2]}),  # 1-D: one row
    ((1, 4, 23, 31), (96, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # few channels: K = 36
    # one tile, K of 36 and 29 chunks of 32: K split (SPLITK; splitk_parts) into 8 parts of 5 chunks
    # but the last (1), and 6 parts of 5 but the last (4)
    ((1, 128, 5, 6), (24, 128, 3, 3), {}),
    ((2, 100, 4, 3), (20, 100, 3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", range(len(CONV)))
def test_conv(case, bias):
    xs, ws, attrs = CONV[case]
    ins = [_x(*xs), _x(*ws)] + ([_x(ws[0])] if bias else [])
    _check("conv", ins, attrs)


@pytest.mark.parametrize("case", range(len(CONV)))
def test_conv_f16_weights(case):
    """f16 weights (the F16 variants of array_nn.wgsl CONV and conv_gemm.wgsl, incl. SPLITK: pairs of
    halves widened exactly; row 5 holds an odd count): within `op-f32` of the cpu reference on
    the same f16 weights, on wgpu+rs."""
    xs, ws, attrs = CONV[case]
    _check("conv", [_x(*xs), _x(*ws).astype(np.float16), _x(ws[0])], attrs)


def test_conv_gemm_unsplit(tmp_path):
    """The tiled conv with K unsplit (CYB_WGPU_SPLITK=0, read once: in a child process) on the rows
    that split K above (the rows of 2+ chunks of K here take splitk_parts' parts)."""
    rows = [4, 5, 10, 11]
    ins = {}
    for r in rows:
        xs, ws, _ = CONV[r]
        ins[f"x{r}"], ins[f"w{r}"], ins[f"b{r}"] = _x(*xs), _x(*ws), _x(ws[0])
    np.savez(tmp_path / "in.npz", **ins)
    code = (
        "import json, sys, numpy as np\n"
        "from cyb_llm import _core\n"
        "d = np.load(sys.argv[1]); out = {}\n"
        "for r, attrs in json.loads(sys.argv[3]).items():\n"
        "    y = _core.run_op('conv', [d['x' + r], d['w' + r], d['b' + r]], attrs, level='auto', backend='wgpu+rs')\n"
        "    assert _core.last_run_op_backend() == 'wgpu+rs'\n"
        "    out['y' + r] = y[0]\n"
        "np.savez(sys.argv[2], **out)\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.npz"), str(tmp_path / "out.npz"),
                        json.dumps({str(r): CONV[r][2] for r in rows})],
                       env=child_env(CYB_WGPU_SPLITK="0"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    for r in rows:
        x, w, b = ins[f"x{r}"], ins[f"w{r}"], ins[f"b{r}"]
        (ref,) = _core.run_op("conv", [x, w, b], {**CONV[r][2], "precise": True}, level="scalar", backend="cpu")
        assert _rel(ref, got[f"y{r}"]) <= TOL, (r, _rel(ref, got[f"y{r}"]))


CONVT = [
    ((1, 3, 7), (3, 2, 4), {}),
    ((2, 4, 6), (4, 3, 3), {"group": 2, "strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 2], "dilations": [1, 2], "pads": [1, 0, 0, 1]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", range(len(CONVT)))
def test_conv_transpose(case, bias):
    xs, ws, attrs = CONVT[case]
    g = attrs.get("group", 1)
    ins = [_x(*xs), _x(*ws)] + ([_x(ws[1] * g)] if bias else [])
    _check("conv_transpose", ins, attrs)


@pytest.mark.parametrize("case", range(len(CONVT)))
def test_conv_transpose_f16_weights(case):
    xs, ws, attrs = CONVT[case]
    _check("conv_transpose", [_x(*xs), _x(*ws).astype(np.float16), _x(ws[1] * attrs.get("group", 1))], attrs)


def test_integer_ops_fall_back_visibly():
    """The integer and bool ops without a WGSL kernel (integer div / mod, i64 -> f32 casts, integer
    prod and mean) run on the cpu, recorded as a fallback."""
    a = RNG.integers(-9, 9, (3, 4)).astype(np.int64)
    b = np.where(a == 0, 5, a)
    got = _core.run_op("binary", [a, b], {"fn": "div"}, level="auto", backend="wgpu+rs")[0]
    assert _core.last_run_op_backend() == "cpu (fallback)"
    assert got.dtype == np.int64 and np.array_equal(got, np.trunc(a / b).astype(np.int64))
    got = _core.run_op("cast", [a], {"to": "f32"}, level="auto", backend="wgpu+rs")[0]
    assert _core.last_run_op_backend() == "cpu (fallback)" and np.array_equal(got, a.astype(np.float32))
    got = _core.run_op("reduce", [a], {"fn": "prod", "axes": [1]}, level="auto", backend="wgpu+rs")[0]
    assert _core.last_run_op_backend() == "cpu (fallback)" and np.array_equal(got, a.prod(1, keepdims=True))


@pytest.mark.parametrize("fn", ["isnan", "isinf"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_isnan_isinf_on_device(fn, shape):
    """isnan / isinf of f32 (typed.wgsl, from the bits) equal to the cpu's on NaNs of either sign and
    payload, both infinities, the largest finite values, zeros and denormals; odd counts fill the
    last packed bool word partly."""
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(np.float32).max,
                        -np.finfo(np.float32).max, 1e-45, 1.0], np.float32)
    special[1] = np.frombuffer(np.uint32(0xFFC00001).tobytes(), np.float32)[0]  # a NaN with a payload
    x = _x(*shape).ravel()
    x[: min(x.size, special.size)] = special[: x.size]
    x = RNG.permutation(x).reshape(shape)
    got = _core.run_op("unary", [x], {"fn": fn}, level="auto", backend="wgpu+rs")[0]
    assert _core.last_run_op_backend() == "wgpu+rs"
    (ref,) = _core.run_op("unary", [x], {"fn": fn}, level="scalar", backend="cpu")
    assert got.dtype == np.bool_ and np.array_equal(got, ref)
    assert np.array_equal(ref, np.isnan(x) if fn == "isnan" else np.isinf(x))


# ---- integer and bool element-wise ops (shaders/wgsl/typed.wgsl): 64-bit pairs, equal to the cpu's

_INTS = {np.int32: (-(2 ** 31), 2 ** 31 - 1), np.int64: (-(2 ** 62), 2 ** 62)}


def _ints(dt, *shape, small=False):
    lo, hi = (-50, 50) if small else _INTS[dt]
    return RNG.integers(lo, hi, shape, dtype=np.int64).astype(dt)


@pytest.mark.parametrize("dt", [np.int32, np.int64])
@pytest.mark.parametrize("fn", ["add", "sub", "mul", "min", "max", "equal", "less", "less_equal", "greater",
                                "greater_equal"])
@pytest.mark.parametrize("shapes", [((3, 5), (3, 5)), ((2, 1, 4), (3, 1)), ((1,), (2, 3, 4))])
def test_integer_binary(dt, fn, shapes):
    """Full-range values: add / sub / mul wrap as the cpu's 64-bit arithmetic does (carries across
    the words of an i64); equal values planted for the comparisons."""
    a, b = _ints(dt, *shapes[0]), _ints(dt, *shapes[1])
    if fn.startswith(("equal", "less", "greater")):
        a.flat[:2] = b.flat[:2] if a.shape == b.shape else a.flat[:2]
    _exact("binary", [a, b], {"fn": fn})


@pytest.mark.parametrize("fn", ["equal", "less", "less_equal", "greater", "greater_equal"])
def test_f32_comparisons(fn):
    a, b = _x(5, 7), _x(7)
    a[0] = b
    _exact("binary", [a, b], {"fn": fn})


@pytest.mark.parametrize("fn", ["and", "or", "xor", "equal"])
def test_bool_logic(fn):
    _exact("binary", [RNG.random((3, 1, 5)) > 0.5, RNG.random((4, 5)) > 0.5], {"fn": fn})


def test_unary_not_neg_abs():
    _exact("unary", [RNG.random((7, 9)) > 0.5], {"fn": "not"})
    for dt in (np.int32, np.int64):
        x = _ints(dt, 5, 6)
        _exact("unary", [x], {"fn": "neg"})
        _exact("unary", [x], {"fn": "abs"})


@pytest.mark.parametrize("src,to", [(s, t) for s in ("f32", "i32", "bool", "i64") for t in ("i64", "i32", "bool", "f32")
                                    if (s, t) != ("i64", "f32")])  # i64 -> f32: the cpu (test above)
def test_cast(src, to):
    x = {"f32": (_x(6, 5) * 1e3).astype(np.float32), "i32": _ints(np.int32, 6, 5),
         "bool": RNG.random((6, 5)) > 0.5, "i64": _ints(np.int64, 6, 5)}[src]
    if src == "f32":
        x[0, :4] = [0.0, -0.0, 3e9, -5e9]  # zeros to bool; beyond i32 to i64
        if to == "i32":
            x[0, 2:4] = [7.9, -7.9]
    _exact("cast", [x], {"to": to})


@pytest.mark.parametrize("shape,groups", [((2, 6, 7), 3), ((1, 4, 3, 5), 2), ((1, 4, 3, 5), 4), ((2, 3, 40), 1)])
def test_group_norm(shape, groups):
    _check("group_norm", [_x(*shape), _x(shape[1]), _x(shape[1])], {"eps": 1e-5, "num_groups": groups})


COORDS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
RESIZE = [((1, 2, 5, 4), (1, 2, 10, 8)), ((1, 3, 7, 6), (1, 3, 3, 11)), ((2, 2, 9), (2, 2, 6)), ((3, 1, 1, 3), (3, 1, 1, 5))]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("case", range(len(RESIZE)))
def test_resize_linear(coord, case):
    shape, sizes = RESIZE[case]
    _check("resize", [_x(*shape)], {"sizes": list(sizes), "mode": "linear", "coordinate_transformation_mode": coord})


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("case", range(len(RESIZE)))
def test_resize_nearest(coord, nearest, case):
    """Nearest picks source values: the GPU's equal the cpu's exactly (the source indices come from
    the host, computed as the cpu computes them)."""
    shape, sizes = RESIZE[case]
    ref, got = _both("resize", [_x(*shape)], {"sizes": list(sizes), "mode": "nearest",
                                              "coordinate_transformation_mode": coord, "nearest_mode": nearest})
    np.testing.assert_array_equal(got[0], ref[0])


POOL = [  # x shape, mode, kernel, strides, pads, dilations, count_include_pad, ceil_mode
    ((1, 2, 7, 8), "max", (3, 2), (2, 2), (1, 1, 1, 1), (1, 1), False, True),
    ((2, 3, 9, 9), "max", (2, 2), (1, 1), (0, 0, 0, 0), (2, 2), False, False),
    ((1, 2, 7, 8), "avg", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False),
    ((1, 2, 7, 8), "avg", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False),
    ((1, 2, 8, 7), "avg", (2, 3), (2, 2), (0, 1, 0, 1), (1, 1), True, True),
    ((1, 3, 10), "avg", (4,), (3,), (0, 2), (1,), True, False),
    ((1, 2, 5), "max", (2,), (2,), (1, 1), (1,), False, True),
]


@pytest.mark.parametrize("case", range(len(POOL)))
def test_pool(case):
    xs, mode, k, s, pads, d, cip, ceil = POOL[case]
    attrs = {"mode": mode, "kernel_shape": list(k), "strides": list(s), "pads": list(pads),
             "count_include_pad": cip, "ceil_mode": ceil}
    if mode == "max":
        attrs["dilations"] = list(d)
    _check("pool", [_x(*xs)], attrs)


@pytest.mark.parametrize("S,B,I,H", [(5, 2, 7, 10), (3, 1, 16, 300), (1, 3, 4, 1), (9, 2, 33, 64)])
@pytest.mark.parametrize("state", [0, 1, 2])
def test_lstm(S, B, I, H, state):
    """lstm.wgsl: with no initial state, h0 only, h0 and c0; H = 300 has threads owning two units."""
    ins = [_x(S, B, I, scale=1.0), _x(4 * H, I, scale=0.3), _x(4 * H, H, scale=0.3), _x(8 * H, scale=0.3)]
    ins += [_x(B, H, scale=0.5), _x(B, H, scale=0.5)][:state]
    _check("lstm", ins)


# ---- version-2 graphs end to end on wgpu+rs

def _fallbacks(m) -> set:
    return {(r["label"], r["op"]) for r in m.dispatch_records if r["fallback"] or r["backend"] != "wgpu+rs"}


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from test_onnx_silero import _silero_path

    src = _silero_path()
    out = str(tmp_path_factory.mktemp("onnx") / "vad.model")
    from cyb_llm.cli import main

    assert main(["import", src, "-o", out]) == 0
    return src, out


def test_silero_on_wgpu_matches_onnxruntime(silero):
    """Silero VAD v6 loaded with backend='wgpu+rs': every node runs on wgpu+rs (none falls back to
    the cpu, by its dispatch records); every output within
    `onnx-vs-onnxruntime` of onnxruntime over seq_len 1, 3 and 8 with the state carried 3 calls."""
    import onnxruntime as ort

    import cyb_llm
    from test_onnx_silero import _chunks, _err

    tol = tolerance("onnx-vs-onnxruntime")
    src, path = silero
    m = cyb_llm.load(path, backend="wgpu+rs")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(45)
    worst = 0.0
    for n in (1, 3, 8):
        h = np.zeros((1, 1, 128), np.float32)
        c = np.zeros((1, 1, 128), np.float32)
        mine = m.session()
        for _ in range(3):
            x = _chunks(rng, n)
            ref = dict(zip(["speech_probs", "hn", "cn"], sess.run(None, {"input": x, "h": h, "c": c})))
            got = mine.run({"input": x})
            for k in ref:
                e = _err(ref[k], got[k])
                worst = max(worst, e)
                assert e <= tol, (n, k, e)
            h, c = ref["hn"], ref["cn"]
    ops = {r["op"] for r in m.dispatch_records if r["backend"] == "wgpu+rs" and not r["fallback"]}
    assert {"conv", "pad", "slice", "sqrt", "sigmoid", "relu"} <= ops, ops
    assert "lstm" in ops and not _fallbacks(m), _fallbacks(m)
    print(f"silero on wgpu+rs: max error vs onnxruntime {worst:.3g}; fell back: {sorted(_fallbacks(m))}")


def test_graph_host_values_and_fallbacks(tmp_path):
    """A version-2 graph on wgpu+rs mixing data-dependent i64 nodes (nonzero: its count from a host
    copy of its input (the shape rule), its indices written by nonzero.wgsl; gather: on the GPU) with
    f32 nodes on the GPU; a concat of 10 i64 arrays falls back as it is (no transfer, so no limit of 8
    inputs), the same concat of f32 arrays runs on wgpu+rs; an empty f32 array (nothing nonzero)
    is left to the cpu, visibly. Every value equals numpy's."""
    import cyb_llm
    from cyb_llm.writer import write_model

    nodes = [{"name": "nz", "op": "nonzero", "inputs": ["x"], "outputs": ["nz"]},
             {"name": "g", "op": "gather", "inputs": ["x", "nz"], "outputs": ["g"], "attrs": {"axis": 0}},
             {"name": "s", "op": "sigmoid", "inputs": ["g"], "outputs": ["s"]},
             {"name": "cat_i64", "op": "concat", "inputs": ["nz"] * 10, "outputs": ["ci"], "attrs": {"axis": 1}},
             {"name": "cat_f32", "op": "concat", "inputs": ["s"] * 10, "outputs": ["cf"], "attrs": {"axis": 1}}]
    outputs = [{"name": "s", "dtype": "f32", "shape": [1, "k"]}, {"name": "ci", "dtype": "i64", "shape": [1, "m"]},
               {"name": "cf", "dtype": "f32", "shape": [1, "m"]}]
    graph = {"version": 2, "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}], "outputs": outputs,
             "constants": [], "nodes": nodes}
    path = str(tmp_path / "g.model")
    write_model(path, name="g", config={"model_type": "onnx-graph"}, tensors=[], graph=graph)
    m = cyb_llm.load(path, backend="wgpu+rs")
    x = np.array([0, 2, 0, -1, 3, 0, 0.5], np.float32)
    out = dict(m.run({"x": x}))
    idx = np.nonzero(x)[0]
    sig = 1 / (1 + np.exp(-x[idx].astype(np.float64)))
    assert _rel(sig[None], out["s"]) <= TOL
    assert out["ci"].dtype == np.int64 and np.array_equal(out["ci"], np.tile(idx, 10)[None])
    assert np.array_equal(out["cf"], np.tile(out["s"], 10))
    assert _fallbacks(m) == {("cat_i64", "concat")}, _fallbacks(m)
    m.clear_dispatch_records()
    out = dict(m.run({"x": np.zeros(4, np.float32)}))  # nothing nonzero: empty arrays, no-ops on the device
    assert out["s"].shape == (1, 0) and out["cf"].shape == (1, 0)
    assert _fallbacks(m) == {("cat_i64", "concat")}, _fallbacks(m)


@pytest.mark.parametrize("op,n,ran", [("relu", 1, "cpu (fallback)"), ("add", 2, "cpu (fallback)"),
                                      ("softmax", 1, "cpu (fallback)"), ("sigmoid", 1, "wgpu+rs"),
                                      ("binary", 2, "wgpu+rs")])
def test_empty_arrays(op, n, ran):
    """An empty array (a dim of 0): a version-2 op whose outputs are all empty is a no-op on the
    device; the version-1 ops leave it to the cpu, recorded as a fallback. An empty result, no crash."""
    xs = [np.zeros((0, 3), np.float32)] * n
    got = _core.run_op(op, xs, {"fn": "add"} if op == "binary" else {}, level="auto", backend="wgpu+rs")[0]
    assert got.shape == (0, 3) and _core.last_run_op_backend() == ran


def test_graph_values_stay_on_the_device(tmp_path):
    """Values stay on the device between nodes: a chain of 25 f32 nodes submits its work at most
    twice besides the early submits of the forward's first chunks (CYB_WGPU_SUBMIT; counted apart):
    the upload of the host shape computation's output (shape -> constant_of_shape, run on the cpu
    by design and recorded as `host_shape`: a queue write goes after the work recorded before it,
    unless a chunk was just submitted) and the read-back of the output, where a read-back per node
    would submit 25 times. The values equal numpy's."""
    import cyb_llm
    from cyb_llm.writer import write_model

    nodes, cur = [], "x"
    for i in range(12):
        nodes.append({"name": f"s{i}", "op": "sigmoid", "inputs": [cur], "outputs": [f"s{i}"]})
        nodes.append({"name": f"a{i}", "op": "binary", "inputs": [f"s{i}", "x"], "outputs": [f"a{i}"],
                      "attrs": {"fn": "add"}})
        cur = f"a{i}"
    nodes += [{"name": "shp", "op": "shape", "inputs": [cur], "outputs": ["shp"]},
              {"name": "cos", "op": "constant_of_shape", "inputs": ["shp"], "outputs": ["ones"],
               "attrs": {"value": 1.0, "to": "f32"}},
              {"name": "out", "op": "binary", "inputs": [cur, "ones"], "outputs": ["y"], "attrs": {"fn": "mul"}}]
    graph = {"version": 2, "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}],
             "outputs": [{"name": "y", "dtype": "f32", "shape": ["n"]}], "constants": [], "nodes": nodes}
    path = str(tmp_path / "chain.model")
    write_model(path, name="chain", config={"model_type": "onnx-graph"}, tensors=[], graph=graph)
    m = cyb_llm.load(path, backend="wgpu+rs")
    x = RNG.standard_normal(1000).astype(np.float32)
    m.run({"x": x})  # pipelines built
    _core.wgpu_take_host_times()
    y = dict(m.run({"x": x}))["y"]
    t = _core.wgpu_take_host_times()
    ref = x.astype(np.float64)
    for _ in range(12):
        ref = 1 / (1 + np.exp(-ref)) + x
    assert _rel(ref, y) <= TOL
    assert 1 <= t["submits"] - t["chunks"] <= 2, t
    recs = {r["label"]: r for r in m.dispatch_records}
    assert recs["shp"]["host_shape"] and recs["cos"]["host_shape"] and recs["cos"]["backend"] == "cpu"
    assert not recs["out"]["fallback"] and recs["out"]["backend"] == "wgpu+rs"


# ---- the index ops and the integer layout copies (shaders/wgsl/index.wgsl): values move as whole
# words, so the GPU's results equal the cpu's bit for bit (cumsum sums: within op-f32)

def _exact(op, inputs, attrs=None):
    ref, got = _both(op, inputs, attrs)
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype and g.shape == r.shape, (op, g.dtype, g.shape, r.dtype, r.shape)
        np.testing.assert_array_equal(g, r)


def _data(dtype, *shape):
    if dtype == np.float32:
        return _x(*shape)
    return RNG.integers(-(2 ** 31), 2 ** 31 - 1, shape).astype(dtype) * (3 if dtype == np.int64 else 1)


INDEX_DTYPES = [np.float32, np.int32, np.int64]


@pytest.mark.parametrize("dt", INDEX_DTYPES + [np.bool_])
@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("axis,ishape", [(0, (4,)), (1, (2, 3)), (-1, ()), (2, (5, 1))])
def test_gather(dt, itype, axis, ishape):
    """(bool data: packed four to a word, so odd counts and element offsets within words are hit)"""
    x = RNG.random((6, 7, 5)) < 0.5 if dt == np.bool_ else _data(dt, 6, 7, 5)
    dim = x.shape[axis]
    idx = RNG.integers(-dim, dim, ishape).astype(itype)  # negative ones count from the end
    _exact("gather", [x, idx], {"axis": axis})


@pytest.mark.parametrize("dt", INDEX_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(dt, axis):
    x = _data(dt, 4, 6, 5)
    ishape = [4, 6, 5]
    ishape[axis] = 3
    idx = RNG.integers(-x.shape[axis], x.shape[axis], ishape).astype(np.int64)
    _exact("gather_elements", [x, idx], {"axis": axis})


@pytest.mark.parametrize("dt", INDEX_DTYPES)
@pytest.mark.parametrize("ishape,b", [((5, 2), 0), ((3, 4, 1), 0), ((4, 3, 3), 0), ((4, 2, 2), 1)])
def test_gather_nd(dt, ishape, b):
    x = _data(dt, 4, 6, 5)
    idx = np.stack([RNG.integers(-x.shape[b + k], x.shape[b + k], ishape[:-1]) for k in range(ishape[-1])], -1)
    if b:
        idx = idx.reshape(ishape)
    _exact("gather_nd", [x, idx.astype(np.int64)], {"batch_dims": b})


@pytest.mark.parametrize("dt,red", [(np.float32, "none"), (np.int32, "none"), (np.int64, "none"), (np.float32, "add")])
def test_scatter_nd(dt, red):
    """Repeated indices: the last update wins (none), every update adds in index order (add; the
    GPU's reduction add is f32 only: each step rounds to f32 as the cpu's does, so equal too)."""
    x = _data(dt, 6, 4, 3)
    idx = np.array([[1, 2], [5, 0], [1, 2], [-1, 3], [0, 0], [1, 2]], np.int64)
    upd = _data(dt, 6, 3)
    _exact("scatter_nd", [x, idx, upd], {"reduction": red})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(axis, exclusive, reverse):
    _check("cumsum", [_x(5, 13, 4)], {"axis": axis, "exclusive": exclusive, "reverse": reverse})


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.bool_])
def test_integer_transpose_slice(dt):
    """Words (i32, i64) and bytes (bool: four packed into each output word, odd sizes)."""
    x = RNG.random((3, 7, 5)) > 0.5 if dt == np.bool_ else _data(dt, 3, 4, 5)
    _exact("transpose", [x], {"perm": [2, 0, 1]})
    _exact("slice", [x], {"axis": 1, "range": [1, 4, 2]})


@pytest.mark.parametrize("dt", [np.int32, np.int64])
@pytest.mark.parametrize("fn", ["sum", "max", "min"])
@pytest.mark.parametrize("axes,keep", [([1], True), ([0, -1], False), ([], True)])
def test_integer_reduce(dt, fn, axes, keep):
    """typed.wgsl REDUCE: full-range values, so sums wrap as the cpu's int64 sum does (i32: its low
    word); max / min compare signed 64-bit pairs."""
    x = _ints(dt, 3, 40, 7)
    x[0, 0, 0] = _INTS[dt][0]  # the most negative value: a signed compare, not an unsigned one
    _exact("reduce", [x], {"fn": fn, "axes": axes, "keepdims": keep})


@pytest.mark.parametrize("dt,s,l,d", [(np.int64, -(2 ** 40), 2 ** 40, 2 ** 31 + 3), (np.int64, 9, -700, -3),
                                      (np.int32, -5, 1000, 7), (np.float32, 0.1, 517.3, 0.1),
                                      (np.float32, 3.0, -40.0, -0.37)])
def test_range(tmp_path, dt, s, l, d):
    """typed.wgsl RANGE in a graph (start, limit, delta: host values, as the shape rule reads them):
    integers as start + i * delta in 64-bit pairs (carries across the words); f32 as the cpu's
    running sum v += delta (0.1 steps: each value carries the rounding of every add before it, which
    start + i * delta would not), so equal bit for bit."""
    feeds = {k: np.array(v, dt) for k, v in (("s", s), ("l", l), ("d", d))}
    inputs = [{"name": k, "dtype": _NP[dt], "shape": []} for k in feeds]
    nodes = [{"name": "r", "op": "range", "inputs": ["s", "l", "d"], "outputs": ["y"]}]
    ref, got, recs = _graph_both(tmp_path, nodes, inputs, feeds, [{"name": "y", "dtype": _NP[dt], "shape": ["n"]}])
    assert got["y"].dtype == ref["y"].dtype and ref["y"].size > 100
    np.testing.assert_array_equal(got["y"], ref["y"])
    assert {r["label"]: r["backend"] for r in recs}["r"] == "wgpu+rs", recs


def test_long_f32_range_falls_back_visibly(tmp_path):
    """An f32 range of more than 65535 values (RANGE's one loop would pass lavapipe's loop limit) is
    the cpu's, recorded as a fallback; the values are the cpu's all the same."""
    feeds = {"s": np.array(0.5, np.float32), "l": np.array(70000.0, np.float32), "d": np.array(1.0, np.float32)}
    inputs = [{"name": k, "dtype": "f32", "shape": []} for k in feeds]
    nodes = [{"name": "r", "op": "range", "inputs": ["s", "l", "d"], "outputs": ["y"]}]
    ref, got, recs = _graph_both(tmp_path, nodes, inputs, feeds, [{"name": "y", "dtype": "f32", "shape": ["n"]}])
    np.testing.assert_array_equal(got["y"], ref["y"])
    assert [(r["backend"], r["fallback"]) for r in recs if r["label"] == "r"] == [("cpu", True)], recs


@pytest.mark.parametrize("dt", [np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(7,), (3, 1, 5), (2, 300, 9)])
def test_nonzero(tmp_path, dt, shape):
    """nonzero.wgsl in a graph, its input a device value (neg / not on the GPU, read back for the
    count: the shape rule's): the coordinates in row-major order ((2, 300, 9): more elements than
    the workgroup's 256 invocations, each owning a chunk); f32 -0.0 is zero and NaN is not, as on
    the cpu; i64 values whose low word is 0 are nonzero."""
    x = RNG.random(shape) > 0.6
    if dt == np.float32:
        x = np.where(x, _x(*shape), np.float32(-0.0)).astype(np.float32)
        x.flat[1] = np.nan
    elif dt != np.bool_:
        x = (x * RNG.integers(1, 9, shape)).astype(dt)
        if dt == np.int64:
            x.flat[2] = 1 << 33
    inputs = [{"name": "x", "dtype": _NP[dt], "shape": list(shape)}]
    nodes = [{"name": "pre", "op": "unary", "inputs": ["x"], "outputs": ["v"],
              "attrs": {"fn": "not" if dt == np.bool_ else "neg"}},
             {"name": "nz", "op": "nonzero", "inputs": ["v"], "outputs": ["y"]}]
    outputs = [{"name": "y", "dtype": "i64", "shape": [len(shape), "k"]}]
    ref, got, recs = _graph_both(tmp_path, nodes, inputs, {"x": x}, outputs)
    want = np.stack(np.nonzero(~x if dt == np.bool_ else x))
    np.testing.assert_array_equal(ref["y"], want)
    np.testing.assert_array_equal(got["y"], want)
    ran = {r["label"]: r["backend"] for r in recs}
    assert ran["pre"] == ran["nz"] == "wgpu+rs", ran


def test_scatter_nd_without_updates():
    """No index tuples (Piper's empty scatters): y is data, on the device."""
    x = _data(np.float32, 1, 1, 83)
    _exact("scatter_nd", [x, np.zeros((0, 3), np.int64), np.zeros((0,), np.float32)])


@pytest.mark.parametrize("seed", [0, -7, (1 << 62) + 5])
def test_random_normal_like_equal_on_every_backend(seed):
    """The counter-based generator's noise (core/counter_rng.h) is the same on wgpu+rs, the cpu and
    nox, bit for bit."""
    x = np.zeros((3, 17, 11), np.float32)
    attrs = {"seed": seed, "mean": 0.5, "scale": 2.0}
    ref, got = _both("random_normal_like", [x], attrs)
    nox = _core.run_op("random_normal_like", [x], attrs, level="auto", backend="nox")[0]
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(nox, ref[0])


def _graph_both(tmp_path, nodes, inputs, feeds, outputs):
    """A version-2 graph of `nodes` run on the cpu and on wgpu+rs: (cpu outputs, wgpu+rs outputs, the
    wgpu+rs model's dispatch records)."""
    import cyb_llm
    from cyb_llm.writer import write_model

    graph = {"version": 2, "inputs": inputs, "outputs": outputs, "constants": [], "nodes": nodes}
    path = str(tmp_path / "g.model")
    write_model(path, name="g", config={"model_type": "onnx-graph"}, tensors=[], graph=graph)
    ref = dict(cyb_llm.load(path, backend="cpu").run(feeds))
    m = cyb_llm.load(path, backend="wgpu+rs")
    return ref, dict(m.run(feeds)), m.dispatch_records


_NP = {np.float32: "f32", np.int32: "i32", np.int64: "i64", np.bool_: "bool"}


@pytest.mark.parametrize("dt", INDEX_DTYPES + [np.bool_])
def test_slice_dyn_expand_pad_dyn(tmp_path, dt):
    """slice_dyn (negative steps, clamped ends), expand and pad_dyn (negative pads crop first, as
    onnxruntime) in a graph: their shape inputs are host values (the plans), the data a device
    value; every result equals the cpu's."""
    feeds = {"x": RNG.random((4, 6, 5)) > 0.5 if dt == np.bool_ else _data(dt, 4, 6, 5), "st": np.array([-1, 1], np.int64), "en": np.array([-100, 6], np.int64),
             "ax": np.array([0, 2], np.int64), "sp": np.array([-1, 2], np.int64),
             "es": np.array([2, 4, 6, 5], np.int64), "pads": np.array([1, -2, 0, 2, 1, -1], np.int64)}
    inputs = [{"name": "x", "dtype": _NP[dt], "shape": [4, 6, 5]}]
    inputs += [{"name": k, "dtype": "i64", "shape": [len(feeds[k])]} for k in ("st", "en", "ax", "sp", "es", "pads")]
    nodes = [{"name": "sl", "op": "slice_dyn", "inputs": ["x", "st", "en", "ax", "sp"], "outputs": ["a"]},
             {"name": "ex", "op": "expand", "inputs": ["x", "es"], "outputs": ["b"]}]
    outputs = [{"name": "a", "dtype": _NP[dt], "shape": [4, 6, 2]}, {"name": "b", "dtype": _NP[dt], "shape": [2, 4, 6, 5]}]
    if dt == np.float32:
        for mode in ("constant", "reflect", "edge"):
            nodes.append({"name": f"pd_{mode}", "op": "pad_dyn", "inputs": ["x", "pads"], "outputs": [f"p_{mode}"],
                          "attrs": {"mode": mode, "value": 0.5}})
            outputs.append({"name": f"p_{mode}", "dtype": "f32", "shape": [7, 5, 4]})
    ref, got, recs = _graph_both(tmp_path, nodes, inputs, feeds, outputs)
    for k in ref:
        assert got[k].shape == ref[k].shape == tuple(next(o["shape"] for o in outputs if o["name"] == k)), k
        np.testing.assert_array_equal(got[k], ref[k])
    ran = {r["label"]: r["backend"] for r in recs}
    assert all(ran[n["name"]] == "wgpu+rs" for n in nodes), ran


def test_out_of_range_index_is_an_error_on_the_device(tmp_path):
    """An index outside [-dim, dim) in a feed is an InvalidConfig naming the node on wgpu+rs too (the
    schema's check runs on the host copy before the indices go to the device); in range, the
    gather runs on the device."""
    from cyb_llm.errors import InvalidConfig

    nodes = [{"name": "g", "op": "gather", "inputs": ["x", "i"], "outputs": ["y"], "attrs": {"axis": 0}}]
    inputs = [{"name": "x", "dtype": "f32", "shape": [5, 3]}, {"name": "i", "dtype": "i64", "shape": [2]}]
    x = _x(5, 3)
    ref, got, recs = _graph_both(tmp_path, nodes, inputs, {"x": x, "i": np.array([1, -1], np.int64)},
                                 [{"name": "y", "dtype": "f32", "shape": [2, 3]}])
    np.testing.assert_array_equal(got["y"], x[[1, -1]])
    assert [r["backend"] for r in recs] == ["wgpu+rs"]
    import cyb_llm

    m = cyb_llm.load(str(tmp_path / "g.model"), backend="wgpu+rs")
    with pytest.raises(InvalidConfig, match=r"g\.indices.*index 7"):
        m.run({"x": x, "i": np.array([1, 7], np.int64)})


# ---- attention_nd (encoder_attention.wgsl's ND layout): the cases of the cpu op matrix, and the
# MiniLM export's shape (several key tiles, a key mask [B, 1, 1, S], a sequence with no key kept)

def _attention_nd_cases():
    from test_ops_nn import ATTN_CASES
    cases = [c for c in ATTN_CASES if 0 not in c[0] and 0 not in c[1]]  # empty dims: the cpu's (a no-op or zeros)
    return cases + [((3, 12, 70, 32), (3, 12, 70, 32), (3, 12, 70, 32), (3, 1, 1, 70)),
                    ((1, 2, 5, 16), (1, 2, 130, 16), (1, 2, 130, 200), (1, 2, 5, 130)),  # lanes own 4 output dims
                    ((1, 1, 3, 256), (1, 1, 4, 256), (1, 1, 4, 8), None),  # q rows of 256 (the kernel's most)
                    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), (2, 1, 5, 1))]  # a mask broadcast over the keys


@pytest.mark.parametrize("case", _attention_nd_cases())
def test_attention_nd(case):
    qs, ks, vs, ms = case
    ins = [_x(*qs, scale=1.0), _x(*ks, scale=1.0), _x(*vs)]
    if ms is not None:
        mask = RNG.random(ms) > 0.3
        mask.reshape(-1, ms[-1])[0] = False  # a row (or a sequence) with no key kept: 0
        ins.append(mask)
    _check("attention_nd", ins, {"scale": 0.37})


def test_attention_nd_past_the_kernel_falls_back():
    """A head dim over 256 (the kernel's lanes own 4 dims each) runs on the cpu, visibly."""
    q = _x(1, 1, 3, 257)
    _core.run_op("attention_nd", [q, q, q], {"scale": 0.1}, level="auto", backend="wgpu+rs")
    assert _core.last_run_op_backend() == "cpu (fallback)"
