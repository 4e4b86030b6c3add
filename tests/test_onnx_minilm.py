"""all-MiniLM-L6-v2 exported to ONNX in the test (torch.onnx.export of the transformers BertModel
built from the shipped safetensors, opset 17, TorchScript exporter: attention as ONNX decomposes it,
IsNaN guards, LayerNormalization, a position-id Slice to the run-time sequence length) imported with
`cyb-llm import`, run on the cpu: every output within `onnx-vs-onnxruntime` (docs/runtime.md) of
onnxruntime for several batches, lengths and padding masks, and the last hidden states equal to our
curated encoder's (`Encoder.encode`) on the same token ids. torch / transformers / onnxruntime are
test dependencies only."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from tolerances import tolerance

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOL = tolerance("onnx-vs-onnxruntime")


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory):
    from cyb_llm.hub import fetch_source

    src = fetch_source("minilm", progress=False)
    bert = transformers.AutoModel.from_pretrained(src).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    d = tmp_path_factory.mktemp("minilm")
    onx = str(d / "minilm.onnx")
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102, 0, 0]])
    dyn = {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(LastHidden(bert), (ids, (ids != 0).long(), torch.zeros_like(ids)), onx,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=dyn, opset_version=17, dynamo=False)
    out = str(d / "minilm_onnx.model")
    from cyb_llm.cli import main

    assert main(["import", onx, "-o", out]) == 0
    return onx, out


def _feeds(rng, b, s):
    ids = rng.integers(1000, 20000, (b, s)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones((b, s), np.int64)
    if b > 1:
        mask[1, s // 2:] = 0  # a padded row
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def test_minilm_onnx_matches_onnxruntime(minilm_onnx):
    onx, path = minilm_onnx
    m = cyb_llm.load(path, backend="cpu")
    assert type(m).__name__ == "GraphModel"
    assert [(i.name, i.dtype) for i in m.inputs] == [("input_ids", "i64"), ("attention_mask", "i64"),
                                                    ("token_type_ids", "i64")]
    sess = ort.InferenceSession(onx, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(17)
    for b, s in ((1, 8), (3, 17), (2, 64), (1, 1)):
        feeds = _feeds(rng, b, s)
        ref = sess.run(["last_hidden_state"], feeds)[0]
        got = m.run(["last_hidden_state"], feeds)[0]
        assert _err(ref, got) <= TOL, (b, s, _err(ref, got))


def test_minilm_attention_fused(minilm_onnx):
    """The export's six attentions ([B, H, T, D], where(mask, 0, -inf) added, the isnan guard) become
    attention_nd (docs/graph.md "Fusion of version-2 graphs"): fused == unfused within `op-f32`,
    a sequence with no token kept included (both 0 there)."""
    onx, path = minilm_onnx
    m = cyb_llm.load(path, backend="cpu")
    plain = cyb_llm.load(path, backend="cpu", fuse=False)
    assert [p for p, _ in m.fusions].count("attention_heads") == 6 and "attention_heads x6" in m.fusion_report
    feeds = _feeds(np.random.default_rng(3), 3, 21)
    feeds["attention_mask"][2] = 0
    got, ref = m.run(feeds)["last_hidden_state"], plain.run(feeds)["last_hidden_state"]
    assert _err(ref, got) <= tolerance("op-f32")
    sess = ort.InferenceSession(onx, providers=["CPUExecutionProvider"])
    assert _err(sess.run(["last_hidden_state"], feeds)[0], got) <= TOL


def test_minilm_onnx_equals_curated_encoder(minilm_onnx):
    _, path = minilm_onnx
    m = cyb_llm.load(path, backend="cpu")
    enc = cyb_llm.load("minilm", backend="cpu")
    texts = ["The quick brown fox jumps over the lazy dog.", "ONNX graphs run on the graph path.", "Hi"]
    batch = enc.tokenize_batch(texts)
    for ids in batch.ids:
        a = np.array([ids], np.int64)
        got = m.run({"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.zeros_like(a)})
        ref = enc.encode(ids)
        assert _err(ref, got["last_hidden_state"][0]) <= TOL
