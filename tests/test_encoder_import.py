"""HF importer on encoder folders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ModernBERT; heads;
sentence-transformers folders; f16/bf16; --quantize): what lands in the .model (docs/encoders.md)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from cyb_llm.convert import import_model  # noqa: E402
from cyb_llm.errors import InvalidConfig  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402

from encoder_fixtures import FAMILIES, make_encoder_folder  # noqa: E402

TEXTS = ["Hello world!", "", "the cat ran to the house, very much", "ünïcödé and あい 123", "a " * 40]
PAIRS = [("the cat", "a dog runs"), ("", "x"), ("hello there", "the dog")]


def _safetensors(folder):
    from safetensors.numpy import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head", [None, "seq", "token"])
def test_family_head_roundtrip(tmp_path, family, head):
    """Config keys an encoder needs are kept, tensors keep their HF names and bytes, the stored
    tokenizer gives transformers' ids and token types for single texts and pairs."""
    from transformers import AutoTokenizer

    folder = make_encoder_folder(tmp_path, family, head, num_labels=3,
                                 problem_type="multi_label_classification" if head == "seq" else None)
    out = str(tmp_path / "m.model")
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    cfg = mf.config
    assert cfg["model_type"] == family
    a = cfg["architecture"]
    raw = json.load(open(os.path.join(folder, "config.json")))
    assert a["pad_token_id"] == raw["pad_token_id"]
    assert a["architectures"] == raw["architectures"]
    if head is not None:
        assert a["id2label"] == {"0": "label_a", "1": "label_b", "2": "label_c"}
        assert a["label2id"] == {"label_a": 0, "label_b": 1, "label_c": 2}
    if head == "seq":
        assert a["problem_type"] == "multi_label_classification"
    for k in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
              "max_position_embeddings"):
        assert isinstance(a[k], int) and a[k] > 0, k
    assert "chat" not in mf.sections  # nothing decoder-only
    st = _safetensors(folder)
    assert set(mf.tensors) == set(st)
    for name, ref in st.items():
        assert mf.tensors[name].encoding == "f32"
        np.testing.assert_array_equal(np.asarray(mf.tensor(name)).reshape(ref.shape), ref)
    ref_tok = AutoTokenizer.from_pretrained(folder)
    tok = mf.tokenizer
    for t in TEXTS:
        assert tok.encode(t) == ref_tok(t)["input_ids"], t
    for q, d in PAIRS:
        ours = tok.raw.encode(q, d)
        ref = ref_tok(q, d, return_token_type_ids=True)
        assert ours.ids == ref["input_ids"]
        if family not in ("roberta", "xlm-roberta"):  # RoBERTa tokenizers return no token types (all 0)
            assert ours.type_ids == ref["token_type_ids"], (q, d)


def test_distilbert_bert_spelling(tmp_path):
    folder = make_encoder_folder(tmp_path, "distilbert", "seq")
    out = str(tmp_path / "d.model")
    import_model(folder, out, progress=False)
    a = ModelFile(out).config["architecture"]
    raw = json.load(open(os.path.join(folder, "config.json")))
    assert (a["hidden_size"], a["num_attention_heads"], a["num_hidden_layers"], a["intermediate_size"], a["hidden_act"]) \
        == (raw["dim"], raw["n_heads"], raw["n_layers"], raw["hidden_dim"], raw["activation"])
    assert a["dim"] == raw["dim"]  # the original keys stay
    assert a["layer_norm_eps"] == 1e-12


def test_modernbert_both_rope_spellings(tmp_path):
    folder = make_encoder_folder(tmp_path, "modernbert")
    out = str(tmp_path / "mb.model")
    import_model(folder, out, progress=False)
    a = ModelFile(out).config["architecture"]
    assert a["global_rope_theta"] == a["rope_theta"] == 160000.0
    assert a["local_rope_theta"] == a["rope_local_base_freq"] == 10000.0
    assert a["layer_types"] == ["full_attention", "sliding_attention", "full_attention"]
    # a transformers-4 config (global/local keys, no layer_types)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    for k in ("rope_parameters", "layer_types"):
        cfg.pop(k, None)
    cfg.update(global_rope_theta=80000.0, local_rope_theta=5000.0, global_attn_every_n_layers=3)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    import_model(folder, out, progress=False)
    a = ModelFile(out).config["architecture"]
    assert a["rope_theta"] == 80000.0 and a["rope_local_base_freq"] == 5000.0
    assert a["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention"]


