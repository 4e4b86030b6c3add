"""Importers: GGUF (real models and synthetic files of every block type) and HF folders."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from cyb_llm import errors
from cyb_llm.convert import import_model
from cyb_llm.convert.gguf import GGUF_ENCODINGS, hf_tensor_name
from cyb_llm.format import ModelFile

Q = gguf.GGMLQuantizationType

ALL_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL,
             Q.F16, Q.BF16, Q.F32]


def _hf_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a GGUF llama Q/K matrix (any row payload) back in HF order, written independently
    of the importer: the GGUF converter maps HF row (h, s, i) to GGUF row (h, i, s)."""
    rows = w.shape[0]
    hd = rows // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for s in range(2):
            for i in range(hd // 2):
                out[h * hd + s * (hd // 2) + i] = w[h * hd + 2 * i + s]
    return out


def test_name_table_per_family():
    cases = {
        ("blk.3.ffn_norm.weight", "llama"): "model.layers.3.post_attention_layernorm.weight",
        ("blk.3.ffn_norm.weight", "qwen2"): "model.layers.3.post_attention_layernorm.weight",
        ("blk.3.ffn_norm.weight", "gemma"): "model.layers.3.post_attention_layernorm.weight",
        ("blk.3.ffn_norm.weight", "gemma2"): "model.layers.3.pre_feedforward_layernorm.weight",
        ("blk.3.post_attention_norm.weight", "gemma2"): "model.layers.3.post_attention_layernorm.weight",
        ("blk.3.post_ffw_norm.weight", "gemma3"): "model.layers.3.post_feedforward_layernorm.weight",
        ("blk.0.attn_q_norm.weight", "qwen3"): "model.layers.0.self_attn.q_norm.weight",
        ("blk.0.attn_k_norm.weight", "qwen3"): "model.layers.0.self_attn.k_norm.weight",
        ("blk.1.attn_qkv.weight", "phi3"): "model.layers.1.self_attn.qkv_proj.weight",
        ("blk.1.ffn_up.weight", "phi3"): "model.layers.1.mlp.gate_up_proj.weight",
        ("blk.1.ffn_up.weight", "llama"): "model.layers.1.mlp.up_proj.weight",
        ("blk.2.attn_k.bias", "qwen2"): "model.layers.2.self_attn.k_proj.bias",
        ("blk.2.attn_output.weight", "qwen2"): "model.layers.2.self_attn.o_proj.weight",
        ("output.weight", "qwen2"): "lm_head.weight",
        ("token_embd.weight", "gemma3"): "model.embed_tokens.weight",
        ("output_norm.weight", "phi3"): "model.norm.weight",
    }
    for (g, arch), hf in cases.items():
        assert hf_tensor_name(g, arch) == hf, (g, arch)
    assert hf_tensor_name("blk.0.ssm_conv1d.weight", "llama") is None


# ---------------------------------------------------------------- synthetic GGUF files

def _tiny_vocab(w):
    from cyb_llm.convert.gguf_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u0120a"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3, 3, 3, 1])
    w.add_token_merges(["\u0120 a"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(258)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    return len(tokens)


def _payload(rng, t, rows, cols):
    """(array to write, float values or None) for a rows x cols tensor of GGML type t."""
    if t == Q.F32:
        v = rng.standard_normal((rows, cols)).astype(np.float32)
        return v, v
    if t == Q.F16:
        v = rng.standard_normal((rows, cols)).astype(np.float16)
        return v, v.astype(np.float32)
    v = rng.standard_normal((rows, cols)).astype(np.float32)
    try:
        q = gguf.quants.quantize(v, t)
        return q, gguf.quants.dequantize(q, t)
    except (NotImplementedError, gguf.quants.QuantError):
        bs, ts = gguf.GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(rows, cols // bs * ts), dtype=np.uint8)
        return raw, None


def make_tiny_gguf(path, arch="llama", types=None, seed=0, extra_tensor=None, tie=False):
    """A small but complete GGUF of `arch` whose tensors use `types` in turn."""
    rng = np.random.default_rng(seed)
    hidden, heads, kv, ffn, layers = 256, 4, 2, 512, 2
    hd = hidden // heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    if arch == "gemma3":
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(512)
    n_vocab = _tiny_vocab(w)
    types = list(types or [Q.Q8_0])
    values: dict[str, np.ndarray | None] = {}
    raw_types: dict[str, int] = {}
    k = 0

    def add(name, rows, cols, t=None):
        nonlocal k
        if t is None:
            t = types[k % len(types)]
            k += 1
        arr, val = _payload(rng, t, rows, cols)
        if arr.dtype == np.uint8:
            w.add_tensor(name, arr, raw_dtype=t)
        elif t == Q.BF16:
            w.add_tensor(name, arr, raw_dtype=t)
        else:
            w.add_tensor(name, arr.reshape(rows, cols) if rows > 1 else arr.reshape(cols))
        values[name] = val
        raw_types[name] = t

    add("token_embd.weight", n_vocab, hidden, Q.Q8_0)
    add("output_norm.weight", 1, hidden, Q.F32)
    if not tie:
        add("output.weight", n_vocab, hidden, Q.Q6_K)
    norms = ["attn_norm", "ffn_norm"] + (["post_attention_norm", "post_ffw_norm"] if arch == "gemma3" else [])
    for i in range(layers):
        for n in norms:
            add(f"blk.{i}.{n}.weight", 1, hidden, Q.F32)
        if arch == "gemma3":
            add(f"blk.{i}.attn_q_norm.weight", 1, hd, Q.F32)
            add(f"blk.{i}.attn_k_norm.weight", 1, hd, Q.F32)
        if arch == "qwen3":
            add(f"blk.{i}.attn_q_norm.weight", 1, hd, Q.F32)
            add(f"blk.{i}.attn_k_norm.weight", 1, hd, Q.F32)
        if arch == "phi3":
            add(f"blk.{i}.attn_qkv.weight", (heads + 2 * kv) * hd, hidden)
        else:
            add(f"blk.{i}.attn_q.weight", heads * hd, hidden)
            add(f"blk.{i}.attn_k.weight", kv * hd, hidden)
            add(f"blk.{i}.attn_v.weight", kv * hd, hidden)
        add(f"blk.{i}.attn_output.weight", hidden, heads * hd)
        if arch == "phi3":
            add(f"blk.{i}.ffn_up.weight", 2 * ffn, hidden)
        else:
            add(f"blk.{i}.ffn_gate.weight", ffn, hidden)
            add(f"blk.{i}.ffn_up.weight", ffn, hidden)
        add(f"blk.{i}.ffn_down.weight", hidden, ffn)
    if arch == "phi3":
        w.add_rope_scaling_orig_ctx_len(256)
        add("rope_factors_long.weight", 1, hd // 2, Q.F32)
        add("rope_factors_short.weight", 1, hd // 2, Q.F32)
    if extra_tensor is not None:
        name, t = extra_tensor
        bs, ts = gguf.GGML_QUANT_SIZES[t]
        w.add_tensor(name, np.zeros((4, 256 // bs * ts), np.uint8), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values, raw_types


def _gguf_tensors(path):
    r = gguf.GGUFReader(str(path))
    return r, {t.name: t for t in r.tensors}


def _raw(r, t) -> np.ndarray:
    return np.asarray(r.data[t.data_offset:t.data_offset + int(t.n_bytes)])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_every_block_type_copied_byte_for_byte(tmp_path, arch):
    src = tmp_path / "tiny.gguf"
    make_tiny_gguf(src, arch=arch, types=ALL_TYPES)
    out = tmp_path / "tiny.model"
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    r, ts = _gguf_tensors(src)
    seen_types = set()
    cfg = mf.config["architecture"]
    for name, t in ts.items():
        hf = hf_tensor_name(name, arch)
        info = mf.tensors[hf]
        assert list(info.shape) == [int(d) for d in reversed(t.shape)]
        got = np.asarray(mf.tensor_bytes(hf))
        want = _raw(r, t)
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            n_head = cfg["num_attention_heads"] if ".attn_q." in name else cfg["num_key_value_heads"]
            rows = info.shape[0]
            want = _hf_unpermute(want.reshape(rows, -1), n_head).reshape(-1)
            assert not np.array_equal(got, _raw(r, t))  # the rows did move
        np.testing.assert_array_equal(got, want)
        seen_types.add(t.tensor_type)
    assert set(ALL_TYPES) <= seen_types | {Q.F32}
    assert {GGUF_ENCODINGS[t.name] for t in ALL_TYPES} <= {i.encoding for i in mf.tensors.values()}


@pytest.mark.parametrize("arch", ["qwen3", "phi3"])
def test_other_families(tmp_path, arch):
    src = tmp_path / "t.gguf"
    values, _ = make_tiny_gguf(src, arch=arch, types=[Q.Q8_0, Q.Q4_K])
    out = tmp_path / "t.model"
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    assert mf.config["model_type"] == arch
    r, ts = _gguf_tensors(src)
    for name, t in ts.items():
        if name.startswith("rope_factors_"):
            continue
        np.testing.assert_array_equal(np.asarray(mf.tensor_bytes(hf_tensor_name(name, arch))), _raw(r, t))
    if arch == "qwen3":
        assert "model.layers.1.self_attn.k_norm.weight" in mf.tensors
    else:
        assert list(mf.tensors["model.layers.0.self_attn.qkv_proj.weight"].shape) == [512, 256]
        assert list(mf.tensors["model.layers.0.mlp.gate_up_proj.weight"].shape) == [1024, 256]
        rs = mf.config["architecture"]["rope_scaling"]
        assert rs["rope_type"] == "longrope"
        assert rs["long_factor"] == [float(x) for x in values["rope_factors_long.weight"].reshape(-1)]
        assert rs["short_factor"] == [float(x) for x in values["rope_factors_short.weight"].reshape(-1)]
        assert mf.config["architecture"]["original_max_position_embeddings"] == 256
        assert not any("rope_factors" in n for n in mf.tensors)


def test_unpermute_matches_dequantized_reference(tmp_path):
    """Q/K values after import equal the GGUF values un-permuted (dequantize + numpy rows)."""
    src = tmp_path / "tiny.gguf"
    values, raw_types = make_tiny_gguf(src, types=[Q.Q8_0, Q.Q4_0, Q.Q5_1])
    out = tmp_path / "tiny.model"
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    heads, kv = 4, 2
    for name, n_head in (("blk.0.attn_q.weight", heads), ("blk.1.attn_k.weight", kv), ("blk.0.attn_k.weight", kv)):
        hf = hf_tensor_name(name, "llama")
        info = mf.tensors[hf]
        deq = gguf.quants.dequantize(np.asarray(mf.tensor(hf)), raw_types[name]).reshape(info.shape)
        np.testing.assert_array_equal(deq, _hf_unpermute(values[name].reshape(info.shape), n_head))


def test_gemma_norms_hold_hf_values(tmp_path):
    src = tmp_path / "g.gguf"
    values, _ = make_tiny_gguf(src, arch="gemma3", types=[Q.Q8_0], tie=True)
    out = tmp_path / "g.model"
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    a = mf.config["architecture"]
    assert a["tie_word_embeddings"] is True and "lm_head.weight" not in mf.tensors
    assert a["layer_types"] == ["sliding_attention", "sliding_attention"]
    assert a["rope_local_base_freq"] == 10000.0 and a["query_pre_attn_scalar"] == a["head_dim"]
    names = {
        "blk.1.attn_norm.weight": "model.layers.1.input_layernorm.weight",
        "blk.1.ffn_norm.weight": "model.layers.1.pre_feedforward_layernorm.weight",
        "blk.1.post_attention_norm.weight": "model.layers.1.post_attention_layernorm.weight",
        "blk.1.post_ffw_norm.weight": "model.layers.1.post_feedforward_layernorm.weight",
        "blk.0.attn_q_norm.weight": "model.layers.0.self_attn.q_norm.weight",
        "output_norm.weight": "model.norm.weight",
    }
    for g, hf in names.items():
        np.testing.assert_array_equal(mf.tensor(hf), values[g].reshape(-1) - np.float32(1))
    # Q/K of a gemma file are not permuted: bytes equal
    r, ts = _gguf_tensors(src)
    np.testing.assert_array_equal(np.asarray(mf.tensor_bytes("model.layers.0.self_attn.q_proj.weight")),
                                  _raw(r, ts["blk.0.attn_q.weight"]))


def test_refuses_unsupported_block_type_and_leaves_nothing(tmp_path):
    src = tmp_path / "bad.gguf"
    make_tiny_gguf(src, extra_tensor=("blk.0.attn_qkv.weight", Q.IQ2_XXS))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(errors.UnsupportedOp) as ei:
        import_model(src, out_dir / "bad.model", progress=False)
    assert "blk.0.attn_qkv.weight" in str(ei.value) and "IQ2_XXS" in str(ei.value)
    assert os.listdir(out_dir) == []


def test_refuses_unknown_arch_and_non_gguf(tmp_path):
    src = tmp_path / "x.gguf"
    w = gguf.GGUFWriter(str(src), "mamba")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(errors.UnsupportedOp, match="mamba"):
        import_model(src, tmp_path / "x.model", progress=False)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(errors.FormatError):
        import_model(junk, tmp_path / "y.model", progress=False)
    with pytest.raises(errors.FormatError):
        import_model(tmp_path / "missing", tmp_path / "z.model", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["junk.bin", "x.gguf"]


def test_write_failure_leaves_nothing(tmp_path, monkeypatch):
    src = tmp_path / "tiny.gguf"
    make_tiny_gguf(src)
    import cyb_llm.convert.gguf as g

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(g, "_unpermute_rows", boom)
    with pytest.raises(RuntimeError):
        import_model(src, tmp_path / "t.model", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["tiny.gguf"]


# ---------------------------------------------------------------- real GGUF models

REAL = {
    "smollm2": dict(model_type="llama", hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, rope_theta=100000.0, tie_word_embeddings=True),
    "qwen05": dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                   num_key_value_heads=2, head_dim=64, rope_theta=1000000.0, tie_word_embeddings=False,
                   attention_bias=True),
    "gemma3": dict(model_type="gemma3", hidden_size=640, num_hidden_layers=18, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=256, rope_theta=1000000.0, tie_word_embeddings=True,
                   sliding_window=512, rope_local_base_freq=10000.0, query_pre_attn_scalar=256),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_gguf_import(name, real_source, real_model):
    src = real_source(name)
    mf = ModelFile(real_model(name))
    cfg = mf.config
    expect = dict(REAL[name])
    assert cfg["model_type"] == expect.pop("model_type")
    for k, v in expect.items():
        assert cfg["architecture"][k] == v, k
    arch = cfg["model_type"]
    a = cfg["architecture"]
    r, ts = _gguf_tensors(src)
    assert len(mf.tensors) == len(ts)
    for gname, t in ts.items():
        hf = hf_tensor_name(gname, arch)
        info = mf.tensors[hf]
        assert list(info.shape) == [int(d) for d in reversed(t.shape)]
        assert info.encoding == GGUF_ENCODINGS[t.tensor_type.name]
        got = np.asarray(mf.tensor_bytes(hf))
        want = _raw(r, t)
        if arch == "llama" and (".attn_q." in gname or ".attn_k." in gname):
            n_head = a["num_attention_heads"] if ".attn_q." in gname else a["num_key_value_heads"]
            rows = info.shape[0]
            # values: dequantized GGUF rows un-permuted == dequantized .model rows
            deq_model = gguf.quants.dequantize(got.reshape(rows, -1), t.tensor_type)
            deq_gguf = gguf.quants.dequantize(want.reshape(rows, -1), t.tensor_type)
            np.testing.assert_array_equal(deq_model, _hf_unpermute(deq_gguf, n_head))
            want = _hf_unpermute(want.reshape(rows, -1), n_head).reshape(-1)
        elif arch == "gemma3" and gname.endswith("norm.weight"):
            np.testing.assert_array_equal(mf.tensor(hf), want.view("<f4") - np.float32(1))
            continue
        np.testing.assert_array_equal(got, want)
    if arch == "gemma3":
        assert a["layer_types"].count("full_attention") == 3 and a["layer_types"][5] == "full_attention"
        assert "chat" not in mf.sections  # a base model: no template
    else:
        assert mf.sections["chat"]["template"] == r.fields["tokenizer.chat_template"].contents()


# ---------------------------------------------------------------- HF folders

def _tiny_llama_folder(path, dtype="float32", tie=False):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rope_theta=50000.0, tie_word_embeddings=tie,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True, max_shard_size="100KB")
    tok_json = _byte_level_tokenizer_json(300)
    (path / "tokenizer.json").write_text(tok_json)
    (path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "eos_token": "<|end|>", "bos_token": "<|begin|>",
    }))
    return model


def _byte_level_tokenizer_json(n):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from cyb_llm.convert.gguf_tokenizer import bytes_to_unicode

    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|begin|>", "<|end|>"])
    return tok.to_str()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_hf_folder_import_tiny_llama(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "tiny"
    model = _tiny_llama_folder(folder, dtype)
    assert len([n for n in os.listdir(folder) if n.endswith(".safetensors")]) > 1  # sharded
    out = tmp_path / "tiny.model"
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    enc = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[dtype]
    sd = model.state_dict()
    for name, t in sd.items():
        info = mf.tensors[name]
        assert info.encoding == enc and list(info.shape) == list(t.shape)
        want = t.contiguous().view(torch.uint8).numpy().reshape(-1) if dtype == "bfloat16" else t.numpy().reshape(-1).view(np.uint8)
        np.testing.assert_array_equal(np.asarray(mf.tensor_bytes(name)), want)
    a = mf.config["architecture"]
    assert mf.config["model_type"] == "llama"
    assert a["rope_theta"] == 50000.0 and a["num_key_value_heads"] == 2 and a["head_dim"] == 16
    assert a["rope_style"] == "neox" and a["tie_word_embeddings"] is False
    assert mf.sections["chat"]["template"].startswith("{% for m in messages %}")
    assert mf.tokenizer.encode("hi <|end|>") == [mf.tokenizer.token_to_id("h"), mf.tokenizer.token_to_id("i"),
                                                mf.tokenizer.token_to_id("Ġ"), mf.tokenizer.token_to_id("<|end|>")]


def test_hf_folder_gemma3_config_normalized(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma3TextConfig(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, sliding_window=16, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(cfg)
    folder = tmp_path / "g3"
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "tokenizer.json").write_text(_byte_level_tokenizer_json(300))
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "gemma3_text"
    out = tmp_path / "g3.model"
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    a = mf.config["architecture"]
    assert mf.config["model_type"] == "gemma3"
    assert a["rope_theta"] == 1000000.0 and a["rope_local_base_freq"] == 10000.0
    assert a["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert a["sliding_window"] == 16 and a["query_pre_attn_scalar"] == 256 and a["head_dim"] == 32
    assert a["tie_word_embeddings"] is True
    for name, t in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied: saved once
        np.testing.assert_array_equal(mf.tensor(name), t.numpy())


def test_hf_folder_quantize_q8_0(tmp_path):
    folder = tmp_path / "tiny"
    model = _tiny_llama_folder(folder)
    out = tmp_path / "q.model"
    import_model(folder, out, quantize="q8_0", progress=False)
    mf = ModelFile(out)
    q = mf.tensors["model.layers.0.self_attn.q_proj.weight"]
    assert q.encoding == "q8_0"
    assert mf.tensors["model.layers.0.input_layernorm.weight"].encoding == "f32"
    w = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].numpy()
    deq = gguf.quants.dequantize(np.asarray(mf.tensor("model.layers.0.self_attn.q_proj.weight")), Q.Q8_0)
    np.testing.assert_array_equal(deq, gguf.quants.dequantize(gguf.quants.quantize(w, Q.Q8_0), Q.Q8_0))


def test_hf_folder_refusals_leave_nothing(tmp_path):
    folder = tmp_path / "tiny"
    _tiny_llama_folder(folder)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(errors.InvalidConfig, match="quantize"):
        import_model(folder, out_dir / "a.model", quantize="q3_xs", progress=False)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(errors.InvalidConfig):
        import_model(folder, out_dir / "b.model", progress=False)
    assert os.listdir(out_dir) == []


def test_hf_folder_minilm(real_source, tmp_path):
    folder = real_source("minilm")
    out = tmp_path / "minilm.model"
    import_model(folder, out, progress=False)
    mf = ModelFile(out)
    assert mf.config["model_type"] == "bert"
    assert mf.config["tokenizer"]["type"] == "wordpiece"
    from safetensors.numpy import load_file

    sd = load_file(os.path.join(folder, "model.safetensors"))
    assert len(sd) == len(mf.tensors)
    for name, v in sd.items():
        np.testing.assert_array_equal(mf.tensor(name), v)
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    from tokenizer_corpus import corpus

    for line in corpus():
        assert mf.tokenizer.encode(line) == ref.encode(line), line
        assert mf.tokenizer.encode(line, add_special_tokens=False) == ref.encode(line, add_special_tokens=False), line
    assert mf.config["pooling"] == {"mode": "mean", "normalize": True, "max_seq_length": 256}


def test_gemma_norm_shift_bf16_f16():
    torch = pytest.importorskip("torch")
    from cyb_llm.convert.gguf import _gemma_norm_to_hf

    class T:
        name = "blk.0.attn_norm.weight"

    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 3 + 1
    for kind, dt in (("BF16", torch.bfloat16), ("F16", torch.float16)):
        T.tensor_type = type("K", (), {"name": kind})
        raw = x.to(dt).view(torch.int16).numpy().view(np.uint8)
        want = (x.to(dt).float() - 1).to(dt).view(torch.int16).numpy().view(np.uint8)
        np.testing.assert_array_equal(_gemma_norm_to_hf(T, raw), want)


def test_importer_tables_come_from_the_native_core():
    """The GGUF importer takes exactly the curated families (native list) under their
    GGUF names, and GGML type names map to encodings through the native table."""
    from cyb_llm import _core
    from cyb_llm.convert.gguf import SUPPORTED_ARCHS

    assert set(SUPPORTED_ARCHS) == set(_core.curated_model_types()) - {"mistral", "gemma3_text"}
    assert set(SUPPORTED_ARCHS) == {"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3"}
    assert GGUF_ENCODINGS["Q4_K"] == "q4_k" and GGUF_ENCODINGS["IQ4_NL"] == "iq4_nl" and "U8" not in GGUF_ENCODINGS


def test_progress_bar_ends_at_100_percent_on_its_own_line(tmp_path, capsys):
    """The import bar's last drawing is 100 % and a newline ends it, so the next line on stderr
    (`cyb-llm run`'s timing line) starts on a line of its own (issue 42, item 8)."""
    src = tmp_path / "tiny.gguf"
    make_tiny_gguf(src)
    import_model(src, tmp_path / "tiny.model", progress=True)
    err = capsys.readouterr().err
    assert err.endswith("\n"), repr(err[-200:])
    last = err.rstrip("\n").split("\r")[-1]
    assert "import tiny.model: 100%" in last, repr(err[-300:])
