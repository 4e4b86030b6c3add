"""nox runs graph v2 (docs/graph.md "nox"): every graph-v2 op (op.h tags 33-72 with a kernel, conv1d,
and relu / add / mul / softmax of imported graphs) on the nox backend against the cpu's scalar
reference level -- nox ran it (last_run_op_backend, no cpu fallback), float results within `op-f32`
(docs/runtime.md), integer / bool results and every byte-moving op exactly equal; nox's own math at
the edges (pow's special cases, log1p, sin / cos out of range is an error); the Silero VAD v6 model
on nox within `onnx-vs-onnxruntime` of onnxruntime with a version-2 digest chain that is identical
across runs, sessions and processes and moves with the input; the hand-made array-op graph of
tests/test_onnx_silero.py on nox. The digest across compilers: tools/nox_golden.sh."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core
from cyb_llm.errors import InvalidConfig
from tolerances import tolerance

TOL = tolerance("op-f32")
ONNX_TOL = tolerance("onnx-vs-onnxruntime")
R = np.random.default_rng(72)


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def i64(*vals):
    return np.array(vals, np.int64)


# (case id, op, inputs, attrs, exact): exact = bit-equal results expected (integers, bools, moved bytes)
CASES = [
    ("sigmoid", "sigmoid", [f32(3, 17, scale=4)], {}, False),
    ("tanh", "tanh", [f32(2, 3, 17, scale=4)], {}, False),
    ("sqrt", "sqrt", [np.abs(f32(5, 7))], {}, False),
    ("transpose", "transpose", [f32(2, 3, 7)], {"perm": [1, 2, 0]}, True),
    ("slice", "slice", [f32(4, 7)], {"axis": -1, "range": [-3, 2 ** 62, 1]}, True),
    ("pad_reflect", "pad", [f32(4, 7)], {"pads": [0, 3, 1, 2], "mode": "reflect"}, True),
    ("pad_const", "pad", [f32(2, 3, 5)], {"pads": [1, 0, 4, 0, 2, 1], "mode": "constant", "value": 1.5}, True),
    ("lstm", "lstm", [f32(5, 2, 7), f32(20, 7, scale=0.5), f32(20, 5, scale=0.5), f32(40, scale=0.3), f32(2, 5),
                      f32(2, 5)], {}, False),
    ("relu", "relu", [f32(3, 9)], {}, True),
    ("add", "add", [f32(3, 8), f32(8)], {}, False),
    ("mul", "mul", [f32(3, 8), f32(3, 8)], {}, False),
    ("softmax", "softmax", [f32(3, 11, scale=3)], {}, False),
    ("conv1d", "conv1d", [f32(2, 3, 11), f32(4, 3, 3), f32(4)], {"stride": 2, "padding": 1, "channels_first": True,
                                                              "outputs": [[2, 6, 4]]}, False),
    ("where", "where", [R.integers(0, 2, (3, 4)).astype(bool), f32(3, 4), f32(4)], {}, True),
    ("cast_f2i", "cast", [f32(3, 5, scale=10)], {"to": "i64"}, True),
    ("cast_i2f", "cast", [i64(-3, 7, 1 << 40)], {"to": "f32"}, True),
    ("cast_bool", "cast", [f32(7)], {"to": "bool"}, True),
    ("reduce_mean", "reduce", [f32(3, 4, 5)], {"fn": "mean", "axes": [1], "keepdims": True}, False),
    ("reduce_prod", "reduce", [f32(3, 4, 5)], {"fn": "prod", "axes": [0, 2], "keepdims": False}, False),
    ("reduce_max_i", "reduce", [R.integers(-50, 50, (3, 4)).astype(np.int64)], {"fn": "max", "axes": [1]}, True),
    ("shape", "shape", [f32(2, 3, 5)], {"range": [1, 3]}, True),
    ("conv", "conv", [f32(1, 4, 7, 6), f32(6, 2, 3, 2), f32(6)],
     {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 2], "group": 2}, False),
    ("conv_transpose", "conv_transpose", [f32(2, 3, 5), f32(3, 2, 3), f32(2)],
     {"strides": [2], "pads": [1, 0], "output_padding": [1]}, False),
    # f16 weights (an f16 pipeline's): widened exactly, the same sums as the cpu reference's
    ("conv_f16", "conv", [f32(1, 4, 7, 6), f32(6, 2, 3, 2).astype(np.float16), f32(6)],
     {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 2], "group": 2}, True),
    ("conv_transpose_f16", "conv_transpose", [f32(2, 3, 5), f32(3, 2, 3).astype(np.float16), f32(2)],
     {"strides": [2], "pads": [1, 0], "output_padding": [1]}, True),
    ("matmul_nd", "matmul_nd", [f32(2, 1, 3, 5), f32(3, 5, 4)], {}, False),
    ("instance_norm", "instance_norm", [f32(2, 3, 9), f32(3), f32(3)], {"eps": 1e-5}, False),
    ("group_norm", "group_norm", [f32(2, 4, 3, 3), f32(4), f32(4)], {"eps": 1e-5, "num_groups": 2}, False),
    ("resize_linear", "resize", [f32(1, 2, 5, 4)],
     {"sizes": [1, 2, 9, 7], "mode": "linear", "coordinate_transformation_mode": "half_pixel"}, False),
    ("resize_cubic", "resize", [f32(1, 2, 5, 4)],
     {"sizes": [1, 2, 9, 3], "mode": "cubic", "coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75,
      "exclude_outside": True}, False),
    ("resize_nearest", "resize", [f32(1, 2, 5, 4)],
     {"sizes": [1, 2, 11, 3], "mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor"}, True),
    ("concat", "concat", [f32(2, 3), f32(2, 1), f32(2, 4)], {"axis": -1}, True),
    ("pool_avg", "pool", [f32(1, 2, 7, 6)],
     {"mode": "avg", "kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "count_include_pad": True,
      "ceil_mode": True}, False),
    ("pool_max", "pool", [f32(2, 3, 9)], {"mode": "max", "kernel_shape": [3], "strides": [2], "pads": [1, 1],
                                          "dilations": [2]}, True),
    ("softmax_axis", "softmax_axis", [f32(3, 6, 4, scale=3)], {"axis": 1}, False),
    ("attention_nd", "attention_nd", [f32(2, 3, 5, 4, scale=2), f32(2, 1, 6, 4, scale=2), f32(2, 3, 6, 3),
                                      R.random((2, 1, 5, 6)) > 0.3], {"scale": 0.5}, False),
    ("gather", "gather", [f32(4, 5), i64(3, -1, 0)], {"axis": 0}, True),
    ("gather_elements", "gather_elements", [f32(3, 4), np.array([[0, 3], [-1, 1], [2, 2]], np.int64)], {"axis": 1},
     True),
    ("gather_nd", "gather_nd", [f32(2, 3, 4), np.array([[[1], [0]], [[2], [1]]], np.int64)], {"batch_dims": 1}, True),
    ("scatter_nd_add", "scatter_nd", [f32(4, 3), np.array([[1], [3], [1]], np.int64), f32(3, 3)],
     {"reduction": "add"}, False),
    ("scatter_elements", "scatter_elements", [f32(3, 4), np.array([[1, 0], [3, 2]], np.int64), f32(2, 2)],
     {"axis": 1}, True),
    ("nonzero", "nonzero", [np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)], {}, True),
    ("range_f32", "range", [np.float32(0.1), np.float32(7.3), np.float32(0.1)], {}, True),
    ("range_i64", "range", [np.array(-5, np.int64), np.array(40, np.int64), np.array(3, np.int64)], {}, True),
    ("cumsum", "cumsum", [f32(3, 6)], {"axis": 1, "exclusive": True, "reverse": True}, False),
    ("cumsum_i", "cumsum", [R.integers(-9, 9, (4, 5)).astype(np.int64)], {"axis": 0}, True),
    ("constant_of_shape", "constant_of_shape", [i64(2, 3)], {"value": 2.5, "to": "f32"}, True),
    ("expand", "expand", [f32(3, 1), i64(2, 3, 4)], {}, True),
    ("tile", "tile", [f32(2, 3), i64(2, 3)], {}, True),
    ("random_normal_like", "random_normal_like", [np.zeros((4, 50), np.float32)], {"seed": 3, "mean": 0.5,
                                                                                   "scale": 2.0}, False),
    ("argmax", "argmax", [f32(3, 7, 2)], {"axis": 1, "keepdims": False, "select_last_index": True}, True),
    ("binary_i_mod", "binary", [R.integers(-20, 20, (3, 4)).astype(np.int64), np.array([3, -4, 5, 7], np.int64)],
     {"fn": "mod"}, True),
    ("binary_less", "binary", [f32(3, 4), f32(4)], {"fn": "less"}, True),
    ("binary_xor", "binary", [R.integers(0, 2, (5,)).astype(bool), R.integers(0, 2, (5,)).astype(bool)],
     {"fn": "xor"}, True),
]
for _fn in ["add", "sub", "mul", "div", "min", "max", "mod"]:
    CASES.append((f"binary_{_fn}", "binary", [f32(3, 5), f32(5) + np.float32(3)], {"fn": _fn}, False))
# pow: fractional exponents of positive bases, small integer exponents of any sign, large ones
CASES.append(("binary_pow", "binary", [np.abs(f32(3, 5)) + np.float32(0.1), f32(5)], {"fn": "pow"}, False))
CASES.append(("binary_pow_int", "binary", [f32(4, 6), np.array([2, 3, -1, -2, 0, 7], np.float32)], {"fn": "pow"},
              False))
for _fn in ["neg", "abs", "exp", "log", "erf", "sin", "cos", "ceil", "floor", "round", "sign", "reciprocal", "softplus",
            "leaky_relu", "clip"]:
    _x = f32(4, 9, scale=3)
    if _fn == "log":
        _x = np.abs(_x) + np.float32(1e-3)
    _attrs = {"fn": _fn, **({"alpha": 0.1} if _fn == "leaky_relu" else {}),
              **({"alpha": -1.0, "beta": 2.0} if _fn == "clip" else {})}
    CASES.append((f"unary_{_fn}", "unary", [_x], _attrs, _fn in ("neg", "abs", "ceil", "floor", "round", "sign",
                                                                 "leaky_relu", "clip")))
CASES.append(("unary_not", "unary", [R.integers(0, 2, (7,)).astype(bool)], {"fn": "not"}, True))
CASES.append(("unary_clip_i", "unary", [R.integers(-9, 9, (7,)).astype(np.int64)], {"fn": "clip", "alpha": -2.0,
                                                                                     "beta": 3.0}, True))


def _rel(ref: np.ndarray, got: np.ndarray) -> float:
    ref64 = ref.astype(np.float64)
    return float(np.abs(got.astype(np.float64) - ref64).max() / max(np.abs(ref64).max(), 1e-30)) if ref.size else 0.0


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_on_nox_matches_cpu_reference(case):
    _, op, inputs, attrs, exact = case
    attrs = dict(attrs)
    outs = attrs.pop("outputs", None)  # output shapes of an op whose caller gives them (conv1d)
    ref = _core.run_op(op, inputs, attrs, outs, level="scalar")
    got = _core.run_op(op, inputs, attrs, outs, backend="nox")
    assert _core.last_run_op_backend() == "nox"  # nox's kernel, not the cpu fallback
    assert len(got) == len(ref)
    for r, g in zip(ref, got):
        r, g = np.asarray(r), np.asarray(g)
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        if exact or g.dtype.kind != "f":
            assert np.array_equal(g, r, equal_nan=g.dtype.kind == "f"), (g, r)
        else:
            assert _rel(r, g) <= TOL, _rel(r, g)
    # the same bits on a second run (nox is deterministic)
    again = _core.run_op(op, inputs, attrs, outs, backend="nox")
    for a, g in zip(again, got):
        assert np.asarray(a).tobytes() == np.asarray(g).tobytes()


@pytest.mark.parametrize("name", ["conv_f16", "conv_transpose_f16"])
def test_conv_f16_weights_are_their_f32_values(name):
    """conv / conv_transpose with f16 weights on nox: bit for bit the run on the same values as f32."""
    _, op, inputs, attrs, _ = next(c for c in CASES if c[0] == name)
    assert inputs[1].dtype == np.float16
    got = _core.run_op(op, inputs, attrs, backend="nox")[0]
    assert _core.last_run_op_backend() == "nox"
    wide = _core.run_op(op, [inputs[0], inputs[1].astype(np.float32)] + inputs[2:], attrs, backend="nox")[0]
    assert got.tobytes() == wide.tobytes()


def test_every_v2_op_has_a_case():
    """Every op of tags 33-72 and 85 (and conv1d) with a kernel is a case here; nox supports every one."""
    names = {c[1] for c in CASES}
    views = {"reshape_to", "squeeze", "unsqueeze", "flatten"}  # resolved by the executor: no kernel
    by_tag = {_core.op_schema(n)["tag"]: n for n in _core.op_names()}
    for tag in [28] + list(range(33, 73)) + [85]:
        if tag == 57:  # reserved (split is written as slices)
            continue
        assert by_tag[tag] in names or by_tag[tag] in views, by_tag[tag]


def test_pow_special_cases():
    """nox's pow (nox_math.cc pow_any) against C's pow on the special values, bit for bit."""
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 3.0, 1e-3], np.float32)
    a, b = np.meshgrid(vals, vals, indexing="ij")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    got = _core.run_op("binary", [a, b], {"fn": "pow"}, backend="nox")[0]
    assert _core.last_run_op_backend() == "nox"
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
    fin = np.isfinite(want)
    assert np.array_equal(got[ok & ~fin], want[ok & ~fin])  # the infinities, signed
    assert _rel(np.where(fin, want, 0), np.where(fin, got, 0)) <= TOL


def test_log1p_and_softplus_edges():
    x = np.array([-80.0, -30.0, -1e-9, 0.0, 1e-12, 1e-5, 0.3, 20.0, 40.0, 90.0], np.float32)
    got = _core.run_op("unary", [x], {"fn": "softplus"}, backend="nox")[0]
    want = np.logaddexp(0.0, x.astype(np.float64))
    assert np.all(np.abs(got - want) <= TOL * np.abs(want) + 1e-45), (got, want)


def test_sin_out_of_range_is_an_error():
    """nox's sin / cos reduce |x| < 1.6e6 only: beyond that a structured error, not a wrong value."""
    for fn in ("sin", "cos"):
        with pytest.raises(InvalidConfig, match=f"nox {fn}.*1.6e6"):
            _core.run_op("unary", [np.array([1.0, 3e6], np.float32)], {"fn": fn}, backend="nox")
        with pytest.raises(InvalidConfig, match=f"nox {fn}"):
            _core.run_op("unary", [np.array([np.inf], np.float32)], {"fn": fn}, backend="nox")
        ok = _core.run_op("unary", [np.array([1.5e6, -1.5e6], np.float32)], {"fn": fn}, backend="nox")[0]
        ref = getattr(np, fn)(np.array([1.5e6, -1.5e6], np.float64))
        assert np.abs(ok - ref).max() <= TOL


