"""The ONNX ops the importer writes as the ops they are made of (convert/onnx_ops_decomp.py,
docs/import.md): Gelu (opset 20), HardSigmoid, HardSwish, BatchNormalization, ReduceSumSquare /
L2 / L1 / LogSum, Trilu, EyeLike, DepthToSpace and SpaceToDepth, against onnxruntime on cpu, nox and wgpu+rs (lavapipe in CI),
on two input sizes each (symbolic dims: the Trilu mask is computed at run time)."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from tolerances import tolerance  # noqa: E402

N = helper.make_node
BACKENDS = ["cpu", "nox", "wgpu+rs"]


def _f(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _check(tmp_path, backend, name, nodes, inputs, outputs, inits, feeds_list, opset=18):
    if backend == "wgpu+rs":
        from placement import wgpu_skip_reason

        if wgpu_skip_reason():
            pytest.skip(wgpu_skip_reason())
    from cyb_llm.convert import import_model

    g = helper.make_graph(nodes, name, inputs, outputs,
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    src, out = str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}.model")
    onnx.save(m, src)
    import_model(src, out, progress=False)
    mod = cyb_llm.load(out, backend=backend)
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        got = mod.run(feeds)
        for o, ref in zip(outputs, sess.run(None, feeds)):
            y = got[o.name]
            assert y.shape == ref.shape and y.dtype == ref.dtype, (name, o.name, y.shape, ref.shape, y.dtype)
            if ref.dtype.kind == "f":
                fin = np.isfinite(ref)
                assert np.array_equal(fin, np.isfinite(y)) and np.array_equal(np.isnan(ref), np.isnan(y)), name
                err = np.abs(y[fin].astype(np.float64) - ref[fin]).max() / max(np.abs(ref[fin]).max(), 1e-30)
                assert err <= tolerance("onnx-vs-onnxruntime"), (name, o.name, err)
            else:
                assert np.array_equal(y, ref), (name, o.name)
    return mod


def _x(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_activations(tmp_path, backend):
    nodes = [N("Gelu", ["x"], ["g"]), N("Gelu", ["x"], ["gt"], approximate="tanh"),
             N("HardSigmoid", ["x"], ["hs"], alpha=0.3, beta=0.4), N("HardSwish", ["x"], ["hw"])]
    _check(tmp_path, backend, "act", nodes, [_f("x", ["n", 3, 7])], [_f(o, None) for o in ("g", "gt", "hs", "hw")],
           {}, [{"x": _x(1, 3, 7, scale=4)}, {"x": _x(4, 3, 7, seed=1, scale=4)}], opset=20)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm(tmp_path, backend):
    rng = np.random.default_rng(2)
    C = 5
    inits = {"s": rng.random(C).astype(np.float32) + 0.5, "b": rng.standard_normal(C).astype(np.float32),
             "m": rng.standard_normal(C).astype(np.float32), "v": rng.random(C).astype(np.float32) + 0.1}
    nodes = [N("BatchNormalization", ["x4", "s", "b", "m", "v"], ["y4"], epsilon=1e-3),
             N("BatchNormalization", ["x2", "s", "b", "m", "v"], ["y2"])]
    _check(tmp_path, backend, "bn", nodes, [_f("x4", ["n", C, "h", 3]), _f("x2", ["m", C])],
           [_f("y4", None), _f("y2", None)], inits,
           [{"x4": _x(1, C, 4, 3), "x2": _x(1, C, seed=3)}, {"x4": _x(3, C, 2, 3, seed=4), "x2": _x(6, C, seed=5)}])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opset", [17, 18])
def test_composite_reductions(tmp_path, backend, opset):
    """Axes as an attribute (opset 17) and as an input (18), keepdims 0 and 1, and over all axes."""
    ops = ("ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceLogSum")
    nodes, outs, inits = [], [], {}
    for op in ops:
        for keep in (0, 1):
            o = f"{op}_{keep}"
            if opset >= 18:
                inits["ax"] = np.array([1, -1], np.int64)
                nodes.append(N(op, ["x", "ax"], [o], keepdims=keep))
            else:
                nodes.append(N(op, ["x"], [o], axes=[1, -1], keepdims=keep))
            outs.append(_f(o, None))
        nodes.append(N(op, ["x"], [f"{op}_all"], keepdims=0))
        outs.append(_f(f"{op}_all", None))
    feeds = [{"x": np.abs(_x(2, 3, 5, 7)) + 0.1}, {"x": np.abs(_x(1, 3, 2, 7, seed=6)) + 0.1}]
    _check(tmp_path, backend, f"red{opset}", nodes, [_f("x", ["n", 3, "h", 7])], outs, inits, feeds, opset=opset)


@pytest.mark.parametrize("backend", BACKENDS)
def test_trilu_and_eye_like(tmp_path, backend):
    """Upper and lower, k absent / negative / positive / given at run time, a float input holding
    inf and NaN (kept where the mask keeps them: Where, not a product by the mask) and an i64 one;
    EyeLike with its k and a dtype."""
    nodes = [N("Trilu", ["x"], ["u"]), N("Trilu", ["x", "km"], ["l"], upper=0), N("Trilu", ["x", "kp"], ["u2"]),
             N("Trilu", ["x", "k"], ["lk"], upper=0), N("Trilu", ["xi"], ["ui"], upper=0),
             N("EyeLike", ["e"], ["ey"], k=1), N("EyeLike", ["e"], ["eyi"], dtype=T.INT64)]
    inits = {"km": np.array(-1, np.int64), "kp": np.array(2, np.int64)}
    outs = [_f(o, None) for o in ("u", "l", "u2", "lk")] + [_f("ui", None, T.INT64), _f("ey", None),
                                                            _f("eyi", None, T.INT64)]
    ins = [_f("x", ["b", 3, "r", "c"]), _f("k", [], T.INT64), _f("xi", ["r", "c"], T.INT64), _f("e", ["r2", "c2"])]

    def feeds(b, r, c, k, seed):
        x = _x(b, 3, r, c, seed=seed)
        x[0, 0, 0, -1], x[0, 1, -1, 0] = np.inf, np.nan
        return {"x": x, "k": np.array(k, np.int64), "xi": np.arange(r * c, dtype=np.int64).reshape(r, c),
                "e": _x(c, r, seed=seed + 1)}
    _check(tmp_path, backend, "trilu", nodes, ins, outs, inits, [feeds(2, 5, 7, 1, 7), feeds(1, 6, 4, -2, 8)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_depth_to_space_and_back(tmp_path, backend):
    """DepthToSpace (DCR and CRD) and SpaceToDepth over symbolic N, H, W: equal to onnxruntime (they
    move elements)."""
    nodes = [N("DepthToSpace", ["x"], ["dcr"], blocksize=2), N("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD"),
             N("SpaceToDepth", ["z"], ["s2d"], blocksize=2)]
    outs = [_f(o, None) for o in ("dcr", "crd", "s2d")]
    _check(tmp_path, backend, "d2s", nodes, [_f("x", ["n", 8, "h", "w"]), _f("z", ["m", 3, "h2", "w2"])], outs, {},
           [{"x": _x(2, 8, 3, 5), "z": _x(2, 3, 4, 6, seed=1)}, {"x": _x(1, 8, 4, 2, seed=2), "z": _x(1, 3, 2, 8, seed=3)}],
           opset=17)


def test_nodes_of_one_name(tmp_path):
    """Two nodes of one name (onnxruntime refuses such a file; the importer takes it): the graph's
    nodes get names of their own ("#2") and the decompositions values of their own (named after each
    node's output). Before, the import wrote a .model that failed to load ("node name defined
    twice"). Against numpy: HardSwish twice, and an upper then a lower Trilu (the diagonal)."""
    from cyb_llm.convert import import_model

    nodes = [N("HardSwish", ["x"], ["a"], name="same"), N("HardSwish", ["a"], ["b"], name="same"),
             N("Trilu", ["x"], ["u"], name="t"), N("Trilu", ["u"], ["d"], name="t", upper=0)]
    g = helper.make_graph(nodes, "dup", [_f("x", ["n", 5, 5])], [_f("b", None), _f("d", None)])
    src, out = str(tmp_path / "dup.onnx"), str(tmp_path / "dup.model")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    import_model(src, out, progress=False)
    x = _x(2, 5, 5, scale=4).astype(np.float64)
    hs = lambda v: v * np.clip(v / 6 + 0.5, 0, 1)  # noqa: E731
    got = cyb_llm.load(out, backend="cpu").run({"x": x.astype(np.float32)})
    assert np.abs(got["b"] - hs(hs(x))).max() <= tolerance("op-f32") * np.abs(hs(hs(x))).max()
    assert np.array_equal(got["d"], np.triu(np.tril(x)).astype(np.float32))
