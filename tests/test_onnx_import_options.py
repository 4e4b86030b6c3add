"""Options of the ONNX import (docs/import.md "ONNX"): `--quantize q8_0|q4_0` turns the 2-D weights
of matmul nodes into blocks (f16 initializers of matmul, Conv and ConvTranspose weights stay f16
otherwise, other weights f32), a `.onnx.json` sidecar is kept (GraphModel.sidecar), and `--pipeline` records what the graph
is for (load() routes on it through cyb_llm.pipelines)."""
from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("gguf")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm import pipelines  # noqa: E402
from cyb_llm.cli import main  # noqa: E402
from cyb_llm.convert import import_model  # noqa: E402
from cyb_llm.errors import FormatError, InvalidConfig  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402
from tolerances import tolerance  # noqa: E402

N = helper.make_node


def _mlp(path, f16=False, K=64, H=96, O=32):
    """x [n, K] -> MatMul W1 [K, H] -> Add b1 -> Relu -> MatMul W2 [H, O] -> y, plus z = x * s (s: a
    float vector weight that stays f32). f16: W1, W2 are f16 initializers, each Cast to f32 before
    its MatMul (the layout of f16-weight exports with f32 activations)."""
    rng = np.random.default_rng(1)
    w1 = (rng.standard_normal((K, H)) / 8).astype(np.float16 if f16 else np.float32)
    w2 = (rng.standard_normal((H, O)) / 8).astype(np.float16 if f16 else np.float32)
    b1 = rng.standard_normal(H).astype(np.float32)
    s = rng.standard_normal(K).astype(np.float32)
    nodes = []
    if f16:
        nodes += [N("Cast", ["w1"], ["w1f"], to=T.FLOAT), N("Cast", ["w2"], ["w2f"], to=T.FLOAT)]
    nodes += [N("MatMul", ["x", "w1f" if f16 else "w1"], ["h"], name="mm1"),
              N("Add", ["h", "b1"], ["hb"], name="add_b1"), N("Relu", ["hb"], ["r"], name="relu"),
              N("MatMul", ["r", "w2f" if f16 else "w2"], ["y"], name="mm2"), N("Mul", ["x", "s"], ["z"], name="mul_s")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, ["n", K])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("z", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                                       numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(s, "s")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    w1d, w2d = w1.astype(np.float64), w2.astype(np.float64)

    def ref(x, wq1=None, wq2=None):
        a = w1d if wq1 is None else wq1
        b = w2d if wq2 is None else wq2
        h = np.maximum(x.astype(np.float64) @ a + b1, 0)
        return h @ b, x * s
    return str(path), ref


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("q,tol", [(None, tolerance("onnx-vs-f64")), ("q8_0", tolerance("quant-q8_0-vs-f32")),
                                   ("q4_0", tolerance("quant-q4_0-vs-f32"))])
def test_quantize_matmul_weights(tmp_path, q, tol):
    src, ref = _mlp(tmp_path / "mlp.onnx")
    out = str(tmp_path / "mlp.model")
    args = ["import", src, "-o", out] + (["--quantize", q] if q else [])
    assert main(args) == 0
    mf = ModelFile(out)
    encs = {n: t.encoding for n, t in mf.tensors.items()}
    mm = [n for n in encs if n not in ("b1", "s")]
    assert len(mm) == 2 and all(encs[n] == (q or "f32") for n in mm), encs
    assert encs["b1"] == encs["s"] == "f32"
    assert mf.config["onnx"].get("quantize") == q
    m = cyb_llm.load(out, backend="cpu")
    x = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)
    got = m.run({"x": x})
    # each MatMul by a constant ran as the `matmul` op (its weight in the weights section)
    assert {r["op"] for r in m.dispatch_records if r["label"] in ("mm1", "mm2")} == {"matmul"}
    ry, rz = ref(x)
    assert _rel(got["y"], ry) <= tol, _rel(got["y"], ry)  # near the f32 model
    assert _rel(got["z"], rz) <= tolerance("op-f32")
    if q:  # and the f32 computation over the blocks' own values (gguf's dequantize)
        from gguf import GGMLQuantizationType, quants

        deq = {tuple(mf.tensors[n].shape): quants.dequantize(np.asarray(mf.tensor_bytes(n)),
                                                             GGMLQuantizationType[q.upper()])
               .reshape(mf.tensors[n].shape).astype(np.float64).T for n in mm}
        assert _rel(got["y"], ref(x, deq[(96, 64)], deq[(32, 96)])[0]) <= tolerance("onnx-vs-f64")