# ---- Silero VAD on nox


def _silero_src() -> str:
    from test_onnx_silero import _silero_path  # one definition of where the Silero asset is

    return _silero_path()


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    pytest.importorskip("onnx")
    src = _silero_src()
    out = str(tmp_path_factory.mktemp("onnx") / "vad.model")
    from cyb_llm.cli import main

    assert main(["import", src, "-o", out]) == 0
    return src, out


def _chunks(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n * 576) / 16000.0
    sig = 0.3 * np.sin(2 * np.pi * rng.uniform(100, 300) * t) + 0.1 * np.sin(2 * np.pi * rng.uniform(500, 3000) * t)
    sig = sig * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(t.size)
    return sig.reshape(n, 576).astype(np.float32)


def fixed_feeds() -> dict:
    """The fixed input of the digest checks of this file."""
    return {"input": _chunks(np.random.default_rng(2026), 3), "h": np.zeros((1, 1, 128), np.float32),
            "c": np.zeros((1, 1, 128), np.float32)}


def _digest_in_process(path: str) -> str:
    code = ("import sys; sys.path.insert(0, %r); import cyb_llm, test_nox_graph2 as t; "
            "m = cyb_llm.load(%r, backend='nox'); m.run(t.fixed_feeds()); print(m.last_digest)"
            % (os.path.dirname(os.path.abspath(__file__)), path))
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_silero_on_nox_matches_onnxruntime(silero):
    ort = pytest.importorskip("onnxruntime")
    src, path = silero
    m = cyb_llm.load(path, backend="nox")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(44)
    for n in (1, 3, 8):
        h = np.zeros((1, 1, 128), np.float32)
        c = np.zeros((1, 1, 128), np.float32)
        mine = m.session()
        for _ in range(3):  # the state carried over 3 calls
            x = _chunks(rng, n)
            ref = dict(zip(["speech_probs", "hn", "cn"], sess.run(None, {"input": x, "h": h, "c": c})))
            got = mine.run({"input": x})
            for k in ref:
                assert _rel(ref[k], got[k]) <= ONNX_TOL, (n, k, _rel(ref[k], got[k]))
            assert len(m.last_digest) == 64
            h, c = ref["hn"], ref["cn"]


