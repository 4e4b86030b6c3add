"""CYB_GRAPH_PROFILE (docs/graph.md "Profile of a run"): a version-2 graph's run prints its time per op
kind (=1) or per op kind and input shapes (=shapes) to stderr; any other value is an InvalidConfig
naming the variable. Read once per process, so each case runs in a child."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from serve_proc import child_env

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

CHILD = """
import numpy as np, cyb_llm
m = cyb_llm.load({path!r}, backend="cpu", threads=2)
x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5) / 7
try:
    m.run({{"x": x}})
except Exception as e:
    print(type(e).__name__, e)
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("prof")
    w = numpy_helper.from_array(np.ones((4, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Sigmoid", ["t"], ["y"])]
    g = helper.make_graph(nodes, "prof", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src, out = str(d / "prof.onnx"), str(d / "prof.model")
    onnx.save(m, src)
    from cyb_llm.convert import import_model
    import_model(src, out, progress=False)
    return out


def _run(path, value):
    r = subprocess.run([sys.executable, "-c", CHILD.format(path=path)], capture_output=True, text=True, timeout=120,
                       env=child_env(CYB_GRAPH_PROFILE=value))
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_profile_per_kind(model):
    out, err = _run(model, "1")
    assert out == ""
    assert re.search(r"graph profile: 4 nodes, [\d.]+ ms in nodes", err), err
    rows = dict(re.findall(r"^\s+(\w+)\s+(\d+) nodes\s+[\d.]+ ms\s+[\d.]+%$", err, re.M))
    assert rows == {"conv": "1", "sigmoid": "2", "tanh": "1"}, err


def test_profile_per_shape(model):
    _, err = _run(model, "shapes")
    # the weight's ones are f16 values: the importer writes them f16 (conv takes f32 or f16 weights)
    assert re.search(r"^\s+conv F32 \[2, 3, 5\], F16 \[4, 3, 3\]\s+1 nodes", err, re.M), err
    assert re.search(r"^\s+sigmoid F32 \[2, 4, 5\]\s+2 nodes", err, re.M), err


def test_profile_off_and_bad_value(model):
    assert _run(model, "0")[1] == ""
    out, err = _run(model, "yes")
    assert "graph profile" not in err
    assert out.startswith("InvalidConfig") and "CYB_GRAPH_PROFILE" in out and "'yes'" in out, out
