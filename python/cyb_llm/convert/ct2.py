"""CTranslate2 Whisper folder -> `.model` importer (docs/import.md, "CTranslate2 Whisper folders").

A CTranslate2 model folder holds `model.bin` (every weight, in CTranslate2's own binary layout),
`config.json` (for Whisper: suppress_ids, suppress_ids_begin, lang_ids, alignment_heads),
`vocabulary.txt` or `vocabulary.json` (the tokens by id) and usually `tokenizer.json`
(+ `preprocessor_config.json`). The model's sizes are not in config.json: they come from the
weights' shapes and the `*/num_heads` scalars.

model.bin, little-endian:
    u32 binary_version (1..6)
    [version >= 2] string spec_name, u32 spec_revision
    u32 n_variables, then per variable:
        string name, u8 rank, u32 dims[rank],
        [version >= 4] u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), u32 n_bytes
        [version <  4] u8 item_size, u32 n_elements
        n_bytes of data
    [version >= 3] u32 n_aliases, then per alias: string alias, string target
    string = u16 length (with the terminating NUL), the UTF-8 bytes, NUL

CTranslate2 renames the weights and fuses projections: self-attention `linear_0` is q|k|v stacked on
the output axis (the k rows of the fused bias are zeros: Whisper's k_proj has no bias),
cross-attention `linear_0` is q and `linear_1` is k|v, the last linear is out_proj; LayerNorms are
`gamma`/`beta`. They are split back into transformers' WhisperForConditionalGeneration names
(convert/whisper_common.py), float weights copied as shipped (f32/f16/bf16) unless quantized.
"""
from __future__ import annotations

import functools
import json
import math
import mmap
import os
import re
import struct
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import FormatError, InvalidConfig, TokenizerError
from .common import TensorRecord, make_error
from .gguf_tokenizer import vocab_section
from .hf import QUANTIZE_TYPES
from .whisper_common import check_tensors, complete_tokenizer_json, quantizable, special_ids, whisper_config

#: the newest model.bin layout this reader knows (CTranslate2 writes 6)
MAX_BINARY_VERSION = 6
#: CTranslate2 dtype id -> (numpy dtype, .model encoding or None for integer scalars)
_DTYPES = {0: ("<f4", "f32"), 1: ("i1", None), 2: ("<i2", None), 3: ("<i4", "i32"), 4: ("<f2", "f16"), 5: ("<u2", "bf16")}
_ITEM_SIZES = {4: 0, 1: 1, 2: 2}  # version < 4: item size -> dtype id (4 bytes are f32)


def _err(path: str, key: str, reason: str) -> FormatError:
    return make_error(FormatError, f"{path}: {reason}", section="model.bin", key=key, reason=reason)


class CT2Variable:
    __slots__ = ("name", "shape", "dtype", "offset", "nbytes")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: int, offset: int, nbytes: int):
        self.name, self.shape, self.dtype, self.offset, self.nbytes = name, shape, dtype, offset, nbytes