def test_silero_digest_is_reproducible(silero):
    _, path = silero
    feeds = fixed_feeds()
    m = cyb_llm.load(path, backend="nox")
    assert m.last_digest == ""  # no run yet
    out1 = m.run(feeds)
    d1 = m.last_digest
    out2 = m.run(feeds)
    assert m.last_digest == d1 and len(d1) == 64
    for k in out1:
        assert out1[k].tobytes() == out2[k].tobytes()
    # a second model in this process, and two fresh processes
    m2 = cyb_llm.load(path, backend="nox")
    m2.run(feeds)
    assert m2.last_digest == d1
    assert _digest_in_process(path) == d1
    assert _digest_in_process(path) == d1
    # the chain moves with the input (one sample changed) and with the state input
    x = feeds["input"].copy()
    x[1, 300] = np.nextafter(x[1, 300], np.float32(1))
    m.run({**feeds, "input": x})
    assert m.last_digest != d1
    m.run({**feeds, "h": np.full((1, 1, 128), 0.01, np.float32)})
    assert m.last_digest != d1
    # a failing run leaves no digest; the cpu has none
    with pytest.raises(Exception):
        m.run({"input": feeds["input"]})
    assert m.last_digest == ""
    c = cyb_llm.load(path, backend="cpu")
    c.run(feeds)
    assert c.last_digest == ""


