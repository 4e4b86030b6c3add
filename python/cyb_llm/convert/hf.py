"""HF folder -> `.model` importer: config.json + *.safetensors (sharded or not) + tokenizer.json.

Float tensors (F32/F16/BF16) are copied byte for byte from the safetensors files (mapped, never
converted); `quantize="q8_0"` (or another type gguf.quants can produce) turns 2-D weights into GGML
blocks. The config is normalized to the classic HF spelling (docs/import.md).
"""
from __future__ import annotations

import functools
import glob
import json
import mmap
import os
import struct
from typing import Any, Iterator

import numpy as np

from .. import _core
from ..errors import FormatError, InvalidConfig, TokenizerError
from .common import TensorRecord, check_layer_count, make_error
from .generation import from_generation_config
from .gguf_tokenizer import vocab_section

SAFETENSORS_ENCODINGS = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "I64": "i64", "U8": "u8", "BOOL": "u8"}

# --quantize choices -> (GGML type name, .model encoding)
QUANTIZE_TYPES = {"q8_0": ("Q8_0", "q8_0"), "q8": ("Q8_0", "q8_0"), "q4_0": ("Q4_0", "q4_0"), "q4": ("Q4_0", "q4_0"),
                  "q4_1": ("Q4_1", "q4_1"), "q5_0": ("Q5_0", "q5_0"), "q5_1": ("Q5_1", "q5_1")}

# config.json keys that say nothing about the computation
_DROP = {"architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "id2label", "label2id",
         "auto_map", "use_cache", "gradient_checkpointing", "initializer_range", "output_attentions",
         "output_hidden_states", "return_dict", "problem_type", "chunk_size_feed_forward", "is_encoder_decoder",
         "tokenizer_class", "attention_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob",
         "_attn_implementation_autoset", "model_type", "bos_token_id", "eos_token_id", "pad_token_id",
         "sep_token_id", "decoder_start_token_id", "quantization_config", "sentence_transformers",
         "sbert_ce_default_activation_function"}

_MODEL_TYPES = {"gemma3_text": "gemma3", "qwen2_5": "qwen2", "phi3small": "phi3"}
#: encoder families (docs/encoders.md): their heads' labels and the pad id (position offset) stay in [architecture]
ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "modernbert"})
#: keys of _DROP that an encoder keeps
_ENCODER_KEEP = {"architectures", "id2label", "label2id", "problem_type", "pad_token_id"}
#: DistilBERT's own spelling -> the BERT spelling, written next to the original keys
_DISTILBERT_KEYS = {"dim": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers",
                    "hidden_dim": "intermediate_size", "activation": "hidden_act"}
#: whisper (docs/whisper.md "The whisper family"): the special token ids its decoding needs stay in [architecture]
WHISPER_MODEL_TYPES = frozenset({"whisper"})
_WHISPER_KEEP = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}
#: sentence-transformers Pooling config flags -> [pooling] mode
_POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}
#: model types with a curated decoder family (the native list, csrc/families/families.cc)
_CURATED = frozenset(_core.curated_model_types())


