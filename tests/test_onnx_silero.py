"""ONNX import + the graph path of version 2 (docs/graph.md, docs/import.md "ONNX"): the Silero VAD
v6 model of the faster-whisper package imported with `cyb-llm import`, run on the cpu against
onnxruntime (the test-only oracle) on random audio-like chunks, with the LSTM state carried over
three calls; tolerance `onnx-vs-onnxruntime` of docs/runtime.md. Hostile cases: unknown ops are
reported together by name, wrong input dtype / shape / names are clear errors, nox refuses to
load a graph with a node it has no kernel for. Silero on nox: tests/test_nox_graph2.py."""
from __future__ import annotations

import os

import numpy as np
import pytest

import cyb_llm
from cyb_llm.errors import BackendInit, InvalidConfig, ShapeMismatch, UnsupportedOp
from tolerances import tolerance

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TOL = tolerance("onnx-vs-onnxruntime")


def _silero_path() -> str:
    fw = pytest.importorskip("faster_whisper")
    p = os.path.join(os.path.dirname(fw.__file__), "assets", "silero_vad_v6.onnx")
    if not os.path.isfile(p):
        pytest.skip("faster_whisper has no assets/silero_vad_v6.onnx")
    return p


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    src = _silero_path()
    out = str(tmp_path_factory.mktemp("onnx") / "vad.model")
    from cyb_llm.cli import main

    assert main(["import", src, "-o", out]) == 0
    return src, out


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _chunks(rng: np.random.Generator, n: int) -> np.ndarray:
    """Audio-like 576-sample chunks (64 of context + 512): a few tones and noise at speech levels."""
    t = np.arange(n * 576) / 16000.0
    sig = sum(a * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3)) for a, f in
              ((0.3, rng.uniform(100, 300)), (0.15, rng.uniform(500, 2000)), (0.05, rng.uniform(2000, 6000))))
    sig = sig * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(t.size)
    return sig.reshape(n, 576).astype(np.float32)


def test_silero_matches_onnxruntime(silero):
    src, path = silero
    m = cyb_llm.load(path, backend="cpu")
    assert type(m).__name__ == "GraphModel" and m.kind == "graph"
    assert [(i.name, i.dtype, i.shape) for i in m.inputs] == [
        ("input", "f32", ("seq_len", 576)), ("h", "f32", (1, 1, 128)), ("c", "f32", (1, 1, 128))]
    assert [o.name for o in m.outputs] == ["speech_probs", "hn", "cn"]
    assert m.state == {"hn": "h", "cn": "c"}
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(44)
    worst = 0.0
    for n in (1, 3, 8):  # seq_len: one chunk, odd, several
        h = np.zeros((1, 1, 128), np.float32)
        c = np.zeros((1, 1, 128), np.float32)
        mine = m.session()
        for _ in range(3):  # the state carried over 3 calls (the session feeds hn/cn back)
            x = _chunks(rng, n)
            ref = dict(zip(["speech_probs", "hn", "cn"], sess.run(None, {"input": x, "h": h, "c": c})))
            got = mine.run({"input": x})
            for k in ref:
                e = _err(ref[k], got[k])
                worst = max(worst, e)
                assert e <= TOL, (n, k, e)
            h, c = ref["hn"], ref["cn"]
    # onnxruntime's call shapes: a list in the order asked
    x = _chunks(rng, 2)
    feeds = {"input": x, "h": h, "c": c}
    probs, hn = m.run(["speech_probs", "hn"], feeds)
    ref = sess.run(["speech_probs", "hn"], feeds)
    assert _err(ref[0], probs) <= TOL and _err(ref[1], hn) <= TOL
    print(f"max error vs onnxruntime: {worst:.3g}")