def golden_feeds(m) -> dict:
    """tools/nox_golden2.cc's inputs: input k, element i: h = ((i * 2654435761 + k * 40503 + 17) mod 2^32)
    >> 8, value ((h mod 4096) - 2048) / 8192; symbolic dims = 3."""
    feeds = {}
    for k, spec in enumerate(m.inputs):
        assert spec.dtype == "f32"
        shape = tuple(d if isinstance(d, int) else 3 for d in spec.shape)
        i = np.arange(int(np.prod(shape)), dtype=np.uint64)
        h = ((i * np.uint64(2654435761) + np.uint64(k * 40503 + 17)) & np.uint64(0xFFFFFFFF)) >> np.uint64(8)
        v = ((h % np.uint64(4096)).astype(np.int64) - 2048).astype(np.float32) / np.float32(8192)
        feeds[spec.name] = v.reshape(shape)
    return feeds


def test_silero_matches_the_golden_file(silero):
    """The module's digest and outputs on tools/nox_golden2.cc's inputs are the committed ones, which
    tools/nox_golden.sh reproduces with g++ / clang++ at -O0 / -O3."""
    m = cyb_llm.load(silero[1], backend="nox")
    out = m.run(golden_feeds(m))
    lines = [f"digest {m.last_digest}"] + [f"output {k} sha256 {hashlib.sha256(v.tobytes()).hexdigest()}"
                                           for k, v in out.items()]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nox_golden_silero.txt")) as f:
        assert lines == f.read().splitlines()