def test_shared_weights_are_written_once(tmp_path):
    """One initializer read by several MatMuls (ALBERT's layers share theirs) is one tensor of the
    .model, not one transposed copy a node; Gemms sharing a B with the same alpha share theirs, a
    different alpha gets its own. (Before: a copy per node, 3 + 3 tensors here.)"""
    K = 64
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((K, K)) / 8).astype(np.float32)
    c = rng.standard_normal(K).astype(np.float32)  # the Gemms' C (a bias of its own per node)
    nodes = [N("MatMul", ["x", "w"], ["h1"], name="l1"), N("MatMul", ["h1", "w"], ["h2"], name="l2"),
             N("MatMul", ["h2", "w"], ["y"], name="l3"),
             N("Gemm", ["x", "w", "c"], ["g1"], name="g1", transB=1), N("Gemm", ["g1", "w", "c"], ["g2"], name="g2", transB=1),
             N("Gemm", ["g2", "w", "c"], ["z"], name="g3", transB=1, alpha=0.5)]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", T.FLOAT, ["n", K])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("z", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    src, out = str(tmp_path / "tied.onnx"), str(tmp_path / "tied.model")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    # w^T (the MatMuls), w (Gemm alpha 1), 0.5 w, and the two Gemm biases
    assert len([n for n in mf.tensors if n.endswith(".weight")]) == 3, sorted(mf.tensors)
    x = rng.standard_normal((4, K)).astype(np.float32)
    got = cyb_llm.load(out, backend="cpu").run({"x": x})
    wd, xd = w.astype(np.float64), x.astype(np.float64)
    assert _rel(got["y"], xd @ wd @ wd @ wd) <= tolerance("onnx-vs-f64")
    cd = c.astype(np.float64)
    assert _rel(got["z"], 0.5 * (((xd @ wd.T + cd) @ wd.T + cd) @ wd.T) + cd) <= tolerance("onnx-vs-f64")


def test_quantize_skips_rows_that_are_not_whole_blocks(tmp_path):
    src, ref = _mlp(tmp_path / "odd.onnx", K=48)  # W1 rows of 48: not whole blocks of 32
    out = str(tmp_path / "odd.model")
    import_model(src, out, quantize="q8_0", progress=False)
    encs = {n: t.encoding for n, t in ModelFile(out).tensors.items()}
    assert sorted(e for n, e in encs.items() if n not in ("b1", "s")) == ["f32", "q8_0"], encs
    x = np.random.default_rng(3).standard_normal((2, 48)).astype(np.float32)
    assert _rel(cyb_llm.load(out, backend="cpu").run({"x": x})["y"], ref(x)[0]) <= tolerance("quant-q8_0-vs-f32")


def test_quantize_bad_type(tmp_path):
    src, _ = _mlp(tmp_path / "mlp.onnx")
    with pytest.raises(InvalidConfig, match="q3_k.*q8_0"):
        import_model(src, str(tmp_path / "x.model"), quantize="q3_k", progress=False)
    assert not (tmp_path / "x.model").exists()


