"""The `.model` container from Python: read (`ModelFile`), summarize
(`describe`), write (`write_model`) and re-write (`rewrite`).

Reading is native (csrc/format/): the file is mapped read-only and validated
at open; tensors come back as numpy arrays: zero-copy views of a file read at open, private
copies read from the descriptor for a mapped (large) file (docs/errors.md).
Writing is Python: a deterministic TOML emitter (toml_writer.py), 64-byte
alignment of the weights and of every tensor, streamed tensor data, and an
atomic rename at the end. The normative layout is docs/format.md.
"""
from __future__ import annotations

import collections.abc
import gc
import os
import re
import shutil
import tempfile
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from . import _core
from .errors import FormatError, InvalidConfig, MissingTensor, WeightFormatMismatch
from .toml_writer import dumps as toml_dumps

ALIGN = 64
MARKER = b"~~~weights\n"

#: encoding -> (elements per block, bytes per block), canonical names in the
#: native table's order (csrc/core/dtype.cc, read through _core).
ENCODINGS: dict[str, tuple[int, int]] = {
    enc: (int(block), int(block_bytes)) for enc, _name, block, block_bytes, _quantized in _core.encodings()}
#: alias spellings accepted everywhere an encoding is read -> canonical name (native table too).
ENCODING_ALIASES: dict[str, str] = dict(_core.encoding_aliases())
#: numpy dtype of the typed view of each plain encoding.
_NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}

#: sections that hold TOML; the others are kept as text.
TOML_SECTIONS = ("frontmatter", "config", "tensors", "vocab", "chat", "graph", "eval")
#: [[files]] format of each known section.
SECTION_FORMATS = {"card": "md", "config": "toml", "program": "rs", "tensors": "toml", "vocab": "toml",
                   "tokenizer": "json", "chat": "toml", "graph": "toml", "eval": "toml"}
#: the order in which write_model places sections; unknown extras go before
#: `tensors`, which is always last (it takes the alignment padding).
_ORDER = ("card", "config", "program", "vocab", "tokenizer", "chat", "graph", "eval")
_SECTION_NAME = re.compile(r"[a-z0-9_]+\Z")
_FENCE = re.compile(r"^(\\*~~~)", re.M)


def canonical_encoding(enc: str) -> str:
    """The canonical name of an encoding (aliases resolved); FormatError if unknown."""
    enc = ENCODING_ALIASES.get(enc, enc)
    if enc not in ENCODINGS:
        raise FormatError("tensors", "encoding", f"unknown encoding '{enc}'")
    return enc


def tensor_nbytes(encoding: str, shape: Iterable[int], name: str = "") -> int:
    """Bytes that `shape` takes in `encoding` (the rule the reader checks)."""
    enc = canonical_encoding(encoding)
    block, block_bytes = ENCODINGS[enc]
    shape = [int(d) for d in shape]
    declared = f"{enc} {list(shape)}"
    if any(d < 0 for d in shape):
        raise FormatError("tensors", name, f"negative dimension in shape {shape}")
    if block > 1:
        if not shape:
            raise WeightFormatMismatch(name, declared, 0,
                                       message=f"tensor '{name}': a quantized tensor needs a dimension")
        if shape[-1] % block:
            raise WeightFormatMismatch(
                name, declared, 0,
                message=f"tensor '{name}' ({declared}): innermost dimension {shape[-1]} "
                        f"is not a multiple of the block size {block}")
    count = 1
    for d in shape:
        count *= d
    if count >= 1 << 63:
        raise FormatError("tensors", name, f"element count of shape {shape} overflows")
    return count // block * block_bytes


class TensorInfo(NamedTuple):
    name: str
    shape: tuple[int, ...]
    encoding: str  # canonical name ("q4_k", "f32", ...)
    offset: int    # bytes from the first weights byte
    size: int      # bytes


# ---------------------------------------------------------------------------
# Reading


class _Sections(collections.abc.Mapping):
    """name -> parsed dict (TOML sections) or str (text sections), parsed on first access."""

    def __init__(self, native: Any, toml_names: set[str]) -> None:
        self._native = native
        self._names = ["frontmatter"] + list(native.section_names)
        self._toml = toml_names
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            if name not in self._names:
                raise KeyError(name)
            if name in self._toml:
                # A vocabulary is a million small objects: no cyclic GC passes while they are built.
                was_enabled = gc.isenabled()
                gc.disable()
                try:
                    self._cache[name] = self._native.section_toml(name)
                finally:
                    if was_enabled:
                        gc.enable()
            else:
                self._cache[name] = self._native.section_text(name)
        return self._cache[name]

    def __contains__(self, name: object) -> bool:  # without parsing
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<sections {self._names}>"


