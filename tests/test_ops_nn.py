"""The nn ops of graph v2 (op.h tags 50-59: conv, conv_transpose, matmul_nd, instance_norm,
group_norm, resize, concat, pool, softmax_axis; 85: attention_nd) on the cpu backend at each of its levels, against
torch (f64) and numpy: 1-D and 2-D, strides / dilations / asymmetric pads / groups, odd and empty
shapes, the structured errors. f32 within `op-f32` of the f64 result (the fast paths of conv and
matmul_nd in precise mode too); the fast mode (amx: bf16-split tiles) within `onnx-vs-onnxruntime`,
the bound the graph path owes onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch, UnsupportedOp
from tolerances import tolerance

TOL = tolerance("op-f32")
TOL_FAST = tolerance("onnx-vs-onnxruntime")
LEVELS = _core.cpu_levels()
RNG = np.random.default_rng(50)


def _err(ref, got) -> float:
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) if ref.size else 0.0


def _run(op, inputs, attrs=None, level="auto", precise=True):
    return _core.run_op(op, inputs, {**(attrs or {}), "precise": precise}, level=level)[0]


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def _torch_pad(x, pads, sd, value=0.0):
    # ONNX pads [b0, b1, e0, e1] -> F.pad's last-dim-first order
    p = []
    for i in reversed(range(sd)):
        p += [pads[i], pads[sd + i]]
    return F.pad(x, p, value=value)


# ------------------------------------------------------------------ conv

CONV_CASES = [  # x shape, O, k, strides, dilations, pads, group, bias
    ((2, 3, 11), 5, (3,), (1,), (1,), (1, 1), 1, True),
    ((1, 4, 17), 6, (5,), (2,), (2,), (3, 0), 2, False),
    ((1, 3, 7, 9), 4, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    ((2, 6, 8, 5), 6, (3, 2), (2, 1), (1, 2), (0, 2, 1, 1), 3, True),
    ((1, 4, 6, 6), 4, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 4, True),  # depthwise
    ((1, 5, 4, 4), 3, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, False),  # 1x1
    ((1, 2, 3, 3), 2, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1, True),  # one output
    ((0, 2, 5, 5), 3, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),  # empty batch
    # the x86 panel GEMM: several row blocks of output channels per group, several column panels
    # per image (a partial last one, panels across output rows), two images
    ((2, 8, 9, 13), 34, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True),
    ((1, 3, 40, 37), 20, (3, 3), (2, 1), (1, 2), (2, 0, 1, 3), 1, True),
    # 1-D over several column panels (the panel gathered along the row): Piper's dilated resblock
    # conv, a strided grouped one, and one output channel (its conv_post)
    ((1, 16, 300), 34, (11,), (1,), (5,), (25, 25), 1, True),
    ((2, 6, 150), 8, (4,), (3,), (1,), (2, 1), 2, True),
    ((1, 16, 100), 1, (7,), (1,), (1,), (3, 3), 1, True),
    # stride 1, output rows of 32+ positions: the rows read in place from a zero-padded copy of x
    ((1, 4, 5, 37), 18, (3, 3), (1, 1), (2, 1), (1, 2, 0, 1), 1, True),
    ((2, 6, 3, 40), 8, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1), 2, False),
    # stride 1, 3 taps, 16+ channels in and out, 31+ tiles of two outputs a row: Winograd F(2 x 2, 3 x 3)
    # (odd output rows and columns, asymmetric pads, two images, a partial last panel), F(2, 3) 1-D
    # (an odd length) and along dim 1 of a 1 x 3 kernel
    ((2, 16, 6, 66), 18, (3, 3), (1, 1), (1, 1), (1, 2, 0, 1), 1, True),
    ((1, 17, 129), 16, (3,), (1,), (1,), (1, 1), 1, True),
    ((1, 16, 4, 70), 20, (1, 3), (1, 1), (1, 1), (0, 1, 0, 0), 1, False),
    # rows of fewer tiles than a panel (16 / 32 at 8 / 16 lanes), a panel of tiles or more an
    # image: panels spanning rows of tiles. 23 x 28 outputs (12 x 14 tiles, an odd last row: a
    # partial last panel at either width); 12 x 13 (6 x 7 tiles, an odd last column; 42 tiles:
    # Winograd at 8 lanes only) over two images; 8 x 8 (4 x 4 tiles: one panel at 8 lanes, shared
    # by chunks of output channels); a 1 x 3 kernel over 14 rows of 10
    ((1, 16, 23, 29), 34, (3, 3), (1, 1), (1, 1), (1, 0, 1, 1), 1, True),
    ((2, 16, 13, 13), 20, (3, 3), (1, 1), (1, 1), (1, 1, 0, 1), 1, True),
    ((1, 24, 8, 8), 40, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    ((1, 16, 14, 10), 17, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1), 1, False),
    # 65 rows of tiles (the last one output row), whole rows a work item: the next tile row of an
    # item reuses the two input rows it shares with the one above
    ((1, 16, 129, 66), 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    # 1 x 1, stride 1, no pads (dilation moot): the x86 path sees the image as one row of 63
    # positions, two images (a partial last panel at either width)
    ((2, 8, 7, 9), 20, (1, 1), (1, 1), (2, 1), (0, 0, 0, 0), 1, True),
    # stride 1, weights over 512 KiB (512 x 16 x 17): the row blocks outer, each over every panel
    ((1, 16, 40), 512, (17,), (1,), (1,), (8, 8), 1, True),
]


def _conv_ref(x, w, b, s, d, pads, group):
    sd = x.ndim - 2
    xp = _torch_pad(_t(x), pads, sd)
    fn = F.conv1d if sd == 1 else F.conv2d
    return fn(xp, _t(w), None if b is None else _t(b), stride=s, dilation=d, groups=group).numpy()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv(level, case):
    xs, O, k, s, d, pads, group, has_b = CONV_CASES[case]
    x = _rand(*xs)
    w = _rand(O, xs[1] // group, *k)
    b = _rand(O) if has_b else None
    attrs = {"strides": list(s), "dilations": list(d), "pads": list(pads), "group": group}
    ref = _conv_ref(x, w, b, s, d, pads, group)
    got = _run("conv", [x, w] + ([b] if has_b else []), attrs, level)
    assert _err(ref, got) <= TOL
    fast = _run("conv", [x, w] + ([b] if has_b else []), attrs, level, precise=False)
    assert _err(ref, fast) <= TOL_FAST


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_f16_weights(level, case):
    """f16 weights (an f16 pipeline's, kept f16 in the file): the result of the same values as f32
    weights, bit for bit (every path widens them exactly before it packs or reads them), in the
    precise and the fast mode; against torch on those values within `op-f32`."""
    xs, O, k, s, d, pads, group, has_b = CONV_CASES[case]
    x = _rand(*xs)
    w16 = _rand(O, xs[1] // group, *k).astype(np.float16)
    w = w16.astype(np.float32)
    b = _rand(O) if has_b else None
    attrs = {"strides": list(s), "dilations": list(d), "pads": list(pads), "group": group}
    extra = [b] if has_b else []
    got = _run("conv", [x, w16] + extra, attrs, level)
    assert np.array_equal(got, _run("conv", [x, w] + extra, attrs, level))
    assert _err(_conv_ref(x, w, b, s, d, pads, group), got) <= TOL
    assert np.array_equal(_run("conv", [x, w16] + extra, attrs, level, precise=False),
                          _run("conv", [x, w] + extra, attrs, level, precise=False))


ACTIVATIONS = {  # conv's fused epilogue (attr activation) against torch in f64
    "relu": (F.relu, {}),
    "silu": (F.silu, {}),
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), {"alpha": 0.2}),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("case", [0, 2, 3, 5, 10, 11, 15, 16, 18, 20, 21, 22, 23, 24])  # 10, 11: the x86 stride-1 rows read in place; 15, 16, 22: Winograd; 18, 20, 21: Winograd over rows of few tiles; 23: 1 x 1 as one row; 24: row blocks outer
def test_conv_activation(level, act, case):
    xs, O, k, s, d, pads, group, has_b = CONV_CASES[case]
    x = _rand(*xs)
    w = _rand(O, xs[1] // group, *k)
    b = _rand(O) if has_b else None
    fn, extra = ACTIVATIONS[act]
    attrs = {"strides": list(s), "dilations": list(d), "pads": list(pads), "group": group, "activation": act, **extra}
    ref = fn(torch.tensor(_conv_ref(x, w, b, s, d, pads, group))).numpy()
    inputs = [x, w] + ([b] if has_b else [])
    assert _err(ref, _run("conv", inputs, attrs, level)) <= TOL
    assert _err(ref, _run("conv", inputs, attrs, level, precise=False)) <= TOL_FAST
    none = _run("conv", inputs, {**attrs, "activation": "none"}, level)
    assert _err(_conv_ref(x, w, b, s, d, pads, group), none) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("O", [5, 70])
@pytest.mark.parametrize("P", [1, 3, 5, 9])
@pytest.mark.parametrize("stride,dil", [(2, 1), (1, 2)])
def test_conv_few_positions_equal_panel_gemm(level, O, P, stride, dil):
    # convs of fewer output positions than one GEMM panel (Silero's, P = 1..5) take their own x86 path:
    # each output the same FMA chain as in the panel GEMM a longer input takes, so the first P outputs
    # over the same samples are bit-identical (O = 5, 70: a partial vector of channels, several blocks;
    # dilation 1: the taps copied in runs, 2: one at a time)
    C, k = 3, 4
    span = (k - 1) * dil + 1
    x = _rand(2, C, (40 - 1) * stride + span - 1)  # 40 outputs (pads 1, 0): the panel GEMM at either width
    w, b = _rand(O, C, k), _rand(O)
    attrs = {"strides": [stride], "dilations": [dil], "pads": [1, 0], "activation": "relu"}
    long = _run("conv", [x, w, b], attrs, level)
    short = _run("conv", [x[:, :, :(P - 1) * stride + span - 1], w, b], attrs, level)
    assert long.shape == (2, O, 40) and short.shape == (2, O, P)
    assert np.array_equal(short, long[:, :, :P])
    ref = F.relu(torch.tensor(_conv_ref(x, w, b, (stride,), (dil,), (1, 0), 1)))[:, :, :P].numpy()
    assert _err(ref, short) <= TOL


def test_conv_activation_errors():
    with pytest.raises(InvalidConfig, match="activation"):
        _run("conv", [_rand(1, 2, 5), _rand(3, 2, 3)], {"activation": "gelu"})


@pytest.mark.parametrize("level", LEVELS)
def test_conv_defaults_and_large(level):
    # no strides / dilations / pads given; 32 -> 24 channels at 20x20 (several im2col rows per thread)
    x, w, b = _rand(1, 32, 20, 20), _rand(24, 32, 3, 3), _rand(24)
    ref = _conv_ref(x, w, b, (1, 1), (1, 1), (0, 0, 0, 0), 1)
    assert _err(ref, _run("conv", [x, w, b], {}, level)) <= TOL


@pytest.mark.parametrize("level", LEVELS)
def test_conv_direct_in_bands(level):
    # stride 1 with output rows of 32+ positions, whose zero-padded copy of x (16 channels of 304 x 522
    # per image: 10.2 MB) passes the 8 MiB the x86 path copies at once: each image goes in bands of
    # output rows (here 247 and 53 rows: a shorter last band), the dilated taps reading the halo rows
    x, w, b = _rand(2, 16, 300, 520), _rand(4, 16, 3, 3), _rand(4)
    attrs = {"pads": [2, 1, 2, 1], "dilations": [2, 1]}
    ref = _conv_ref(x, w, b, (1, 1), (2, 1), (2, 1, 2, 1), 1)
    assert _err(ref, _run("conv", [x, w, b], attrs, level)) <= TOL


def test_conv_fast_equals_reference_level():
    x, w = _rand(2, 16, 13, 11), _rand(8, 16, 3, 3)
    attrs = {"pads": [1, 0, 2, 1], "strides": [1, 2]}
    ref = _run("conv", [x, w], attrs, "scalar")
    for level in LEVELS:
        assert _err(ref, _run("conv", [x, w], attrs, level)) <= TOL


def test_conv_errors():
    x, w = _rand(1, 4, 5, 5), _rand(3, 4, 3, 3)
    with pytest.raises(ShapeMismatch, match="weight"):
        _run("conv", [x, _rand(3, 2, 3, 3)])
    with pytest.raises(InvalidConfig, match="group"):
        _run("conv", [x, w], {"group": 3})
    with pytest.raises(InvalidConfig, match="strides"):
        _run("conv", [x, w], {"strides": [0, 1]})
    with pytest.raises(InvalidConfig, match="strides"):
        _run("conv", [x, w], {"strides": [1]})
    with pytest.raises(InvalidConfig, match="pads"):
        _run("conv", [x, w], {"pads": [1, 1]})
    with pytest.raises(InvalidConfig, match="pads"):
        _run("conv", [x, w], {"pads": [-1, 0, 0, 0]})
    with pytest.raises(ShapeMismatch, match="smaller than the kernel"):
        _run("conv", [_rand(1, 4, 2, 2), w])
    with pytest.raises(ShapeMismatch, match="bias"):
        _run("conv", [x, w, _rand(4)])
    with pytest.raises(ShapeMismatch):
        _run("conv", [_rand(1, 4, 2, 2, 2), _rand(3, 4, 1, 1, 1)])
    with pytest.raises(UnsupportedOp):
        _run("conv", [x.astype(np.int64), w])
    with pytest.raises(UnsupportedOp, match="weight"):  # f32 or f16 weights only
        _run("conv", [x, ((w.view(np.uint32) >> 16).astype(np.uint16).tobytes(), "bf16", list(w.shape))])
    with pytest.raises(UnsupportedOp, match="weight"):
        _run("conv", [x, w.astype(np.int32)])
    with pytest.raises(InvalidConfig, match="at most 2"):
        _run("conv", [x, w], {"strides": [1, 1, 1]})


# ------------------------------------------------------------------ conv_transpose

CONVT_CASES = [  # x shape, O/group, k, strides, dilations, pads, output_padding, group, bias
    ((2, 3, 7), 4, (3,), (2,), (1,), (1, 1), (1,), 1, True),
    ((1, 4, 5), 3, (16,), (8,), (1,), (4, 4), (0,), 1, True),  # HiFi-GAN style upsampling
    ((1, 4, 5, 4), 2, (3, 3), (2, 1), (1, 2), (1, 0, 0, 1), (1, 0), 2, True),
    ((1, 2, 3, 3), 3, (4, 4), (2, 2), (1, 1), (1, 1, 1, 1), (0, 0), 1, False),
    ((0, 2, 3), 3, (2,), (1,), (1,), (0, 0), (0,), 1, True),
    # 1-D, stride > 1: the x86 phase convs (nn_x86.inc conv_transpose_phases); a stride above the
    # kernel (a phase no tap reaches: the bias), groups, 50 positions (conv's rows read in place),
    # and pads that make a phase start past x's first column (the col2im path instead)
    ((1, 4, 40), 3, (3,), (4,), (1,), (0, 0), (1,), 2, True),
    ((2, 6, 50), 5, (8,), (4,), (1,), (2, 2), (0,), 1, False),
    ((1, 3, 9), 2, (4,), (2,), (1,), (5, 0), (0,), 1, True),
    # k a multiple of the stride, one group: the phases as one GEMM per panel (conv_transpose_fused),
    # 70 positions (panels read in place and packed at both ends), asymmetric pads, output_padding
    ((1, 8, 70), 5, (8,), (4,), (1,), (3, 1), (1,), 1, True),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(CONVT_CASES)))
def test_conv_transpose(level, case):
    xs, og, k, s, d, pads, opad, group, has_b = CONVT_CASES[case]
    sd = len(xs) - 2
    x, w = _rand(*xs), _rand(xs[1], og, *k)
    b = _rand(og * group) if has_b else None
    fn = F.conv_transpose1d if sd == 1 else F.conv_transpose2d
    full = fn(_t(x), _t(w), None if b is None else _t(b), stride=s, dilation=d, groups=group,
              output_padding=opad).numpy()
    # ONNX pads crop the full output, asymmetric allowed
    sl = tuple(slice(pads[i], full.shape[2 + i] - pads[sd + i]) for i in range(sd))
    ref = full[(slice(None), slice(None)) + sl]
    attrs = {"strides": list(s), "dilations": list(d), "pads": list(pads), "output_padding": list(opad),
             "group": group}
    got = _run("conv_transpose", [x, w] + ([b] if has_b else []), attrs, level)
    assert _err(ref, got) <= TOL
    fast = _run("conv_transpose", [x, w] + ([b] if has_b else []), attrs, level, precise=False)
    assert _err(ref, fast) <= TOL_FAST


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(CONVT_CASES)))
def test_conv_transpose_f16_weights(level, case):
    """f16 weights: bit for bit the result of the same values as f32 weights (the phase convs, the
    col2im path and the reference), both modes."""
    xs, og, k, s, d, pads, opad, group, has_b = CONVT_CASES[case]
    x, w16 = _rand(*xs), _rand(xs[1], og, *k).astype(np.float16)
    extra = [_rand(og * group)] if has_b else []
    attrs = {"strides": list(s), "dilations": list(d), "pads": list(pads), "output_padding": list(opad),
             "group": group}
    for precise in (True, False):
        got = _run("conv_transpose", [x, w16] + extra, attrs, level, precise=precise)
        assert np.array_equal(got, _run("conv_transpose", [x, w16.astype(np.float32)] + extra, attrs, level,
                                        precise=precise)), precise


def test_conv_transpose_fast_equals_reference_level():
    # the x86 levels' matmul + col2im path against the scalar level's f64 reference: a Piper-sized
    # upsampling layer (k 16, stride 8, pads 4), more input positions than one col2im chunk, groups
    cases = [((1, 64, 300), (64, 32, 16), {"strides": [8], "pads": [4, 4]}),
             ((1, 4, 1100), (4, 256, 16), {"strides": [8], "pads": [4, 4]}),  # 18 chunks of 64 positions
             ((2, 6, 9, 7), (6, 2, 3, 4), {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1],
                                            "output_padding": [1, 2], "group": 3})]
    for xs, ws, attrs in cases:
        x, w, b = _rand(*xs), _rand(*ws), _rand(ws[1] * attrs.get("group", 1))
        ref = _run("conv_transpose", [x, w, b], attrs, "scalar")
        for level in LEVELS:
            assert _err(ref, _run("conv_transpose", [x, w, b], attrs, level)) <= TOL, level
            assert _err(ref, _run("conv_transpose", [x, w, b], attrs, level, precise=False)) <= TOL_FAST, level


def test_conv_transpose_errors():
    x, w = _rand(1, 4, 5), _rand(4, 2, 3)
    with pytest.raises(ShapeMismatch, match="weight"):
        _run("conv_transpose", [x, _rand(3, 2, 3)])
    with pytest.raises(InvalidConfig, match="output_padding"):
        _run("conv_transpose", [x, w], {"strides": [2], "output_padding": [2]})
    with pytest.raises(ShapeMismatch, match="bias"):
        _run("conv_transpose", [x, w, _rand(3)])
    with pytest.raises(UnsupportedOp, match="weight"):  # f32 or f16 weights only
        _run("conv_transpose", [x, w.astype(np.int32)])


# ------------------------------------------------------------------ matmul_nd

MM_SHAPES = [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)),
             ((2, 1, 3, 7), (5, 7, 2)), ((1, 5, 17), (3, 17, 19)), ((0, 3), (3, 2)), ((3, 0), (0, 2)),
             ((2, 20, 33), (2, 33, 18)), ((2, 37, 9), (9, 70))]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shapes", MM_SHAPES, ids=str)
def test_matmul_nd(level, shapes):
    a, b = _rand(*shapes[0]), _rand(*shapes[1])
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = _run("matmul_nd", [a, b], {}, level)
    assert got.shape == np.shape(ref)
    assert _err(ref, got) <= TOL
    assert _err(ref, _run("matmul_nd", [a, b], {}, level, precise=False)) <= TOL_FAST


def test_matmul_nd_errors():
    with pytest.raises(ShapeMismatch, match="inner"):
        _run("matmul_nd", [_rand(3, 4), _rand(5, 2)])
    with pytest.raises(ShapeMismatch, match="broadcast"):
        _run("matmul_nd", [_rand(2, 3, 4), _rand(3, 4, 2)])


# ------------------------------------------------------------------ norms

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 1, 1, 1)])
def test_instance_norm(level, shape):
    x, s, b = _rand(*shape) * 3 + 1, _rand(shape[1]), _rand(shape[1])
    xd = x.astype(np.float64)
    ax = tuple(range(2, x.ndim))
    bc = (1, -1) + (1,) * (x.ndim - 2)
    ref = (xd - xd.mean(ax, keepdims=True)) / np.sqrt(xd.var(ax, keepdims=True) + 1e-5) * s.reshape(bc) + b.reshape(bc)
    assert _err(ref, _run("instance_norm", [x, s, b], {"eps": 1e-5}, level)) <= TOL


@pytest.mark.parametrize("level", LEVELS)
def test_instance_norm_offset_spread(level):
    """A mean far from zero against a small spread, long rows (the x86 kernel's vectors and tails):
    x - mean keeps its digits (the mean held as two floats)."""
    x = _rand(2, 3, 37, 41) * 0.01 + 300
    s, b = _rand(3), _rand(3)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean((2, 3), keepdims=True)) / np.sqrt(xd.var((2, 3), keepdims=True) + 1e-5) * \
        s.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)
    assert _err(ref, _run("instance_norm", [x, s, b], {"eps": 1e-5}, level)) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,groups", [((2, 6, 7), 3), ((1, 4, 3, 5), 2), ((1, 4, 3, 5), 4), ((2, 3, 2), 1)])
def test_group_norm(level, shape, groups):
    x, s, b = _rand(*shape) * 2, _rand(shape[1]), _rand(shape[1])
    ref = F.group_norm(_t(x), groups, weight=_t(s), bias=_t(b), eps=1e-5).numpy()
    assert _err(ref, _run("group_norm", [x, s, b], {"eps": 1e-5, "num_groups": groups}, level)) <= TOL


def test_norm_errors():
    x = _rand(1, 4, 5)
    with pytest.raises(ShapeMismatch, match="scale"):
        _run("instance_norm", [x, _rand(3), _rand(4)], {"eps": 1e-5})
    with pytest.raises(InvalidConfig, match="num_groups"):
        _run("group_norm", [x, _rand(4), _rand(4)], {"eps": 1e-5, "num_groups": 3})


# ------------------------------------------------------------------ resize

def _resize_ref(x, sizes, mode, coord, nearest):
    """ONNX Resize (sizes given: scale = out / in per dim), separable, in f64."""
    y = x.astype(np.float64)
    for d in range(x.ndim):
        n_in, n_out = x.shape[d], sizes[d]
        if n_in == n_out:
            continue
        sc = n_out / n_in
        o = np.arange(n_out, dtype=np.float64)
        if coord == "asymmetric":
            c = o / sc
        elif coord == "align_corners":
            c = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0 * o
        elif coord == "pytorch_half_pixel":
            c = (o + 0.5) / sc - 0.5 if n_out > 1 else 0 * o
        else:
            c = (o + 0.5) / sc - 0.5
        if mode == "nearest":
            half = c == np.floor(c) + 0.5
            r = {"floor": np.floor(c), "ceil": np.ceil(c),
                 "round_prefer_floor": np.where(half, np.floor(c), np.round(c)),
                 "round_prefer_ceil": np.where(half, np.ceil(c), np.round(c))}[nearest]
            idx = np.clip(r, 0, n_in - 1).astype(np.int64)
            y = np.take(y, idx, axis=d)
        else:
            cc = np.clip(c, 0, n_in - 1)
            i0 = np.floor(cc).astype(np.int64)
            i1 = np.minimum(i0 + 1, n_in - 1)
            f = (cc - i0).reshape([-1 if k == d else 1 for k in range(x.ndim)])
            y = np.take(y, i0, axis=d) * (1 - f) + np.take(y, i1, axis=d) * f
    return y


COORDS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("shape,sizes", [((1, 2, 5, 4), (1, 2, 10, 8)), ((1, 3, 7, 6), (1, 3, 3, 11)),
                                         ((2, 2, 9), (2, 2, 4)), ((1, 1, 3, 3), (1, 1, 1, 5))])
def test_resize_linear(level, coord, shape, sizes):
    x = _rand(*shape)
    got = _run("resize", [x], {"sizes": list(sizes), "mode": "linear", "coordinate_transformation_mode": coord}, level)
    assert _err(_resize_ref(x, sizes, "linear", coord, None), got) <= TOL


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("shape,sizes", [((1, 2, 5, 4), (1, 2, 10, 8)), ((1, 3, 7, 6), (1, 3, 3, 11)),
                                         ((2, 2, 9), (2, 2, 6))])
def test_resize_nearest(coord, nearest, shape, sizes):
    x = _rand(*shape)
    attrs = {"sizes": list(sizes), "mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    got = _run("resize", [x], attrs)
    np.testing.assert_array_equal(got, _resize_ref(x, sizes, "nearest", coord, nearest).astype(np.float32))


def test_resize_matches_torch():
    x = _rand(1, 3, 6, 5)
    up = _run("resize", [x], {"sizes": [1, 3, 12, 10], "mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                              "nearest_mode": "floor"})
    np.testing.assert_array_equal(up, F.interpolate(torch.tensor(x), scale_factor=2, mode="nearest").numpy())
    for ac, coord in ((False, "half_pixel"), (True, "align_corners")):
        got = _run("resize", [x], {"sizes": [1, 3, 11, 7], "mode": "linear", "coordinate_transformation_mode": coord})
        ref = F.interpolate(_t(x), size=(11, 7), mode="bilinear", align_corners=ac).numpy()
        assert _err(ref, got) <= TOL
        # torch's bicubic: Keys' a = -0.75, source indices clamped to the input (ONNX's exclude_outside 0)
        for sizes in ((11, 7), (4, 3)):
            got = _run("resize", [x], {"sizes": [1, 3, *sizes], "mode": "cubic", "coordinate_transformation_mode": coord,
                                       "cubic_coeff_a": -0.75})
            ref = F.interpolate(_t(x), size=sizes, mode="bicubic", align_corners=ac).numpy()
            assert _err(ref, got) <= TOL, (coord, sizes)


def test_resize_errors():
    with pytest.raises(InvalidConfig, match="sizes"):
        _run("resize", [_rand(1, 2, 3, 3)], {"sizes": [6, 6]})
    with pytest.raises(ShapeMismatch, match="empty"):
        _run("resize", [_rand(1, 0, 3)], {"sizes": [1, 2, 3]})


# ------------------------------------------------------------------ concat

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_concat(level, axis, dtype):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, n in enumerate((1, 0, 5)):
        shapes[i][axis] = n
    xs = [(_rand(*s) * 5).astype(dtype) for s in shapes]
    got = _run("concat", xs, {"axis": axis}, level)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=axis))


def test_concat_many_and_errors():
    xs = [_rand(1, 2) for _ in range(64)]
    np.testing.assert_array_equal(_run("concat", xs, {"axis": 0}), np.concatenate(xs, 0))
    with pytest.raises(ShapeMismatch, match="off the axis"):
        _run("concat", [_rand(2, 3), _rand(3, 3)], {"axis": 1})
    with pytest.raises(InvalidConfig, match="dtype"):
        _run("concat", [_rand(2, 3), np.zeros((2, 3), np.int64)], {"axis": 0})
    with pytest.raises(InvalidConfig, match="axis"):
        _run("concat", [_rand(2, 3), _rand(2, 3)], {"axis": 2})


# ------------------------------------------------------------------ pool

POOL_CASES = [  # x shape, mode, kernel, strides, pads, dilations, count_include_pad, ceil_mode
    ((2, 3, 9), "max", (3,), (2,), (1, 1), (1,), False, False),
    ((1, 2, 7, 8), "max", (3, 2), (2, 2), (1, 1, 1, 1), (1, 1), False, True),
    ((1, 2, 7, 8), "max", (3, 2), (2, 2), (1, 0, 1, 1), (1, 1), False, False),
    ((1, 2, 9, 9), "max", (2, 2), (1, 1), (0, 0, 0, 0), (2, 2), False, False),
    ((1, 2, 7, 8), "avg", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False),
    ((1, 2, 7, 8), "avg", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False),
    ((1, 2, 8, 7), "avg", (2, 3), (2, 2), (0, 1, 0, 1), (1, 1), True, True),
    ((1, 3, 10), "avg", (4,), (4,), (0, 0), (1,), False, False),
    ((1, 2, 5), "max", (2,), (2,), (1, 1), (1,), False, True),  # ceil: no window starting in the end pad
    ((1, 2, 5), "avg", (2,), (2,), (1, 1), (1,), True, True),
]


def _pool_ref(x, mode, k, s, pads, d, cip, ceil):
    sd = x.ndim - 2
    if pads[:sd] != pads[sd:]:  # asymmetric: pad explicitly (max: -inf; avg: count with / without pad)
        if mode == "max":
            xp = _torch_pad(_t(x), pads, sd, value=-np.inf)
            return (F.max_pool1d if sd == 1 else F.max_pool2d)(xp, k, s, 0, d, ceil_mode=ceil).numpy()
        xp = _torch_pad(_t(x), pads, sd)
        ones = _torch_pad(torch.ones_like(_t(x)), pads, sd)
        pool = F.avg_pool1d if sd == 1 else F.avg_pool2d
        tot = pool(xp, k, s, 0, ceil_mode=ceil, count_include_pad=True) 
        if cip:
            return tot.numpy()
        return (tot / pool(ones, k, s, 0, ceil_mode=ceil, count_include_pad=True)).numpy()
    p = pads[:sd]
    if mode == "max":
        return (F.max_pool1d if sd == 1 else F.max_pool2d)(_t(x), k, s, p, d, ceil_mode=ceil).numpy()
    return (F.avg_pool1d if sd == 1 else F.avg_pool2d)(_t(x), k, s, p, ceil_mode=ceil, count_include_pad=cip).numpy()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pool(level, case):
    xs, mode, k, s, pads, d, cip, ceil = POOL_CASES[case]
    x = _rand(*xs)
    attrs = {"mode": mode, "kernel_shape": list(k), "strides": list(s), "pads": list(pads), "count_include_pad": cip,
             "ceil_mode": ceil}
    if mode == "max":
        attrs["dilations"] = list(d)
    assert _err(_pool_ref(x, mode, k, s, list(pads), d, cip, ceil), _run("pool", [x], attrs, level)) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("k,s,d,ceil", [((2, 2), (2, 2), (1, 1), False), ((3, 2), (2, 1), (1, 2), False),
                                        ((2, 3), (3, 2), (1, 1), True)])
def test_pool_inside_equals_reference(level, mode, k, s, d, ceil):
    # windows all within x (no pads; ceil mode whose last window still fits): the cpu's row-at-a-time
    # path sums (max) in the reference's order, so the values equal the scalar level's bit for bit
    x = _rand(2, 3, 11, 13)
    if ceil:
        x = np.ascontiguousarray(x[:, :, :, :11])  # out 4 x 5: the ceil windows end at 10, inside
    attrs = {"mode": mode, "kernel_shape": list(k), "strides": list(s), "ceil_mode": ceil}
    if mode == "max":
        attrs["dilations"] = list(d)
    got, ref = _run("pool", [x], attrs, level), _run("pool", [x], attrs, "scalar")
    assert got.shape == ref.shape and got.size and np.array_equal(got, ref)
    assert _err(_pool_ref(x, mode, k, s, [0, 0, 0, 0], d if mode == "max" else (1, 1), False, ceil), got) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("k,hw", [(8, (2, 1)), (3, (2, 2)), (5, (3, 3)), (4, (2, 3))])
def test_pool_ceil_mode_kernel_larger_than_x(level, mode, k, hw):
    """ceil_mode with a kernel larger than x by less than a stride: one window (EfficientNet's pooler,
    AvgPool2d(hidden_dim, ceil_mode=True), on a smaller feature map), as torch gives it; it was a
    ShapeMismatch. Without ceil_mode it stays one (test_pool_errors)."""
    x = _rand(2, 3, *hw)
    got = _run("pool", [x], {"mode": mode, "kernel_shape": [k, k], "strides": [k, k], "ceil_mode": True}, level)
    pool = F.avg_pool2d if mode == "avg" else F.max_pool2d
    ref = pool(_t(x), k, k, ceil_mode=True).numpy()
    assert got.shape == ref.shape == (2, 3, 1, 1) and _err(ref, got) <= TOL


def test_pool_errors():
    x = _rand(1, 2, 5, 5)
    with pytest.raises(InvalidConfig, match="kernel_shape"):
        _run("pool", [x], {"mode": "max", "kernel_shape": [2]})
    with pytest.raises(InvalidConfig, match="pads"):
        _run("pool", [x], {"mode": "avg", "kernel_shape": [2, 2], "pads": [2, 0, 0, 0]})
    with pytest.raises(InvalidConfig, match="dilations"):
        _run("pool", [x], {"mode": "avg", "kernel_shape": [2, 2], "dilations": [2, 2]})
    with pytest.raises(ShapeMismatch, match="smaller than the kernel"):
        _run("pool", [_rand(1, 2, 1, 1)], {"mode": "max", "kernel_shape": [2, 2]})
    # ceil_mode: one window only where the kernel is larger than x by less than a stride
    with pytest.raises(ShapeMismatch, match=r"smaller than the kernel.*expected \[1, 2, 4, 4\], got \[1, 2, 3, 3\]"):
        _run("pool", [_rand(1, 2, 3, 3)], {"mode": "avg", "kernel_shape": [6, 6], "strides": [3, 3], "ceil_mode": True})


# ------------------------------------------------------------------ softmax_axis

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape,axis", [((3, 5), 0), ((2, 3, 7), 1), ((2, 3, 7), -1), ((4, 1, 6), -2), ((0, 3), 1)])
def test_softmax_axis(level, shape, axis):
    x = _rand(*shape) * 4
    ref = torch.softmax(_t(x), dim=axis).numpy()
    assert _err(ref, _run("softmax_axis", [x], {"axis": axis}, level)) <= TOL


def test_softmax_axis_errors():
    with pytest.raises(InvalidConfig, match="axis"):
        _run("softmax_axis", [_rand(2, 3)], {"axis": 2})


def test_split_tag_reserved():
    assert "split" not in _core.op_names()


# ------------------------------------------------------------------ attention_nd (tag 85)

def _attention_ref(q, k, v, mask, scale):
    """torch's scaled dot-product attention in f64 with a boolean mask (-inf where False), a row with
    no key kept set to 0 (the isnan guard of the ONNX export)."""
    s = _t(q) @ _t(k).transpose(-1, -2) * scale
    if mask is not None:
        s = s.masked_fill(~torch.tensor(mask), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return (p @ _t(v)).numpy()


ATTN_CASES = [  # q, k, v shapes, mask shape (None: no mask)
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), (2, 1, 5, 7)),
    ((2, 3, 5, 4), (2, 1, 7, 4), (1, 3, 7, 6), (2, 1, 1, 7)),  # k, v broadcast; Dv != D
    ((1, 2, 9, 8), (1, 2, 9, 8), (1, 2, 9, 8), (9, 9)),        # a rank-2 mask (right-aligned)
    ((1, 4, 3, 5), (1, 4, 6, 5), (1, 4, 6, 5), None),
    ((1, 1, 1, 3), (1, 1, 1, 3), (1, 1, 1, 3), None),
    ((1, 2, 1, 4), (3, 2, 5, 4), (1, 2, 5, 4), (3, 2, 1, 5)),  # the batch from k and the mask
    ((1, 2, 4, 3), (1, 2, 0, 3), (1, 2, 0, 3), None),          # no keys: every row 0
    ((1, 2, 0, 3), (1, 2, 5, 3), (1, 2, 5, 3), None),          # no queries
]


@pytest.mark.parametrize("level", LEVELS)
def test_attention_nd_query_blocks(level):
    """12000 x 100 scores (4.8 MB) pass the 4 MiB the x86 path scores at once: blocks of 10485 query
    rows and a last one of 1515, the mask read at each block's rows. The blocked run must equal, bit
    for bit, the two halves run on their own (each within one block), and the f64 reference within
    op-f32 at the scalar level. (Against the reference the SIMD levels' f32 scores carry a few ulp
    of |score| into the softmax weights: over these 144,000 outputs of scores up to ~20 that tail
    reaches 0.65-1.4e-6, past op-f32, whether blocked or not; the small cases above check them.)"""
    rng = np.random.default_rng(8)
    q = (rng.standard_normal((1, 2, 12000, 8)) * 2).astype(np.float32)
    k = (rng.standard_normal((1, 1, 100, 8)) * 2).astype(np.float32)
    v = rng.standard_normal((1, 2, 100, 6)).astype(np.float32)
    mask = rng.random((1, 1, 12000, 100)) > 0.3
    mask[0, 0, 0] = False  # a row with no key kept
    got = _run("attention_nd", [q, k, v, mask], {"scale": 0.37}, level)
    cut = 10485
    parts = [_run("attention_nd", [q[:, :, a:b], k, v, mask[:, :, a:b]], {"scale": 0.37}, level)
             for a, b in ((0, cut), (cut, 12000))]
    assert np.array_equal(got, np.concatenate(parts, axis=2))
    assert np.isfinite(got).all()
    if level == "scalar":
        assert _err(_attention_ref(q, k, v, mask, 0.37), got) <= TOL


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(ATTN_CASES)))
def test_attention_nd(level, case):
    qs, ks, vs, ms = ATTN_CASES[case]
    q, k, v = _rand(*qs) * 2, _rand(*ks) * 2, _rand(*vs)
    mask = None
    ins = [q, k, v]
    if ms is not None:
        mask = RNG.random(ms) > 0.3
        mask.reshape(-1, ms[-1])[0] = False  # a row with no key kept
        ins.append(mask)
    ref = _attention_ref(q, k, v, mask, 0.37)
    got = _run("attention_nd", ins, {"scale": 0.37}, level)
    assert _err(ref, got) <= TOL
    if mask is not None:
        assert np.isfinite(got).all()


@pytest.mark.parametrize("level", LEVELS)
def test_attention_nd_repeated_mask_rows(level):
    """An expanded [B, 1, T, S] mask (an encoder's padding mask: every query row the same) with some
    rows changed: the x86 path keeps a row's mask while the next row equals it and must rebuild it at
    each change (rows 3, 4, 5 and the last differ here)."""
    rng = np.random.default_rng(3)
    q, k, v = _rand(2, 6, 9, 8) * 2, _rand(2, 6, 37, 8) * 2, _rand(2, 6, 37, 5)  # 37 keys: 16-lane runs and a tail
    base = rng.random((2, 1, 1, 37)) > 0.3
    mask = np.repeat(base, 9, axis=2)
    mask[0, 0, 3, 2] = not mask[0, 0, 3, 2]
    mask[0, 0, 5, 20] = not mask[0, 0, 5, 20]
    mask[1, 0, 4] = False  # no key kept in this row only
    mask[:, 0, 8, :5] = ~mask[:, 0, 8, :5]
    ref = _attention_ref(q, k, v, mask, 0.37)
    got = _run("attention_nd", [q, k, v, mask], {"scale": 0.37}, level)
    assert _err(ref, got) <= TOL
    assert np.isfinite(got).all()


def test_attention_nd_errors():
    q = _rand(1, 2, 3, 4)
    with pytest.raises(ShapeMismatch, match="k"):
        _run("attention_nd", [q, _rand(1, 2, 5, 3), _rand(1, 2, 5, 4)], {"scale": 1.0})
    with pytest.raises(ShapeMismatch, match="v"):
        _run("attention_nd", [q, _rand(1, 2, 5, 4), _rand(1, 2, 6, 4)], {"scale": 1.0})
    with pytest.raises(ShapeMismatch, match="broadcast"):
        _run("attention_nd", [_rand(2, 2, 3, 4), _rand(3, 2, 5, 4), _rand(1, 2, 5, 4)], {"scale": 1.0})
    with pytest.raises(ShapeMismatch, match="mask"):
        _run("attention_nd", [q, _rand(1, 2, 5, 4), _rand(1, 2, 5, 4), np.ones((1, 1, 3, 4), bool)], {"scale": 1.0})
    with pytest.raises(ShapeMismatch, match="q"):
        _run("attention_nd", [_rand(2, 3, 4), _rand(1, 2, 5, 4), _rand(1, 2, 5, 4)], {"scale": 1.0})


# ------------------------------------------------------------------ elementwise (tag 86)

def test_elementwise_matches_numpy_bit_for_bit():
    # the fusion pass's op (docs/graph.md): a postfix program over broadcast f32 inputs, each step
    # rounded to f32 as numpy's f32 ops round; at every level, a same-shape run, a row, a column and a
    # one-element input, runs shorter than a vector and longer than a block
    for shape in [(2, 3, 1000), (5, 2500), (3, 7), (1,)]:
        a, b, c = (_rand(*shape) for _ in range(3))
        row, col, k = _rand(shape[-1]), _rand(*shape[:-1], 1), np.array([3.0], np.float32)
        f = np.float32
        s = ((a + b) - (c * row)) / k
        want = (np.where(s >= 0, s, f(0.1) * s) * col).astype(np.float32)
        prog = [0, 1, -1, 2, 3, -3, -2, 4, -4, -5, 5, -3]
        for level in LEVELS:
            got = _run("elementwise", [a, b, c, row, k, col], {"program": prog, "alpha": 0.1}, level=level)
            assert got.shape == want.shape and np.array_equal(got.view(np.int32), want.view(np.int32)), (shape, level)
            got = _run("elementwise", [k, a], {"program": [0, 1, -2, 0, 1, -4, -1]}, level=level)  # the value first
            assert np.array_equal(got, (k - a) + (k / a)), (shape, level)
    # runs over several trailing dims (x [N, C, H, W] times a [1, C, 1, 1] scale plus a [1, C, 1, 1]
    # shift: runs of H W) and a broadcast leading dim
    x4, sc, sh = _rand(2, 3, 5, 6), _rand(1, 3, 1, 1), _rand(1, 3, 1, 1)
    for level in LEVELS:
        got = _run("elementwise", [x4, sc, sh], {"program": [0, 1, -3, 2, -1]}, level=level)
        assert np.array_equal(got, x4 * sc + sh), level
        got = _run("elementwise", [sc, x4[:1]], {"program": [1, 0, -4]}, level=level)
        assert np.array_equal(got, x4[:1] / sc), level
    # a lone push (a copy, broadcast to the others' shape) and a tree of one-element values only
    x, one = _rand(4, 5), np.array([2.0], np.float32)
    for level in LEVELS:
        assert np.array_equal(_run("elementwise", [x, one], {"program": [0]}, level=level), x)
        got = _run("elementwise", [one, x], {"program": [0, 0, -3, 1, -1]}, level=level)
        assert np.array_equal(got, np.float32(4.0) + x)


@pytest.mark.parametrize("prog, what", [([], "is empty"), ([0, 2, -1], "pushes input 2 of 2"), ([0, -1], "needs two values"),
                                        ([-5], "the stack is empty"), ([0, 1], "leaves 2 values"), ([0, 1, -6], "is no step")])
def test_elementwise_bad_programs(prog, what):
    with pytest.raises(InvalidConfig) as e:
        _run("elementwise", [_rand(3), _rand(3)], {"program": prog})
    assert "elementwise.attrs.program" in str(e.value) and what in str(e.value), str(e.value)
    with pytest.raises(ShapeMismatch):
        _run("elementwise", [_rand(3), _rand(4)], {"program": [0, 1, -1]})