@pytest.mark.parametrize("dtype,enc", [("float16", "f16"), ("bfloat16", "bf16")])
def test_half_weights_copied(tmp_path, dtype, enc):
    folder = make_encoder_folder(tmp_path, "bert", "seq", dtype=dtype)
    out = str(tmp_path / "h.model")
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    assert {t.encoding for n, t in mf.tensors.items() if n != "bert.embeddings.position_ids"} == {enc}


def test_quantize_q8_0_linear_layers_only(tmp_path):
    folder = make_encoder_folder(tmp_path, "bert", "seq")
    out = str(tmp_path / "q.model")
    import_model(folder, out, quantize="q8_0", progress=False)
    mf = ModelFile(out)
    q = {n for n, t in mf.tensors.items() if t.encoding == "q8_0"}
    assert "bert.encoder.layer.0.attention.self.query.weight" in q
    assert "bert.encoder.layer.1.output.dense.weight" in q
    assert "bert.pooler.dense.weight" in q
    assert not any("embeddings" in n or "LayerNorm" in n or n.endswith(".bias") for n in q)
    assert mf.tensors["bert.embeddings.word_embeddings.weight"].encoding == "f32"


@pytest.mark.parametrize("mode", ["cls", "mean", "max"])
def test_sentence_transformers_pooling(tmp_path, mode):
    folder = make_encoder_folder(tmp_path, "bert", sentence_transformers={"mode": mode, "normalize": mode != "max",
                                                                          "max_seq_length": 24})
    out = str(tmp_path / "st.model")
    import_model(folder, out, progress=False)
    assert ModelFile(out).config["pooling"] == {"mode": mode, "normalize": mode != "max", "max_seq_length": 24}


def test_sentence_transformers_unsupported(tmp_path):
    folder = make_encoder_folder(tmp_path, "bert", sentence_transformers={"mode": "mean"})
    pc = os.path.join(folder, "1_Pooling", "config.json")
    p = json.load(open(pc))
    json.dump(dict(p, pooling_mode_max_tokens=True), open(pc, "w"))  # two modes: concatenated in s-t
    with pytest.raises(InvalidConfig, match="pooling"):
        import_model(folder, str(tmp_path / "x.model"), progress=False)
    json.dump(dict(p, pooling_mode_mean_tokens=False, pooling_mode_mean_sqrt_len_tokens=True), open(pc, "w"))
    with pytest.raises(InvalidConfig, match="mean_sqrt_len"):
        import_model(folder, str(tmp_path / "x.model"), progress=False)
    json.dump(p, open(pc, "w"))
    mods = json.load(open(os.path.join(folder, "modules.json")))
    mods.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    json.dump(mods, open(os.path.join(folder, "modules.json"), "w"))
    with pytest.raises(InvalidConfig, match="Dense"):
        import_model(folder, str(tmp_path / "x.model"), progress=False)
    assert not os.path.exists(tmp_path / "x.model")


def test_cross_encoder_activation(tmp_path):
    folder = make_encoder_folder(tmp_path, "bert", "seq", num_labels=1)
    cfg_path = os.path.join(folder, "config.json")
    cfg = json.load(open(cfg_path))
    out = str(tmp_path / "ce.model")
    import_model(folder, out, progress=False)
    assert "rerank" not in ModelFile(out).config
    cfg["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity", "version": "5.0.0"}
    json.dump(cfg, open(cfg_path, "w"))
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    assert mf.config["rerank"] == {"activation": "identity"}
    assert "sentence_transformers" not in mf.config["architecture"]
    cfg["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Tanh"}
    json.dump(cfg, open(cfg_path, "w"))
    with pytest.raises(InvalidConfig, match="Tanh"):
        import_model(folder, out, progress=False)


def test_encoder_without_tokenizer(tmp_path):
    """An encoder folder without tokenizer.json (a bare save_pretrained of the model) imports:
    ids-only use (Model.encode); a decoder folder still needs its tokenizer."""
    folder = make_encoder_folder(tmp_path, "bert", "seq")
    for f in os.listdir(folder):
        if f.startswith(("tokenizer", "special_tokens")):
            os.remove(os.path.join(folder, f))
    out = str(tmp_path / "nt.model")
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    assert "tokenizer" not in mf.sections and "vocab" not in mf.sections
    assert mf.config["architecture"]["vocab_size"] > 0
