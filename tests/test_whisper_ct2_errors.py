"""Malformed CTranslate2 folders: structured cyb_llm.errors, never a crash, nothing written.
The folders are written here by a small model.bin writer (the layout in python/cyb_llm/convert/ct2.py)."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from cyb_llm.convert import detect_source, import_model
from cyb_llm.errors import Error, FormatError, InvalidConfig, TokenizerError
from cyb_llm.format import ModelFile

D, MELS, FFN, SRC, TGT, HEADS = 32, 8, 64, 6, 5, 2
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|notimestamps|>"]


def _vocab() -> list[str]:
    from tokenizers import pre_tokenizers

    return sorted(pre_tokenizers.ByteLevel.alphabet()) + SPECIALS + ["<|0.00|>", "<|0.02|>"]


def _variables(rng) -> dict[str, np.ndarray]:
    v: dict[str, np.ndarray] = {}
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

    def lin(p, o, i):
        v[p + "/weight"], v[p + "/bias"] = f(o, i), f(o)

    def norm(p):
        v[p + "/gamma"], v[p + "/beta"] = f(D), f(D)

    lin("encoder/conv1", D, MELS)
    v["encoder/conv1/weight"] = f(D, MELS, 3)
    lin("encoder/conv2", D, D)
    v["encoder/conv2/weight"] = f(D, D, 3)
    v["encoder/position_encodings/encodings"] = f(SRC, D)
    v["decoder/position_encodings/encodings"] = f(TGT, D)
    v["decoder/embeddings/weight"] = f(len(_vocab()), D)
    for side in ("encoder", "decoder"):
        v[f"{side}/num_heads"] = np.array(HEADS, dtype=np.int16)
        norm(f"{side}/layer_norm")
        c = f"{side}/layer_0"
        lin(c + "/self_attention/linear_0", 3 * D, D)
        v[c + "/self_attention/linear_0/bias"][D:2 * D] = 0  # no key bias
        lin(c + "/self_attention/linear_1", D, D)
        norm(c + "/self_attention/layer_norm")
        if side == "decoder":
            lin(c + "/attention/linear_0", D, D)
            lin(c + "/attention/linear_1", 2 * D, D)
            v[c + "/attention/linear_1/bias"][:D] = 0
            lin(c + "/attention/linear_2", D, D)
            norm(c + "/attention/layer_norm")
        lin(c + "/ffn/linear_0", FFN, D)
        lin(c + "/ffn/linear_1", D, FFN)
        v[c + "/ffn/linear_1/weight"] = f(D, FFN)
        norm(c + "/ffn/layer_norm")
    return v


_DTYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.float16): 4}


def write_model_bin(path: str, variables: dict[str, np.ndarray], version: int = 6, spec: str = "WhisperSpec",
                    aliases: dict[str, str] | None = None) -> None:
    def s(text: str) -> bytes:
        b = text.encode() + b"\0"
        return struct.pack("<H", len(b)) + b

    out = [struct.pack("<I", version), s(spec), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, a in sorted(variables.items()):
        out += [s(name), struct.pack("<B", a.ndim), struct.pack(f"<{a.ndim}I", *a.shape),
                struct.pack("<BI", _DTYPE_IDS[a.dtype], a.nbytes), a.tobytes()]
    aliases = {"decoder/projection/weight": "decoder/embeddings/weight"} if aliases is None else aliases
    out.append(struct.pack("<I", len(aliases)))
    for a, t in aliases.items():
        out += [s(a), s(t)]
    with open(path, "wb") as f:
        f.write(b"".join(out))


def make_folder(folder: str, variables=None, **kw) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(folder, exist_ok=True)
    write_model_bin(os.path.join(folder, "model.bin"), _variables(np.random.default_rng(0)) if variables is None else variables, **kw)
    vocab = _vocab()
    with open(os.path.join(folder, "vocabulary.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"suppress_ids": [1], "suppress_ids_begin": [220], "lang_ids": [vocab.index("<|en|>")],
                   "alignment_heads": [[0, 1]]}, f)
    base = [t for t in vocab if not t.startswith("<|")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(base)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(SPECIALS)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return folder


def _fails(folder: str, out: str, cls, *words: str) -> Error:
    with pytest.raises(cls) as e:
        import_model(folder, out, progress=False)
    assert os.listdir(os.path.dirname(out)) == [], "a failed import left a file behind"
    msg = str(e.value)
    for w in words:
        assert w in msg, (w, msg)
    return e.value


@pytest.fixture
def dirs(tmp_path):
    os.makedirs(tmp_path / "out")
    return str(tmp_path / "src"), str(tmp_path / "out" / "w.model")


def test_good_folder_imports(dirs):
    """The writer above makes a folder the importer takes (so the failures below are the edits')."""
    src, out = dirs
    make_folder(src)
    assert detect_source(src) == "ct2"
    import_model(src, out, progress=False)
    mf = ModelFile(out)
    assert mf.config["architecture"]["encoder_attention_heads"] == HEADS
    v = _variables(np.random.default_rng(0))
    fused = v["decoder/layer_0/attention/linear_1/weight"]
    assert np.array_equal(mf.tensor("model.decoder.layers.0.encoder_attn.k_proj.weight"), fused[:D])
    assert np.array_equal(mf.tensor("model.decoder.layers.0.encoder_attn.v_proj.weight"), fused[D:])


@pytest.mark.parametrize("cut", [2, 30, 300, 5000, -40, -1])
def test_truncated(dirs, cut):
    src, out = dirs
    make_folder(src)
    path = os.path.join(src, "model.bin")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:cut] if cut > 0 else data[:len(data) + cut])
    e = _fails(src, out, FormatError, "truncated")
    assert e.fields["section"] == "model.bin"