def test_silero_bad_inputs(silero):
    _, path = silero
    m = cyb_llm.load(path, backend="cpu")
    h = np.zeros((1, 1, 128), np.float32)
    x = np.zeros((2, 576), np.float32)
    with pytest.raises(InvalidConfig, match="inputs\\['input'\\].*dtype f64|dtype"):
        m.run({"input": x.astype(np.int32), "h": h, "c": h})
    with pytest.raises(ShapeMismatch, match="input 'input'"):
        m.run({"input": np.zeros((2, 512), np.float32), "h": h, "c": h})
    with pytest.raises(ShapeMismatch, match="input 'h'"):
        m.run({"input": x, "h": np.zeros((1, 128), np.float32), "c": h})
    with pytest.raises(InvalidConfig, match="missing"):
        m.run({"input": x, "h": h})
    with pytest.raises(InvalidConfig, match="no input 'state'"):
        m.run({"input": x, "h": h, "c": h, "state": h})
    with pytest.raises(InvalidConfig, match="not outputs"):
        m.run(["nope"], {"input": x, "h": h, "c": h})


def test_nox_refuses_by_node(tmp_path):
    """nox never falls back: a version-2 graph with a node nox has no kernel for (every graph-v2 op
    has one: a fused op written by hand here) is refused at load, naming the node."""
    from cyb_llm.format import write_model

    g = "\n".join(['version = 2', '[[inputs]]', 'name = "x"', 'dtype = "f32"', 'shape = [2, 4]',
                   '[[outputs]]', 'name = "y"', 'dtype = "f32"', 'shape = [2, 4]',
                   '[[outputs]]', 'name = "s"', 'dtype = "f32"', 'shape = [2, 4]',
                   '[[initializers]]', 'name = "w"',
                   '[[nodes]]', 'name = "the_fused_norm"', 'op = "fused_skip_norm"', 'inputs = ["x", "x", "w"]',
                   'outputs = ["y", "s"]', '[nodes.attrs]', 'eps = 1e-5', ''])
    path = str(tmp_path / "fused.model")
    write_model(path, name="f", config={"model_type": "onnx-graph"}, tensors=[("w", "f32", (4,), np.ones(4, np.float32))],
                graph=g)
    assert cyb_llm.load(path, backend="cpu").run({"x": np.ones((2, 4), np.float32)})["s"][0, 0] == 2.0
    with pytest.raises(BackendInit, match="node 'the_fused_norm' \\(op fused_skip_norm\\) has no nox kernel"):
        cyb_llm.load(path, backend="nox")


