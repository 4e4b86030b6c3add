"""A small, deterministic TOML emitter for `.model` sections.

The output is TOML 1.0 that both Python's ``tomllib`` and the native parser
(docs/toml-subset.md) read back to the same data, and emitting what was read
gives the same text again (the writer relies on that for byte-identical
rewrites). Layout rules:

- keys that are not tables come first, as ``key = value`` lines, in dict order;
- then each sub-dict as a ``[dotted.header]`` and each non-empty list of dicts
  as ``[[dotted.header]]`` blocks, recursively, separated by a blank line;
- dicts nested inside arrays are inline tables ``{ k = v }``;
- strings with a newline use multi-line basic strings, others basic strings;
- floats use Python's shortest round-trip ``repr`` (``inf``, ``nan`` included).
"""
from __future__ import annotations

import math
import re
from typing import Any

from .errors import FormatError

_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")
_ESCAPE = re.compile(r'[\x00-\x1f"\\\x7f]')
_ESCAPE_ML = re.compile(r"[\x00-\x08\x0b-\x1f\\\x7f]")  # \n and \t stay raw
_QUOTE_RUN = re.compile(r'"(?="|\Z)')  # a quote that another quote or the end follows
_NAMED = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _esc(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or "\\u%04X" % ord(c)


class Emitter:
    """Emits one document; `section` names the section in error messages."""

    def __init__(self, section: str) -> None:
        self.section = section

    def fail(self, path: list[str], reason: str) -> FormatError:
        return FormatError(self.section, ".".join(path), reason)

    def string(self, s: str, path: list[str]) -> str:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise self.fail(path, f"string is not valid Unicode: {e.reason}") from None
        if "\n" in s:
            body = _ESCAPE_ML.sub(_esc, s)
            body = _QUOTE_RUN.sub('\\\\"', body)
            return '"""\n' + body + '"""'
        if _ESCAPE.search(s) is None:
            return '"' + s + '"'
        return '"' + _ESCAPE.sub(_esc, s) + '"'

    def key(self, k: Any, path: list[str]) -> str:
        if isinstance(k, bool) or not isinstance(k, (str, int)):
            raise self.fail(path, f"table keys must be strings, not {type(k).__name__}")
        k = str(k)
        return k if _BARE.match(k) else self.string(k, path)

    def value(self, v: Any, path: list[str]) -> str:
        if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy scalars and arrays
            v = v.tolist()
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            if not _INT64[0] <= v <= _INT64[1]:
                raise self.fail(path, f"integer {v} does not fit in 64 bits")
            return str(v)
        if isinstance(v, float):
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, str):
            return self.string(v, path)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.value(x, path) for x in v) + "]"
        if isinstance(v, dict):
            if not v:
                return "{}"
            return "{ " + ", ".join(f"{self.key(k, path)} = {self.value(x, path + [str(k)])}"
                                    for k, x in v.items()) + " }"
        raise self.fail(path, f"cannot write a value of type {type(v).__name__} in TOML")

    def document(self, doc: dict) -> str:
        if not isinstance(doc, dict):
            raise self.fail([], f"a TOML section must be a dict, not {type(doc).__name__}")
        out: list[str] = []
        self._table(doc, [], [], None, out)
        return "".join(out)

    def _table(self, d: dict, path: list[str], header_keys: list[str], header: str | None,
               out: list[str]) -> None:
        if header is not None:
            if out:
                out.append("\n")
            out.append(header + "\n")
        nested = []
        for k, v in d.items():
            if isinstance(v, dict) or _is_array_of_tables(v):
                nested.append((k, v))
            else:
                kp = path + [str(k)]
                out.append(f"{self.key(k, kp)} = {self.value(v, kp)}\n")
        for k, v in nested:
            kp = path + [str(k)]
            hk = header_keys + [self.key(k, kp)]
            dotted = ".".join(hk)
            if isinstance(v, dict):
                self._table(v, kp, hk, f"[{dotted}]", out)
            else:
                for element in v:
                    self._table(element, kp, hk, f"[[{dotted}]]", out)


def _is_array_of_tables(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, dict) for x in v)


def dumps(doc: dict, section: str = "") -> str:
    """TOML text of `doc` (see the module docstring for the layout)."""
    return Emitter(section).document(doc)
