"""CTranslate2 Whisper importer (python/cyb_llm/convert/ct2.py): a tiny random HF Whisper checkpoint,
converted by CTranslate2's own converter and imported back, gives the HF tensors exactly (names,
shapes, bytes) in F32 and F16; q8_0 gives the blocks gguf.quants makes of the HF weights; the config
carries what the whisper family needs."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

from cyb_llm.convert import import_model  # noqa: E402
from cyb_llm.convert.ct2 import CT2Source  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|fr|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
N_TIMESTAMPS = 20


def _tokenizer_json(folder: str) -> int:
    """A byte-level BPE tokenizer.json with Whisper's special tokens; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return tok.get_vocab_size()


def make_hf_whisper(folder: str, dtype: str = "float32", num_mel_bins: int = 80) -> None:
    """A random WhisperForConditionalGeneration (2+2 layers, d_model 64) saved as safetensors."""
    os.makedirs(folder, exist_ok=True)
    n = _tokenizer_json(folder)
    eot, sot = n - len(SPECIALS), n - len(SPECIALS) + 1
    cfg = transformers.WhisperConfig(
        vocab_size=n + N_TIMESTAMPS, num_mel_bins=num_mel_bins, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=96,
        max_source_positions=50, max_target_positions=24, decoder_start_token_id=sot, eos_token_id=eot,
        pad_token_id=eot, bos_token_id=eot, suppress_tokens=[1, 2, 7], begin_suppress_tokens=[220, eot])
    torch.manual_seed(1234)
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # every value distinct and non-zero (biases too: an init of zeros hides swaps)
            p.normal_(0.0, 0.5)
    if dtype == "float16":
        model = model.half()
    model.save_pretrained(folder)
    tok = transformers.WhisperTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"),
                                            additional_special_tokens=SPECIALS[2:])
    tok.save_pretrained(folder)


def convert_ct2(hf: str, out: str, quantization=None) -> str:
    conv = ctranslate2.converters.TransformersConverter(hf, copy_files=["tokenizer.json"])
    conv.convert(out, quantization=quantization, force=True)
    return out


