"""The tokenizer of a `.model` file: an HF `tokenizers.Tokenizer` built from the file.

The `~~~tokenizer` section (a complete tokenizer.json) is authoritative when present; otherwise the
tokenizer is rebuilt from the `~~~vocab` section (tokens, merges, scores) and the `[tokenizer]`
table of the config. See docs/tokenizers.md.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers.decoders import DecodeStream

from .convert.gguf_tokenizer import build_from_gguf
from .errors import FormatError, InvalidConfig, TokenizerError
from .ids import token_bytes, token_id_array


class Tokenizer:
    """Encode text to token ids and back, with the file's special-token and BOS/EOS rules."""

    def __init__(self, raw: _HFTokenizer, config: dict[str, Any] | None = None):
        # Padding and truncation are the caller's business (as with transformers' tokenizers).
        raw.no_padding()
        raw.no_truncation()
        self.raw = raw
        self.config = dict(config or {})
        self.bos_token_id: int | None = self.config.get("bos_token_id")
        eos = self.config.get("eos_token_ids", self.config.get("eos_token_id", []))
        self.eos_token_ids: list[int] = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
        self.pad_token_id: int | None = self.config.get("pad_token_id")
        self.add_bos: bool = bool(self.config.get("add_bos", False))

    @classmethod
    def from_json(cls, tokenizer_json: str, config: dict[str, Any] | None = None) -> "Tokenizer":
        try:
            raw = _HFTokenizer.from_str(tokenizer_json)
        except Exception as e:
            raise TokenizerError(f"tokenizer section does not load: {e}") from e
        return cls(raw, config)

    @property
    def vocab_size(self) -> int:
        return self.raw.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects a str, got {type(text).__name__}")
        try:
            return list(self.raw.encode(text, add_special_tokens=add_special_tokens).ids)
        except TypeError:
            _check_text(text)
            raise

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        texts = list(texts)
        try:
            return [list(e.ids) for e in self.raw.encode_batch(texts, add_special_tokens=add_special_tokens)]
        except TypeError:
            for t in texts:
                if not isinstance(t, str):
                    raise TokenizerError(f"encode_batch expects str items, got {type(t).__name__}") from None
                _check_text(t)
            raise

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        try:  # the checks of Conversation.forward: no float/bool coercion, ids within the vocab
            ids = token_id_array(ids if isinstance(ids, (Sequence, np.ndarray)) else list(ids), self.vocab_size)
        except InvalidConfig as e:
            raise TokenizerError(e.fields["reason"]) from e
        return self.raw.decode(ids.tolist(), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.raw.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The token's string, or None for an id the vocabulary does not have (negative or too large)."""
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise TypeError(f"id_to_token: token id must be an int, not {type(token_id).__name__}")
        if not 0 <= int(token_id) < 2 ** 32:
            return None
        return self.raw.id_to_token(int(token_id))

    def is_eos(self, token_id: int) -> bool:
        return int(token_id) in self.eos_token_ids

    def stream_decoder(self, skip_special_tokens: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"Tokenizer(type={self.config.get('type')!r}, vocab_size={self.vocab_size})"


def _check_text(text: str) -> None:
    """TokenizerError when `text` is not valid Unicode (a lone surrogate, which UTF-8 cannot hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TokenizerError(f"the text holds a lone surrogate {text[e.start]!r} at index {e.start}: "
                             "not valid Unicode") from None


class StreamDecoder:
    """Incremental detokenizer for streaming generation, on HF `tokenizers.decoders.DecodeStream`.

    `push(id)` returns the text that the new token completes, and never a partial UTF-8 sequence
    (a byte-level or byte-fallback piece that ends inside a multi-byte character is held back until
    the character is complete). Concatenating all outputs plus `flush()` equals `decode(all ids)`,
    less the U+FFFD that stands for an incomplete character at the very end (a generation cut by
    max_tokens in the middle of an emoji): `flush()` drops it, so a cut never ends in a broken
    character.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._ids: list[int] = []
        self._emitted = 0  # characters returned so far
        self._settled = 0  # ids whose text was returned (the ones after it are held back)
        self._vocab = tokenizer.vocab_size

    def push(self, token_id: int) -> str:
        token_id = int(token_id)
        if not 0 <= token_id < self._vocab:
            raise TokenizerError(f"token id {token_id} out of range (vocabulary size {self._vocab})")
        self._ids.append(token_id)
        out = self._stream.step(self._tok.raw, token_id)
        if out is None:
            return ""
        self._emitted += len(out)
        self._settled = len(self._ids)
        return out

    def flush(self) -> str:
        """Whatever is still held back, less an incomplete character at the very end (its bytes
        came from the last tokens and the rest of it never did: dropped, not shown as U+FFFD)."""
        rest = self._tok.decode(self._ids, self._skip)[self._emitted:]
        if rest.endswith("\ufffd") and _ends_inside_a_character(self._held_bytes()):
            rest = rest[:-1]
        self._emitted += len(rest)
        self._settled = len(self._ids)
        return rest

    def _held_bytes(self) -> bytes:
        """The bytes of the tokens held back (those after the last text returned)."""
        held = [t for t in self._ids[self._settled:] if self._tok.decode([t], self._skip)]
        return b"".join(token_bytes(self._tok, t) for t in held)


def _ends_inside_a_character(data: bytes) -> bool:
    """Whether `data` ends with the start of a UTF-8 character whose other bytes are missing (a
    lead byte and fewer continuation bytes than it announces)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")("replace")
    dec.decode(data, final=False)
    return bool(dec.getstate()[0])  # the bytes it keeps for the next call


def tokenizer_from_modelfile(mf) -> Tokenizer:
    """The tokenizer of an open `.model` file (cyb_llm.format.ModelFile)."""
    config = mf.config.get("tokenizer", {}) if isinstance(mf.config, dict) else {}
    sections = mf.sections
    if "tokenizer" in sections:
        return Tokenizer.from_json(sections["tokenizer"], config)
    if "vocab" in sections:
        return Tokenizer.from_json(tokenizer_json_from_vocab(sections["vocab"], config), config)
    raise TokenizerError("the file has neither a tokenizer nor a vocab section")


def _ordered(table: Any, name: str) -> list:
    """A `[tokens]`/`[merges]`/`[scores]` table keyed by id (TOML keys are strings) as a list; a key
    that is not a token id raises FormatError(section="vocab", key="<name>.<key>")."""
    if isinstance(table, list):
        return table
    if isinstance(table, dict):
        items = []
        for k, v in table.items():
            try:
                items.append((int(k), v))
            except ValueError:
                raise FormatError("vocab", f"{name}.{k}",
                                  f"the keys of [{name}] are token ids (integers), got {k!r}") from None
        return [v for _, v in sorted(items, key=lambda kv: kv[0])]
    raise FormatError("vocab", name, f"[{name}] must be a table keyed by token id, got {type(table).__name__}")


def _merge(pair: Any) -> str:
    """A `[merges]` entry (two pieces) as the "a b" line of tokenizer.json."""
    if isinstance(pair, str):
        raise ValueError(pair)
    a, b = pair
    return f"{a} {b}"


def _converted(values: list, name: str, convert: Any) -> list:
    """`convert` applied to each value of a vocab table; a value it refuses raises FormatError naming
    the entry."""
    out = []
    for i, v in enumerate(values):
        try:
            out.append(convert(v))
        except (TypeError, ValueError):
            raise FormatError("vocab", f"{name}.{i}", f"unexpected value {v!r}") from None
    return out


def tokenizer_json_from_vocab(vocab: dict, config: dict) -> str:
    """Rebuild a tokenizer.json from a cyb `vocab` section (files written without a tokenizer
    section). BPE vocabularies are byte-level with the GPT-2 pre-tokenizer unless `ggml_pre` in the
    config names another; `spm` vocabularies are SentencePiece BPE with byte fallback."""
    tokens = [str(t) for t in _ordered(vocab.get("tokens", {}), "tokens")]
    if not tokens:
        raise TokenizerError("vocab section has no tokens")
    ttype = config.get("type", "bpe")
    meta: dict[str, Any] = {"tokenizer.ggml.tokens": tokens}
    if "types" in vocab:
        meta["tokenizer.ggml.token_type"] = _converted(_ordered(vocab["types"], "types"), "types", int)
    if "scores" in vocab:
        meta["tokenizer.ggml.scores"] = _converted(_ordered(vocab["scores"], "scores"), "scores", float)
    if "merges" in vocab:
        meta["tokenizer.ggml.merges"] = _converted(_ordered(vocab["merges"], "merges"), "merges", _merge)
    special = vocab.get("special", {})
    for key, gg in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"), ("pad", "padding_token_id")):
        if key in special:
            try:
                meta[f"tokenizer.ggml.{gg}"] = int(special[key])
            except (TypeError, ValueError):
                raise FormatError("vocab", f"special.{key}", f"a token id, got {special[key]!r}") from None
    meta["tokenizer.ggml.add_bos_token"] = bool(config.get("add_bos", False))
    meta["tokenizer.ggml.add_eos_token"] = bool(config.get("add_eos", False))
    if ttype == "bpe":
        meta["tokenizer.ggml.model"] = "gpt2"
        meta["tokenizer.ggml.pre"] = config.get("ggml_pre", "gpt2")
    elif ttype == "spm":
        meta["tokenizer.ggml.model"] = "llama"
        meta["tokenizer.ggml.add_space_prefix"] = bool(config.get("add_space_prefix", True))
    else:
        raise TokenizerError(f"cannot rebuild a {ttype!r} tokenizer from the vocab section alone")
    arch = "gemma" if config.get("spm_merge_order") == "file" else ""
    return build_from_gguf(meta, arch).tokenizer_json