class CT2ModelBin:
    """The variable index of a CTranslate2 model.bin over a read-only map of its bytes."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except OSError as e:
            raise _err(path, "file", f"cannot read model.bin: {e}") from e
        self.size = size
        self.pos = 0
        self.version = self._u32("binary_version")
        if not 1 <= self.version <= MAX_BINARY_VERSION:
            raise _err(path, "binary_version", f"binary version {self.version} is not a CTranslate2 model.bin version "
                       f"this reader knows (1..{MAX_BINARY_VERSION})")
        self.spec, self.revision = "", 1
        if self.version >= 2:
            self.spec = self._string("spec name")
            self.revision = self._u32("spec revision")
        n = self._u32("variable count")
        if n > size // 8:  # every variable takes more than 8 bytes
            raise _err(path, "variable count", f"{n} variables cannot fit in {size} bytes")
        self.variables: dict[str, CT2Variable] = {}
        for _ in range(n):
            name = self._string("variable name")
            rank = self._read(1, f"{name}: rank")[0]
            dims = tuple(struct.unpack(f"<{rank}I", self._read(4 * rank, f"{name}: shape")))
            if self.version >= 4:
                dtype = self._read(1, f"{name}: dtype")[0]
                nbytes = self._u32(f"{name}: byte count")
                if dtype not in _DTYPES:
                    raise _err(path, name, f"variable {name!r} has unknown dtype id {dtype}")
            else:
                item = self._read(1, f"{name}: item size")[0]
                if item not in _ITEM_SIZES:
                    raise _err(path, name, f"variable {name!r} has item size {item}")
                dtype = _ITEM_SIZES[item]
                nbytes = self._u32(f"{name}: element count") * item
            count = math.prod(dims)
            if nbytes != count * np.dtype(_DTYPES[dtype][0]).itemsize:
                raise _err(path, name, f"variable {name!r}: {nbytes} bytes do not hold shape {list(dims)} "
                           f"of dtype id {dtype}")
            offset = self._skip(nbytes, f"{name}: data")
            if name in self.variables:
                raise _err(path, name, f"variable {name!r} appears twice")
            self.variables[name] = CT2Variable(name, dims, dtype, offset, nbytes)
        self.aliases: dict[str, str] = {}
        if self.version >= 3:
            for _ in range(self._u32("alias count")):
                alias = self._string("alias")
                target = self._string(f"{alias}: alias target")
                self.aliases[alias] = target
        if self.pos != size:
            raise _err(path, "end", f"{size - self.pos} bytes after the last record")

    def _skip(self, n: int, what: str) -> int:
        """Moves past `n` bytes (FormatError when the file ends first); returns where they start."""
        start, end = self.pos, self.pos + n
        if end > self.size:
            raise _err(self.path, what, f"truncated: {what} needs {n} bytes at offset {start}, the file has {self.size}")
        self.pos = end
        return start

    def _read(self, n: int, what: str) -> bytes:
        start = self._skip(n, what)
        return bytes(self.map[start:start + n])

    def _u32(self, what: str) -> int:
        return struct.unpack("<I", self._read(4, what))[0]

    def _string(self, what: str) -> str:
        n = struct.unpack("<H", self._read(2, what))[0]
        raw = self._read(n, what)
        if n == 0 or raw[-1:] != b"\0":
            raise _err(self.path, what, f"{what} at offset {self.pos - n} is not a NUL-terminated string")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise _err(self.path, what, f"{what} is not UTF-8: {e}") from e

    def resolve(self, name: str) -> CT2Variable | None:
        seen = set()
        while name in self.aliases and name not in seen:
            seen.add(name)
            name = self.aliases[name]
        return self.variables.get(name)

    def array(self, v: CT2Variable) -> np.ndarray:
        """A zero-copy read-only view of the variable (bf16 as uint16)."""
        dt = np.dtype(_DTYPES[v.dtype][0])
        count = v.nbytes // dt.itemsize
        return np.frombuffer(self.map, dtype=dt, count=count, offset=v.offset).reshape(v.shape)

    def scalar(self, name: str) -> int | None:
        v = self.resolve(name)
        if v is None or v.shape not in ((), (1,)):
            return None
        return int(self.array(v).reshape(-1)[0])


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise make_error(InvalidConfig, f"{what} ({path}) is not valid JSON: {e}", field=os.path.basename(path),
                         reason="unreadable")


def read_vocabulary(folder: str) -> list[str]:
    """The tokens by id from vocabulary.json (a JSON list) or vocabulary.txt (one token a line)."""
    js, txt = os.path.join(folder, "vocabulary.json"), os.path.join(folder, "vocabulary.txt")
    if os.path.isfile(js):
        tokens = _read_json(js, "vocabulary.json")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise make_error(TokenizerError, f"{js}: not a JSON list of token strings", reason="vocabulary.json malformed")
        return tokens
    if os.path.isfile(txt):
        try:
            with open(txt, encoding="utf-8", newline="") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise make_error(TokenizerError, f"{txt}: unreadable: {e}", reason="vocabulary.txt unreadable")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline
        return [line[:-1] if line.endswith("\r") else line for line in lines]
    raise make_error(TokenizerError, f"{folder} has no vocabulary.txt or vocabulary.json (a CTranslate2 folder "
                     "keeps its tokens there)", reason="vocabulary missing")


_LAYER = re.compile(r"(encoder|decoder)/layer_(\d+)/")


class CT2Source:
    """A CTranslate2 Whisper folder, read as `.model` tensor records + config + tokenizer."""

    def __init__(self, folder: str, quantize: str | None = None):
        self.folder = folder
        if quantize is not None and quantize.lower() not in QUANTIZE_TYPES:
            raise make_error(InvalidConfig, f"--quantize {quantize!r} is not available (choices: {', '.join(QUANTIZE_TYPES)})",
                             field="quantize", reason="unknown type")
        self.quantize = QUANTIZE_TYPES[quantize.lower()] if quantize else None
        path = os.path.join(folder, "model.bin")
        if not os.path.isfile(path):
            raise make_error(FormatError, f"{folder} has no model.bin", section="source", key="model.bin",
                             reason="model.bin missing")
        self.bin = CT2ModelBin(path)
        if self.bin.spec != "WhisperSpec":
            raise make_error(InvalidConfig, f"{path}: a CTranslate2 {self.bin.spec or '(unnamed, version 1)'} model; "
                             "only Whisper (WhisperSpec) models can be imported", field="spec", reason="not WhisperSpec")
        cfg_path = os.path.join(folder, "config.json")
        ct2_cfg = _read_json(cfg_path, "config.json") if os.path.isfile(cfg_path) else {}
        if not isinstance(ct2_cfg, dict):
            raise make_error(InvalidConfig, f"{cfg_path}: a JSON {type(ct2_cfg).__name__}, not an object",
                             field="config.json", reason="not an object")
        pre_path = os.path.join(folder, "preprocessor_config.json")
        pre = _read_json(pre_path, "preprocessor_config.json") if os.path.isfile(pre_path) else None
        tokens = read_vocabulary(folder)
        self._plan = self._map_tensors()
        dims = self._dims()
        if len(tokens) != dims["vocab_size"]:
            raise make_error(TokenizerError, f"the vocabulary has {len(tokens)} tokens, the embedding "
                             f"{dims['vocab_size']} rows", reason="vocabulary size mismatch")
        generation = {"suppress_tokens": ct2_cfg.get("suppress_ids"), "begin_suppress_tokens": ct2_cfg.get("suppress_ids_begin"),
                      "alignment_heads": ct2_cfg.get("alignment_heads"), "lang_ids": ct2_cfg.get("lang_ids")}
        for key, v in generation.items():
            ok = v is None or (isinstance(v, list) and all(
                (isinstance(x, int) and not isinstance(x, bool)) if key != "alignment_heads" else
                (isinstance(x, list) and len(x) == 2 and all(type(y) is int for y in x)) for x in v))
            if not ok:
                raise make_error(InvalidConfig, f"config.json {key} = {v!r} is not a list of token ids"
                                 + (" / [layer, head] pairs" if key == "alignment_heads" else ""), field=key, reason="malformed")
        self.config = whisper_config(dims, tokens, generation, pre if isinstance(pre, dict) else None)
        check_tensors(self.config["architecture"], {n: s for n, (s, _) in self._plan.items()})
        self.config["parameters"] = int(sum(int(np.prod(s)) for s, _ in self._plan.values()))
        self._tokenizer(tokens)
        self.total_bytes = sum(load().nbytes for _, load in self._plan.values())  # as shipped (views, no copy)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.folder))

    # --- weights ---------------------------------------------------------------------------

    def _var(self, name: str) -> "CT2Variable":
        v = self.bin.resolve(name)
        if v is None:
            raise make_error(FormatError, f"{self.bin.path}: variable {name!r} is missing", section="model.bin",
                             key=name, reason="missing variable")
        if _DTYPES[v.dtype][1] not in ("f32", "f16", "bf16"):
            raise make_error(FormatError, f"{self.bin.path}: variable {name!r} is stored as "
                             f"{_DTYPES[v.dtype][0]} (a quantized CTranslate2 model); import a float16/float32 "
                             "conversion instead", section="model.bin", key=name, reason="quantized weights")
        return v

    def _rows(self, name: str, parts: int, index: int, zero_ok: bool = False) -> tuple[tuple[int, ...], Callable]:
        """(shape, loader) of rows block `index` of `parts` equal blocks of variable `name`."""
        v = self._var(name)
        if not v.shape or v.shape[0] % parts:
            raise make_error(FormatError, f"{self.bin.path}: {name!r} of shape {list(v.shape)} does not split into "
                             f"{parts} equal parts", section="model.bin", key=name, reason="fused shape")
        n = v.shape[0] // parts
        shape = (n,) + tuple(v.shape[1:])
        return shape, functools.partial(self._slice, v, index * n, (index + 1) * n)

    def _slice(self, v: CT2Variable, begin: int, end: int) -> np.ndarray:
        return self.bin.array(v)[begin:end]

    def _map_tensors(self) -> dict[str, tuple[tuple[int, ...], Callable[[], np.ndarray]]]:
        """HF name -> (shape, loader of the array as shipped)."""
        plan: dict[str, tuple[tuple[int, ...], Callable]] = {}

        def whole(hf: str, ct: str) -> None:
            v = self._var(ct)
            plan[hf] = (tuple(v.shape), functools.partial(self.bin.array, v))

        def linear(hf: str, ct: str) -> None:
            whole(hf + ".weight", ct + "/weight")
            whole(hf + ".bias", ct + "/bias")

        def norm(hf: str, ct: str) -> None:
            whole(hf + ".weight", ct + "/gamma")
            whole(hf + ".bias", ct + "/beta")

        def fused(hf: str, ct: str, projs: tuple[str, ...]) -> None:
            for i, p in enumerate(projs):
                plan[f"{hf}.{p}.weight"] = self._rows(ct + "/weight", len(projs), i)
                if p == "k_proj":
                    self._check_zero_bias(ct + "/bias", len(projs), i)
                else:
                    plan[f"{hf}.{p}.bias"] = self._rows(ct + "/bias", len(projs), i)

        for side in ("encoder", "decoder"):
            norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
            whole(f"model.{side}.embed_positions.weight", f"{side}/position_encodings/encodings")
        for conv in ("conv1", "conv2"):
            linear(f"model.encoder.{conv}", f"encoder/{conv}")
        whole("model.decoder.embed_tokens.weight", "decoder/embeddings/weight")
        self._check_tied()
        layers = {}
        for name in self.bin.variables:
            m = _LAYER.match(name)
            if m:
                layers.setdefault(m.group(1), set()).add(int(m.group(2)))
        self.layers = {}
        for side in ("encoder", "decoder"):
            idx = sorted(layers.get(side, ()))
            if not idx or idx != list(range(len(idx))):
                raise make_error(FormatError, f"{self.bin.path}: {side} layers {idx[:8]} are not 0..n-1",
                                 section="model.bin", key=f"{side}/layer_*", reason="layer numbering")
            self.layers[side] = len(idx)
            for i in idx:
                c, h = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
                fused(h + ".self_attn", c + "/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
                linear(h + ".self_attn.out_proj", c + "/self_attention/linear_1")
                norm(h + ".self_attn_layer_norm", c + "/self_attention/layer_norm")
                if side == "decoder":
                    linear(h + ".encoder_attn.q_proj", c + "/attention/linear_0")
                    fused(h + ".encoder_attn", c + "/attention/linear_1", ("k_proj", "v_proj"))
                    linear(h + ".encoder_attn.out_proj", c + "/attention/linear_2")
                    norm(h + ".encoder_attn_layer_norm", c + "/attention/layer_norm")
                linear(h + ".fc1", c + "/ffn/linear_0")
                linear(h + ".fc2", c + "/ffn/linear_1")
                norm(h + ".final_layer_norm", c + "/ffn/layer_norm")
        return plan

    def _check_zero_bias(self, name: str, parts: int, index: int) -> None:
        """The k rows of a fused bias must be zeros: Whisper's k_proj has none, and the layout has no place for one."""
        shape, load = self._rows(name, parts, index)
        if np.any(load()):
            raise make_error(FormatError, f"{self.bin.path}: {name!r} has a non-zero key bias, which Whisper has not",
                             section="model.bin", key=name, reason="key bias")

    def _check_tied(self) -> None:
        """The output projection must be the token embedding (an alias, or equal bytes) and bias-free."""
        emb = self.bin.resolve("decoder/embeddings/weight")
        proj = self.bin.resolve("decoder/projection/weight")
        if proj is not None and proj is not emb and not (
                proj.shape == emb.shape and proj.dtype == emb.dtype
                and np.array_equal(self.bin.array(proj), self.bin.array(emb))):
            raise make_error(FormatError, f"{self.bin.path}: decoder/projection/weight differs from the token "
                             "embedding; the whisper layout ties them", section="model.bin",
                             key="decoder/projection/weight", reason="untied output projection")
        bias = self.bin.resolve("decoder/projection/bias")
        if bias is not None and np.any(self.bin.array(bias)):
            raise make_error(FormatError, f"{self.bin.path}: decoder/projection/bias is not zero; the whisper layout "
                             "has no output bias", section="model.bin", key="decoder/projection/bias",
                             reason="output bias")

    def _dims(self) -> dict[str, Any]:
        p = self._plan
        d, mels, _ = p["model.encoder.conv1.weight"][0]
        dims: dict[str, Any] = {
            "d_model": d, "num_mel_bins": mels, "vocab_size": p["model.decoder.embed_tokens.weight"][0][0],
            "max_source_positions": p["model.encoder.embed_positions.weight"][0][0],
            "max_target_positions": p["model.decoder.embed_positions.weight"][0][0],
            "encoder_layers": self.layers["encoder"], "decoder_layers": self.layers["decoder"],
            "encoder_ffn_dim": p["model.encoder.layers.0.fc1.weight"][0][0],
            "decoder_ffn_dim": p["model.decoder.layers.0.fc1.weight"][0][0],
        }
        for side in ("encoder", "decoder"):
            heads = self.bin.scalar(f"{side}/num_heads")
            if heads is None or heads <= 0 or d % heads:
                raise make_error(InvalidConfig, f"{self.bin.path}: {side}/num_heads = {heads!r} does not divide "
                                 f"d_model {d}", field=f"{side}_attention_heads", reason="invalid head count")
            dims[f"{side}_attention_heads"] = heads
        return {k: int(v) for k, v in dims.items()}

    def tensor_records(self) -> Iterator[TensorRecord]:
        for name, (shape, load) in self._plan.items():
            if self.quantize is not None and quantizable(name, shape):
                gtype, qenc = self.quantize
                yield TensorRecord(name, qenc, list(shape), functools.partial(_quantize, load, gtype))
                continue
            enc = {np.dtype("<f4"): "f32", np.dtype("<f2"): "f16", np.dtype("<u2"): "bf16"}[load().dtype]
            yield TensorRecord(name, enc, list(shape), functools.partial(_contiguous, load))

    # --- tokenizer ---------------------------------------------------------------------------

    def _tokenizer(self, tokens: list[str]) -> None:
        from tokenizers import Tokenizer

        path = os.path.join(self.folder, "tokenizer.json")
        if not os.path.isfile(path):
            raise make_error(TokenizerError, f"{self.folder} has no tokenizer.json (the vocabulary alone has no BPE merges)",
                             reason="tokenizer.json missing")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            j = json.loads(text)
            model = j.get("model", {}) if isinstance(j, dict) else {}
            if model.get("type") != "BPE":
                raise ValueError(f"model type {model.get('type')!r}, Whisper's is BPE")
            tok = Tokenizer.from_str(text)
        except Exception as e:
            raise make_error(TokenizerError, f"tokenizer.json does not load: {e}", reason=str(e))
        for t, i in special_ids(tokens).items():  # the ids the decoding prompt uses must agree
            got = tok.token_to_id(t)
            if got is not None and got != i:
                raise make_error(TokenizerError, f"tokenizer.json gives {t} id {got}, the vocabulary {i}",
                                 reason="tokenizer.json and vocabulary disagree")
        self.tokenizer_json = complete_tokenizer_json(text, tokens)
        merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model.get("merges", [])]
        eot = self.config["architecture"]["eos_token_id"]
        self.vocab = vocab_section(tokens, merges=merges, special={"eos": eot, "pad": eot})

    def chat(self) -> None:
        return None

    def card(self) -> str:
        a = self.config["architecture"]
        return (f"# {self.name}\n\nImported from a CTranslate2 Whisper folder (model.bin version {self.bin.version}, "
                f"{a['encoder_layers']}+{a['decoder_layers']} layers, d_model {a['d_model']}, "
                f"{'multilingual' if a['is_multilingual'] else 'English-only'}).\n")


def _contiguous(load: Callable[[], np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(load()).reshape(-1).view(np.uint8)


def _quantize(load: Callable[[], np.ndarray], gtype: str) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    a = load()
    if a.dtype == np.uint16:  # bf16: the high half of an f32
        a = (a.astype(np.uint32) << 16).view(np.float32)
    v = np.ascontiguousarray(a, dtype=np.float32)
    return quants.quantize(v, GGMLQuantizationType[gtype]).reshape(-1).view(np.uint8)


def is_ct2_folder(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "model.bin"))
