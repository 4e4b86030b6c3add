"""Tiny transformers models of several architectures, built from configs (seeded random weights),
exported by torch's TorchScript exporter and imported (docs/import.md "ONNX"), against onnxruntime
on the same .onnx at several batch and sequence sizes. Each covers a translation a sweep of such
exports found missing or wrong: GPT-2 under the default SDPA attention (its causal mask as Trilu),
BERT with a 64-row position table (the load-time probes exceed it), LeViT (BatchNormalization,
HardSwish), ConvNeXt-V2 (ReduceL2), XLNet (Einsum with two free letters a side, of one operand,
EyeLike), Funnel (Einsum 'td,dnh->tnh'), BEiT (Resize to tracked sizes), DINOv2 (its position
table's bicubic Resize), MobileBERT (its pooler's tanh of small values), BERT exported at opset 20
(Gelu)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import cyb_llm  # noqa: E402
from tolerances import tolerance  # noqa: E402

H = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, vocab_size=1000)
SEQ = {0: "batch", 1: "seq"}


class Fields(torch.nn.Module):
    """model(**named inputs, **kw) -> the named output fields, as a tuple."""

    def __init__(self, m, names, fields, **kw):
        super().__init__()
        self.m, self.names, self.fields, self.kw = m.eval(), names, fields, kw

    def forward(self, *args):
        o = self.m(**dict(zip(self.names, args)), **self.kw)
        return tuple(getattr(o, f) for f in self.fields)


def _text(model, fields, mask=True, **kw):
    names = ["input_ids", "attention_mask"] if mask else ["input_ids"]
    feeds = []
    for b, s in ((1, 5), (2, 7), (2, 12)):
        f = {"input_ids": np.random.RandomState(b * 100 + s).randint(0, 1000, (b, s)).astype(np.int64)}
        if mask:
            f["attention_mask"] = np.ones((b, s), np.int64)
            f["attention_mask"][-1, s // 2 + 1:] = 0 if b > 1 else 1
        feeds.append(f)
    axes = {n: SEQ for n in names + list(fields)}
    return Fields(model, names, list(fields), **kw), names, list(fields), axes, feeds


def _image(model, fields, vary=False):
    r = np.random.RandomState(0)
    feeds = [{"pixel_values": r.randn(1, 3, 32, 32).astype(np.float32)},
             {"pixel_values": r.randn(2, 3, 32, 32).astype(np.float32)}]
    axes = {"pixel_values": {0: "batch"}, **{f: {0: "batch"} for f in fields}}
    if vary:
        feeds.append({"pixel_values": r.randn(2, 3, 48, 40).astype(np.float32)})
        axes["pixel_values"] = {0: "batch", 2: "h", 3: "w"}
        axes.update({f: ({0: "batch", 1: "c", 2: "y", 3: "x"} if f == "last_hidden_state" else {0: "batch"})
                     for f in fields})
    return Fields(model, ["pixel_values"], list(fields)), ["pixel_values"], list(fields), axes, feeds


def _gpt2_sdpa():
    import transformers.masking_utils as mu

    # transformers' packed-sequence check (torch.diff, only without a mask) has no TorchScript
    # export; there is no packing here
    mu.find_packed_sequence_indices = lambda position_ids: None
    cfg = T.GPT2Config(n_embd=64, n_layer=2, n_head=2, n_inner=128, vocab_size=1000, n_positions=64)
    return _text(T.GPT2LMHeadModel(cfg), ("logits",), mask=False, use_cache=False)


MODELS = {
    "gpt2-sdpa": (_gpt2_sdpa, 17),
    "bert-64-positions": (lambda: _text(T.BertModel(T.BertConfig(**H, max_position_embeddings=64)),
                                        ("last_hidden_state", "pooler_output")), 17),
    "bert-opset20": (lambda: _text(T.BertModel(T.BertConfig(**H, max_position_embeddings=128)),
                                   ("last_hidden_state",)), 20),
    "mobilebert": (lambda: _text(T.MobileBertModel(T.MobileBertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, intra_bottleneck_size=32,
        embedding_size=32, true_hidden_size=32, vocab_size=1000, num_feedforward_networks=2)),
        ("last_hidden_state", "pooler_output")), 17),
    "xlnet": (lambda: _text(T.XLNetModel(T.XLNetConfig(d_model=64, n_layer=2, n_head=2, d_inner=128, vocab_size=1000)),
                            ("last_hidden_state",), use_mems=False), 17),
    "funnel": (lambda: _text(T.FunnelBaseModel(T.FunnelConfig(d_model=64, n_head=2, d_head=32, d_inner=128,
                                                              block_sizes=[1, 1], vocab_size=1000)),
                             ("last_hidden_state",)), 17),
    "levit": (lambda: _image(T.LevitModel(T.LevitConfig(
        image_size=32, hidden_sizes=[32, 48], num_attention_heads=[2, 2], depths=[1, 1], key_dim=[8, 8],
        drop_path_rate=0, mlp_ratio=[2, 2], attention_ratio=[2, 2], patch_size=16,
        down_ops=[["Subsample", 8, 32 // 8, 4, 2, 2]])), ("last_hidden_state", "pooler_output")), 17),
    "convnextv2": (lambda: _image(T.ConvNextV2Model(T.ConvNextV2Config(hidden_sizes=[16, 32], depths=[1, 1],
                                                                       num_stages=2)),
                                  ("last_hidden_state", "pooler_output"), vary=True), 17),
    "dinov2": (lambda: _image(T.Dinov2Model(T.Dinov2Config(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                                           num_attention_heads=2, mlp_ratio=2)),
                              ("last_hidden_state", "pooler_output")), 17),
    "beit": (lambda: _image(T.BeitModel(T.BeitConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        use_relative_position_bias=True, use_mean_pooling=True)), ("last_hidden_state", "pooler_output")), 17),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_onnxruntime(tmp_path, name):
    from cyb_llm.convert import import_model

    torch.manual_seed(0)
    build, opset = MODELS[name]
    module, names, fields, axes, feeds = build()
    src, out = str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}.model")
    with torch.no_grad():
        torch.onnx.export(module, tuple(torch.from_numpy(feeds[0][n]) for n in names), src, input_names=names,
                          output_names=fields, dynamic_axes=axes, opset_version=opset, dynamo=False)
    import_model(src, out, progress=False)
    m = cyb_llm.load(out, backend="cpu")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    compared = 0
    for f in feeds:
        try:
            refs = sess.run(None, f)
        except Exception:  # noqa: BLE001 - a size the export baked in (Funnel's at batch 2): refused by both
            with pytest.raises(cyb_llm.errors.Error):
                m.run(dict(f))
            continue
        compared += 1
        got = m.run(dict(f))
        for field, ref in zip(fields, refs):
            y = got[field]
            assert y.shape == ref.shape, (name, field, y.shape, ref.shape)
            err = float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())
            assert err <= tolerance("onnx-vs-onnxruntime"), (name, field, {k: v.shape for k, v in f.items()}, err)
    assert compared >= 1