def _toml_safe(v: Any) -> Any:
    """Drop None (TOML has no null) recursively."""
    if isinstance(v, dict):
        return {k: _toml_safe(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_toml_safe(x) for x in v if x is not None]
    return v


def normalize_config(cfg: dict, n_tensors: int) -> dict[str, Any]:
    """config.json -> the `.model` config (model_type + [architecture]) in the classic spelling.
    `n_tensors` (the checkpoint's tensor count) bounds the layer count."""
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise make_error(InvalidConfig, "config.json has no model_type", field="model_type", reason="missing")
    model_type = _MODEL_TYPES.get(cfg["model_type"], cfg["model_type"])
    if model_type == "gemma3" and "text_config" in cfg:
        if cfg.get("vision_config"):
            raise make_error(InvalidConfig, "multimodal Gemma 3 checkpoints are not supported (text-only importer)",
                             field="vision_config", reason="unsupported")
        cfg = dict(cfg["text_config"], model_type="gemma3")
    encoder = model_type in ENCODER_MODEL_TYPES
    whisper = model_type in WHISPER_MODEL_TYPES
    a = {k: v for k, v in cfg.items() if k not in _DROP or (encoder and k in _ENCODER_KEEP)
         or (whisper and k in _WHISPER_KEEP)}
    if model_type == "distilbert":
        for k, canon in _DISTILBERT_KEYS.items():
            if k in a:
                a.setdefault(canon, a[k])
        a.setdefault("layer_norm_eps", 1e-12)  # fixed in transformers' DistilBERT
        a.setdefault("type_vocab_size", 0)
    if "num_hidden_layers" in a:
        a["num_hidden_layers"] = check_layer_count(a["num_hidden_layers"], n_tensors, "num_hidden_layers", InvalidConfig)
    rp = a.pop("rope_parameters", None)
    if isinstance(rp, dict):
        if "full_attention" in rp or "sliding_attention" in rp:  # per layer type (Gemma 3)
            full = rp.get("full_attention", {})
            local = rp.get("sliding_attention", {})
            if "rope_theta" in full:
                a["rope_theta"] = full["rope_theta"]
            if "rope_theta" in local:
                a["rope_local_base_freq"] = local["rope_theta"]
            scaling = full
        else:
            scaling = rp
            if "rope_theta" in rp:
                a["rope_theta"] = rp["rope_theta"]
            if "partial_rotary_factor" in rp:
                a["partial_rotary_factor"] = rp["partial_rotary_factor"]
        rtype = scaling.get("rope_type", "default")
        if rtype != "default":
            a["rope_scaling"] = {k: v for k, v in scaling.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if isinstance(a.get("rope_scaling"), dict):
        rs = dict(a["rope_scaling"])
        if "rope_type" in rs and "type" not in rs:
            rs["type"] = rs["rope_type"]
        a["rope_scaling"] = rs
    heads = a.get("num_attention_heads")
    if heads and "hidden_size" in a and not a.get("head_dim"):
        a["head_dim"] = a["hidden_size"] // heads
    if heads and "num_key_value_heads" not in a and model_type in _CURATED:
        a["num_key_value_heads"] = heads
    if model_type in _CURATED:
        a.setdefault("rope_theta", 10000.0)
        a["rope_style"] = "neox"
        a.setdefault("tie_word_embeddings", model_type in ("gemma", "gemma2", "gemma3"))
    if model_type == "gemma3":
        a.setdefault("rope_local_base_freq", 10000.0)
        n = a.get("num_hidden_layers", 0)
        if "layer_types" not in a and n:
            pattern = a.get("sliding_window_pattern", a.get("_sliding_window_pattern", 6))
            if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
                raise make_error(InvalidConfig, f"sliding_window_pattern must be a positive integer, got {pattern!r}",
                                 field="sliding_window_pattern", reason=f"must be a positive integer, got {pattern!r}")
            a["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
        a.setdefault("query_pre_attn_scalar", a.get("head_dim"))
    if model_type == "modernbert":  # both spellings: transformers 5 (rope_parameters, layer_types) and 4 (global/local)
        if "rope_theta" in a:
            a.setdefault("global_rope_theta", a["rope_theta"])
        if "rope_local_base_freq" in a:
            a.setdefault("local_rope_theta", a["rope_local_base_freq"])
        a.setdefault("global_rope_theta", 160000.0)
        a.setdefault("local_rope_theta", 10000.0)
        a.setdefault("rope_theta", a["global_rope_theta"])
        a.setdefault("rope_local_base_freq", a["local_rope_theta"])
        n, every = a.get("num_hidden_layers", 0), a.get("global_attn_every_n_layers", 3)
        if "layer_types" not in a and isinstance(n, int) and isinstance(every, int) and every > 0:
            a["layer_types"] = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(n)]
    a = {k: v for k, v in a.items() if not k.startswith("_")}
    return {"model_type": model_type, "architecture": _toml_safe(a)}


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise make_error(InvalidConfig, f"{what} ({path}) is not valid JSON: {e}", field=os.path.basename(path), reason="unreadable")


class _SafetensorsFile:
    """The header of one safetensors file and a read-only map of its bytes."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    raise ValueError("shorter than 8 bytes")
                (n,) = struct.unpack("<Q", head)
                if n > 100 << 20:
                    raise ValueError(f"header length {n} is implausible")
                header = json.loads(f.read(n))
                size = os.fstat(f.fileno()).st_size
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except (OSError, ValueError) as e:
            raise make_error(FormatError, f"{path}: not a readable safetensors file: {e}", section="safetensors", key=os.path.basename(path))
        self.base = 8 + n
        if not isinstance(header, dict):
            raise make_error(FormatError, f"{path}: the safetensors header is a JSON {type(header).__name__}, "
                             "not an object", section="safetensors", key=os.path.basename(path))
        meta = header.pop("__metadata__", {}) or {}
        self.meta = meta if isinstance(meta, dict) else {}
        self.entries = header
        for name, e in header.items():
            offs = e.get("data_offsets") if isinstance(e, dict) else None
            if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)):
                raise make_error(FormatError, f"{path}: tensor {name!r} has no [begin, end] integer data_offsets",
                                 section="safetensors", key=name)
            begin, end = offs
            if not (0 <= begin <= end and self.base + end <= size):
                raise make_error(FormatError, f"{path}: tensor {name!r} lies outside the file", section="safetensors", key=name)

    def raw(self, name: str) -> np.ndarray:
        begin, end = self.entries[name]["data_offsets"]
        return np.frombuffer(self.map, dtype=np.uint8, count=end - begin, offset=self.base + begin)


class HFSource:
    def __init__(self, folder: str, quantize: str | None = None):
        self.folder = folder
        if quantize is not None and quantize.lower() not in QUANTIZE_TYPES:
            raise make_error(InvalidConfig, f"--quantize {quantize!r} is not available (choices: {', '.join(QUANTIZE_TYPES)})",
                             field="quantize", reason="unknown type")
        self.quantize = QUANTIZE_TYPES[quantize.lower()] if quantize else None
        raw_cfg = _read_json(os.path.join(folder, "config.json"), "config.json")
        files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
        self.files = [_SafetensorsFile(p) for p in files]
        self.entries: list[tuple[str, _SafetensorsFile]] = []
        seen: set[str] = set()
        for sf in self.files:
            for name in sf.entries:
                if name in seen:
                    raise make_error(FormatError, f"tensor {name!r} appears in two safetensors shards", section="safetensors", key=name)
                seen.add(name)
                dt = sf.entries[name]["dtype"]
                if dt not in SAFETENSORS_ENCODINGS:
                    raise make_error(FormatError, f"tensor {name!r} has dtype {dt}, which the .model format cannot hold",
                                     section="safetensors", key=name)
                self.entries.append((name, sf))
        self.config = normalize_config(raw_cfg, len(seen))
        self._prefix = ""  # tensor name prefix added on import (whisper: "model.")
        if self.config["model_type"] in WHISPER_MODEL_TYPES and "encoder.conv1.weight" in seen:
            # a WhisperModel checkpoint (no "model." prefix): the .model layout is the
            # WhisperForConditionalGeneration one
            self._prefix = "model."
        a = self.config["architecture"]
        if "lm_head.weight" not in seen and "tie_word_embeddings" in a and not a["tie_word_embeddings"] \
                and self.config["model_type"] in ("llama", "qwen2", "qwen3", "mistral", "phi3"):
            a["tie_word_embeddings"] = True  # no lm_head in the checkpoint: the embedding is reused
        self._tokenizer(raw_cfg)
        self.config["parameters"] = int(sum(int(np.prod(sf.entries[n]["shape"])) for n, sf in self.entries))
        self.total_bytes = sum(sf.entries[n]["data_offsets"][1] - sf.entries[n]["data_offsets"][0] for n, sf in self.entries)
        self._pooling(raw_cfg)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.folder))

    def _tokenizer(self, raw_cfg: dict) -> None:
        from tokenizers import Tokenizer

        path = os.path.join(self.folder, "tokenizer.json")
        encoder = self.config["model_type"] in ENCODER_MODEL_TYPES
        if not os.path.isfile(path) and encoder:  # ids-only encoder (Model.encode); text methods need a tokenizer
            self.tokenizer_json, self.vocab, self._chat = None, None, None
            return
        if not os.path.isfile(path):
            raise make_error(TokenizerError, f"{self.folder} has no tokenizer.json", reason="tokenizer.json missing")
        with open(path, encoding="utf-8") as f:
            self.tokenizer_json = f.read()
        try:
            tok = Tokenizer.from_str(self.tokenizer_json)
        except Exception as e:
            raise make_error(TokenizerError, f"tokenizer.json does not load: {e}", reason=str(e))
        tok.no_padding()
        tok.no_truncation()
        tcfg_path = os.path.join(self.folder, "tokenizer_config.json")
        tcfg = _read_json(tcfg_path, "tokenizer_config.json") if os.path.isfile(tcfg_path) else {}
        j = json.loads(self.tokenizer_json)
        model = j.get("model", {})
        mtype = model.get("type")
        if mtype == "WordPiece":
            ttype = "wordpiece"
        elif mtype == "Unigram":
            ttype = "unigram"
        elif mtype == "BPE":
            ttype = "spm" if model.get("byte_fallback") else "bpe"
        else:
            raise make_error(TokenizerError, f"tokenizer.json model type {mtype!r} is not supported", reason="model type")

        def token_id(v):
            if isinstance(v, dict):
                v = v.get("content")
            return tok.token_to_id(v) if isinstance(v, str) else None

        bos = token_id(tcfg.get("bos_token"))
        if bos is None and isinstance(raw_cfg.get("bos_token_id"), int):
            bos = raw_cfg["bos_token_id"]
        eos_ids: list[int] = []
        e = token_id(tcfg.get("eos_token"))
        if e is not None:
            eos_ids.append(e)
        cfg_eos = raw_cfg.get("eos_token_id")
        gen_path = os.path.join(self.folder, "generation_config.json")
        gen = _read_json(gen_path, "generation_config.json") if os.path.isfile(gen_path) else {}
        sampling = from_generation_config(gen)
        if sampling:
            self.config["sampling"] = sampling
        for src in (cfg_eos, gen.get("eos_token_id")):
            for x in (src if isinstance(src, list) else [src]):
                if isinstance(x, int) and x not in eos_ids:
                    eos_ids.append(x)
        pad = token_id(tcfg.get("pad_token"))
        if pad is None and isinstance(raw_cfg.get("pad_token_id"), int):
            pad = raw_cfg["pad_token_id"]
        probe = tok.encode("a", add_special_tokens=True).ids
        add_bos = bos is not None and len(probe) > 0 and probe[0] == bos
        tconf: dict[str, Any] = {"type": ttype, "add_bos": add_bos, "eos_token_ids": eos_ids}
        for k, v in (("bos_token_id", bos), ("pad_token_id", pad), ("unk_token_id", token_id(tcfg.get("unk_token")))):
            if v is not None:
                tconf[k] = int(v)
        mml = tcfg.get("model_max_length")
        if encoder and type(mml) is int and 0 < mml < 1 << 24:  # HF writes 1e30 for "no limit"
            tconf["model_max_length"] = mml
        self.config["tokenizer"] = tconf
        self.config["architecture"].setdefault("vocab_size", tok.get_vocab_size(True))

        # cyb vocab section
        size = tok.get_vocab_size(with_added_tokens=True)
        tokens = [tok.id_to_token(i) or "" for i in range(size)]
        merges = None
        if mtype == "BPE":
            merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model.get("merges", [])]
        specials = {k: v for k, v in (("bos", bos), ("eos", eos_ids[0] if eos_ids else None), ("pad", pad)) if v is not None}
        self.vocab = vocab_section(tokens, merges=merges, special=specials)

        template = tcfg.get("chat_template")
        jinja_path = os.path.join(self.folder, "chat_template.jinja")
        if template is None and os.path.isfile(jinja_path):
            with open(jinja_path, encoding="utf-8") as f:
                template = f.read()
        if isinstance(template, list):  # named templates: keep the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        self._chat = None
        if template and not encoder:
            def text(v):
                return v.get("content", "") if isinstance(v, dict) else (v or "")
            self._chat = {
                "template": template,
                "eos_sequences": [tokens[i] for i in eos_ids if 0 <= i < size],
                "bos_token": text(tcfg.get("bos_token")),
                "eos_token": text(tcfg.get("eos_token")),
            }

    def _pooling(self, raw: dict) -> None:
        """sentence-transformers folders: pooling mode, normalization and max_seq_length into [pooling];
        a cross-encoder's activation (config.json `sentence_transformers.activation_fn`) into [rerank]."""
        st = raw.get("sentence_transformers")
        act = st.get("activation_fn") if isinstance(st, dict) else raw.get("sbert_ce_default_activation_function")
        if isinstance(act, str):
            name = act.rsplit(".", 1)[-1].lower()
            if name not in ("sigmoid", "identity"):
                raise make_error(InvalidConfig, f"cross-encoder activation {act!r} is not supported (Sigmoid, Identity)",
                                 field="sentence_transformers.activation_fn", reason="unsupported")
            self.config["rerank"] = {"activation": name}
        modules_path = os.path.join(self.folder, "modules.json")
        if not os.path.isfile(modules_path):
            return
        modules = _read_json(modules_path, "modules.json")
        pooling: dict[str, Any] = {}
        for m in modules if isinstance(modules, list) else []:
            t = m.get("type", "") if isinstance(m, dict) else ""
            if t.endswith("Pooling"):
                pc = os.path.join(self.folder, m.get("path", ""), "config.json")
                if os.path.isfile(pc):
                    p = _read_json(pc, "pooling config")
                    on = [k for k, v in p.items() if k.startswith("pooling_mode_") and v is True]
                    modes = [_POOLING_MODES.get(k) for k in on]
                    if len(modes) != 1 or modes[0] is None:
                        raise make_error(InvalidConfig, f"{pc}: pooling {', '.join(on) or '(none)'} is not supported "
                                         "(exactly one of cls, mean, max)", field="pooling.mode", reason="unsupported")
                    pooling["mode"] = modes[0]
            elif t.endswith("Normalize"):
                pooling["normalize"] = True
            elif not t.endswith("Transformer"):
                raise make_error(InvalidConfig, f"modules.json: sentence-transformers module {t!r} is not supported "
                                 "(Transformer, Pooling, Normalize)", field="modules.json", reason="unsupported module")
        sb = os.path.join(self.folder, "sentence_bert_config.json")
        if os.path.isfile(sb):
            msl = _read_json(sb, "sentence_bert_config.json").get("max_seq_length")
            if type(msl) is int and msl > 0:
                pooling["max_seq_length"] = msl
        if pooling:
            pooling.setdefault("mode", "mean")  # sentence-transformers' default without a Pooling module
            pooling.setdefault("normalize", False)
            self.config["pooling"] = pooling

    def chat(self) -> dict | None:
        return self._chat

    def card(self) -> str:
        return f"# {self.name}\n\nImported from an HF folder (model_type `{self.config['model_type']}`).\n"

    def _should_quantize(self, name: str, shape: list[int]) -> bool:
        if self.config["model_type"] in WHISPER_MODEL_TYPES and "embed_positions" in name:
            return False  # whisper: position tables stay float (the encoder adds them as f32)
        if self.config["model_type"] in ENCODER_MODEL_TYPES and ("embeddings" in name or "norm" in name.lower()):
            return False  # encoders: only the linear layers (embedding tables and norms stay float)
        return (self.quantize is not None and len(shape) == 2 and name.endswith(".weight") and "norm" not in name
                and shape[-1] % 32 == 0)

    def tensor_records(self) -> Iterator[TensorRecord]:
        prefix = self._prefix
        for src, sf in self.entries:
            name = src if src.startswith("proj_out.") else prefix + src
            e = sf.entries[src]
            shape = [int(d) for d in e["shape"]]
            enc = SAFETENSORS_ENCODINGS[e["dtype"]]
            if self._should_quantize(name, shape) and enc in ("f32", "f16", "bf16"):
                gtype, qenc = self.quantize
                yield TensorRecord(name, qenc, shape, functools.partial(_quantize, sf, src, enc, shape, gtype))
            else:
                yield TensorRecord(name, enc, shape, functools.partial(sf.raw, src))


def _quantize(sf: _SafetensorsFile, name: str, enc: str, shape: list[int], gtype: str) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    raw = sf.raw(name)
    if enc == "f32":
        v = raw.view("<f4")
    elif enc == "f16":
        v = raw.view("<f2").astype(np.float32)
    else:  # bf16: the high half of an f32
        v = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    return quants.quantize(v.reshape(shape).astype(np.float32), GGMLQuantizationType[gtype]).reshape(-1).view(np.uint8)
