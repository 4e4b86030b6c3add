"""GGUF -> `.model` importer.

Quantized blocks are copied byte for byte (never requantized); names and metadata are translated
to the HF names and config keys of the original checkpoint; `llama`-architecture Q/K rows are
un-permuted back to the HF layout; Gemma-family norm weights get the `+1` that the GGUF converter
folded in removed again. docs/import.md is the normative description.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Iterator

import numpy as np

from .. import _core
from ..errors import FormatError, InvalidConfig, MissingTensor, UnsupportedOp
from .common import TensorRecord, check_layer_count, make_error
from .generation import from_gguf as sampling_from_gguf
from .gguf_tokenizer import GEMMA_FAMILY, build_from_gguf

# GGML type name -> .model encoding (docs/format.md section 3): the native
# encoding table's display names are GGML's type names; GGML has no U8 type.
GGUF_ENCODINGS = {name: enc for enc, name, _block, _bytes, _quantized in _core.encodings() if name != "U8"}

# GGUF architectures the importer takes: every curated family of the native
# runtime (csrc/families/families.cc, read through _core) under its GGUF name.
# "mistral" and "gemma3_text" are HF-only spellings: GGUF files of those models
# say "llama" and "gemma3".
_HF_ONLY_TYPES = ("mistral", "gemma3_text")
SUPPORTED_ARCHS = tuple(t for t in _core.curated_model_types() if t not in _HF_ONLY_TYPES)

_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def hf_tensor_name(gguf_name: str, arch: str) -> str | None:
    """HF name of a GGUF tensor, or None when this importer has no translation for it."""
    if gguf_name in _TOP:
        return _TOP[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if not m:
        return None
    layer, part, kind = m.groups()
    if arch in ("gemma2", "gemma3") and part == "ffn_norm":
        hf = "pre_feedforward_layernorm"  # Gemma 2/3: four norms per block
    elif arch == "phi3" and part == "ffn_up":
        hf = "mlp.gate_up_proj"  # Phi-3 stores gate and up fused, gate rows first
    else:
        hf = _BLOCK.get(part)
    if hf is None:
        return None
    return f"model.layers.{layer}.{hf}.{kind}"


def read_metadata(reader) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            meta[key] = field.contents()
        except Exception as e:
            raise make_error(FormatError, f"GGUF metadata key {key!r} cannot be read: {e}", section="gguf", key=key)
    return meta


def _f32(v) -> float:
    """A float32 metadata value written as the shortest decimal that round-trips in float32
    (GGUF stores 1e-5 as 9.999999747378752e-06; HF configs say 1e-05)."""
    return float(str(np.float32(v)))


def _gemma_query_scalar(arch: str, hidden: int, heads: int, head_dim: int, n_layers: int) -> float:
    # Gemma 2 27B (46 layers) scales queries by hidden/heads; every other Gemma by head_dim.
    if arch == "gemma2" and n_layers == 46:
        return hidden // heads
    return head_dim


def build_config(meta: dict, arch: str, tensor_names: set[str]) -> dict[str, Any]:
    def k(name, default=None, required=False):
        key = f"{arch}.{name}"
        if key in meta:
            return meta[key]
        if required:
            raise make_error(InvalidConfig, f"GGUF metadata lacks {key!r}", field=key, reason="missing")
        return default

    def count(name, default=None, required=False) -> int:
        """A positive integer count of the metadata (head counts, lengths): InvalidConfig naming the key otherwise."""
        v = k(name, default, required)
        if isinstance(v, list):
            raise make_error(InvalidConfig, f"per-layer values of {arch}.{name} are not supported",
                             field=f"{arch}.{name}", reason="per-layer values are not supported")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < int(v) < 2**31:
            raise make_error(InvalidConfig, f"GGUF metadata {arch}.{name} must be a positive integer, got {v!r}",
                             field=f"{arch}.{name}", reason=f"must be a positive integer, got {v!r}")
        return int(v)

    hidden = count("embedding_length", required=True)
    heads = count("attention.head_count", required=True)
    kv_heads = count("attention.head_count_kv", heads)
    head_dim = count("attention.key_length", hidden // heads)
    n_layers = check_layer_count(count("block_count", required=True), len(tensor_names), f"{arch}.block_count",
                                 InvalidConfig)
    ffn = count("feed_forward_length", required=True)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab_size = int(k("vocab_size", len(tokens) if tokens is not None else 0))

    a: dict[str, Any] = {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": n_layers,
        "intermediate_size": int(ffn),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(k("context_length", 2048)),
        "rope_theta": _f32(k("rope.freq_base", 10000.0)),
        "rope_style": "neox",
        "rms_norm_eps": _f32(k("attention.layer_norm_rms_epsilon", 1e-6)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names or "blk.0.attn_qkv.bias" in tensor_names,
    }
    rot = k("rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        a["partial_rotary_factor"] = int(rot) / head_dim
    stype = k("rope.scaling.type")
    if stype and stype != "none":
        rs: dict[str, Any] = {"rope_type": stype, "type": stype, "factor": _f32(k("rope.scaling.factor", 1.0))}
        orig = k("rope.scaling.original_context_length")
        if orig is not None:
            rs["original_max_position_embeddings"] = int(orig)
        a["rope_scaling"] = rs
    sw = k("attention.sliding_window")
    if sw is not None:
        a["sliding_window"] = int(sw)

    if arch in GEMMA_FAMILY:
        a["hidden_activation"] = "gelu_pytorch_tanh"
        a["query_pre_attn_scalar"] = _gemma_query_scalar(arch, hidden, heads, head_dim, n_layers)
    if arch == "gemma2":
        a["attn_logit_softcapping"] = _f32(k("attn_logit_softcapping", 50.0))
        a["final_logit_softcapping"] = _f32(k("final_logit_softcapping", 30.0))
        a.setdefault("sliding_window", 4096)
        a["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    if arch == "gemma3":
        # The GGUF stores one rope base (the global one); Gemma 3 uses 1e4 on its local layers.
        a["rope_local_base_freq"] = 10000.0
        # attn/final logit softcapping: none for Gemma 3 (TOML has no null: the keys are absent).
        a.setdefault("sliding_window", 4096)
        a["sliding_window_pattern"] = 6
        a["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n_layers)]
    if arch == "phi3":
        a["hidden_act"] = "silu"
    if arch in ("llama", "qwen2", "qwen3"):
        a["hidden_act"] = "silu"
    if arch == "qwen2" and "sliding_window" not in a:
        a["use_sliding_window"] = False

    model_type = arch
    return {"model_type": model_type, "architecture": {k2: v for k2, v in a.items() if v is not None}}


def _unpermute_rows(raw: np.ndarray, rows: int, n_head: int) -> np.ndarray:
    """Undo the GGUF Q/K row permutation of `llama` files. GGUF row h*hd + 2i + s holds HF row
    h*hd + s*hd/2 + i (s in {0, 1}); whole rows (runs of quantized blocks) are moved."""
    if rows % (2 * n_head):
        raise make_error(InvalidConfig, f"Q/K rows ({rows}) not divisible by 2 x heads ({n_head})", field="num_attention_heads", reason="permutation")
    row_bytes = raw.size // rows
    half = rows // n_head // 2
    return np.ascontiguousarray(raw.reshape(n_head, half, 2, row_bytes).swapaxes(1, 2)).reshape(-1)


def _check_required_tensors(hf_names: set[str], arch_cfg: dict, arch: str) -> None:
    """MissingTensor for the first tensor every decoder family needs that the GGUF lacks
    (a GGUF with no tensors at all fails on the embedding)."""
    need = ["model.embed_tokens.weight", "model.norm.weight"]
    for layer in range(arch_cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        need += [p + "input_layernorm.weight", p + "self_attn.o_proj.weight", p + "mlp.down_proj.weight"]
        if p + "self_attn.qkv_proj.weight" not in hf_names:
            need += [p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"]
    for name in need:
        if name not in hf_names:
            raise MissingTensor(name, f"the {arch} importer (GGUF)")


# GGUF value types (gguf.GGUFValueType): fixed sizes of the scalar ones; 8 = string, 9 = array.
_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_MAX_DIMS = 4


def check_gguf_structure(path: str) -> None:
    """Walks the GGUF header (magic, version, counts, every metadata key and value, every tensor
    entry) against the file size before the gguf package reads it, so that a truncated or
    corrupted file fails with FormatError(section="gguf", key=<the field>, reason) naming the
    field and the offset instead of an error from numpy's internals."""
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(min(size, 64 << 20))  # headers beyond 64 MiB: checked as far as that

    def fail(field: str, reason: str) -> FormatError:
        return FormatError(section="gguf", key=field, reason=reason)

    pos = 0

    def take(n: int, field: str) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(head):
            if len(head) < size:
                raise _HeaderTooLong
            raise fail(field, f"truncated at byte {pos}: needs {n} bytes, the file has {size - pos} left")
        b = head[pos:pos + n]
        pos += n
        return b

    def u32(field: str) -> int:
        return struct.unpack("<I", take(4, field))[0]

    def u64(field: str) -> int:
        return struct.unpack("<Q", take(8, field))[0]

    def string(field: str) -> str:
        n = u64(field + " length")
        if n > size:
            raise fail(field + " length", f"string length {n} at byte {pos - 8} exceeds the file size {size}")
        raw = take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(field, f"not UTF-8 at byte {pos - n + e.start}") from None

    def value(vtype: int, field: str, depth: int = 0) -> None:
        if vtype in _GGUF_SCALAR_SIZES:
            take(_GGUF_SCALAR_SIZES[vtype], field)
        elif vtype == 8:
            string(field)
        elif vtype == 9 and depth == 0:
            item_type = u32(field + " array type")
            n = u64(field + " array length")
            if item_type in _GGUF_SCALAR_SIZES:
                if n > size:
                    raise fail(field + " array length", f"{n} items at byte {pos - 8} exceed the file size {size}")
                take(n * _GGUF_SCALAR_SIZES[item_type], field)
            else:
                if n > size // 8:
                    raise fail(field + " array length", f"{n} items at byte {pos - 8} exceed the file size {size}")
                for _ in range(n):
                    value(item_type, field, depth + 1)
        else:
            raise fail(field + " type", f"unknown value type {vtype} at byte {pos - 4}")

    try:
        if take(4, "magic") != b"GGUF":
            raise fail("magic", "not a GGUF file (the first 4 bytes are not 'GGUF')")
        version = u32("version")
        if version not in (2, 3):
            raise fail("version", f"GGUF version {version} is not supported (2 or 3)")
        n_tensors = u64("n_tensors")
        n_kv = u64("n_kv")
        if n_tensors > size // 24:
            raise fail("n_tensors", f"{n_tensors} tensors cannot fit in a file of {size} bytes")
        if n_kv > size // 12:
            raise fail("n_kv", f"{n_kv} metadata entries cannot fit in a file of {size} bytes")
        for i in range(n_kv):
            key = string(f"key {i}")
            value(u32(f"{key} type"), key)
        for i in range(n_tensors):
            name = string(f"tensor {i} name")
            n_dims = u32(f"{name} n_dims")
            if not 0 < n_dims <= _GGUF_MAX_DIMS:
                raise fail(f"{name} n_dims", f"{n_dims} dimensions (1 to {_GGUF_MAX_DIMS})")
            dims = [u64(f"{name} dims") for _ in range(n_dims)]
            if any(d == 0 or d > 2**40 for d in dims):
                raise fail(f"{name} dims", f"dimensions {dims} are out of range")
            u32(f"{name} type")
            offset = u64(f"{name} offset")
            if offset >= size:
                raise fail(f"{name} offset", f"data offset {offset} is beyond the file size {size}")
    except _HeaderTooLong:
        return