def hf_tensors(folder: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    t = load_file(os.path.join(folder, "model.safetensors"))
    t.pop("proj_out.weight", None)  # tied to model.decoder.embed_tokens.weight
    return t


def mismatches(model_path: str, hf: dict[str, np.ndarray]) -> list[str]:
    """Every way the imported tensors differ from the HF ones (empty: identical)."""
    mf = ModelFile(model_path)
    out = []
    names = set(mf.tensors)
    if names != set(hf):
        out.append(f"names: only imported {sorted(names - set(hf))[:5]}, only HF {sorted(set(hf) - names)[:5]}")
    for name in sorted(names & set(hf)):
        got, want = mf.tensor(name), hf[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            out.append(f"{name}: {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}")
        elif got.tobytes() != np.ascontiguousarray(want).tobytes():
            out.append(f"{name}: values differ")
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{'f32' | 'f16': (hf folder, ct2 folder)}."""
    root = tmp_path_factory.mktemp("whisper_ct2")
    out = {}
    for dtype, key in (("float32", "f32"), ("float16", "f16")):
        hf = str(root / f"hf_{key}")
        make_hf_whisper(hf, dtype)
        out[key] = (hf, convert_ct2(hf, str(root / f"ct2_{key}")))
    return out


@pytest.mark.parametrize("key", ["f32", "f16"])
def test_tensors_exact(tiny, tmp_path, key):
    hf, ct2 = tiny[key]
    out = str(tmp_path / "w.model")
    import_model(ct2, out, progress=False)
    want = hf_tensors(hf)
    assert {str(a.dtype) for a in want.values()} == {"float32" if key == "f32" else "float16"}
    assert mismatches(out, want) == []
    mf = ModelFile(out)
    assert len(mf.tensors) == len(want) == 11 + 2 * 15 + 2 * 24
    assert "model.encoder.layers.0.self_attn.k_proj.bias" not in mf.tensors


def test_ct2_float16_conversion_exact(tiny, tmp_path):
    """CTranslate2's quantization="float16" of an F32 checkpoint imports as the HF tensors cast to F16."""
    hf, _ = tiny["f32"]
    ct2 = convert_ct2(hf, str(tmp_path / "ct2_half"), quantization="float16")
    out = str(tmp_path / "w.model")
    import_model(ct2, out, progress=False)
    assert mismatches(out, {k: v.astype(np.float16) for k, v in hf_tensors(hf).items()}) == []


def test_swapped_split_is_caught(tiny, tmp_path, monkeypatch):
    """The comparison bites: an importer that takes v for k (and k for v) in the fused blocks fails it."""
    hf, ct2 = tiny["f32"]
    real = CT2Source._rows

    def swapped(self, name, parts, index, zero_ok=False):
        if parts >= 2 and name.endswith("/weight") and index in (parts - 2, parts - 1):
            index = (2 * parts - 3) - index  # k <-> v: the last two blocks trade places
        return real(self, name, parts, index)

    monkeypatch.setattr(CT2Source, "_rows", swapped)
    out = str(tmp_path / "bad.model")
    import_model(ct2, out, progress=False)
    bad = mismatches(out, hf_tensors(hf))
    assert sorted(bad) == sorted(f"model.{p}.{x}_proj.weight: values differ"
                                 for p in [f"encoder.layers.{i}.self_attn" for i in range(2)]
                                 + [f"decoder.layers.{i}.{a}" for i in range(2) for a in ("self_attn", "encoder_attn")]
                                 for x in ("k", "v"))


def test_config(tiny, tmp_path):
    hf, ct2 = tiny["f16"]
    out = str(tmp_path / "w.model")
    import_model(ct2, out, progress=False)
    mf = ModelFile(out)
    cfg = mf.config
    assert cfg["model_type"] == "whisper"
    a = cfg["architecture"]
    with open(os.path.join(hf, "config.json")) as f:
        ref = json.load(f)
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                "encoder_ffn_dim", "decoder_ffn_dim", "num_mel_bins", "max_source_positions", "max_target_positions",
                "vocab_size", "decoder_start_token_id", "eos_token_id", "pad_token_id", "activation_function",
                "scale_embedding"):
        assert a[key] == ref[key], key
    with open(os.path.join(hf, "generation_config.json")) as f:
        gen = json.load(f)
    assert a["suppress_tokens"] == gen["suppress_tokens"] == [1, 2, 7]
    assert a["begin_suppress_tokens"] == gen["begin_suppress_tokens"]
    # CTranslate2's default alignment heads: every head of the last half of the decoder layers
    assert a["alignment_heads"] == [[1, 0], [1, 1]]
    n = a["vocab_size"] - N_TIMESTAMPS
    sot = a["decoder_start_token_id"]
    assert a["lang_to_id"] == {"<|en|>": sot + 1, "<|de|>": sot + 2, "<|fr|>": sot + 3}
    assert a["task_to_id"] == {"translate": sot + 4, "transcribe": sot + 5}
    assert a["no_timestamps_token_id"] == n - 1 and a["timestamp_begin"] == n
    assert cfg["preprocessor"] == {"sampling_rate": 16000, "n_fft": 400, "hop_length": 160, "chunk_length": 30,
                                   "num_mel_bins": 80}
    assert cfg["tokenizer"]["eos_token_ids"] == [ref["eos_token_id"]]
    tok = mf.tokenizer
    # every id decodes: the timestamps the CT2 vocabulary appends are in the stored tokenizer
    assert tok.decode([n, n + 1, n + N_TIMESTAMPS - 1], skip_special_tokens=False) == "<|0.00|><|0.02|><|0.38|>"
    assert tok.decode(tok.encode("the hat", add_special_tokens=False), skip_special_tokens=False) == "the hat"


def test_quantize_q8_0(tiny, tmp_path):
    from gguf import GGMLQuantizationType, quants

    hf, ct2 = tiny["f32"]
    out = str(tmp_path / "q.model")
    import_model(ct2, out, quantize="q8_0", progress=False)
    mf = ModelFile(out)
    want = hf_tensors(hf)
    quantized = {n for n, t in mf.tensors.items() if t.encoding == "q8_0"}
    assert quantized == {n for n, v in want.items() if v.ndim == 2 and "embed_positions" not in n}
    assert "model.decoder.embed_tokens.weight" in quantized and "model.encoder.layers.1.fc2.weight" in quantized
    for name, t in mf.tensors.items():
        if name in quantized:
            ref = quants.quantize(want[name].astype(np.float32), GGMLQuantizationType.Q8_0).reshape(-1)
            assert mf.tensor_bytes(name).tobytes() == ref.tobytes(), name
        else:
            assert t.encoding == "f32" and mf.tensor(name).tobytes() == want[name].tobytes(), name


def test_preprocessor_config(tiny, tmp_path):
    import shutil

    _, ct2 = tiny["f32"]
    folder = str(tmp_path / "ct2")
    shutil.copytree(ct2, folder)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"feature_size": 80, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400, "chunk_length": 20}, f)
    out = str(tmp_path / "w.model")
    import_model(folder, out, progress=False)
    assert ModelFile(out).config["preprocessor"]["chunk_length"] == 20


def test_128_mel(tmp_path):
    """A large-v3-shaped stem (128 mel bins)."""
    hf = str(tmp_path / "hf")
    make_hf_whisper(hf, "float16", num_mel_bins=128)
    ct2 = convert_ct2(hf, str(tmp_path / "ct2"))
    out = str(tmp_path / "w.model")
    import_model(ct2, out, progress=False)
    assert mismatches(out, hf_tensors(hf)) == []
    mf = ModelFile(out)
    assert mf.config["architecture"]["num_mel_bins"] == 128 == mf.config["preprocessor"]["num_mel_bins"]
    assert mf.tensors["model.encoder.conv1.weight"].shape == (64, 128, 3)
