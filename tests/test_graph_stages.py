"""Files of several graphs (model_type "graph-stages", docs/graph.md "Stages"): each stage's graph in
its section graph_<stage>, its weights prefixed by the stage; load_stage runs one; the errors name
the file's stages."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from cyb_llm import _core  # noqa: E402
from cyb_llm.convert.onnx_graph import import_onnx_stages  # noqa: E402
from cyb_llm.errors import InvalidConfig  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402
from cyb_llm.named_arrays import load_stage, stage_names  # noqa: E402
from serve_proc import child_env  # noqa: E402


def _onnx(path, op: str, w: np.ndarray, x: str = "x", y: str = "y") -> str:
    """x [n, 3] -> y = op(x, w), the weight an initializer named 'w' in every file (the stages'
    weights must not collide)."""
    g = helper.make_graph([helper.make_node(op, [x, "w"], [y])], "g",
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["n", 3])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    d = tmp_path_factory.mktemp("stages")
    wa = np.array([1.0, 2.0, 3.0], np.float32)
    wb = np.array([0.5, -1.0, 4.0], np.float32)
    out = str(d / "two.model")
    import_onnx_stages({"add": _onnx(d / "a.onnx", "Add", wa), "mul": _onnx(d / "b.onnx", "Mul", wb, "u", "v")}, out,
                       pipeline="graph", progress=False)
    return out, wa, wb


def test_each_stage_runs_its_own_graph_and_weights(staged):
    path, wa, wb = staged
    mf = ModelFile(path)
    assert mf.config["model_type"] == "graph-stages"
    assert stage_names(mf) == ["add", "mul"]
    assert set(mf.tensors) == {"add.w", "mul.w"}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = load_stage(mf, "add")
    b = load_stage(path, "mul")
    assert a.stage == "add" and [i.name for i in a.inputs] == ["x"] and [o.name for o in a.outputs] == ["y"]
    assert b.stage == "mul" and [i.name for i in b.inputs] == ["u"] and [o.name for o in b.outputs] == ["v"]
    np.testing.assert_array_equal(a.run({"x": x})["y"], x + wa)
    np.testing.assert_array_equal(b.run({"u": x})["v"], x * wb)


def test_stage_errors_name_the_stages(staged):
    path, _, _ = staged
    mf = ModelFile(path)
    with pytest.raises(InvalidConfig, match=r"no stage 'vae'.*add, mul"):
        load_stage(mf, "vae")
    # the native load: no stage, an unknown one (the Python check bypassed)
    with pytest.raises(InvalidConfig, match=r"load one stage by name \(stages: add, mul\)"):
        _core.load(mf._native, "cpu", False, 1, "", True, None, "")
    with pytest.raises(InvalidConfig, match=r"no stage 'vae' \(stages: add, mul\)"):
        _core.load(mf._native, "cpu", False, 1, "", True, None, "vae")
    # cyb_llm.load of a stages file recorded as a plain graph: the native error, not a crash
    import cyb_llm

    with pytest.raises(InvalidConfig, match="load one stage by name"):
        cyb_llm.load(path)


def test_stage_on_a_file_of_one_graph_is_refused(tmp_path):
    from cyb_llm.convert.onnx_graph import import_onnx

    src = _onnx(tmp_path / "a.onnx", "Add", np.ones(3, np.float32))
    out = str(tmp_path / "one.model")
    import_onnx(src, out, progress=False)
    mf = ModelFile(out)
    with pytest.raises(InvalidConfig, match="hold one graph"):
        _core.load(mf._native, "cpu", False, 1, "", True, None, "add")
    with pytest.raises(InvalidConfig, match="stages.names"):
        load_stage(mf, "add")


def test_cli_imports_stages(tmp_path):
    a = _onnx(tmp_path / "a.onnx", "Add", np.ones(3, np.float32))
    b = _onnx(tmp_path / "b.onnx", "Mul", np.full(3, 2.0, np.float32))
    out = tmp_path / "s.model"
    r = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "import", "--stage", f"first={a}", "--stage", f"second={b}",
                        "-o", str(out)], capture_output=True, text=True, env=child_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    assert stage_names(ModelFile(str(out))) == ["first", "second"]
    r = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "import", "--stage", f"first={a}", "--stage", f"first={b}",
                        "-o", str(tmp_path / "t.model")], capture_output=True, text=True, env=child_env(), timeout=300)
    assert r.returncode != 0 and "each name once" in r.stderr