def _check_config_types(config: dict) -> None:
    """InvalidConfig for a config key the Python side reads whose value has the wrong type
    (the native side checks [architecture] itself)."""
    for table in ("tokenizer", "sampling"):
        if table in config and not isinstance(config[table], dict):
            raise InvalidConfig(field=table, reason=f"must be a table, got {config[table]!r}")
    tok = config.get("tokenizer", {})
    eos = tok.get("eos_token_ids")
    if eos is not None and (not isinstance(eos, list) or
                            not all(type(i) is int and 0 <= i < 2**31 for i in eos)):
        raise InvalidConfig(field="tokenizer.eos_token_ids", reason=f"must be a list of token ids, got {eos!r}")
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = tok.get(key)
        if v is not None and not (type(v) is int and 0 <= v < 2**31) and not (key == "eos_token_id" and isinstance(v, list)):
            raise InvalidConfig(field=f"tokenizer.{key}", reason=f"must be a token id, got {v!r}")
    for key in ("add_bos", "add_eos"):
        if key in tok and type(tok[key]) is not bool:
            raise InvalidConfig(field=f"tokenizer.{key}", reason=f"must be a boolean, got {tok[key]!r}")
    if "type" in tok and not isinstance(tok["type"], str):
        raise InvalidConfig(field="tokenizer.type", reason=f"must be a string, got {tok['type']!r}")
    vocab = config.get("architecture", {}).get("vocab_size") if isinstance(config.get("architecture"), dict) else None
    bos = tok.get("bos_token_id")
    # The BOS id is fed to the model, so it must name a row of the embedding. End ids outside the
    # vocabulary are harmless (never sampled; small test configs carry the full model's ids).
    if type(vocab) is int and vocab > 0 and type(bos) is int and bos >= vocab:
        raise InvalidConfig(field="tokenizer.bos_token_id",
                            reason=f"token id {bos} is outside the vocabulary (vocab_size {vocab})")


