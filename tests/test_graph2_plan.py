"""Shapes at load and the memory plan of version-2 graphs (docs/graph.md "Shapes and the memory
plan", csrc/model/array_graph_plan.cc): small ONNX graphs made with onnx.helper, imported; the
shapes inferred at load (sizes, products and sums of the input dims' names, fresh names where the
data decides), the plan before a run against what the run held, reuse, the budget refused before
anything is allocated, shape errors at load naming the node, `cyb-llm run-graph --plan`. Silero
and Piper: tests/test_onnx_silero.py, tests/test_onnx_piper.py."""
from __future__ import annotations


import numpy as np
import pytest

import cyb_llm
from cyb_llm.errors import InvalidConfig, OutOfMemory, ShapeMismatch
from tolerances import tolerance

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
N = helper.make_node


def _import(tmp_path, name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = str(tmp_path / f"{name}.onnx")
    onnx.save(m, src)
    out = str(tmp_path / f"{name}.model")
    from cyb_llm.convert import import_model
    import_model(src, out, progress=False)
    return out


def _chain(tmp_path):
    """x [n, 16] through a chain whose values die as it goes (a branch kept to the end as `t`)."""
    pads = numpy_helper.from_array(np.array([1, 0, 1, 0], np.int64), "pads")
    shape = numpy_helper.from_array(np.array([-1, 8], np.int64), "shape8")
    nodes = [N("Relu", ["x"], ["a"], name="relu"), N("Sigmoid", ["a"], ["b"], name="sig"),
             N("Concat", ["a", "b"], ["c"], name="cat", axis=0), N("Tanh", ["c"], ["d"], name="tanh"),
             N("Pad", ["d", "pads"], ["e"], name="pad"), N("Reshape", ["e", "shape8"], ["f"], name="view"),
             N("Exp", ["f"], ["g"], name="exp"), N("Neg", ["g"], ["h"], name="neg"),
             N("ReduceSum", ["h", "one"], ["y"], name="sum", keepdims=0), N("Sigmoid", ["x"], ["t"], name="t")]
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    return _import(tmp_path, "chain", nodes, [helper.make_tensor_value_info("x", F32, ["n", 16])],
                   [helper.make_tensor_value_info("y", F32, None), helper.make_tensor_value_info("t", F32, None)],
                   [pads, shape, one])


def _chain_ref(x):
    a = np.maximum(x, 0)
    c = np.concatenate([a, 1 / (1 + np.exp(-a))], 0)
    e = np.pad(np.tanh(c), ((1, 1), (0, 0)))
    return {"y": -np.exp(e.reshape(-1, 8)).sum(1), "t": 1 / (1 + np.exp(-x))}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return _chain(tmp_path_factory.mktemp("plan"))


def _no_shared_bytes(plan):
    """No two values alive at one node share bytes (read from the plan's own numbers)."""
    placed = [v for v in plan["values"] if v["offset"] is not None]
    for i, u in enumerate(placed):
        for v in placed[i + 1:]:
            if u["first"] <= v["last"] and v["first"] <= u["last"]:
                assert u["offset"] + u["bytes"] <= v["offset"] or v["offset"] + v["bytes"] <= u["offset"], (u, v)


def test_symbolic_shapes_at_load(chain):
    s = cyb_llm.load(chain, backend="cpu").shapes
    assert s["c"]["shape"] == ["2*n", 16]
    assert s["e"]["shape"] == ["2*n+2", 16]
    assert s["f"]["shape"] == ["4*n+4", 8]
    assert s["y"] == {"dtype": "f32", "shape": ["4*n+4"]} and s["t"]["shape"] == ["n", 16]


@pytest.mark.parametrize("n", [1, 5, 300])
def test_plan_is_what_the_run_holds(chain, n):
    m = cyb_llm.load(chain, backend="cpu")
    p = m.memory_plan(n=n)
    assert p["complete"] and p["unknown"] == [] and p["dims"] == {"n": n}
    by = {v["name"]: v for v in p["values"]}
    assert by["f"]["view_of"] == "e" and by["f"]["offset"] is None and by["e"]["last"] >= by["g"]["first"]
    assert by["t"]["last"] == len(m.shapes) and by["y"]["last"] == len(m.shapes)  # outputs kept to the end
    _no_shared_bytes(p)
    # reuse: the peak is below every value in its own buffer, and no plan can go below live_max_bytes
    assert p["live_max_bytes"] <= p["peak_bytes"] < p["sum_bytes"] and p["reused"] > 0
    x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
    got = m.run({"x": x})
    r = m.last_run_memory()
    assert r == {"planned_peak": p["peak_bytes"], "measured_peak": p["peak_bytes"], "dynamic_peak": 0,
                 "unknown_values": 0, "unplanned": 0, "weight_cache_bytes": 0, "released_weight_bytes": 0,
                 "pooled_bytes": p["peak_bytes"]}  # the arena waits in the pool for the next run
    m.release_memory()
    assert m.last_run_memory()["pooled_bytes"] == 0
    for k, ref in _chain_ref(x.astype(np.float64)).items():
        np.testing.assert_allclose(got[k], ref, rtol=tolerance("op-f32"), atol=tolerance("op-f32"))


def test_plan_errors(chain):
    m = cyb_llm.load(chain, backend="cpu")
    with pytest.raises(InvalidConfig) as e:
        m.memory_plan()
    assert e.value.field == "dims['n']" and "missing" in str(e.value)
    with pytest.raises(InvalidConfig) as e:
        m.memory_plan(n=3, seq=4)
    assert e.value.field == "dims['seq']"
    with pytest.raises(InvalidConfig):
        m.memory_plan(n=-1)


def test_over_budget_fails_before_the_first_node(chain):
    n = 1 << 14
    probe = cyb_llm.load(chain, backend="cpu")
    p = probe.memory_plan(n=n)
    largest = max(v["bytes"] for v in p["values"] if v["offset"] is not None)
    held = probe._native.charged_bytes  # what the model holds (the budget counts it)
    budget = held + (largest + p["peak_bytes"]) // 2  # room for the largest value, not for the plan
    m = cyb_llm.load(chain, backend="cpu", max_memory=budget)
    m._native.set_profiling(True)
    m._native.clear_dispatch_records()
    with pytest.raises(OutOfMemory) as e:
        m.run({"x": np.ones((n, 16), np.float32)})
    assert f"the memory plan of this run (n={n}): its peak of {p['peak_bytes']} bytes" in str(e.value)
    assert m._native.dispatch_records() == []  # no node ran
    m.run({"x": np.ones((4, 16), np.float32)})  # a smaller run fits


def test_data_dependent_sizes(tmp_path):
    """NonZero's count is a fresh name; the plan leaves its value out (a lower bound, complete False)."""
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [N("Greater", ["x", "zero"], ["pos"], name="gt"), N("NonZero", ["pos"], ["nz"], name="nz_node"),
             N("Relu", ["x"], ["y"], name="relu")]
    path = _import(tmp_path, "nz", nodes, [helper.make_tensor_value_info("x", F32, ["n"])],
                   [helper.make_tensor_value_info("nz", I64, None), helper.make_tensor_value_info("y", F32, None)],
                   [zero])
    m = cyb_llm.load(path, backend="cpu")
    shape = m.shapes["nz"]["shape"]
    assert shape[0] == 1 and isinstance(shape[1], str) and "nz_node" in shape[1] and ":" in shape[1], shape
    p = m.memory_plan(n=10)
    assert not p["complete"] and p["unknown"] == ["nz"]
    x = np.array([1, -1, 2, 0, 3, -4, 5, 6, -7, 8], np.float32)
    out = m.run({"x": x})
    np.testing.assert_array_equal(out["nz"], np.stack(np.nonzero(x > 0)))
    r = m.last_run_memory()
    assert r["planned_peak"] == p["peak_bytes"] and r["unknown_values"] == 1 and r["unplanned"] == 0
    assert r["dynamic_peak"] > 0 and r["measured_peak"] >= p["peak_bytes"] + r["dynamic_peak"] - 64


def test_shape_error_at_load_names_the_node(tmp_path):
    def graph(name, xdims):
        return _import(tmp_path, name, [N("Add", ["x", "w"], ["y"], name="bad_add")],
                       [helper.make_tensor_value_info("x", F32, xdims), helper.make_tensor_value_info("w", F32, [4])],
                       [helper.make_tensor_value_info("y", F32, None)])
    with pytest.raises(ShapeMismatch) as e:
        cyb_llm.load(graph("static", [2, 3]), backend="cpu")
    assert "bad_add" in str(e.value)
    # where an input dim reaches the node, the size decides: a load, and the same error at run time
    m = cyb_llm.load(graph("sym", ["n", 3]), backend="cpu")
    assert m.shapes["y"]["shape"] is None
    with pytest.raises(ShapeMismatch) as e:
        m.run({"x": np.ones((2, 3), np.float32), "w": np.ones(4, np.float32)})
    assert "bad_add" in str(e.value)


def test_run_graph_plan_flag(chain, tmp_path, capsys):
    from cyb_llm.cli import main
    f = str(tmp_path / "x.npy")
    np.save(f, np.ones((7, 16), np.float32))
    assert main(["run-graph", chain, "--input", f"x={f}", "--plan"]) == 0
    out = capsys.readouterr().out
    peak = cyb_llm.load(chain, backend="cpu").memory_plan(n=7)["peak_bytes"]
    assert f"plan (n=7): peak {peak} bytes;" in out and f"held: {peak} bytes at most" in out
