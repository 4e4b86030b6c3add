"""The terrain consistency UNet of adaptive-terrain-diffusion 0.4.2 (issue 44; slow tier: a call
takes about a second on 2 cores): `cyb_llm.load("terrain")` (hub row "terrain": the wheel fetched
with pip, or taken from CYB_LLM_WHEELS, the member's SHA-256 checked, imported once into the cache)
run on the cpu against onnxruntime's CPU provider on the same .onnx within `onnx-vs-onnxruntime`
(max abs error over max abs reference), at batch 1 and 2 over several sigma / difficulty values.
The op patterns at every cpu level: tests/test_onnx_terrain.py."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub
from tolerances import tolerance

ort = pytest.importorskip("onnxruntime")

TOL = tolerance("onnx-vs-onnxruntime")


@pytest.fixture(scope="module")
def terrain():
    try:
        src = hub.fetch_source("terrain", progress=False)
        model = cyb_llm.load("terrain", backend="cpu", threads=2)
    except hub.FetchError as e:
        pytest.skip(f"the terrain UNet could not be fetched: {e}")
    return src, model


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.mark.slow
def test_terrain_unet_matches_onnxruntime(terrain):
    src, m = terrain
    assert [(i.name, i.dtype, i.shape) for i in m.inputs] == [
        ("noisy", "f32", ("batch", 1, 128, 128)), ("sigma", "f32", ("batch",)), ("difficulty", "f32", ("batch",))]
    assert [o.name for o in m.outputs] == ["denoised"]
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(44)
    worst = 0.0
    # (sigma, difficulty) per batch row: low / mid / high noise, easy and hard terrain
    for rows in (((0.02, 0.0),), ((0.8, 0.5),), ((80.0, 1.0),), ((0.3, 0.2), (5.0, 0.9))):
        sigma = np.array([r[0] for r in rows], np.float32)
        diff = np.array([r[1] for r in rows], np.float32)
        noisy = (rng.standard_normal((len(rows), 1, 128, 128)) * np.sqrt(1 + sigma[:, None, None, None] ** 2))
        feed = {"noisy": noisy.astype(np.float32), "sigma": sigma, "difficulty": diff}
        (ref,) = sess.run(None, feed)
        got = m.session().run(feed)["denoised"]
        e = _err(ref, got)
        worst = max(worst, e)
        assert e <= TOL, (rows, e)
    print(f"terrain UNet vs onnxruntime: worst {worst:.2e}")
