"""Structured errors of cyb_llm (docs/errors.md has the table cause -> class).

Every error is an instance of :class:`Error`; each subclass mirrors one
variant of the native ``cyb::Error`` and carries its fields both as
attributes (``e.name``, ``e.required_by``) and in ``e.fields``. Native code
throws ``cyb::Error``; the bindings turn it into the matching class here
(see ``_from_native``).

Each class can also be raised from Python with its fields, positionally or
by keyword: ``MissingTensor("lm_head.weight", "llama")``.

The variants, their fields and their messages are defined once, natively
(csrc/core/errors.cc); this module reads them through ``_core``
(``error_variants``, ``error_message``) and adds only the Python classes.
"""
from __future__ import annotations

from typing import Any, ClassVar

from . import _core

#: native variant name -> (field names in positional order, integer fields)
_VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (tuple(fields), tuple(ints)) for name, fields, ints in _core.error_variants()}


def _field_str(v: Any) -> str:
    """A field value as the native side spells it: shapes as "[2, 3]", absent as ""."""
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


class Error(Exception):
    """Base class of every cyb_llm error."""

    #: Field names in positional order.
    field_names: ClassVar[tuple[str, ...]] = ()
    #: Fields that hold integers (native code passes them as decimal strings).
    int_fields: ClassVar[tuple[str, ...]] = ()
    #: The native variant name (``cyb::error_kind_name``).
    native_kind: ClassVar[str] = ""

    def __init__(self, *args: Any, message: str | None = None, **fields: Any) -> None:
        if len(args) > len(self.field_names):
            if not self.field_names and len(args) == 1 and message is None:
                message, args = str(args[0]), ()
            else:
                raise TypeError(f"{type(self).__name__} takes at most {len(self.field_names)} fields")
        values = dict(zip(self.field_names, args))
        for k, v in fields.items():
            if k in values:
                raise TypeError(f"field {k!r} given twice")
            values[k] = v
        for name in self.field_names:
            values.setdefault(name, None)
        self.fields: dict[str, Any] = values
        for k, v in values.items():
            setattr(self, k, v)
        if message is None:
            message = self._message()
        self.message = message
        super().__init__(message)

    def _message(self) -> str:
        if self.native_kind:
            return _core.error_message(self.native_kind, {k: _field_str(v) for k, v in self.fields.items()})
        return ", ".join(f"{k}={v!r}" for k, v in self.fields.items() if v is not None)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.native_kind:  # fields come from the native variant table
            cls.field_names, cls.int_fields = _VARIANTS[cls.native_kind]

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[Error], message: str, fields: dict[str, Any]) -> Error:
    return cls(message=message, **fields)


class FormatError(Error):
    """A malformed `.model` file: container, TOML, ranges, duplicates, overflow."""

    native_kind = "FormatError"


class UnsupportedOp(Error):
    """No backend (not even the fallback) can run this op for these inputs."""

    native_kind = "UnsupportedOp"


class ShapeMismatch(Error):
    """An op or a tensor got a shape other than the one required."""

    native_kind = "ShapeMismatch"


class MissingTensor(Error):
    """A tensor that the family, the graph or the caller needs is absent."""

    native_kind = "MissingTensor"


class WeightFormatMismatch(Error):
    """A tensor's bytes disagree with its declared shape and encoding."""

    native_kind = "WeightFormatMismatch"


class OutOfMemory(Error):
    """An allocation failed."""

    native_kind = "OutOfMemory"


class BackendInit(Error):
    """A backend could not start (no adapter, driver failure, ...)."""

    native_kind = "BackendInit"


class InvalidConfig(Error):
    """A config key is missing or has a value the runtime cannot use."""

    native_kind = "InvalidConfig"


class TokenizerError(Error):
    """The tokenizer data cannot be built or used."""

    native_kind = "Tokenizer"


_BY_NATIVE_KIND: dict[str, type[Error]] = {
    cls.native_kind: cls
    for cls in (FormatError, UnsupportedOp, ShapeMismatch, MissingTensor, WeightFormatMismatch,
                OutOfMemory, BackendInit, InvalidConfig, TokenizerError)
}


def _from_native(kind: str, message: str, fields: dict[str, str]) -> Error:
    """Builds the exception for a native ``cyb::Error`` (called by the bindings)."""
    cls = _BY_NATIVE_KIND.get(kind, Error)
    values: dict[str, Any] = {}
    for k, v in fields.items():
        if k in cls.int_fields:
            try:
                v = int(v)
            except ValueError:
                pass
        values[k] = v
    if cls is Error:
        return Error(message)
    known = {k: v for k, v in values.items() if k in cls.field_names}
    err = cls(message=message, **known)
    for k, v in values.items():  # fields a newer native core added
        if k not in known:
            err.fields[k] = v
            setattr(err, k, v)
    return err


__all__ = [
    "Error", "FormatError", "UnsupportedOp", "ShapeMismatch", "MissingTensor",
    "WeightFormatMismatch", "OutOfMemory", "BackendInit", "InvalidConfig", "TokenizerError",
]