def test_empty_and_trailing(dirs):
    src, out = dirs
    make_folder(src)
    path = os.path.join(src, "model.bin")
    with open(path, "ab") as f:
        f.write(b"\0" * 3)
    _fails(src, out, FormatError, "3 bytes after the last record")
    open(path, "wb").close()
    _fails(src, out, FormatError, "truncated")


@pytest.mark.parametrize("version", [0, 7, 0x46554747])
def test_wrong_version(dirs, version):
    src, out = dirs
    make_folder(src, version=version)
    e = _fails(src, out, FormatError, f"binary version {version}")
    assert e.fields["key"] == "binary_version"


def test_gguf_bytes_as_model_bin(dirs):
    src, out = dirs
    make_folder(src)
    with open(os.path.join(src, "model.bin"), "wb") as f:
        f.write(b"GGUF" + os.urandom(200))
    _fails(src, out, FormatError, "binary version")


def test_not_whisper(dirs):
    src, out = dirs
    make_folder(src, spec="TransformerDecoderModelSpec")
    e = _fails(src, out, InvalidConfig, "TransformerDecoderModelSpec", "WhisperSpec")
    assert e.fields["field"] == "spec"


def test_missing_vocabulary(dirs):
    src, out = dirs
    make_folder(src)
    os.remove(os.path.join(src, "vocabulary.txt"))
    _fails(src, out, TokenizerError, "vocabulary.txt")


def test_missing_tokenizer_json(dirs):
    src, out = dirs
    make_folder(src)
    os.remove(os.path.join(src, "tokenizer.json"))
    _fails(src, out, TokenizerError, "tokenizer.json")


def test_vocabulary_size_mismatch(dirs):
    src, out = dirs
    make_folder(src)
    with open(os.path.join(src, "vocabulary.txt"), "a", encoding="utf-8") as f:
        f.write("<|0.04|>\n")
    _fails(src, out, TokenizerError, "tokens", "rows")


def test_missing_variable(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    del v["decoder/layer_0/attention/linear_1/weight"]
    make_folder(src, variables=v)
    e = _fails(src, out, FormatError, "decoder/layer_0/attention/linear_1/weight")
    assert e.fields["key"] == "decoder/layer_0/attention/linear_1/weight"


def test_unsplittable_fused(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    v["encoder/layer_0/self_attention/linear_0/weight"] = v["encoder/layer_0/self_attention/linear_0/weight"][:-1]
    make_folder(src, variables=v)
    _fails(src, out, FormatError, "3 equal parts")


def test_nonzero_key_bias(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    v["decoder/layer_0/self_attention/linear_0/bias"][D + 3] = 1.0
    make_folder(src, variables=v)
    _fails(src, out, FormatError, "key bias")


def test_untied_projection(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    v["decoder/projection/weight"] = v["decoder/embeddings/weight"] + 1
    make_folder(src, variables=v, aliases={})
    _fails(src, out, FormatError, "projection")


def test_quantized_ct2(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    v["encoder/layer_0/ffn/linear_0/weight"] = np.ones((FFN, D), np.int8)
    make_folder(src, variables=v)
    _fails(src, out, FormatError, "quantized")


def test_bad_heads(dirs):
    src, out = dirs
    v = _variables(np.random.default_rng(0))
    v["decoder/num_heads"] = np.array(5, dtype=np.int16)
    make_folder(src, variables=v)
    e = _fails(src, out, InvalidConfig, "num_heads")
    assert e.fields["field"] == "decoder_attention_heads"


def test_bad_config_json(dirs):
    src, out = dirs
    make_folder(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write('{"suppress_ids": [1, "x"]}')
    _fails(src, out, InvalidConfig, "suppress_tokens")
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write("{not json")
    _fails(src, out, InvalidConfig, "not valid JSON")


def test_bad_quantize(dirs):
    src, out = dirs
    make_folder(src)
    with pytest.raises(InvalidConfig, match="--quantize 'q3_zz' is not available"):
        import_model(src, out, quantize="q3_zz", progress=False)
    assert os.listdir(os.path.dirname(out)) == []


def test_random_bytes_never_crash(dirs):
    """Random edits of a good model.bin: an import that finishes, or a cyb_llm error."""
    src, out = dirs
    make_folder(src)
    path = os.path.join(src, "model.bin")
    with open(path, "rb") as f:
        good = f.read()
    rng = np.random.default_rng(7)
    header_end = 200
    for _ in range(40):
        data = bytearray(good)
        for pos in rng.integers(0, header_end, size=3):
            data[pos] = int(rng.integers(0, 256))
        with open(path, "wb") as f:
            f.write(bytes(data))
        try:
            import_model(src, out, progress=False)
        except Error:
            assert not os.path.exists(out)
        else:
            ModelFile(out)
            os.remove(out)
