"""Quantized ONNX graphs (convert/onnx_ops_decomp.py, docs/import.md): DynamicQuantizeLinear,
QuantizeLinear, DequantizeLinear and MatMulInteger written as float arithmetic on the integer values,
each node against onnxruntime (equal: the integers, scales and zero points; the dequantized and
integer-product values exactly), and a tiny BERT quantized by onnxruntime's quantize_dynamic (int8
weights, u8 activations quantized at run time, its int8 embedding tables in the weights section) on
cpu, nox and wgpu+rs against onnxruntime on the same quantized file."""
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


def _backend(name):
    if name == "wgpu+rs":
        from placement import wgpu_skip_reason

        if wgpu_skip_reason():
            pytest.skip(wgpu_skip_reason())
    return name


def _pair(tmp_path, name, nodes, ins, outs, inits, backend):
    from cyb_llm.convert import import_model

    g = helper.make_graph(nodes, name, ins, outs, initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src, out = str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}.model")
    onnx.save(m, src)
    import_model(src, out, progress=False)
    return cyb_llm.load(out, backend=_backend(backend)), ort.InferenceSession(src, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantize_nodes_equal_onnxruntime(tmp_path, backend):
    nodes = [N("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"]),
             N("QuantizeLinear", ["x", "s", "z"], ["qu"]),
             N("QuantizeLinear", ["x", "sa", "za"], ["qa"], axis=1),
             N("DequantizeLinear", ["q", "s", "zi"], ["d"]),
             N("DequantizeLinear", ["q", "sa", "za"], ["da"], axis=1)]
    inits = {"s": np.array(0.05, np.float32), "z": np.array(100, np.uint8), "zi": np.array(-3, np.int8),
             "sa": np.array([0.02, 0.1, 0.07], np.float32), "za": np.array([-5, 0, 9], np.int8)}
    ins = [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3, 4]), helper.make_tensor_value_info("q", T.INT8, ["n", 3, 4])]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            (("y", T.UINT8), ("ys", T.FLOAT), ("yz", T.UINT8), ("qu", T.UINT8), ("qa", T.INT8), ("d", T.FLOAT),
             ("da", T.FLOAT))]
    m, sess = _pair(tmp_path, "q", nodes, ins, outs, inits, backend)
    rng = np.random.default_rng(0)
    for x in (rng.standard_normal((2, 3, 4)) * 3 + 1, np.abs(rng.standard_normal((1, 3, 4))),
              -np.abs(rng.standard_normal((3, 3, 4))) * 9, np.arange(24).reshape(2, 3, 4) * 0.25 - 2.5):
        feeds = {"x": x.astype(np.float32), "q": rng.integers(-128, 128, x.shape).astype(np.int8)}
        got = m.run(feeds)
        for o, ref in zip(outs, sess.run(None, feeds)):
            assert got[o.name].dtype == ref.dtype and got[o.name].shape == ref.shape, o.name
            assert np.array_equal(got[o.name], ref), (o.name, got[o.name], ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_integer_equals_onnxruntime(tmp_path, backend):
    """A run-time u8 A with its zero point, a constant i8 B with a zero point per column (subtracted at
    import: a weight of the matmul op) and a run-time B: the int32 products, exactly, as floats.

    The oracle for every input is ONNX's definition, (A - a_zero) @ (B - b_zero) in exact integers;
    onnxruntime is compared too where its own result is exact. On x86 CPUs without VNNI, its u8 x i8
    kernel adds pairs of products in saturating 16-bit lanes (vpmaddubsw), so with A over the whole
    u8 range its y is not the exact product there (seen on an AVX2-only AMD EPYC: 16836 where the
    exact sum is 17473); A below 128 keeps every pair within int16 on any CPU."""
    rng = np.random.default_rng(1)
    nodes = [N("MatMulInteger", ["a", "B", "az", "bz"], ["y"]), N("MatMulInteger", ["a", "b"], ["y2"])]
    inits = {"B": rng.integers(-128, 128, (16, 8)).astype(np.int8), "bz": rng.integers(-5, 5, 8).astype(np.int8)}
    ins = [helper.make_tensor_value_info("a", T.UINT8, ["n", 5, 16]), helper.make_tensor_value_info("az", T.UINT8, []),
           helper.make_tensor_value_info("b", T.UINT8, [16, 3])]
    outs = [helper.make_tensor_value_info("y", T.INT32, None), helper.make_tensor_value_info("y2", T.INT32, None)]
    m, sess = _pair(tmp_path, "mmi", nodes, ins, outs, inits, backend)
    B, bz = inits["B"].astype(np.int64), inits["bz"].astype(np.int64)
    for n, a_max in ((1, 256), (3, 256), (2, 128), (3, 128)):
        feeds = {"a": rng.integers(0, a_max, (n, 5, 16)).astype(np.uint8), "az": np.array(7, np.uint8),
                 "b": rng.integers(0, 256, (16, 3)).astype(np.uint8)}
        got = m.run(feeds)
        a = feeds["a"].astype(np.int64)
        exact = {"y": (a - 7) @ (B - bz), "y2": a @ feeds["b"].astype(np.int64)}
        for o, ref in zip(outs, sess.run(None, feeds)):
            assert got[o.name].shape == ref.shape, o.name
            assert np.array_equal(got[o.name], exact[o.name].astype(np.float32)), o.name
            if a_max <= 128:  # no pair of u8 x i8 products can saturate onnxruntime's 16-bit lanes
                assert np.array_equal(ref, exact[o.name]) and np.array_equal(got[o.name], ref.astype(np.float32)), o.name


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamically_quantized_bert(tmp_path, backend):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from cyb_llm.convert import import_model

    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, vocab_size=1000,
        max_position_embeddings=128)).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = bert

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

    f32, q8, out = str(tmp_path / "b.onnx"), str(tmp_path / "bq.onnx"), str(tmp_path / "bq.model")
    ids = torch.randint(0, 1000, (2, 12))
    axes = {"ids": {0: "b", 1: "s"}, "mask": {0: "b", 1: "s"}, "h": {0: "b", 1: "s"}}
    with torch.no_grad():
        torch.onnx.export(Hidden(), (ids, torch.ones_like(ids)), f32, input_names=["ids", "mask"], output_names=["h"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    quantize_dynamic(f32, q8, weight_type=QuantType.QInt8)
    kinds = {n.op_type for n in onnx.load(q8).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger", "DequantizeLinear"} <= kinds, kinds
    import_model(q8, out, progress=False)
    m = cyb_llm.load(out, backend=_backend(backend))
    sess = ort.InferenceSession(q8, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for b, s in ((1, 5), (3, 40)):
        mask = np.ones((b, s), np.int64)
        mask[-1, s // 2:] = 0
        feeds = {"ids": rng.integers(0, 1000, (b, s)).astype(np.int64), "mask": mask}
        ref = sess.run(None, feeds)[0]
        got = m.run(feeds)["h"]
        assert np.abs(got - ref).max() <= tolerance("onnx-vs-onnxruntime") * np.abs(ref).max()
