"""`cyb-llm run-graph MODEL --input NAME=FILE.npy ... [-o OUT.npz]` (docs/import.md "ONNX"): prints
each output's name, dtype, dims and first values, writes an .npz; its errors name the option, the
input or the file; the docs' example runs as written."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from cyb_llm.cli import main  # noqa: E402
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = helper.make_node


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """y = relu(x + b) [n, 4] f32, k = ids + ids [m] i64."""
    tmp = tmp_path_factory.mktemp("rg")
    g = helper.make_graph([N("Add", ["x", "b"], ["a"]), N("Relu", ["a"], ["y"]), N("Add", ["ids", "ids"], ["k"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("ids", T.INT64, ["m"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("k", T.INT64, None)],
                          initializer=[numpy_helper.from_array(np.array([1, -1, 0, 2], np.float32), "b")])
    src = str(tmp / "g.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    model = str(tmp / "g.model")
    assert main(["import", src, "-o", model]) == 0
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "ids.npy", np.array([5, -2, 7], np.int64))
    (tmp / "junk.npy").write_bytes(b"not numpy")
    np.savez(tmp / "both.npz", a=np.zeros(2))
    return tmp, model, x


def test_run_graph_prints_and_writes(two_inputs, capsys):
    tmp, model, x = two_inputs
    out = str(tmp / "out.npz")
    assert main(["run-graph", model, "--input", f"x={tmp / 'x.npy'}", "-i", f"ids={tmp / 'ids.npy'}", "-o", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "y  float32  [3, 4]  [0, 0, 0, 0, 0, 0, ...]"
    assert lines[1] == "k  int64  [3]  [10, -4, 14]"
    with np.load(out) as z:
        assert sorted(z.files) == ["k", "y"]
        np.testing.assert_array_equal(z["y"], np.maximum(x + np.array([1, -1, 0, 2], np.float32), 0))
        np.testing.assert_array_equal(z["k"], [10, -4, 14])


@pytest.mark.parametrize("args,needle", [
    (["--input", "x"], "'x': expected NAME=FILE.npy"),
    (["--input", "x={x}", "--input", "x={x}", "--input", "ids={ids}"], "input 'x' given twice"),
    (["--input", "x={tmp}/absent.npy", "--input", "ids={ids}"], "absent.npy: no such file"),
    (["--input", "x={tmp}/junk.npy", "--input", "ids={ids}"], "junk.npy: not a readable .npy array"),
    (["--input", "x={tmp}/both.npz", "--input", "ids={ids}"], "an .npz archive"),
    (["--input", "ids={ids}"], "missing x (f32 [n, 4])"),
    (["--input", "x={ids}", "--input", "ids={ids}"], "inputs['x']"),  # an i64 array for the f32 input
    (["--input", "x={x}", "--input", "ids={ids}", "-o", "{tmp}/out.txt"], "the outputs are written as an .npz"),
])
def test_run_graph_errors(two_inputs, capsys, args, needle):
    tmp, model, _ = two_inputs
    args = [a.format(tmp=tmp, x=tmp / "x.npy", ids=tmp / "ids.npy") for a in args]
    assert main(["run-graph", model] + args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err, err
    assert not (tmp / "out.txt").exists()


def test_run_graph_refuses_a_text_model(tmp_path, capsys):
    from graph_util import write_tiny

    path = write_tiny(str(tmp_path / "tiny.model"), model_type="llama")
    np.save(tmp_path / "y.npy", np.zeros(2, np.float32))
    assert main(["run-graph", path, "--input", f"x={tmp_path / 'y.npy'}"]) == 1
    assert "`cyb-llm run-graph` takes named-array graphs" in capsys.readouterr().err


def test_docs_example_runs(tmp_path):
    text = open(os.path.join(ROOT, "docs", "import.md"), encoding="utf-8").read()
    m = re.search(r"<!-- run-graph example -->\n```bash\n(.*?)```", text, re.S)
    assert m, "the run-graph example of docs/import.md"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "cyb-llm"  # this checkout's CLI, whatever cyb-llm is installed
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from cyb_llm.cli import main; "
                    "sys.exit(main())' \"$@\"\n")
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}"
                         f"{os.environ.get('PATH', '')}")
    p = subprocess.run(["bash", "-e", "-c", m.group(1)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "y  float32  [2, 4]  [0, 0, 0, 0, 0.5, 0, ...]" in p.stdout
    assert "[[0.  0.  0.  0. ]\n [0.5 0.  4.  3. ]]" in p.stdout
