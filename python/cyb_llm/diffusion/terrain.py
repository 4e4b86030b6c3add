"""One-step terrain sampling with the terrain-diffusion consistency UNet on our runtime.

The model is the difficulty-conditioned consistency UNet that adaptive-terrain-diffusion ships
as ONNX (inputs ``noisy`` (N,1,128,128), ``sigma`` (N,), ``difficulty`` (N,) in [0, 1]; output
``denoised``, with the EDM preconditioning c_skip / c_out / c_in inside the graph), imported
with ``cyb_llm.convert.import_model`` and loaded with ``cyb_llm.load``.

Sampling is one consistency step from sigma_max = 80: a standard-normal draw (numpy's
``default_rng(seed)``, after the difficulty draw when the difficulty is random) times 80,
denoised once. The network's values live in [-1, 1], an asinh-compressed height: height =
0.1 * sinh(u * asinh(22.1686 / 0.1)) with u = (v + 1) / 2, so the heights run 0 .. 22.17 m.
Heightmaps up to 128 on a side come from one 128x128 sample, bilinearly resized; larger ones
are tiled: one noise canvas, 128x128 windows at a stride of 128 - overlap (the last window
flush with the edge), each denoised on its own and blended with a Hann window (floored at
1e-3) normalised by the summed weights. The same seed and size give the package's
``TerrainGenerator.generate`` heightmap (tests/slow/test_terrain_sampler.py).

``save_heightmap_png`` writes a heightmap as a 16-bit grayscale PNG (cyb_llm.diffusion.png:
Pillow when installed, else a small zlib-based writer).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidConfig
from .png import save_png

__all__ = ["generate_terrain", "save_heightmap_png", "NATIVE_SIZE", "SIGMA_MAX", "HEIGHT_RANGE"]

NATIVE_SIZE = 128
NUM_CLASSES = 100
HEIGHT_RANGE = 22.16864013671875  # metres: the top of the model's height scale
ASINH_SCALE = 0.1
SIGMA_MAX = 80.0


def _size(size: Any) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        h = w = int(size)
    elif isinstance(size, Sequence) and not isinstance(size, str) and len(size) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in size):
        h, w = int(size[0]), int(size[1])
    else:
        raise InvalidConfig(field="size", reason=f"must be an integer or a (height, width) pair, got {size!r}")
    if h <= 0 or w <= 0:
        raise InvalidConfig(field="size", reason=f"must be positive, got {(h, w)}")
    return h, w


def _difficulty(difficulty: Any, rng: np.random.Generator) -> int:
    """The difficulty 1..100; "random" / None draws it (the first draw from the seed's stream)."""
    if difficulty is None or (isinstance(difficulty, str) and difficulty.lower() == "random"):
        return int(rng.integers(1, NUM_CLASSES + 1, size=1, dtype=np.int64)[0])
    try:
        value = float(difficulty)
    except (TypeError, ValueError):
        raise InvalidConfig(field="difficulty", reason=f"must be a whole number 1..100 or 'random', "
                                                       f"got {difficulty!r}") from None
    if not math.isfinite(value) or value != math.floor(value) or not 1 <= value <= NUM_CLASSES:
        raise InvalidConfig(field="difficulty", reason=f"must be a whole number 1..100 or 'random', got {difficulty!r}")
    return int(value)


def _to_heights(values: np.ndarray) -> np.ndarray:
    """Model space [-1, 1] -> metres (the inverse of the asinh compression), clipped to the range."""
    u = np.clip((values.astype(np.float32) + np.float32(1)) * np.float32(0.5), 0, 1)
    k = math.asinh(HEIGHT_RANGE / ASINH_SCALE)
    h = ASINH_SCALE * np.sinh(u.astype(np.float64) * k)
    return np.clip(h, 0.0, HEIGHT_RANGE).astype(np.float32)


def _bilinear(a: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bilinear resize of a 2-D float32 array with half-pixel centres, edges clamped
    (width first, then height)."""
    in_h, in_w = a.shape
    if (in_h, in_w) == (out_h, out_w):
        return a

    def taps(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * n_in / n_out - np.float32(0.5)
        pos = np.clip(pos, 0, n_in - 1)
        lo = np.floor(pos).astype(np.intp)
        return lo, np.minimum(lo + 1, n_in - 1), (pos - lo).astype(np.float32)

    x0, x1, wx = taps(out_w, in_w)
    rows = a[:, x0] * (np.float32(1) - wx) + a[:, x1] * wx
    y0, y1, wy = taps(out_h, in_h)
    wy = wy[:, None]
    return (rows[y0] * (np.float32(1) - wy) + rows[y1] * wy).astype(np.float32)


def _window_starts(length: int, tile: int, overlap: int) -> list[int]:
    if length <= tile:
        return [0]
    starts = list(range(0, length - tile + 1, tile - overlap))
    if starts[-1] != length - tile:
        starts.append(length - tile)
    return starts


def _load(model: Any) -> Any:
    if isinstance(model, (str, Path)):
        from ..base import load
        model = load(str(model))
    if not callable(getattr(model, "run", None)):
        raise InvalidConfig(field="model", reason="must be the terrain UNet (a GraphModel) or its path / hub name")
    names = {i.name for i in getattr(model, "inputs", [])}
    if names and not {"noisy", "sigma", "difficulty"} <= names:
        raise InvalidConfig(field="model", reason=f"the terrain UNet takes noisy, sigma and difficulty; this "
                                                  f"graph takes {sorted(names)}")
    return model


def _denoise(model: Any, noisy: np.ndarray, label: float) -> np.ndarray:
    n = noisy.shape[0]
    out = model.run({"noisy": np.ascontiguousarray(noisy, dtype=np.float32),
                     "sigma": np.full(n, SIGMA_MAX, dtype=np.float32),
                     "difficulty": np.full(n, label, dtype=np.float32)})
    d = out["denoised"] if isinstance(out, dict) else out[0]
    d = np.asarray(d, dtype=np.float32)
    if d.shape != noisy.shape:
        raise InvalidConfig(field="model", reason=f"denoised has shape {list(d.shape)}, expected {list(noisy.shape)}")
    return d


def generate_terrain(model: Any, seed: int | None = None, size: int | tuple[int, int] = NATIVE_SIZE,
                     difficulty: int | str | None = "random", *, size_mode: str = "auto",
                     tile_overlap: int = 32, batch_size: int = 1, zero_floor: bool = True,
                     return_difficulty: bool = False) -> np.ndarray | tuple[np.ndarray, int]:
    """One terrain heightmap (float32 metres, shape ``size``) from the terrain consistency UNet.

    model: the imported UNet (a GraphModel), or its ``.model`` path / hub name.
    seed: numpy ``default_rng`` seed (None: fresh entropy).
    size: side, or (height, width).
    difficulty: 1..100, or "random" (drawn from the seed's stream before the noise).
    size_mode: "auto" (tile above 128 on a side, else one sample resized), "tile" or "resize".
    tile_overlap: pixels shared by neighbouring 128x128 windows when tiling (0..127).
    batch_size: windows per UNet call when tiling (the heightmap does not depend on it; on our
        cpu runtime one window a call measured ~20% faster per window than batches of 2-4).
    zero_floor: shift the heightmap so its lowest point is 0.
    return_difficulty: also return the difficulty used.
    """
    h, w = _size(size)
    if isinstance(seed, bool) or not (seed is None or isinstance(seed, (int, np.integer))):
        raise InvalidConfig(field="seed", reason=f"must be an integer or None, got {seed!r}")
    if seed is not None and seed < 0:
        raise InvalidConfig(field="seed", reason=f"must be non-negative, got {seed}")
    mode = size_mode.lower() if isinstance(size_mode, str) else size_mode
    if mode not in ("auto", "tile", "resize"):
        raise InvalidConfig(field="size_mode", reason=f"must be auto, tile or resize, got {size_mode!r}")
    if isinstance(tile_overlap, bool) or not isinstance(tile_overlap, (int, np.integer)) or \
            not 0 <= tile_overlap < NATIVE_SIZE:
        raise InvalidConfig(field="tile_overlap", reason=f"must be an integer in [0, {NATIVE_SIZE - 1}], "
                                                         f"got {tile_overlap!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InvalidConfig(field="batch_size", reason=f"must be a positive integer, got {batch_size!r}")
    model = _load(model)
    rng = np.random.default_rng(seed)
    diff = _difficulty(difficulty, rng)
    label = float(np.float32((diff - 1) / (NUM_CLASSES - 1)))
    if mode == "auto":
        mode = "tile" if max(h, w) > NATIVE_SIZE else "resize"
    sigma = np.float32(SIGMA_MAX)

    if mode == "resize":
        noisy = rng.standard_normal((1, 1, NATIVE_SIZE, NATIVE_SIZE), dtype=np.float32) * sigma
        heights = _to_heights(_denoise(model, noisy, label)[0, 0])
        heights = np.clip(_bilinear(heights, h, w), 0.0, HEIGHT_RANGE).astype(np.float32)
    else:
        ch, cw = max(h, NATIVE_SIZE), max(w, NATIVE_SIZE)
        canvas = rng.standard_normal((ch, cw), dtype=np.float32) * sigma
        windows = [(y, x) for y in _window_starts(ch, NATIVE_SIZE, tile_overlap)
                   for x in _window_starts(cw, NATIVE_SIZE, tile_overlap)]
        hann = np.maximum(np.hanning(NATIVE_SIZE).astype(np.float32), np.float32(1e-3))
        blend = np.outer(hann, hann)
        acc = np.zeros((ch, cw), dtype=np.float32)
        wsum = np.zeros((ch, cw), dtype=np.float32)
        n = NATIVE_SIZE
        for b in range(0, len(windows), batch_size):
            chunk = windows[b:b + batch_size]
            patches = np.stack([canvas[y:y + n, x:x + n] for y, x in chunk])[:, None]
            for d, (y, x) in zip(_denoise(model, patches, label)[:, 0], chunk):
                acc[y:y + n, x:x + n] += d * blend
                wsum[y:y + n, x:x + n] += blend
        values = acc / np.maximum(wsum, np.float32(1e-12))
        heights = _to_heights(values[:h, :w])
    if zero_floor:
        heights = heights - heights.min()
    heights = np.ascontiguousarray(heights, dtype=np.float32)
    return (heights, diff) if return_difficulty else heights


# ---------------------------------------------------------------------------------------------
# PNG


def save_heightmap_png(arr: Any, path: str | Path, *, vmin: float | None = None, vmax: float | None = None,
                       use_pillow: bool | None = None) -> Path:
    """Write a 2-D heightmap as a 16-bit grayscale PNG: values mapped linearly from
    [vmin, vmax] (default: the array's min and max) to 0..65535. Pillow writes it when
    installed (``use_pillow=None``), else the built-in zlib writer; both give the same pixels."""
    a = np.asarray(arr, dtype=np.float64)
    if a.ndim != 2 or a.size == 0:
        raise InvalidConfig(field="arr", reason=f"must be a non-empty 2-D heightmap, got shape {list(a.shape)}")
    if not np.isfinite(a).all():
        raise InvalidConfig(field="arr", reason="holds NaN or infinite values")
    lo = float(a.min()) if vmin is None else float(vmin)
    hi = float(a.max()) if vmax is None else float(vmax)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise InvalidConfig(field="vmax", reason=f"needs vmin <= vmax, got {lo} .. {hi}")
    scale = 65535.0 / (hi - lo) if hi > lo else 0.0
    img = np.rint(np.clip((a - lo) * scale, 0, 65535)).astype(np.uint16)
    return save_png(img, path, use_pillow=use_pillow)
