"""Token ids shared by every pipeline: the one check of ids given by a caller (`token_id_array`),
the bytes a token stands for (`token_bytes`) and the prefix two id sequences share
(`common_prefix`).

A leaf module: it imports numpy and cyb_llm.errors only (tools/check_py_imports.py).
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from .errors import InvalidConfig, ShapeMismatch


def token_id_array(ids: Any, vocab_size: int | None = None) -> np.ndarray:
    """`ids` as a contiguous 1-D int32 array, never coerced: a flat sequence of Python or
    numpy integers, or a 1-D integer numpy array. Floats, bools, strings, bytes and nested
    sequences raise TypeError; a 2-D array ShapeMismatch; an id outside [0, vocab_size)
    (or outside int32 when vocab_size is None) InvalidConfig naming the id and its index."""
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got an array of dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ShapeMismatch("forward (ids)", [-1], list(ids.shape))
        arr = ids
    elif isinstance(ids, (str, bytes, bytearray, memoryview)) or not isinstance(ids, Sequence):
        raise TypeError(f"token ids must be a sequence of ints or a 1-D integer array, got {type(ids).__name__}")
    else:
        for k, i in enumerate(ids):
            if type(i) is not int and (isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer))):
                raise TypeError(f"token ids must be ints, got {type(i).__name__} {i!r} at index {k}")
        try:
            arr = np.array(ids, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is None or arr.ndim != 1:  # ints beyond int64 (or a sequence numpy reads otherwise)
            arr = np.array([int(i) for i in ids], dtype=object)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        limit = vocab_size if vocab_size is not None else 2**31
        if lo < 0 or hi >= limit:
            at = int(np.argmax((arr < 0) | (arr >= limit)))
            what = f"the vocab of {vocab_size}" if vocab_size is not None else "the int32 range"
            raise InvalidConfig(field="input_ids",
                                reason=f"token id {int(arr[at])} at index {at} is outside [0, {limit}) ({what})")
    return np.ascontiguousarray(arr, dtype=np.int32)


def common_prefix(cache: Sequence[int] | None, ids: Sequence[int]) -> int:
    """Leading tokens of `ids` a KV cache holding `cache` can keep: their common prefix,
    short of the last prompt token (its logits are needed, so it is always forwarded)."""
    if not cache:
        return 0
    n, limit = 0, min(len(cache), len(ids) - 1)
    while n < limit and cache[n] == ids[n]:
        n += 1
    return n


def _bytes_to_unicode() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2): printable stand-in character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_OF_CHAR = _bytes_to_unicode()
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer: Any, token: int) -> bytes:
    """The bytes a token stands for, also when it holds only part of a UTF-8 character."""
    text = tokenizer.decode([token])
    if "\ufffd" not in text:
        return text.encode("utf-8")
    piece = tokenizer.id_to_token(token) if hasattr(tokenizer, "id_to_token") else None
    if piece:
        m = _BYTE_PIECE.fullmatch(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        if all(c in _BYTE_OF_CHAR for c in piece):
            return bytes(_BYTE_OF_CHAR[c] for c in piece)
    return text.encode("utf-8")


__all__ = ["token_id_array", "common_prefix", "token_bytes"]