class ModelFile:
    """A `.model` file, mapped read-only and validated at open.

    ``sections`` (name -> dict or str, lazily parsed), ``config`` (dict),
    ``tensors`` (name -> TensorInfo), ``tensor(name)`` (read-only numpy array),
    ``tokenizer`` (an HF tokenizers-based tokenizer, built on first use).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        """`path`: any model reference (cyb_llm.hub.resolve: a .model path, a known name, a .gguf
        file or HF folder imported once, hf://...); a missing file raises FormatError naming it."""
        from . import hub

        self.path = hub.resolve(path, unknown_ok=True)
        self._native = _core.ModelFile.open(self.path)
        self._init()

    @classmethod
    def from_bytes(cls, data: bytes) -> "ModelFile":
        """Validates a whole file image held in memory (copied); for tests and tools."""
        self = cls.__new__(cls)
        self.path = "<bytes>"
        self._native = _core.ModelFile.from_bytes(bytes(data))
        self._init()
        return self

    def _init(self) -> None:
        n = self._native
        front = n.frontmatter()
        toml_names = set(TOML_SECTIONS)
        for f in front.get("files", []):
            if isinstance(f, dict) and f.get("format") == "toml" and isinstance(f.get("name"), str):
                toml_names.add(f["name"])
        self.sections: Mapping[str, Any] = _Sections(n, toml_names)
        self.sections._cache["frontmatter"] = front  # type: ignore[attr-defined]
        self._config: dict | None = None
        self._tensors: dict[str, TensorInfo] | None = None
        self._tokenizer = None
        self._tokenizer_lock = threading.Lock()

    @property
    def tensors(self) -> dict[str, TensorInfo]:
        """name -> TensorInfo. The native side parsed and validated the index once at open; this
        Python copy is built on first use (loading a model for inference never needs it)."""
        if self._tensors is None:
            self._tensors = {name: TensorInfo(name, tuple(shape), enc, off, size)
                             for name, shape, enc, off, size in self._native.tensors()}
        return self._tensors

    @property
    def name(self) -> str:
        cyb = self.sections["frontmatter"].get("cyb", {})
        return cyb.get("name", "") if isinstance(cyb, dict) else ""

    @property
    def config(self) -> dict:
        if self._config is None:
            config = self._native.config()
            _check_config_types(config)
            self._config = config
        return self._config

    @property
    def weights_offset(self) -> int:
        """File offset of the first weights byte."""
        return self._native.weights_offset

    @property
    def weights_size(self) -> int:
        return self._native.weights_size

    @property
    def file_size(self) -> int:
        return self._native.file_size

    def section_text(self, name: str) -> str:
        """The raw text of any section (escapes undone)."""
        return self._native.section_text(name)

    def _info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise MissingTensor(name, "ModelFile.tensor")
        return self.tensors[name]

    def tensor(self, name: str) -> np.ndarray:
        """Read-only array: float32/float16/int32/int64/uint8 with the tensor's shape for plain
        encodings; bf16 and block-quantized tensors as uint8 [rows, row_bytes]. A zero-copy view
        when the bytes are the process's own (a file read at open, weights in huge pages); a
        private copy read from the descriptor for a mapped file, so that truncating the file
        cannot fault a live array (FormatError when the file changed since open)."""
        self._info(name)
        return self._native.tensor_array(name)

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Read-only 1-D uint8 array of the tensor's bytes (a view or a private copy, as tensor())."""
        self._info(name)
        return self._native.tensor_bytes(name)

    @property
    def tokenizer(self):
        """Built on first use, once: concurrent first uses (a cold server's first requests)
        wait for the one build instead of each building its own."""
        if self._tokenizer is None:
            with self._tokenizer_lock:
                if self._tokenizer is None:
                    from .tokenizer import tokenizer_from_modelfile
                    self._tokenizer = tokenizer_from_modelfile(self)
        return self._tokenizer

    def __repr__(self) -> str:
        return f"ModelFile({self.path!r}, {len(self.tensors)} tensors)"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def describe(path: str | os.PathLike | ModelFile) -> str:
    """A human summary of a `.model` file, or of any model reference (used by `cyb-llm inspect`)."""
    mf = path if isinstance(path, ModelFile) else ModelFile(path)
    cfg = mf.config
    lines = [f"name:        {mf.name or '(none)'}",
             f"file:        {mf.path} ({_human(mf.file_size)})",
             f"model_type:  {cfg.get('model_type', '(none)')}"]
    arch = cfg.get("architecture")
    if isinstance(arch, dict):
        keys = ", ".join(f"{k}={v}" for k, v in arch.items() if not isinstance(v, (dict, list)))
        lines.append(f"architecture: {keys}")
        towers = [k for k, v in arch.items() if isinstance(v, dict)]
        if towers:
            lines.append(f"towers:      {', '.join(towers)}")
    sampling = cfg.get("sampling")
    if isinstance(sampling, dict) and sampling:
        keys = ", ".join(f"{k}={v}" for k, v in sampling.items() if k != "source")
        src = f" ({sampling['source']})" if "source" in sampling else ""
        lines.append(f"sampling:    {keys}{src}")
    else:
        lines.append("sampling:    (none recorded: cyb_llm.sampling.DEFAULTS apply)")
    sizes = []
    for name in mf.sections:
        n = len(mf.section_text(name).encode("utf-8"))
        sizes.append(f"{name} ({_human(n)})")
    lines.append(f"sections:    {', '.join(sizes)}, weights ({_human(mf.weights_size)})")
    by_enc: dict[str, list[int]] = {}
    params = 0
    for t in mf.tensors.values():
        count = 1
        for d in t.shape:
            count *= d
        params += count
        e = by_enc.setdefault(t.encoding, [0, 0])
        e[0] += 1
        e[1] += t.size
    lines.append(f"tensors:     {len(mf.tensors)} ({params:,} elements)")
    for enc, (count, size) in sorted(by_enc.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {enc:8s} {count:5d} tensors  {_human(size)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Writing


def _escape_text(text: str) -> str:
    """Section content: lines that start with (backslashes and) `~~~` get one more backslash."""
    if text and not text.endswith("\n"):
        text += "\n"
    return _FENCE.sub(r"\\\1", text)


def _as_bytes(data: Any, name: str, enc: str, shape: list[int], expected: int) -> memoryview:
    if callable(data):
        data = data()
    declared = f"{enc} {shape}"
    if isinstance(data, np.ndarray):
        if data.dtype.kind == "f" and not ((enc == "f32" and data.dtype.itemsize == 4) or
                                           (enc == "f16" and data.dtype.itemsize == 2)):
            raise WeightFormatMismatch(
                name, declared, data.nbytes,
                message=f"tensor '{name}' is declared {enc} but the data is a {data.dtype} array")
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        mv = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    else:
        try:
            mv = memoryview(np.frombuffer(data, np.uint8))
        except (ValueError, BufferError):  # a non-contiguous buffer
            mv = memoryview(np.frombuffer(memoryview(data).tobytes(), np.uint8))
        except TypeError:
            raise FormatError("tensors", name,
                              f"tensor data must be a buffer, not {type(data).__name__}") from None
    if mv.nbytes != expected:
        raise WeightFormatMismatch(
            name, declared, mv.nbytes,
            message=f"tensor '{name}' declared as {declared} needs {expected} bytes, got {mv.nbytes}")
    return mv


class _Tensor(NamedTuple):
    name: str
    encoding: str
    shape: list[int]
    size: int
    data: Any


def _check_tensor(item: Any, seen: set[str]) -> _Tensor:
    try:
        name, enc, shape, data = item
    except (TypeError, ValueError):
        raise FormatError("tensors", "", "each tensor must be (name, encoding, shape, data)") from None
    if not isinstance(name, str) or not name:
        raise FormatError("tensors", str(name), "tensor names must be non-empty strings")
    if name in seen:
        raise FormatError("tensors", name, "duplicate tensor")
    seen.add(name)
    try:
        enc = canonical_encoding(str(enc))
    except FormatError:
        raise FormatError("tensors", name, f"unknown encoding '{enc}'") from None
    shape = [int(d) for d in shape]
    return _Tensor(name, enc, shape, tensor_nbytes(enc, shape, name), data)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _write_data(out, mv: memoryview, chunk: int = 64 << 20) -> None:
    for start in range(0, mv.nbytes, chunk):
        out.write(mv[start:start + chunk])


def write_model(path: str | os.PathLike, *, name: str, config: dict,
                tensors: Iterable[tuple[str, str, Iterable[int], Any]],
                vocab: dict | None = None, tokenizer_json: str | None = None, chat: dict | None = None,
                card: str | None = None, graph: dict | str | None = None,
                extra_sections: dict[str, str] | None = None,
                progress: Callable[[str, int], None] | None = None) -> None:
    """Writes a `.model` file atomically (temp file in the same folder, renamed at the end).

    ``tensors`` yields ``(name, encoding, shape, data)``; ``data`` is any buffer (bytes,
    memoryview, numpy array of raw bytes or of values; or a callable returning one) whose
    byte count must equal what shape x encoding implies. A list/tuple is written in one pass
    over the data; any other iterable is streamed through a spool file, so weights are never
    all held in memory. ``progress(name, nbytes)`` is called after each tensor is written.
    On any failure nothing is left behind.
    """
    path = os.fspath(path)
    if not isinstance(config, dict):
        raise FormatError("config", "", "config must be a dict")
    texts: dict[str, str] = {}
    if card is not None:
        texts["card"] = card
    texts["config"] = toml_dumps(config, "config")
    if vocab is not None:
        texts["vocab"] = toml_dumps(vocab, "vocab")
    if tokenizer_json is not None:
        texts["tokenizer"] = tokenizer_json
    if chat is not None:
        texts["chat"] = toml_dumps(chat, "chat")
    if graph is not None:
        texts["graph"] = graph if isinstance(graph, str) else toml_dumps(graph, "graph")
    for sec, text in (extra_sections or {}).items():
        if not isinstance(sec, str) or not _SECTION_NAME.match(sec):
            raise FormatError(str(sec), "", "section names are lowercase letters, digits and '_'")
        if sec in texts or sec in ("frontmatter", "tensors", "weights"):
            raise FormatError(sec, "", "section given twice (or reserved)")
        if not isinstance(text, str):
            raise FormatError(sec, "", "extra sections are text")
        texts[sec] = text
    order = [s for s in _ORDER if s in texts] + [s for s in texts if s not in _ORDER]

    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=".tmp")
    spool_path = None
    try:
        with os.fdopen(fd, "wb") as out:
            seen: set[str] = set()
            if isinstance(tensors, (list, tuple)):
                items = [_check_tensor(t, seen) for t in tensors]
                index, weights_size = _layout(items)
                _write_head(out, name, texts, order, index, weights_size)
                _write_weights(out, items, index, progress)
            else:
                spool_fd, spool_path = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=".weights.tmp")
                with os.fdopen(spool_fd, "w+b") as spool:
                    index = []
                    pos = 0
                    for item in tensors:
                        t = _check_tensor(item, seen)
                        off = _align(pos)
                        spool.write(b"\0" * (off - pos))
                        _write_data(spool, _as_bytes(t.data, t.name, t.encoding, t.shape, t.size))
                        index.append((t, off))
                        pos = off + t.size
                        if progress:
                            progress(t.name, t.size)
                    _write_head(out, name, texts, order, index, pos)
                    spool.seek(0)
                    shutil.copyfileobj(spool, out, 16 << 20)
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        if spool_path and os.path.exists(spool_path):
            os.unlink(spool_path)


def _layout(items: list[_Tensor]) -> tuple[list[tuple[_Tensor, int]], int]:
    index = []
    pos = 0
    for t in items:
        off = _align(pos)
        index.append((t, off))
        pos = off + t.size
    return index, pos


def _write_weights(out, items, index, progress) -> None:
    pos = 0
    for t, off in index:
        mv = _as_bytes(t.data, t.name, t.encoding, t.shape, t.size)
        out.write(b"\0" * (off - pos))
        _write_data(out, mv)
        pos = off + t.size
        if progress:
            progress(t.name, t.size)


def _write_head(out, name: str, texts: dict[str, str], order: list[str],
                index: list[tuple[_Tensor, int]], weights_size: int) -> None:
    tensors_doc = {t.name: {"shape": t.shape, "encoding": t.encoding, "offset": off, "size": t.size}
                   for t, off in index}
    tensors_text = toml_dumps(tensors_doc, "tensors")
    files = [{"name": s, "format": SECTION_FORMATS.get(s, "md")} for s in order + ["tensors"]]
    files.append({"name": "weights", "format": "tensors", "size": weights_size})
    front = toml_dumps({"cyb": {"types": ["model"], "name": str(name)}, "files": files}, "frontmatter")
    parts = [_escape_text(front)]
    for s in order:
        parts.append(f"~~~{s}\n")
        parts.append(_escape_text(texts[s]))
    parts.append("~~~tensors\n")
    head = "".join(parts).encode("utf-8")
    last = _escape_text(tensors_text).encode("utf-8")
    # Pad with spaces before the newline that ends the last section, so that the
    # first weights byte sits at a multiple of 64.
    if last:
        pad = -(len(head) + len(last) + len(MARKER)) % ALIGN
        last = last[:-1] + b" " * pad + b"\n"
    else:
        pad = -(len(head) + 1 + len(MARKER)) % ALIGN
        last = b" " * pad + b"\n" if pad else b""
    out.write(head + last + MARKER)


def _source_tensors(mf: ModelFile) -> list[tuple[str, str, tuple[int, ...], Callable[[], np.ndarray]]]:
    return [(t.name, t.encoding, t.shape, (lambda n=t.name: mf.tensor_bytes(n))) for t in mf.tensors.values()]


def rewrite(src: str | os.PathLike, dst: str | os.PathLike, progress=None) -> None:
    """Reads `src` and writes it again with write_model. For a file that write_model wrote,
    the result is byte-identical; other files come out in write_model's canonical layout."""
    mf = ModelFile(src)
    sections = mf.sections
    handled = {"frontmatter", "config", "tensors", "vocab", "tokenizer", "chat", "card", "graph"}
    extra = {s: mf.section_text(s) for s in sections if s not in handled}
    write_model(
        dst, name=mf.name, config=mf.config, tensors=_source_tensors(mf),
        vocab=sections["vocab"] if "vocab" in sections else None,
        tokenizer_json=mf.section_text("tokenizer") if "tokenizer" in sections else None,
        chat=sections["chat"] if "chat" in sections else None,
        card=mf.section_text("card") if "card" in sections else None,
        graph=mf.section_text("graph") if "graph" in sections else None,
        extra_sections=extra or None, progress=progress)


__all__ = ["ModelFile", "TensorInfo", "describe", "write_model", "rewrite", "tensor_nbytes",
           "canonical_encoding", "ENCODINGS", "ENCODING_ALIASES"]
