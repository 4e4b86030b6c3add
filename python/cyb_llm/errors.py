"""Structured errors of cyb_llm (docs/errors.md has the table cause -> class).

Every error is an instance of :class:`Error`; each subclass mirrors one
variant of the native ``cyb::Error`` and carries its fields both as
attributes (``e.name``, ``e.required_by``) and in ``e.fields``. Native code
throws ``cyb::Error``; the bindings turn it into the matching class here
(see ``_from_native``).

Each class can also be raised from Python with its fields, positionally or
by keyword: ``MissingTensor("lm_head.weight", "llama")``.
"""
from __future__ import annotations

from typing import Any, ClassVar


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
        return ", ".join(f"{k}={v!r}" for k, v in self.fields.items() if v is not None)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[Error], message: str, fields: dict[str, Any]) -> Error:
    return cls(message=message, **fields)


class FormatError(Error):
    """A malformed `.model` file: container, TOML, ranges, duplicates, overflow."""

    field_names = ("section", "key", "reason")
    native_kind = "FormatError"

    def _message(self) -> str:
        where = f"section '{self.section}'" if self.section else "file"
        if self.key:
            where += f", key '{self.key}'"
        return f"malformed .model ({where}): {self.reason}"


class UnsupportedOp(Error):
    """No backend (not even the fallback) can run this op for these inputs."""

    field_names = ("op", "backend", "input_dtype")
    native_kind = "UnsupportedOp"

    def _message(self) -> str:
        return (f"op '{self.op}' is not supported by backend '{self.backend}' "
                f"for input dtype {self.input_dtype}")


class ShapeMismatch(Error):
    """An op or a tensor got a shape other than the one required."""

    field_names = ("op", "expected", "got")
    native_kind = "ShapeMismatch"

    def _message(self) -> str:
        return f"shape mismatch in '{self.op}': expected {self.expected}, got {self.got}"


class MissingTensor(Error):
    """A tensor that the family, the graph or the caller needs is absent."""

    field_names = ("name", "required_by")
    native_kind = "MissingTensor"

    def _message(self) -> str:
        return f"missing tensor '{self.name}' (required by {self.required_by})"


class WeightFormatMismatch(Error):
    """A tensor's bytes disagree with its declared shape and encoding."""

    field_names = ("name", "declared", "actual_bytes")
    int_fields = ("actual_bytes",)
    native_kind = "WeightFormatMismatch"

    def _message(self) -> str:
        return f"tensor '{self.name}' declared as {self.declared} but has {self.actual_bytes} bytes"


class OutOfMemory(Error):
    """An allocation failed."""

    field_names = ("backend", "requested_bytes")
    int_fields = ("requested_bytes",)
    native_kind = "OutOfMemory"

    def _message(self) -> str:
        return f"backend '{self.backend}' is out of memory (requested {self.requested_bytes} bytes)"


class BackendInit(Error):
    """A backend could not start (no adapter, driver failure, ...)."""

    field_names = ("backend", "reason")
    native_kind = "BackendInit"

    def _message(self) -> str:
        return f"backend '{self.backend}' failed to start: {self.reason}"


class InvalidConfig(Error):
    """A config key is missing or has a value the runtime cannot use."""

    field_names = ("field", "reason")
    native_kind = "InvalidConfig"

    def _message(self) -> str:
        return f"invalid config '{self.field}': {self.reason}"


class TokenizerError(Error):
    """The tokenizer data cannot be built or used."""

    field_names = ("reason",)
    native_kind = "Tokenizer"

    def _message(self) -> str:
        return f"tokenizer error: {self.reason}"


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
