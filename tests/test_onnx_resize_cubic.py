"""Resize in mode cubic (graph op resize, docs/graph.md; dispatch/nn_geom.cc resize_taps): Keys'
weights of coefficient cubic_coeff_a over floor(c) - 1 .. floor(c) + 2, indices clamped to the input
(or, with exclude_outside, the outer taps dropped and the rest renormalized), each of the four
coordinate modes, up- and downsampling in one node, against onnxruntime and the onnx package's
reference evaluator, on cpu, nox (bit-identical across two runs) and wgpu+rs (which declines cubic:
the cpu runs it, recorded as a fallback)."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tolerances import tolerance  # noqa: E402

MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


def _graph(tmp_path, ctm, a, exclude, sizes=(1, 2, 9, 4)):
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", coordinate_transformation_mode=ctm,
                            cubic_coeff_a=a, exclude_outside=exclude)
    g = helper.make_graph([node], "rc", [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 5, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    src = str(tmp_path / f"rc_{ctm}_{a}_{exclude}.onnx")
    onnx.save(m, src)
    return src


@pytest.mark.parametrize("backend", ["cpu", "nox", "wgpu+rs"])
def test_cubic_resize_matches_onnxruntime(tmp_path, backend):
    if backend == "wgpu+rs":
        from placement import wgpu_skip_reason

        if wgpu_skip_reason():
            pytest.skip(wgpu_skip_reason())
    from cyb_llm.convert import import_model

    x = np.random.default_rng(3).standard_normal((1, 2, 5, 6)).astype(np.float32)
    for ctm in MODES:
        for a in (-0.75, -0.5):
            for exclude in (0, 1):
                src = _graph(tmp_path, ctm, a, exclude)
                out = src[:-5] + ".model"
                import_model(src, out, progress=False)
                m = cyb_llm.load(out, backend=backend)
                got = m.run({"x": x})["y"]
                ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                ref2 = ReferenceEvaluator(src).run(None, {"x": x})[0]
                assert got.shape == ref.shape == (1, 2, 9, 4)
                for r in (ref, ref2):
                    err = float(np.abs(got - r).max() / np.abs(r).max())
                    assert err <= tolerance("onnx-vs-onnxruntime"), (ctm, a, exclude, err)
                if backend == "nox":
                    assert np.array_equal(got, m.run({"x": x})["y"])
                if backend == "wgpu+rs":
                    assert {r["op"] for r in m.dispatch_records if r.get("fallback")} == {"resize"}


def test_cubic_unchanged_size_is_a_copy():
    """A dim whose size does not change reads its own index with weight 1 (any coefficient)."""
    from cyb_llm import _core

    x = np.random.default_rng(4).standard_normal((3, 7)).astype(np.float32)
    for a in (-0.75, -0.5, 0.0):
        y = _core.run_op("resize", [x], {"sizes": [3, 7], "mode": "cubic", "cubic_coeff_a": a})[0]
        assert np.array_equal(y, x)


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_scales_rounded_to_float32(tmp_path, mode):
    """A scale of 0.6 is stored as float32 0.6000000238 while out / in is 6 / 10: linear and cubic
    take it (their coordinates 4e-8 apart), within onnx-vs-onnxruntime; nearest refuses it, naming
    the dim (a shifted coordinate could move an index across a tie). It was refused for every mode."""
    from cyb_llm.convert import import_model
    from cyb_llm.errors import UnsupportedOp

    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    g = helper.make_graph([node], "rs", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 10, 5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array([1, 1, 0.6, 1.0], np.float32), "scales")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    src, out = str(tmp_path / "rs.onnx"), str(tmp_path / "rs.model")
    onnx.save(m, src)
    if mode == "nearest":
        with pytest.raises(UnsupportedOp, match="scale 0.6000000238418579 of dim 10 is not out / in"):
            import_model(src, out, progress=False)
        return
    import_model(src, out, progress=False)
    x = np.random.default_rng(5).standard_normal((2, 3, 10, 5)).astype(np.float32)
    got = cyb_llm.load(out, backend="cpu").run({"x": x})["y"]
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape == (2, 3, 6, 5)
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) <= tolerance("onnx-vs-onnxruntime")