class _HeaderTooLong(Exception):
    """The header goes on beyond the part read: the gguf package checks the rest."""


class GGUFSource:
    """An open GGUF file, translated: config, tokenizer, and a lazy stream of tensors."""

    def __init__(self, path: str):
        from gguf import GGUFReader

        self.path = path
        check_gguf_structure(path)
        try:
            self.reader = GGUFReader(path, "r")
        except Exception as e:
            raise make_error(FormatError, f"{path}: not a readable GGUF file: {type(e).__name__}: {e}",
                             section="gguf", key="header", reason=f"{type(e).__name__}: {e}") from e
        self.meta = read_metadata(self.reader)
        self.arch = self.meta.get("general.architecture")
        if self.arch not in SUPPORTED_ARCHS:
            raise make_error(
                UnsupportedOp,
                f"GGUF architecture {self.arch!r} is not supported by the importer (supported: {', '.join(SUPPORTED_ARCHS)})",
                op=f"import:{self.arch}", backend="import", input_dtype="gguf",
            )
        self.tensors = {t.name: t for t in self.reader.tensors}
        names = set(self.tensors)
        self.extra_rope: dict[str, list[float]] = {}
        self.plan: list[tuple[str, Any]] = []  # (hf name, gguf tensor)
        for t in self.reader.tensors:
            if t.name in ("rope_factors_long.weight", "rope_factors_short.weight") and self.arch == "phi3":
                self.extra_rope[t.name.split(".")[0].replace("rope_factors_", "")] = [float(x) for x in np.asarray(t.data).reshape(-1)]
                continue
            hf = hf_tensor_name(t.name, self.arch)
            if hf is None:
                raise make_error(
                    UnsupportedOp, f"GGUF tensor {t.name!r} has no HF equivalent in the {self.arch} importer",
                    op=f"import:{t.name}", backend="import", input_dtype=t.tensor_type.name,
                )
            enc = GGUF_ENCODINGS.get(t.tensor_type.name)
            if enc is None:
                raise make_error(
                    UnsupportedOp,
                    f"GGUF tensor {t.name!r} has type {t.tensor_type.name}, which the .model format cannot hold "
                    f"(supported: {', '.join(GGUF_ENCODINGS)})",
                    op=f"import:{t.name}", backend="import", input_dtype=t.tensor_type.name,
                )
            self.plan.append((hf, t))
        self.config = build_config(self.meta, self.arch, names)
        _check_required_tensors({hf for hf, _ in self.plan}, self.config["architecture"], self.arch)
        arch_cfg = self.config["architecture"]
        if self.extra_rope:
            rs = {"rope_type": "longrope", "type": "longrope"}
            for key in ("long", "short"):
                if key in self.extra_rope:
                    rs[f"{key}_factor"] = self.extra_rope[key]
            orig = self.meta.get("phi3.rope.scaling.original_context_length")
            if orig is not None:
                arch_cfg["original_max_position_embeddings"] = int(orig)
            attn_factor = self.meta.get("phi3.rope.scaling.attn_factor")
            if attn_factor is not None:
                rs["attention_factor"] = float(attn_factor)
            arch_cfg["rope_scaling"] = rs
        self.tok = build_from_gguf(self.meta, self.arch)
        if not arch_cfg["vocab_size"]:
            arch_cfg["vocab_size"] = len(self.meta["tokenizer.ggml.tokens"])
        self.config["tokenizer"] = self.tok.config
        self.config["parameters"] = int(sum(int(t.n_elements) for _, t in self.plan))
        sampling = sampling_from_gguf(self.meta)
        if sampling:
            self.config["sampling"] = sampling

    @property
    def name(self) -> str:
        n = self.meta.get("general.name")
        return str(n) if n else os.path.splitext(os.path.basename(self.path))[0]

    def chat(self) -> dict | None:
        tmpl = self.meta.get("tokenizer.chat_template")
        if not tmpl:
            return None
        tokens = self.meta["tokenizer.ggml.tokens"]
        eos_ids = self.tok.config.get("eos_token_ids", [])
        chat = {
            "template": str(tmpl),
            "eos_sequences": [tokens[i] for i in eos_ids],
            "bos_token": self.tok.special_tokens.get("bos", ""),
            "eos_token": self.tok.special_tokens.get("eos", ""),
        }
        return chat

    def card(self) -> str:
        lines = [f"# {self.name}", "", f"Imported from GGUF `{os.path.basename(self.path)}` (architecture `{self.arch}`).", ""]
        for key in ("general.organization", "general.basename", "general.finetune", "general.size_label", "general.license", "general.file_type"):
            if key in self.meta:
                lines.append(f"- {key}: {self.meta[key]}")
        return "\n".join(lines) + "\n"

    def tensor_records(self) -> Iterator[TensorRecord]:
        """(hf name, encoding, shape outermost first, bytes) for every tensor, in file order."""
        arch_cfg = self.config["architecture"]
        data = self.reader.data
        for hf, t in self.plan:
            enc = GGUF_ENCODINGS[t.tensor_type.name]
            shape = [int(d) for d in reversed([int(x) for x in t.shape])]
            raw = data[t.data_offset:t.data_offset + int(t.n_bytes)]
            transform = None
            if self.arch == "llama" and (".attn_q." in t.name or ".attn_k." in t.name):
                n_head = arch_cfg["num_attention_heads"] if ".attn_q." in t.name else arch_cfg["num_key_value_heads"]
                transform = functools.partial(_unpermute_rows, np.asarray(raw), shape[0], n_head)
            if self.arch in GEMMA_FAMILY and t.name.endswith("norm.weight"):
                transform = functools.partial(_gemma_norm_to_hf, t, raw)
            if transform is not None:
                raw = transform  # computed when the writer reaches this tensor
            yield TensorRecord(hf, enc, shape, raw)


def _gemma_norm_to_hf(t, raw) -> np.ndarray:
    """GGUF Gemma files store 1 + w for every RMSNorm weight; HF checkpoints store w."""
    kind = t.tensor_type.name
    if kind == "F32":
        w = np.frombuffer(memoryview(raw), dtype="<f4").astype(np.float32)
        return (w - np.float32(1.0)).astype("<f4").view(np.uint8)
    if kind == "F16":
        w = np.frombuffer(memoryview(raw), dtype="<f2").astype(np.float32)
        return (w - np.float32(1.0)).astype("<f2").view(np.uint8)
    if kind == "BF16":
        bits = np.frombuffer(memoryview(raw), dtype="<u2").astype(np.uint32) << 16
        w = bits.view(np.float32) - np.float32(1.0)
        u = w.view(np.uint32)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").view(np.uint8)
    raise make_error(
        UnsupportedOp, f"Gemma norm tensor {t.name!r} has type {kind}; only F32/F16/BF16 norms can be shifted back",
        op=f"import:{t.name}", backend="import", input_dtype=kind,
    )