def test_unknown_ops_reported_together(tmp_path):
    from onnx import TensorProto, helper

    from cyb_llm.convert import import_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Hardmax", ["a"], ["b"], name="hm_1"),
             helper.make_node("Hardmax", ["b"], ["c"], name="hm_2"),
             helper.make_node("Det", ["c"], ["y"], name="det")]
    g = helper.make_graph(nodes, "g", [x], [y])
    src = str(tmp_path / "bad.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    out = tmp_path / "bad.model"
    with pytest.raises(UnsupportedOp) as e:
        import_model(src, str(out), progress=False)
    msg = str(e.value)
    assert "Hardmax x2 (hm_1, hm_2)" in msg and "Det x1 (det)" in msg
    assert not out.exists()


def _backend(name: str) -> str:
    if name == "wgpu+rs":
        from placement import wgpu_skip_reason

        why = wgpu_skip_reason()
        if why:
            pytest.skip(why)
    return name


def _fallen_back(m) -> set:
    """The (label, op) of every node that did not run on wgpu+rs (the cpu ran it as a fallback)."""
    return {(r["label"], r["op"]) for r in m.dispatch_records if r["fallback"] or r["backend"] != "wgpu+rs"}


@pytest.mark.parametrize("backend", ["cpu", "wgpu+rs"])
def test_small_graph_broadcast_and_views(tmp_path, backend):
    """A hand-made graph over the translated ops: row broadcast, Pow 2, Slice with a negative axis
    and start, Transpose, Unsqueeze/Squeeze/Flatten, Tanh, Pad (edge), against onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    b = rng.standard_normal(5).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(b, "bias"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([-4], np.int64), "st"),
             numpy_helper.from_array(np.array([-1], np.int64), "en"),
             numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 2], np.int64), "pads")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]),
             helper.make_node("Pow", ["a", "two"], ["p"]),
             helper.make_node("Slice", ["p", "st", "en", "ax"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Unsqueeze", ["t", "one"], ["u"]),
             helper.make_node("Squeeze", ["u", "one"], ["q"]),
             helper.make_node("Tanh", ["q"], ["th"]),
             helper.make_node("Pad", ["th", "pads"], ["y"], mode="edge"),
             helper.make_node("Flatten", ["a"], ["z"], axis=1)]
    g = helper.make_graph(nodes, "g", [x], [y, z], initializer=inits)
    src = str(tmp_path / "small.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    out = str(tmp_path / "small.model")
    from cyb_llm.convert import import_model

    import_model(src, out, progress=False)
    m = cyb_llm.load(out, backend=_backend(backend))
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    for n in (1, 4):
        xv = rng.standard_normal((n, 3, 5)).astype(np.float32)
        ref = sess.run(None, {"x": xv})
        got = m.run(None, {"x": xv})
        for r, o in zip(ref, got):
            assert _err(r, o) <= TOL
    if backend == "wgpu+rs":  # every node of this f32 graph has a WGSL kernel
        assert not _fallen_back(m), _fallen_back(m)


@pytest.mark.parametrize("backend", ["cpu", "wgpu+rs"])
def test_array_ops_graph_matches_onnxruntime(tmp_path, backend):
    """A hand-made graph over the array ops of graph v2 (broadcasting Sub / Div / Pow / Max, Erf,
    Softplus, LeakyRelu, Clip, Sin, Where over Equal / Greater / Not, Cast to i64 and back, ReduceMean
    / ReduceMax with and without keepdims, a run-time Shape feeding Reshape, Squeeze / Unsqueeze of
    a symbolic dim), with float, i64 and bool outputs, against onnxruntime on two sizes."""
    from onnx import TensorProto, helper, numpy_helper

    from cyb_llm.convert import import_model

    T = TensorProto
    x = helper.make_tensor_value_info("x", T.FLOAT, ["n", 3, 4])
    ids = helper.make_tensor_value_info("ids", T.INT64, ["n"])
    outs = [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("m", T.BOOL, None),
            helper.make_tensor_value_info("k", T.INT64, None), helper.make_tensor_value_info("r", T.FLOAT, None)]
    inits = [numpy_helper.from_array(np.array([0.5, -1.0, 2.0, 3.0], np.float32), "row"),
             numpy_helper.from_array(np.array([[1.5], [2.0], [-0.5]], np.float32), "col"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    N = helper.make_node
    nodes = [N("Sub", ["x", "row"], ["a"]), N("Div", ["a", "col"], ["b"]), N("Erf", ["b"], ["c"]),
             N("Softplus", ["c"], ["d"]), N("LeakyRelu", ["b"], ["e"], alpha=0.1), N("Max", ["d", "e"], ["f"]),
             N("Clip", ["f", "", "one"], ["g"]), N("Sin", ["g"], ["h"]),
             N("Greater", ["h", "c"], ["gt"]), N("Not", ["gt"], ["m"]),
             N("Where", ["gt", "h", "b"], ["w"]), N("Pow", ["w", "two_f"], ["p"]),
             N("Constant", [], ["two_f"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
             N("ReduceMean", ["p", "ax1"], ["rm"], keepdims=1), N("ReduceMax", ["p"], ["y"], keepdims=0),
             N("Cast", ["rm"], ["ri"], to=T.INT64), N("Mod", ["ri", "two"], ["k0"]),
             N("Unsqueeze", ["ids", "ax1"], ["ids2"]), N("Mul", ["ids2", "two"], ["ids3"]),
             N("Squeeze", ["ids3", "ax1"], ["ids4"]), N("Equal", ["ids4", "ids4"], ["eq"]),
             N("Cast", ["eq"], ["eqi"], to=T.INT64), N("Add", ["ids4", "eqi"], ["k"]),
             N("Shape", ["x"], ["xs"]), N("Cast", ["k0"], ["k0f"], to=T.FLOAT),
             N("Reshape", ["w", "xs"], ["r0"]), N("Add", ["r0", "k0f"], ["r"])]
    # the Constant node first (topological order)
    nodes.insert(0, nodes.pop(12))
    g = helper.make_graph(nodes, "g", [x, ids], outs, initializer=inits)
    src = str(tmp_path / "arr.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    out = str(tmp_path / "arr.model")
    import_model(src, out, progress=False)
    m = cyb_llm.load(out, backend=_backend(backend))
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for n in (2, 5):
        feeds = {"x": rng.standard_normal((n, 3, 4)).astype(np.float32) * 2,
                 "ids": rng.integers(-5, 5, n).astype(np.int64)}
        ref = dict(zip(["y", "m", "k", "r"], sess.run(["y", "m", "k", "r"], feeds)))
        got = m.run(feeds)
        for name in ("m", "k"):
            assert got[name].dtype == ref[name].dtype and np.array_equal(got[name], ref[name]), name
        for name in ("y", "r"):
            assert _err(ref[name], got[name]) <= TOL, name
        if backend == "nox":  # the digest chain of the run, the same on a second run
            d = m.last_digest
            assert len(d) == 64 and (m.run(feeds), m.last_digest)[1] == d
    if backend == "wgpu+rs":  # every node on wgpu+rs (integer and bool ones too: index.wgsl, typed.wgsl)
        # but the integer Mod and the i64 -> f32 Cast, which have no WGSL kernel
        assert _fallen_back(m) == {("k0", "binary"), ("k0f", "cast")}, sorted(_fallen_back(m))


def test_random_normal_like_seed(tmp_path):
    """RandomNormalLike: the graph's own seed gives the same numbers every run; run(..., seed=s)
    gives the counter-based generator's numbers for s (two random nodes: independent streams), the
    same for the same s and different for another; mean / scale applied; a bad seed is an
    InvalidConfig."""
    from onnx import TensorProto, helper

    from cyb_llm.convert import import_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 3]) for n in ("a", "b")]
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["a"], name="r0", seed=7.0),
             helper.make_node("RandomNormalLike", ["x"], ["b0"], name="r1", mean=2.0, scale=0.5),
             helper.make_node("Add", ["b0", "x"], ["b"], name="add")]
    src = str(tmp_path / "rnd.onnx")
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], outs),
                                opset_imports=[helper.make_opsetid("", 18)]), src)
    out = str(tmp_path / "rnd.model")
    import_model(src, out, progress=False)
    m = cyb_llm.load(out, backend="cpu")
    feeds = {"x": np.zeros((1000, 3), np.float32)}
    r1, r2 = m.run(feeds), m.run(feeds)
    assert np.array_equal(r1["a"], r2["a"]) and np.array_equal(r1["b"], r2["b"])
    s1, s1b, s2 = m.run(feeds, seed=1), m.run(feeds, seed=1), m.run(feeds, seed=2)
    assert np.array_equal(s1["a"], s1b["a"]) and not np.array_equal(s1["a"], s2["a"])
    assert not np.array_equal(s1["a"], r1["a"])
    assert not np.allclose(s1["a"], s1["b"] - 2.0, atol=0.1)  # two nodes, two streams
    MOMENTS = tolerance("rng-moments/3000")  # 1000 x 3 draws per output
    for v, mean, std in ((s1["a"], 0.0, 1.0), (s1["b"], 2.0, 0.5), (r1["a"], 0.0, 1.0)):
        assert abs(float(v.mean()) - mean) < MOMENTS and abs(float(v.std()) - std) < MOMENTS
    with pytest.raises(InvalidConfig):
        m.run(feeds, seed=-1)
    with pytest.raises(InvalidConfig):
        m.run(feeds, seed="x")


def test_silero_memory_plan(silero):
    """The plan before a run is what the run holds (docs/graph.md "Shapes and the memory plan"), with
    bytes reused; the shapes at load follow seq_len."""
    m = cyb_llm.load(silero[1], backend="cpu")
    assert m.shapes["speech_probs"]["shape"] == ["seq_len"] and m.shapes["hn"]["shape"] == [1, 1, 128]
    h = np.zeros((1, 1, 128), np.float32)
    for n in (1, 8):
        p = m.memory_plan(seq_len=n)
        assert p["complete"] and p["live_max_bytes"] <= p["peak_bytes"] < p["sum_bytes"] and p["reused"] > 0
        m.run({"input": _chunks(np.random.default_rng(n), n), "h": h, "c": h})
        r = m.last_run_memory()
        assert r["planned_peak"] == r["measured_peak"] == p["peak_bytes"] and r["unplanned"] == 0, (r, n)
