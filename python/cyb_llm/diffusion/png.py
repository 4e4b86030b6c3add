"""PNG writing for the diffusion pipeline's images and the terrain heightmaps: Pillow when it is
installed, else a small zlib-based writer; both give the same pixels (tests/test_diffusion_terrain.py,
tests/test_diffusion_pipeline.py)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidConfig

__all__ = ["encode_png", "save_png"]

#: (dtype, channels) -> (bit depth, PNG colour type)
_KINDS = {(np.dtype(np.uint8), 1): (8, 0), (np.dtype(np.uint16), 1): (16, 0), (np.dtype(np.uint8), 3): (8, 2)}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _check(img: Any) -> np.ndarray:
    a = np.asarray(img)
    channels = 1 if a.ndim == 2 else a.shape[2] if a.ndim == 3 else 0
    if (a.dtype, channels) not in _KINDS or a.size == 0:
        raise InvalidConfig(field="image", reason=f"a PNG is written from uint8 [H, W, 3] (RGB), uint8 [H, W] or "
                                                  f"uint16 [H, W] (grayscale); got {a.dtype} {list(a.shape)}")
    return a


def encode_png(img: Any) -> bytes:
    """The PNG bytes of `img` (uint8 RGB [H, W, 3], uint8 or uint16 grayscale [H, W]), filter 0 on
    every row, without Pillow."""
    a = _check(img)
    depth, colour = _KINDS[(a.dtype, 1 if a.ndim == 2 else a.shape[2])]
    h, w = a.shape[:2]
    rows = a.astype(">u2") if depth == 16 else a
    raw = b"".join(b"\x00" + rows[r].tobytes() for r in range(h))
    header = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6))
            + _chunk(b"IEND", b""))


def save_png(img: Any, path: str | Path, *, use_pillow: bool | None = None) -> Path:
    """Writes `img` (as encode_png takes it) to `path`: Pillow when installed (`use_pillow=None`),
    else the built-in writer."""
    a = _check(img)
    path = Path(path)
    pil = None
    if use_pillow is not False:
        try:
            from PIL import Image as pil  # type: ignore[no-redef]
        except ImportError:
            if use_pillow:
                raise
    if pil is not None:
        pil.fromarray(np.ascontiguousarray(a)).save(path, format="PNG")  # uint16 -> mode "I;16"
    else:
        path.write_bytes(encode_png(a))
    return path
