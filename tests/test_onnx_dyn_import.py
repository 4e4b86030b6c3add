"""The importer's Slice / Pad whose bounds or pads are computed at run time (or a Slice with a
negative step): small ONNX graphs translated to slice_dyn / pad_dyn (docs/import.md) and run on the
cpu against onnxruntime, exactly (they move elements)."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tolerances import tolerance  # noqa: E402

I64_MAX = np.iinfo(np.int64).max


def _build(nodes, inputs, outputs, inits, opset, path):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=[onnx.numpy_helper.from_array(v, k)
                                                                     for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _load(src, tmp_path):
    from cyb_llm.cli import main

    out = str(tmp_path / "m.model")
    assert main(["import", src, "-o", out]) == 0
    return cyb_llm.load(out, backend="cpu"), ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def _same(m, sess, feeds):
    names = [o.name for o in sess.get_outputs()]
    got = m.run(feeds)
    for k, r in zip(names, sess.run(None, feeds)):
        assert got[k].shape == r.shape and got[k].dtype == r.dtype, (k, got[k].shape, r.shape)
        assert np.array_equal(got[k], r), k


def test_slice_runtime_bounds_and_negative_steps(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [1])
    e = helper.make_tensor_value_info("e", TensorProto.INT64, [1])
    outs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "flip", "every2", "back2", "rows")]
    inits = {"ax1": np.array([1], np.int64), "m1": np.array([-1], np.int64), "mmax": np.array([-I64_MAX], np.int64),
             "z": np.array([0], np.int64), "big": np.array([I64_MAX], np.int64), "two": np.array([2], np.int64),
             "m2": np.array([-2], np.int64), "m9": np.array([-9], np.int64)}
    nodes = [
        helper.make_node("Slice", ["x", "s", "e", "ax1"], ["y"]),                  # run-time bounds on axis 1
        helper.make_node("Slice", ["x", "m1", "mmax", "ax1", "m1"], ["flip"]),     # torch.flip's export
        helper.make_node("Slice", ["x", "z", "big", "", "two"], ["every2"]),       # steps without axes
        helper.make_node("Slice", ["x", "m9", "mmax", "ax1", "m2"], ["back2"]),    # start before the dim, step -2
        helper.make_node("Slice", ["x", "s", "e"], ["rows"]),                      # run-time bounds, default axes
    ]
    m, sess = _load(_build(nodes, [x, s, e], outs, inits, 15, str(tmp_path / "s.onnx")), tmp_path)
    shapes = {o.name: tuple(o.shape) for o in m.outputs}
    # dims known at import: a start before the dim still reads element 0 backwards (ONNX, not Python)
    assert shapes["flip"] == ("n", 6) and shapes["back2"] == ("n", 1), shapes
    rng = np.random.default_rng(5)
    for n, b, en in ((4, 1, 5), (3, -4, -1), (5, 0, I64_MAX), (2, 4, 2), (6, -100, 100)):
        _same(m, sess, {"x": rng.standard_normal((n, 6)).astype(np.float32), "s": np.array([b]), "e": np.array([en])})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_runtime_pads(tmp_path, mode):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])
    p = helper.make_tensor_value_info("p", TensorProto.INT64, [4])
    q = helper.make_tensor_value_info("q", TensorProto.INT64, [2])
    outs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "y1")]
    inits = {"v": np.array(1.5, np.float32), "ax": np.array([-1], np.int64)}
    nodes = [helper.make_node("Pad", ["x", "p"] + (["v"] if mode == "constant" else []), ["y"], mode=mode),
             helper.make_node("Pad", ["x", "q", "", "ax"], ["y1"], mode=mode)]  # opset 18: pads of axis -1 only
    m, sess = _load(_build(nodes, [x, p, q], outs, inits, 18, str(tmp_path / "p.onnx")), tmp_path)
    rng = np.random.default_rng(6)
    for pads, qs in (([1, 2, 0, 3], [2, 1]), ([0, 0, 0, 0], [0, 0]), ([-1, 1, 1, -2], [-2, 2]), ([2, 0, 1, 3], [3, -1])):
        _same(m, sess, {"x": rng.standard_normal((4, 5)).astype(np.float32), "p": np.array(pads), "q": np.array(qs)})


def test_a_table_that_caps_seq_loads_and_refuses_longer_runs(tmp_path):
    """BERT's buffered token_type_ids: a [1, P] table sliced to [1, seq] and expanded to [batch, seq].
    The load-time probes (sizes of 101 and up) exceed P = 64 at every probe, so the Expand fails in
    all three; its target shape differs between them, so that is the model's limit on seq, not a
    broken graph: the model loads (it did not: the check compared only the inputs' shapes), runs
    seq <= 64 as onnxruntime does, and refuses seq 70 naming the Expand."""
    from cyb_llm.errors import ShapeMismatch

    nodes = [helper.make_node("Shape", ["ids"], ["shp"]),
             helper.make_node("Gather", ["shp", "one"], ["seq"], axis=0),
             helper.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
             helper.make_node("Slice", ["table", "zero1", "seq1", "one1"], ["row"]),
             helper.make_node("Expand", ["row", "shp"], ["types"], name="expand_types"),
             helper.make_node("Add", ["ids", "types"], ["y"])]
    inits = {"table": np.arange(64, dtype=np.int64)[None], "one": np.array(1, np.int64),
             "ax0": np.array([0], np.int64), "zero1": np.array([0], np.int64), "one1": np.array([1], np.int64)}
    src = _build(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                 [helper.make_tensor_value_info("y", TensorProto.INT64, None)], inits, 17, str(tmp_path / "cap.onnx"))
    m, sess = _load(src, tmp_path)
    for b, s in ((1, 5), (3, 64), (2, 17)):
        _same(m, sess, {"ids": np.arange(b * s, dtype=np.int64).reshape(b, s)})
    with pytest.raises(ShapeMismatch, match="expand_types"):
        m.run({"ids": np.zeros((2, 70), np.int64)})


def test_resize_to_sizes_from_tracked_shape_arithmetic(tmp_path):
    """Resize whose sizes are Concat(Shape(x)[:2], [7, 9]) (BEiT's interpolated position table): the
    importer tracks the vector as [batch, 4, 7, 9] and writes a resize to known sizes (before: refused
    as 'computed at run time'); within op-f32 of onnxruntime (one linear resize) at two batch sizes."""
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Slice", ["shp", "zero1", "two1"], ["nc"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                              coordinate_transformation_mode="half_pixel")]
    inits = {"zero1": np.array([0], np.int64), "two1": np.array([2], np.int64), "hw": np.array([7, 9], np.int64)}
    src = _build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5, 6])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, 18, str(tmp_path / "rs.onnx"))
    m, sess = _load(src, tmp_path)
    for b in (1, 3):
        x = np.random.default_rng(b).standard_normal((b, 4, 5, 6)).astype(np.float32)
        got, ref = m.run({"x": x})["y"], sess.run(None, {"x": x})[0]
        assert got.shape == ref.shape == (b, 4, 7, 9)
        assert np.abs(got - ref).max() <= tolerance("op-f32") * np.abs(ref).max()
