"""Writing `.model` files: `write_model` (deterministic TOML sections through toml_writer.py, the
weights and every tensor aligned to 64 bytes, tensor data streamed, an atomic rename at the end)
and the encoding table both sides share (`ENCODINGS`, `canonical_encoding`, `tensor_nbytes`).
The normative layout is docs/format.md; cyb_llm.format reads the files (and re-exports these).

A leaf below cyb_llm.format and cyb_llm.convert: it imports the native core, errors and
toml_writer only (tools/check_py_imports.py).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from . import _core
from .errors import FormatError, WeightFormatMismatch
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
def section_format(name: str) -> str:
    """The [[files]] format of a section: SECTION_FORMATS's, TOML for a stage's graph (`graph_<stage>`),
    else markdown (text kept as is)."""
    return SECTION_FORMATS.get(name, "toml" if name.startswith("graph_") else "md")


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
                stages: dict[str, dict | str] | None = None,
                extra_sections: dict[str, str] | None = None,
                progress: Callable[[str, int], None] | None = None) -> None:
    """Writes a `.model` file atomically (temp file in the same folder, renamed at the end).

    ``tensors`` yields ``(name, encoding, shape, data)``; ``data`` is any buffer (bytes,
    memoryview, numpy array of raw bytes or of values; or a callable returning one) whose
    byte count must equal what shape x encoding implies. A list/tuple is written in one pass
    over the data; any other iterable is streamed through a spool file, so weights are never
    all held in memory. ``progress(name, nbytes)`` is called after each tensor is written.
    ``stages`` ({stage: graph}): the graphs of a model_type "graph-stages" file, each written to
    its section `graph_<stage>` (docs/graph.md "Stages"). On any failure nothing is left behind.
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
    for stage, g in (stages or {}).items():  # model_type "graph-stages": one graph section per stage
        if not isinstance(stage, str) or not _SECTION_NAME.match(stage):
            raise FormatError(f"graph_{stage}", "", "stage names are lowercase letters, digits and '_'")
        texts[f"graph_{stage}"] = g if isinstance(g, str) else toml_dumps(g, f"graph_{stage}")
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
    files = [{"name": s, "format": section_format(s)} for s in order + ["tensors"]]
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


__all__ = ["write_model", "tensor_nbytes", "canonical_encoding", "ENCODINGS", "ENCODING_ALIASES", "ALIGN",
           "MARKER", "TOML_SECTIONS", "SECTION_FORMATS"]
