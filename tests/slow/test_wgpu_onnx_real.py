"""The real ONNX models of issue 44 on wgpu+rs (lavapipe here; slow tier: a Piper call takes about a
minute, a terrain call half a minute on 2 cores): the terrain consistency UNet and the Piper voice
en_US-joe-medium loaded with backend="wgpu+rs" against onnxruntime's CPU provider on the same .onnx,
within `onnx-vs-onnxruntime`. Their dispatch records: the terrain UNet runs every node on the
device; so does Piper (no fallback; its host shape computations are flagged `host_shape`), and
with its noise scales on, seeded, its audio on wgpu+rs equals the cpu backend's within the
tolerance: random_normal_like gives the same noise on both."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub
from placement import wgpu_skip_reason
from tolerances import tolerance

ort = pytest.importorskip("onnxruntime")
REASON = wgpu_skip_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
TOL = tolerance("onnx-vs-onnxruntime")


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _load(name: str):
    try:
        src = hub.fetch_source(name, progress=False)
        return src, cyb_llm.load(name, backend="wgpu+rs")
    except hub.FetchError as e:
        pytest.skip(f"{name} could not be fetched: {e}")


def _fallbacks(m) -> dict:
    fb: dict = {}
    for r in m.dispatch_records:
        if (r["fallback"] or r["backend"] != "wgpu+rs") and not r["host_shape"] and r["count"]:
            fb[r["op"]] = fb.get(r["op"], 0) + r["count"]
    return fb


def test_terrain_unet_on_wgpu_matches_onnxruntime():
    src, m = _load("terrain")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(45)
    for sigma, diff in ((0.8, 0.5), (20.0, 1.0)):
        feed = {"noisy": (rng.standard_normal((1, 1, 128, 128)) * np.sqrt(1 + sigma ** 2)).astype(np.float32),
                "sigma": np.array([sigma], np.float32), "difficulty": np.array([diff], np.float32)}
        (ref,) = sess.run(None, feed)
        e = _err(ref, m.session().run(feed)["denoised"])
        assert e <= TOL, (sigma, diff, e)
    assert _fallbacks(m) == {}, _fallbacks(m)
    assert not any(r["host_shape"] for r in m.dispatch_records)


def test_piper_on_wgpu_matches_onnxruntime():
    """Noise scales 0 (the output is then deterministic): the audio within the tolerance and of
    onnxruntime's length, for two phoneme sequences."""
    from test_onnx_piper import _feeds, _voice, phonemes

    src, m = _load("piper-joe")
    _, cfg = _voice()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(46)
    for n in (6, 17):
        f = _feeds(cfg, [phonemes(cfg, n, rng)], [0.0, 1.0, 0.0])
        (ref,) = sess.run(None, f)
        got = m.run(f)["output"]
        assert got.shape == ref.shape
        assert _err(ref, got) <= TOL, (n, _err(ref, got))
    fb = _fallbacks(m)
    assert fb == {}, fb
    ran = {r["op"] for r in m.dispatch_records if r["backend"] == "wgpu+rs" and not r["fallback"]}
    assert {"gather", "gather_elements", "scatter_nd", "gather_nd", "cumsum", "pad_dyn", "conv", "nonzero",
            "range", "reduce", "random_normal_like"} <= ran, ran
    assert sum(r["count"] for r in m.dispatch_records if r["host_shape"]) > 0
    # the voice's own noise scales, one seed: the same noise on the cpu, so the same audio
    f = _feeds(cfg, [phonemes(cfg, 9, rng)], [0.667, 1.0, 0.8])
    want = cyb_llm.load("piper-joe", backend="cpu").run(f, seed=11)["output"]
    got = m.run(f, seed=11)["output"]
    assert got.shape == want.shape and _err(want, got) <= TOL, _err(want, got)
    other = m.run(f, seed=12)["output"]  # another seed: other noise
    assert other.shape != want.shape or _err(want, other) > TOL
