"""Hostile ONNX files and hostile feeds (docs/import.md "ONNX", "Hostile files"): every case is a
structured error (cyb_llm.errors) whose message names the node, tensor, input or file at fault;
none is a crash, a hang or a silent wrong answer. Cases that reach native code or parse a broken
protobuf run in a child interpreter (one per group, each case reported on its own line), and the
child must exit normally (no signal). The 10k-node graph imports and runs in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm.convert import import_model  # noqa: E402
from tolerances import tolerance  # noqa: E402
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

N = helper.make_node
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(nodes, ins, outs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", ins, outs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _save(path, nodes, ins, outs, inits=(), opset=18) -> str:
    onnx.save(_model(nodes, ins, outs, inits, opset), str(path))
    return str(path)


def _f(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


X, Y = _f("x", ["n", 4]), _f("y", None)

# The child: runs each case of a JSON list, printing one JSON line per case (the error's class and
# message, or "ok" and the outputs' shapes), flushed before the next case starts.
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import cyb_llm
    from cyb_llm.errors import Error
    cases = json.load(open(sys.argv[1]))
    for c in cases:
        print(json.dumps({"case": c["case"], "started": True}), flush=True)
        try:
            if c["kind"] == "import":
                from cyb_llm.convert import import_model
                import_model(c["src"], c["out"], progress=False, **c.get("kw", {}))
                res = {"ok": True, "written": __import__("os").path.exists(c["out"])}
            else:
                m = cyb_llm.load(c["model"], backend="cpu", max_memory=c.get("max_memory"))
                feeds = {k: np.load(v) for k, v in c["feeds"].items()}
                out = m.run(feeds)
                res = {"ok": True, "shapes": {k: list(v.shape) for k, v in out.items()}}
        except Error as e:
            res = {"ok": False, "type": type(e).__name__, "msg": str(e),
                   "written": c["kind"] == "import" and __import__("os").path.exists(c["out"])}
        except Exception as e:  # not a structured error: reported as such
            res = {"ok": False, "type": "UNSTRUCTURED " + type(e).__name__, "msg": str(e)}
        res["case"] = c["case"]
        print(json.dumps(res), flush=True)
""")


def _run_child(tmp_path, cases: list[dict], timeout: float = 120) -> dict[str, dict]:
    """Runs the cases in a child interpreter; asserts that it was not killed by a signal and did not
    hang; returns {case: result}."""
    spec = tmp_path / f"cases_{len(os.listdir(tmp_path))}.json"
    spec.write_text(json.dumps(cases))
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = child_env()
    p = subprocess.run([sys.executable, str(script), str(spec)], capture_output=True, text=True, timeout=timeout,
                       env=env)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    started = [r["case"] for r in lines if r.get("started")]
    assert p.returncode >= 0, f"child killed by signal {-p.returncode} during case {started[-1:]}: {p.stderr[-2000:]}"
    assert p.returncode == 0, p.stderr[-2000:]
    return {r["case"]: r for r in lines if not r.get("started")}


def _expect(res: dict, case: str, err: str, *needles: str) -> None:
    r = res[case]
    assert not r["ok"] and r["type"] == err, (case, r)
    for n in needles:
        assert n in r["msg"], (case, n, r["msg"])
    assert not r.get("written"), (case, "a file was written")


# ---- import time -------------------------------------------------------------------------------