def test_digest_chain_is_the_documented_one(silero):
    """Recomputes the version-2 chain of docs/graph.md in Python for a small hand-made graph:
    H_0 = SHA256("cyb-nox/2" || D(input)..), then one link per node, views included."""
    from cyb_llm.format import write_model

    g = "\n".join(['version = 2', '[[inputs]]', 'name = "x"', 'dtype = "f32"', 'shape = [2, 3]',
                   '[[outputs]]', 'name = "y"', 'dtype = "f32"', 'shape = [3, 2]',
                   '[[initializers]]', 'name = "w"',
                   '[[nodes]]', 'name = "t"', 'op = "transpose"', 'inputs = ["x"]', 'outputs = ["xt"]',
                   '[nodes.attrs]', 'perm = [1, 0]',
                   '[[nodes]]', 'name = "r"', 'op = "reshape"', 'inputs = ["xt"]', 'outputs = ["xr"]',
                   '[nodes.attrs]', 'shape = [3, 2]',
                   '[[nodes]]', 'name = "a"', 'op = "add"', 'inputs = ["xr", "w"]', 'outputs = ["y"]', ''])
    path = os.path.join(os.path.dirname(silero[1]), "chain.model")
    w = np.array([0.5, -1.0], np.float32)
    write_model(path, name="c", config={"model_type": "onnx-graph"}, tensors=[("w", "f32", (2,), w)], graph=g)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    m = cyb_llm.load(path, backend="nox")
    y = m.run({"x": x})["y"]

    def D(a: np.ndarray, enc: str = "f32") -> bytes:
        h = hashlib.sha256(enc.encode() + b"\0" + bytes([a.ndim]))
        for d in a.shape:
            h.update(int(d).to_bytes(8, "little"))
        h.update(np.ascontiguousarray(a).tobytes())
        return h.digest()

    def link(H: bytes, tag: int, ins, outs) -> bytes:
        h = hashlib.sha256(H + tag.to_bytes(2, "little") + bytes([len(ins)]))
        for a in ins:
            h.update(D(a))
        h.update(bytes([len(outs)]))
        for a in outs:
            h.update(D(a))
        return h.digest()

    xt = x.T.copy()
    H = hashlib.sha256(b"cyb-nox/2" + D(x)).digest()
    H = link(H, 36, [x], [xt])                      # transpose
    H = link(H, 22, [xt], [xt.reshape(3, 2)])       # reshape (a view: counts too)
    H = link(H, 8, [xt.reshape(3, 2), w], [y])      # add
    assert np.array_equal(y, (xt.astype(np.float64) + w).astype(np.float32))
    assert m.last_digest == H.hex()


def test_array_ops_graph_on_nox(tmp_path):
    """The hand-made array-op graph of tests/test_onnx_silero.py on nox, against onnxruntime."""
    import test_onnx_silero

    test_onnx_silero.test_array_ops_graph_matches_onnxruntime(tmp_path, backend="nox")