def test_f16_matmul_weights_stay_f16(tmp_path):
    """f16 initializers read (through a Cast to f32 folded at import) as matmul weights are written
    f16, losslessly; the f32 vectors stay f32; the result is the f32 computation's."""
    src, ref = _mlp(tmp_path / "h.onnx", f16=True)
    out = str(tmp_path / "h.model")
    import_model(src, out, progress=False)
    encs = {n: t.encoding for n, t in ModelFile(out).tensors.items()}
    assert sorted(e for n, e in encs.items() if n not in ("b1", "s")) == ["f16", "f16"], encs
    assert encs["b1"] == encs["s"] == "f32"
    x = np.random.default_rng(4).standard_normal((3, 64)).astype(np.float32)
    assert _rel(cyb_llm.load(out, backend="cpu").run({"x": x})["y"], ref(x)[0]) <= tolerance("onnx-vs-f64")


def _convs(path, f16=False):
    """x [1, 16, 6, 40] -> Conv W1 [16, 16, 3, 3] (pads 1) -> Conv W2 [16, 16, 3, 3] (stride 2) -> c2;
    y = ConvTranspose(c2, W3 [16, 8, 3, 3], stride 2), z = Conv(c2, W4 [8, 16, 3, 20]) (one output
    position): the x86 paths Winograd / direct rows, panels, col2im and few positions. f16: the
    weights are f16 initializers, each Cast to f32 before its node; the biases f32."""
    rng = np.random.default_rng(5)
    shapes = {"w1": (16, 16, 3, 3), "w2": (16, 16, 3, 3), "w3": (16, 8, 3, 3), "w4": (8, 16, 3, 20)}
    ws = {k: (rng.standard_normal(v) / 8).astype(np.float16) for k, v in shapes.items()}
    bs = {k: rng.standard_normal(n).astype(np.float32) for k, n in (("b1", 16), ("b2", 16), ("b3", 8), ("b4", 8))}
    src = {k: v if f16 else v.astype(np.float32) for k, v in ws.items()}  # the same values either way
    nodes = [N("Cast", [k], [k + "f"], to=T.FLOAT) for k in ws] if f16 else []
    w = (lambda k: k + "f") if f16 else (lambda k: k)
    nodes += [N("Conv", ["x", w("w1"), "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
              N("Conv", ["c1", w("w2"), "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
              N("ConvTranspose", ["c2", w("w3"), "b3"], ["y"], name="convt", strides=[2, 2]),
              N("Conv", ["c2", w("w4"), "b4"], ["z"], name="conv4")]
    inits = [numpy_helper.from_array(v, k) for k, v in {**src, **bs}.items()]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", T.FLOAT, [1, 16, 6, 40])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("z", T.FLOAT, None)], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))

    def ref(x):
        import torch
        import torch.nn.functional as F

        t = {k: torch.tensor(v.astype(np.float64)) for k, v in {**ws, **bs}.items()}
        c1 = F.conv2d(torch.tensor(x.astype(np.float64)), t["w1"], t["b1"], padding=1)
        c2 = F.conv2d(c1, t["w2"], t["b2"], padding=1, stride=2)
        return F.conv_transpose2d(c2, t["w3"], t["b3"], stride=2).numpy(), F.conv2d(c2, t["w4"], t["b4"]).numpy()
    return str(path), ref


def test_f16_conv_weights_stay_f16(tmp_path, monkeypatch):
    """f16 initializers read (through a Cast folded at import) as Conv / ConvTranspose weights are
    written f16, losslessly (the file's weights smaller), the biases f32; at every cpu level the
    model runs them through its packed weight copies (built from the f16 bytes) to the bits of the
    same values imported as f32, within `onnx-vs-f64` of torch in f64; on wgpu+rs (its f16 conv
    kernels, no cpu fallback) within `onnx-vs-f64` too."""
    from cyb_llm import _core
    from cyb_llm.convert import onnx_graph
    from placement import wgpu_skip_reason

    src16, ref = _convs(tmp_path / "c16.onnx", f16=True)
    src32, _ = _convs(tmp_path / "c32.onnx")
    out16, out32 = str(tmp_path / "c16.model"), str(tmp_path / "c32.model")
    import_model(src16, out16, progress=False)
    with monkeypatch.context() as mp:  # the same values written f32 (the importer writes exact f16 values f16)
        mp.setattr(onnx_graph, "_exact_f16", lambda w: False)
        import_model(src32, out32, progress=False)
    assert {t.encoding for t in ModelFile(out32).tensors.values()} == {"f32"}
    encs = {n: (t.encoding, len(t.shape)) for n, t in ModelFile(out16).tensors.items()}
    assert sorted(encs.values()) == [("f16", 4)] * 4 + [("f32", 1)] * 4, encs  # the folded Casts' values
    mf = ModelFile(out16)
    assert all(mf.tensor_bytes(n).nbytes == 2 * int(np.prod(t.shape)) for n, t in mf.tensors.items() if len(t.shape) == 4)
    assert mf.weights_size < ModelFile(out32).weights_size
    x = np.random.default_rng(6).standard_normal((1, 16, 6, 40)).astype(np.float32)
    ry, rz = ref(x)
    before = _core.cpu_levels()[-1]
    try:
        for level in _core.cpu_levels():
            _core.set_cpu_level(level)
            m16, m32 = cyb_llm.load(out16, backend="cpu"), cyb_llm.load(out32, backend="cpu")
            for _ in range(2):  # the second run reads the packed copies the first one built
                got, want = m16.run({"x": x}), m32.run({"x": x})
                assert np.array_equal(got["y"], want["y"]) and np.array_equal(got["z"], want["z"]), level
            assert {r["op"] for r in m16.dispatch_records if r["label"].startswith("conv")} == {"conv",
                                                                                                "conv_transpose"}
            assert _rel(got["y"], ry) <= tolerance("onnx-vs-f64") and _rel(got["z"], rz) <= tolerance("onnx-vs-f64")
    finally:
        _core.set_cpu_level(before)
    if wgpu_skip_reason() is None:
        m = cyb_llm.load(out16, backend="wgpu+rs")
        got = m.run({"x": x})
        recs = [r for r in m.dispatch_records if r["op"] in ("conv", "conv_transpose")]
        assert len(recs) == 4 and all(r["backend"] == "wgpu+rs" and not r["fallback"] for r in recs), recs
        assert _rel(got["y"], ry) <= tolerance("onnx-vs-f64") and _rel(got["z"], rz) <= tolerance("onnx-vs-f64")


# ---- the sidecar config ---------------------------------------------------------------------------

def _relu(path):
    g = helper.make_graph([N("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


PIPER_LIKE = {"audio": {"sample_rate": 22050, "quality": "medium"}, "espeak": {"voice": "en-us"},
              "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
              "phoneme_id_map": {"_": [0], "^": [1], " ": [3], "ə": [59], "\"": [150]},
              "num_speakers": 1, "speaker_id_map": {}, "dataset": None, "piper_version": "1.0.0"}


def test_sidecar_kept(tmp_path):
    src = _relu(tmp_path / "voice.onnx")
    (tmp_path / "voice.onnx.json").write_text(json.dumps(PIPER_LIKE, ensure_ascii=False), encoding="utf-8")
    out = str(tmp_path / "voice.model")
    assert main(["import", src, "-o", out]) == 0
    m = cyb_llm.load(out, backend="cpu")
    assert m.sidecar == PIPER_LIKE
    assert m.config["onnx"]["sidecar"] == "voice.onnx.json"
    plain = _relu(tmp_path / "plain.onnx")
    import_model(plain, str(tmp_path / "plain.model"), progress=False)
    assert cyb_llm.load(str(tmp_path / "plain.model"), backend="cpu").sidecar is None


@pytest.mark.parametrize("text,needle", [("{\"audio\": ", "not JSON"), ("[1, 2]", "JSON list, not an object")])
def test_bad_sidecar(tmp_path, text, needle):
    src = _relu(tmp_path / "voice.onnx")
    (tmp_path / "voice.onnx.json").write_text(text)
    with pytest.raises(FormatError, match=needle) as e:
        import_model(src, str(tmp_path / "voice.model"), progress=False)
    assert "voice.onnx.json" in str(e.value)
    assert not (tmp_path / "voice.model").exists()


# ---- --pipeline ---------------------------------------------------------------------------------------

def test_pipeline_default_graph(tmp_path):
    out = str(tmp_path / "g.model")
    import_model(_relu(tmp_path / "g.onnx"), out, progress=False)
    m = cyb_llm.load(out, backend="cpu")
    assert type(m).__name__ == "GraphModel" and m.config["onnx"]["pipeline"] == "graph" and m.pipeline == "graph"


def test_pipeline_diffusion_needs_stages(tmp_path):
    """Every pipeline has its row now; one graph imported with --pipeline diffusion is not a diffusion
    model (its stages are: docs/diffusion.md), and the error says how to import one."""
    out = str(tmp_path / "diffusion.model")
    assert main(["import", _relu(tmp_path / "g.onnx"), "-o", out, "--pipeline", "diffusion"]) == 0
    assert ModelFile(out).config["onnx"]["pipeline"] == "diffusion"
    with pytest.raises(InvalidConfig, match="graph-stages") as e:
        cyb_llm.load(out, backend="cpu")
    assert e.value.fields["field"] == "model_type"


def test_pipeline_routes_through_the_registry(tmp_path, monkeypatch):
    """A row for the recorded pipeline (as a TTS class will add) makes load() return its class."""
    from cyb_llm.graph.model import GraphModel

    cls = type("FakeTTS", (GraphModel,), {"kind": "tts"})
    row = pipelines.Pipeline("tts", "fake:FakeTTS", "text to speech", (), (), "")
    monkeypatch.setitem(pipelines._BY_KIND, "tts", row)
    monkeypatch.setitem(pipelines._CLASSES, "fake:FakeTTS", cls)
    out = str(tmp_path / "t.model")
    import_model(_relu(tmp_path / "g.onnx"), out, progress=False, pipeline="tts")
    m = cyb_llm.load(out, backend="cpu")
    assert type(m) is cls and m.kind == "tts" and m.pipeline == "tts"
    assert m.run({"x": np.array([[-1, 2, -3, 4]], np.float32)})["y"].tolist() == [[0, 2, 0, 4]]


def test_pipeline_only_for_onnx(tmp_path):
    folder = tmp_path / "ct2"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"")
    with pytest.raises(InvalidConfig, match="--pipeline applies to ONNX graphs"):
        import_model(str(folder), str(tmp_path / "x.model"), pipeline="tts", progress=False)
    with pytest.raises(SystemExit):  # argparse: not a choice
        main(["import", _relu(tmp_path / "g.onnx"), "-o", str(tmp_path / "y.model"), "--pipeline", "vocoder"])


def test_scalar_initializers_stay_scalars(tmp_path):
    """A 0-d float initializer is a 0-d tensor of the weights section (np.ascontiguousarray had made it
    [1], so a scalar op with it gave a [1] output where ONNX gives [])."""
    g = helper.make_graph([N("Div", ["x", "c"], ["y"]), N("Mul", ["v", "c"], ["z"])], "s",
                          [helper.make_tensor_value_info("x", T.FLOAT, []), helper.make_tensor_value_info("v", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("z", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array(255.0, np.float32), "c")])
    src, out = str(tmp_path / "s.onnx"), str(tmp_path / "s.model")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), src)
    import_model(src, out, progress=False)
    assert ModelFile(out).tensors["c"].shape == ()
    got = cyb_llm.load(out, backend="cpu").run({"x": np.array(510.0, np.float32), "v": np.ones(3, np.float32)})
    assert got["y"].shape == () and got["y"] == 2.0
    assert got["z"].shape == (3,) and np.all(got["z"] == 255.0)