def _import_cases(tmp_path) -> list[dict]:
    cases = []

    def add(case, src, **kw):
        cases.append({"case": case, "kind": "import", "src": str(src), "out": str(tmp_path / f"{case}.model"),
                      "kw": kw})

    ok = _save(tmp_path / "ok.onnx", [N("Add", ["x", "w"], ["y"], name="add")], [X], [Y],
               [numpy_helper.from_array(np.ones((64, 4), np.float32), "w")])
    data = open(ok, "rb").read()
    (tmp_path / "trunc.onnx").write_bytes(data[: len(data) // 2])
    add("truncated", tmp_path / "trunc.onnx")
    (tmp_path / "garbage.onnx").write_bytes(b"\xff" * 100)
    add("garbage", tmp_path / "garbage.onnx")
    add("no_file", tmp_path / "absent.onnx")

    short = numpy_helper.from_array(np.ones(4, np.float32), "bias")
    short.raw_data = short.raw_data[:8]
    add("short_raw", _save(tmp_path / "short_raw.onnx", [N("Add", ["x", "bias"], ["y"], name="add")], [X], [Y],
                           [short]))
    typed = helper.make_tensor("bias", T.FLOAT, [2], [1.0, 2.0])
    typed.dims[0] = 4  # float_data: 2 values for 4
    add("short_typed", _save(tmp_path / "short_typed.onnx", [N("Add", ["x", "bias"], ["y"], name="add")], [X], [Y],
                             [typed]))
    huge = numpy_helper.from_array(np.ones(4, np.float32), "bias")
    del huge.dims[:]
    huge.dims.extend([1 << 20, 1 << 20])  # 2^40 values claimed, 16 bytes given: nothing allocated
    add("huge_dims", _save(tmp_path / "huge.onnx", [N("Add", ["x", "bias"], ["y"], name="add")], [X], [Y], [huge]))

    add("cycle", _save(tmp_path / "cycle.onnx", [N("Relu", ["b"], ["a"], name="r1"), N("Tanh", ["a"], ["b"], name="r2"),
                                                 N("Relu", ["b"], ["y"], name="r3")], [X], [Y]))
    add("undefined", _save(tmp_path / "undef.onnx", [N("Relu", ["nothere"], ["y"], name="r1")], [X], [Y]))
    add("twice", _save(tmp_path / "twice.onnx", [N("Relu", ["x"], ["a"], name="r1"), N("Tanh", ["x"], ["a"], name="r2"),
                                                 N("Relu", ["a"], ["y"], name="r3")], [X], [Y]))
    add("arity", _save(tmp_path / "arity.onnx", [N("Add", ["x"], ["y"], name="lonely_add")], [X], [Y]))
    add("no_outputs", _save(tmp_path / "noout.onnx", [N("Relu", ["x"], [], name="mute"),
                                                      N("Relu", ["x"], ["y"], name="r")], [X], [Y]))
    x2 = _f("x", ["n", "m"])
    add("perm", _save(tmp_path / "perm.onnx", [N("Transpose", ["x"], ["y"], name="tp", perm=[0, 5])], [x2], [Y]))
    add("slice_axis", _save(tmp_path / "slice.onnx", [N("Slice", ["x", "st", "en", "ax"], ["y"], name="sl")], [x2], [Y],
                            [numpy_helper.from_array(np.array([v], np.int64), k) for k, v in
                             (("st", 0), ("en", 1), ("ax", 7))]))
    w4 = numpy_helper.from_array(np.ones(4, np.float32), "w4")
    add("dup_input", _save(tmp_path / "dupin.onnx", [N("Relu", ["x"], ["y"], name="r")], [X, X], [Y]))
    add("dup_init", _save(tmp_path / "dupinit.onnx", [N("Add", ["x", "w4"], ["y"], name="a")], [X], [Y], [w4, w4]))
    add("dup_output", _save(tmp_path / "dupout.onnx", [N("Relu", ["x"], ["y"], name="r")], [X], [Y, Y]))
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "sw"),
                                   numpy_helper.from_array(np.array([0], np.int64), "idx"), [4])
    m_sp = _model([N("Add", ["x", "sw"], ["y"], name="a")], [X], [Y])
    m_sp.graph.sparse_initializer.extend([sp])
    onnx.save(m_sp, str(tmp_path / "sparse.onnx"))
    add("sparse", tmp_path / "sparse.onnx")
    add("output_undefined", _save(tmp_path / "outundef.onnx", [N("Relu", ["x"], ["a"], name="r")], [X], [Y]))

    body = helper.make_graph([N("Relu", ["x"], ["t"])], "body", [], [_f("t", None)])
    cond = helper.make_tensor_value_info("c", T.BOOL, [])
    add("if", _save(tmp_path / "if.onnx", [N("If", ["c"], ["y"], name="the_if", then_branch=body, else_branch=body)],
                    [X, cond], [Y]))
    loop_body = helper.make_graph([N("Identity", ["cond_in"], ["cond_out"]), N("Relu", ["v_in"], ["v_out"])], "lb",
                                  [helper.make_tensor_value_info("i", T.INT64, []),
                                   helper.make_tensor_value_info("cond_in", T.BOOL, []), _f("v_in", None)],
                                  [helper.make_tensor_value_info("cond_out", T.BOOL, []), _f("v_out", None)])
    trip = helper.make_tensor_value_info("trip", T.INT64, [])
    add("loop", _save(tmp_path / "loop.onnx", [N("Loop", ["trip", "", "x"], ["y"], name="the_loop", body=loop_body)],
                      [X, trip], [Y]))
    scan_body = helper.make_graph([N("Add", ["s_in", "e"], ["s_out"]), N("Identity", ["s_out"], ["o"])], "sb",
                                  [_f("s_in", [4]), _f("e", [4])], [_f("s_out", [4]), _f("o", [4])])
    s0 = _f("s0", [4])
    add("scan", _save(tmp_path / "scan.onnx", [N("Scan", ["s0", "x"], ["sf", "y"], name="the_scan", body=scan_body,
                                                  num_scan_inputs=1)], [s0, X], [_f("sf", None), Y]))
    add("unsupported_all", _save(tmp_path / "uns.onnx", [N("Hardmax", ["x"], ["a"], name="hm_1"),
                                                          N("Hardmax", ["a"], ["b"], name="hm_2"),
                                                          N("Det", ["b"], ["y"], name="det")], [X], [Y]))
    for opset in (11, 22):
        add(f"opset_{opset}", _save(tmp_path / f"op{opset}.onnx", [N("Relu", ["x"], ["y"], name="r")], [X], [Y],
                                    opset=opset))

    # external data: missing, too short, outside the model's folder
    for case in ("ext_missing", "ext_short", "ext_escape"):
        folder = tmp_path / case
        folder.mkdir()
        m = _model([N("Add", ["x", "w"], ["y"], name="add")], [X], [Y],
                   [numpy_helper.from_array(np.ones((64, 4), np.float32), "w")])
        src = str(folder / "m.onnx")
        onnx.save(m, src, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
        if case == "ext_missing":
            os.remove(folder / "m.onnx.data")
        elif case == "ext_short":
            with open(folder / "m.onnx.data", "r+b") as f:
                f.truncate(100)
        else:
            m2 = onnx.load(src, load_external_data=False)
            for e in m2.graph.initializer[0].external_data:
                if e.key == "location":
                    e.value = "../../etc/passwd"
            onnx.save(m2, src)
        add(case, src)
    return cases


@pytest.fixture(scope="module")
def import_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile_import")
    return _run_child(tmp, _import_cases(tmp))


@pytest.mark.parametrize("case,err,needles", [
    ("truncated", "FormatError", ["trunc.onnx", "not a readable ONNX file"]),
    ("garbage", "FormatError", ["garbage.onnx", "not a readable ONNX file"]),
    ("no_file", "FormatError", ["absent.onnx", "no such file"]),
    ("short_raw", "FormatError", ["initializer 'bias'", "raw_data holds 8 bytes", "need 16"]),
    ("short_typed", "FormatError", ["initializer 'bias'", "float_data holds 2 values", "need 4"]),
    ("huge_dims", "FormatError", ["initializer 'bias'", "raw_data holds 16 bytes", "[1048576, 1048576]"]),
    ("cycle", "FormatError", ["cycle", "'r1'", "'r2'"]),
    ("undefined", "FormatError", ["'r1'", "'nothere'", "no node, graph input or initializer"]),
    ("twice", "FormatError", ["'r2'", "defines 'a'", "node 'r1'"]),
    ("arity", "FormatError", ["'lonely_add'", "1 inputs", "takes 2"]),
    ("no_outputs", "FormatError", ["'mute'", "no outputs"]),
    ("perm", "FormatError", ["'tp'", "perm [0, 5] is not a permutation"]),
    ("slice_axis", "FormatError", ["'sl'", "axis 7 of an input of 2 dims"]),
    ("dup_input", "FormatError", ["graph input 'x' is declared twice"]),
    ("dup_init", "FormatError", ["initializer 'w4' is declared twice"]),
    ("dup_output", "FormatError", ["graph output 'y' is declared twice"]),
    ("sparse", "UnsupportedOp", ["sparse initializers (sw)"]),
    ("output_undefined", "FormatError", ["graph output 'y'", "defined by no node"]),
    ("if", "UnsupportedOp", ["If x1 (the_if)"]),
    ("loop", "UnsupportedOp", ["Loop x1 (the_loop)"]),
    ("scan", "UnsupportedOp", ["Scan x1 (the_scan)"]),
    ("unsupported_all", "UnsupportedOp", ["Hardmax x2 (hm_1, hm_2)", "Det x1 (det)"]),
    ("opset_11", "UnsupportedOp", ["opset 11", "13 to 21"]),
    ("opset_22", "UnsupportedOp", ["opset 22", "13 to 21"]),
    ("ext_missing", "FormatError", ["tensor 'w'", "'m.onnx.data'", "missing"]),
    ("ext_short", "FormatError", ["tensor 'w'", "'m.onnx.data'", "has 100 bytes", "too short"]),
    ("ext_escape", "FormatError", ["tensor 'w'", "outside the model's folder"]),
])
def test_hostile_import(import_results, case, err, needles):
    _expect(import_results, case, err, *needles)


def test_unsorted_graph_is_sorted(tmp_path):
    """Nodes out of file order (no cycle) are sorted, and the result is right."""
    src = _save(tmp_path / "unsorted.onnx", [N("Tanh", ["a"], ["y"], name="second"), N("Relu", ["x"], ["a"], name="first")],
                [X], [Y])
    out = str(tmp_path / "unsorted.model")
    import_model(src, out, progress=False)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    got = cyb_llm.load(out, backend="cpu").run({"x": x})["y"]
    np.testing.assert_allclose(got, np.tanh(np.maximum(x, 0)), rtol=tolerance("op-f32"), atol=1e-7)


def test_feeds_of_any_layout(tmp_path):
    """Feeds strided, Fortran-ordered, transposed, read-only or byte-swapped give numpy's answer
    (never the bytes read as if they were native C-order values)."""
    src = _save(tmp_path / "relu.onnx", [N("Relu", ["x"], ["y"], name="r")], [_f("x", ["n", "m"])], [Y])
    out = str(tmp_path / "relu.model")
    import_model(src, out, progress=False)
    m = cyb_llm.load(out, backend="cpu")
    base = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)
    ro = np.frombuffer(base.tobytes(), np.float32).reshape(4, 6)
    for x in (base[:, ::2], np.asfortranarray(base), base.T, ro, base.astype(">f4"), base.T.astype(">f4")):
        np.testing.assert_array_equal(m.run({"x": x})["y"], np.maximum(x.astype(np.float32), 0))
    i = np.arange(-3, 3, dtype=">i8")
    ids = _save(tmp_path / "ids.onnx", [N("Neg", ["i"], ["y"], name="neg")],
                [helper.make_tensor_value_info("i", T.INT64, ["n"])], [helper.make_tensor_value_info("y", T.INT64, None)])
    import_model(ids, str(tmp_path / "ids.model"), progress=False)
    assert cyb_llm.load(str(tmp_path / "ids.model"), backend="cpu").run({"i": i})["y"].tolist() == [3, 2, 1, 0, -1, -2]


