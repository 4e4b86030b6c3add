"""The `.model` container from Python: read (`ModelFile`), summarize
(`describe`), write (`write_model`) and re-write (`rewrite`).

Reading is native (csrc/format/): the file is mapped read-only and validated
at open; tensors come back as numpy arrays: zero-copy views of a file read at open, private
copies read from the descriptor for a mapped (large) file (docs/errors.md).
Writing is Python (writer.py, re-exported here): a deterministic TOML emitter (toml_writer.py),
64-byte alignment of the weights and of every tensor, streamed tensor data, and an
atomic rename at the end. The normative layout is docs/format.md.
"""
from __future__ import annotations

import collections.abc
import gc
import os
import re
import threading
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np

from . import _core, hub
from .errors import FormatError, InvalidConfig, MissingTensor
from .tokenizer import tokenizer_from_modelfile
from .writer import (ALIGN, ENCODING_ALIASES, ENCODINGS, MARKER, SECTION_FORMATS, TOML_SECTIONS,  # noqa: F401
                     canonical_encoding, tensor_nbytes, write_model)


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
        lines.append("sampling:    (none recorded: cyb_llm.text.sampling.DEFAULTS apply)")
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
