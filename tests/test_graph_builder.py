"""GraphBuilder (python/cyb_llm/convert/graph_builder.py): a graph written from Python runs natively,
as one graph or as a stage of a graph-stages file, with its weights prefixed."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from cyb_llm.convert.graph_builder import GraphBuilder
from cyb_llm.errors import FormatError
from cyb_llm.named_arrays import load_stage
from cyb_llm.writer import write_model
from tolerances import tolerance


def _linear(prefix: str = "") -> tuple[dict, dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    b = GraphBuilder(prefix)
    x = b.input("x", "f32", ["batch", 3])
    y = b.node("matmul_nd", [x, b.weight("lin.weight", w)])
    y = b.node("binary", [y, b.weight("lin.bias", bias)], fn="add")
    y = b.node("binary", [y, b.const([2.0])], fn="mul")
    b.output("y", y, ["batch", 4])
    graph, weights = b.build()
    return graph, weights, w, bias


def test_builder_graph_runs(tmp_path):
    graph, weights, w, bias = _linear()
    path = str(tmp_path / "lin.model")
    write_model(path, name="lin", config={"model_type": "onnx-graph"}, graph=graph,
                tensors=[(k, "f32", list(v.shape), v) for k, v in weights.items()])
    m = cyb_llm.load(path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(m.run({"x": x})["y"], (x @ w + bias) * 2, rtol=tolerance("op-f32"))


def test_builder_stage_prefix(tmp_path):
    graph, weights, w, bias = _linear("enc.")
    assert set(weights) == {"enc.lin.weight", "enc.lin.bias"}
    path = str(tmp_path / "st.model")
    write_model(path, name="st", config={"model_type": "graph-stages", "stages": {"pipeline": "graph",
                                                                                  "names": ["enc"]}},
                stages={"enc": graph}, tensors=[(k, "f32", list(v.shape), v) for k, v in weights.items()])
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(load_stage(path, "enc").run({"x": x})["y"], (x @ w + bias) * 2, rtol=tolerance("op-f32"))


def test_builder_refuses_duplicates():
    b = GraphBuilder()
    b.input("x", "f32", [1])
    with pytest.raises(FormatError):
        b.input("x", "f32", [1])
    b.weight("w", np.ones(1, np.float32))
    with pytest.raises(FormatError):
        b.weight("w", np.ones(1, np.float32))
    with pytest.raises(FormatError):
        b.output("y", "nothing", [1])