def test_external_data_imports(tmp_path):
    """`onnx.save(..., save_as_external_data=True)`: model.onnx + model.onnx.data import as one."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    m = _model([N("Add", ["x", "b"], ["a"], name="add_b"), N("Mul", ["a", "w"], ["y"], name="mul_w")],
               [_f("x", [6, 4])], [Y], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    src = str(tmp_path / "m.onnx")
    onnx.save(m, src, save_as_external_data=True, all_tensors_to_one_file=True, location="m.onnx.data",
              size_threshold=0)
    assert os.path.getsize(tmp_path / "m.onnx.data") >= w.nbytes + b.nbytes
    out = str(tmp_path / "m.model")
    import_model(src, out, progress=False)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    np.testing.assert_allclose(cyb_llm.load(out, backend="cpu").run({"x": x})["y"], (x + b) * w, rtol=tolerance("op-f32"))


# ---- run time ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runtime_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile_run")
    i64 = lambda n, s: helper.make_tensor_value_info(n, T.INT64, s)  # noqa: E731
    zero, one = numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")
    # sized by run-time inputs: ConstantOfShape(s), Range(0, lim, 1), Expand(x, e); a big intermediate
    # reduced to a scalar (big), and a chain of 1 MiB intermediates (chain)
    fill = numpy_helper.from_array(np.array([1.0], np.float32))
    chain = [N("ConstantOfShape", ["c"], ["c0"], name="chain_fill", value=fill)]
    for k in range(8):
        chain.append(N("Sigmoid", [f"c{k}"], [f"c{k + 1}"], name=f"chain_{k}"))
    chain.append(N("ReduceSum", ["c8"], ["chain_sum"], name="chain_sum", keepdims=0))
    nodes = [N("ConstantOfShape", ["s"], ["filled"], name="cos_node", value=fill),
             N("Range", ["zero", "lim", "one"], ["ramp"], name="range_node"),
             N("Expand", ["x", "e"], ["grown"], name="expand_node"),
             N("ConstantOfShape", ["big_s"], ["big"], name="big_fill", value=fill),
             N("ReduceSum", ["big"], ["big_sum"], name="big_sum", keepdims=0),
             N("Relu", ["x"], ["y"], name="relu"),
             N("Gather", ["x", "gi"], ["picked"], name="gather_node")] + chain
    outs = [_f("filled", None), helper.make_tensor_value_info("ramp", T.INT64, None), _f("grown", None),
            _f("big_sum", None), _f("y", None), _f("chain_sum", None), _f("picked", None)]
    src = _save(tmp / "rt.onnx", nodes, [i64("s", [2]), i64("lim", []), _f("x", [1]), i64("e", [1]), i64("big_s", [1]),
                                         i64("c", [1]), i64("gi", [1])], outs, [zero, one])
    model = str(tmp / "rt.model")
    import_model(src, model, progress=False)
    size = os.path.getsize(model)
    # a Pad of 2^40 written in the file (constant pads): refused by the default budget (the memory available)
    pads = numpy_helper.from_array(np.array([0, 1 << 40], np.int64), "pads")
    pad_model = str(tmp / "pad.model")
    import_model(_save(tmp / "pad.onnx", [N("Pad", ["x", "pads"], ["y"], name="pad_node")], [_f("x", [1])], [Y], [pads]),
                 pad_model, progress=False)

    # empty feeds (a dim of 0): run like numpy (they used to read as "no data")
    empty_model = str(tmp / "empty.model")
    e_outs = [_f("relu", None), _f("tp", None), helper.make_tensor_value_info("nz", T.INT64, None), _f("cs", None),
              _f("rsum", None)]
    import_model(_save(tmp / "empty.onnx", [N("Relu", ["x"], ["relu"]), N("Transpose", ["x"], ["tp"], perm=[1, 0]),
                                            N("NonZero", ["x"], ["nz"]), N("CumSum", ["x", "zero"], ["cs"]),
                                            N("ReduceSum", ["x", "zero1"], ["rsum"], keepdims=0)],
                       [_f("x", ["n", 4])], e_outs,
                       [zero, numpy_helper.from_array(np.array([0], np.int64), "zero1")]), empty_model, progress=False)
    base = {"s": np.array([2, 3], np.int64), "lim": np.array(5, np.int64), "x": np.ones(1, np.float32),
            "e": np.array([4], np.int64), "big_s": np.array([16], np.int64), "c": np.array([16], np.int64),
            "gi": np.array([0], np.int64)}
    cases = []

    def add(case, max_memory=None, model=model, feeds_base=base, **over):
        feeds = {}
        for k, v in {**feeds_base, **over}.items():
            if v is None:
                continue
            p = str(tmp / f"{case}_{k}.npy")
            np.save(p, np.asarray(v), allow_pickle=False)
            feeds[k] = p
        cases.append({"case": case, "kind": "run", "model": model, "feeds": feeds, "max_memory": max_memory})

    add("ok")
    add("cos_2_40", s=np.array([1 << 20, 1 << 20], np.int64))
    add("cos_negative", s=np.array([2, -1], np.int64))
    add("range_2_40", lim=np.array(1 << 40, np.int64))
    add("expand_2_40", e=np.array([1 << 40], np.int64))
    add("budget_output", max_memory=size + (16 << 20), s=np.array([2048, 4096], np.int64))  # 32 MiB out
    add("budget_intermediate", max_memory=size + (16 << 20), big_s=np.array([8 << 20], np.int64))  # 32 MiB
    add("budget_fits", max_memory=size + (16 << 20), big_s=np.array([1 << 20], np.int64))  # 4 MiB
    # 9 values of 4 MiB in a chain, at most 2 alive at once: fits 16 MiB only when dead values are freed
    add("budget_chain", max_memory=size + (16 << 20), c=np.array([1 << 20], np.int64))
    add("gather_2_40", gi=np.array([1 << 40], np.int64))
    add("pad_2_40", model=pad_model, feeds_base={"x": np.ones(1, np.float32)})
    add("empty", model=empty_model, feeds_base={"x": np.ones((0, 4), np.float32)})
    add("feed_f64", x=np.ones(1))
    add("feed_rank", x=np.ones((1, 1), np.float32))
    add("feed_missing", x=None)
    add("feed_scalar_rank", lim=np.array([5], np.int64))
    return _run_child(tmp, cases)


def test_runtime_ok(runtime_results):
    r = runtime_results["ok"]
    assert r["ok"], r
    assert r["shapes"]["filled"] == [2, 3] and r["shapes"]["ramp"] == [5] and r["shapes"]["grown"] == [4]


@pytest.mark.parametrize("case,err,needles", [
    ("cos_2_40", "InvalidConfig", ["cos_node", "2^31"]),
    ("cos_negative", "InvalidConfig", ["cos_node", "negative"]),
    ("range_2_40", "InvalidConfig", ["range_node", "2^31"]),
    ("expand_2_40", "InvalidConfig", ["expand_node", "2^31"]),
    ("budget_output", "OutOfMemory", ["node 'cos_node' (op constant_of_shape)", "max_memory="]),
    ("budget_intermediate", "OutOfMemory", ["node 'big_fill' (op constant_of_shape)", "max_memory="]),
    ("gather_2_40", "InvalidConfig", ["gather_node", "index 1099511627776"]),
    ("pad_2_40", "OutOfMemory", ["node 'pad_node' (op pad)", "[1099511627777]", "physical memory available"]),
    ("feed_f64", "InvalidConfig", ["inputs['x']", "float64"]),
    ("feed_rank", "ShapeMismatch", ["input 'x'"]),
    ("feed_missing", "InvalidConfig", ["inputs['x']", "missing"]),
    ("feed_scalar_rank", "ShapeMismatch", ["input 'lim'"]),
])
def test_hostile_run(runtime_results, case, err, needles):
    _expect(runtime_results, case, err, *needles)


def test_empty_feeds(runtime_results):
    r = runtime_results["empty"]
    assert r["ok"], r
    assert r["shapes"] == {"relu": [0, 4], "tp": [4, 0], "nz": [2, 0], "cs": [0, 4], "rsum": [4]}


@pytest.mark.parametrize("case", ["budget_fits", "budget_chain"])
def test_budget_room(runtime_results, case):
    """Under the same budget: a smaller intermediate runs, and a chain whose values die as it goes runs."""
    assert runtime_results[case]["ok"], runtime_results[case]


def test_10k_nodes(tmp_path):
    """A chain of 10,000 nodes imports and runs in seconds, with numpy's answer."""
    n = 10_000
    b = np.full(8, 0.25, np.float32)
    nodes, prev = [], "x"
    for i in range(n):
        op = ("Add", "Relu", "Mul", "Tanh")[i % 4]
        out = "y" if i == n - 1 else f"v{i}"
        nodes.append(N(op, [prev, "b"] if op in ("Add", "Mul") else [prev], [out], name=f"n{i}"))
        prev = out
    src = _save(tmp_path / "big.onnx", nodes, [_f("x", ["n", 8])], [Y], [numpy_helper.from_array(b, "b")])
    out = str(tmp_path / "big.model")
    t0 = time.perf_counter()
    import_model(src, out, progress=False)
    t_import = time.perf_counter() - t0
    m = cyb_llm.load(out, backend="cpu")
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(3, 8)
    t0 = time.perf_counter()
    got = m.run({"x": x})["y"]
    t_run = time.perf_counter() - t0
    ref = x.astype(np.float64)
    for i in range(n):
        k = i % 4
        ref = ref + 0.25 if k == 0 else np.maximum(ref, 0) if k == 1 else ref * 0.25 if k == 2 else np.tanh(ref)
    np.testing.assert_allclose(got, ref, rtol=tolerance("onnx-vs-f64"), atol=tolerance("op-f32"))
    assert t_import < 30 and t_run < 5, (t_import, t_run)
