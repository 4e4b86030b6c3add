"""Audio input of the speech models (docs/whisper.md, "Audio frontend").

``load_audio`` turns a file (wav/flac/ogg/mp3 through ``soundfile``) or an
array into float32 mono samples at 16 kHz: channels averaged, integer PCM
scaled to [-1, 1), other rates resampled with ``soxr`` (``scipy.signal.
resample_poly`` when soxr is not installed). ``log_mel_spectrogram`` runs the
native log-mel frontend (``_core.log_mel``, csrc/audio/mel.cc) on it.

Bad input raises :class:`cyb_llm.errors.InvalidConfig` with ``field="audio"``
(a missing or unreadable file, a file that is not audio, empty audio, NaN or
infinite samples, a non-numeric dtype, a bad rate) or
:class:`cyb_llm.errors.ShapeMismatch` (an array that is neither 1-D samples nor
2-D ``(frames, channels)``); an object that is neither a path, a binary file
nor array-like raises ``TypeError``.
"""
from __future__ import annotations

import os
from math import gcd
from typing import Any, Union

import numpy as np

from .. import _core
from ..errors import InvalidConfig, ShapeMismatch

#: The rate every speech model here takes.
SAMPLE_RATE = 16000
#: Samples of one 30 s window (the Whisper encoder's input: 3000 frames).
CHUNK_SAMPLES = 30 * SAMPLE_RATE
#: Samples between two frames.
HOP_LENGTH = 160
#: Most channels an array may have (2-D arrays are (frames, channels)).
MAX_CHANNELS = 64

AudioInput = Union[str, "os.PathLike[str]", np.ndarray, Any]


def _bad(reason: str) -> InvalidConfig:
    return InvalidConfig(field="audio", reason=reason)


def _to_float32(a: np.ndarray) -> np.ndarray:
    """Samples of any PCM dtype as float32: ints scaled by their full range (8-bit
    unsigned centred at 128, as 8-bit WAV stores it), floats cast."""
    k = a.dtype.kind
    if k == "f":
        return a.astype(np.float32, copy=False)
    if k == "i":
        scale = float(2 ** (8 * a.dtype.itemsize - 1))
        return (a.astype(np.float64) / scale).astype(np.float32)
    if k == "u":
        half = float(2 ** (8 * a.dtype.itemsize - 1))
        return ((a.astype(np.float64) - half) / half).astype(np.float32)
    raise _bad(f"dtype {a.dtype} is not a sample type (float or integer PCM expected)")


def _mono(a: np.ndarray) -> np.ndarray:
    if a.ndim == 1:
        return a
    if a.ndim == 2 and 1 <= a.shape[1] <= MAX_CHANNELS:
        return a[:, 0] if a.shape[1] == 1 else a.mean(axis=1, dtype=np.float64).astype(np.float32)
    raise ShapeMismatch(op=f"audio samples: 1-D, or 2-D (frames, channels) with 1..{MAX_CHANNELS} channels",
                        expected=[-1, -1], got=list(a.shape))


def resample(x: np.ndarray, orig_sr: int, sr: int = SAMPLE_RATE) -> np.ndarray:
    """float32 mono ``x`` from ``orig_sr`` to ``sr`` Hz (soxr 'HQ'; resample_poly without soxr)."""
    if orig_sr == sr:
        return x
    try:
        import soxr
    except ImportError:  # the fallback: a polyphase filter from scipy
        from scipy.signal import resample_poly

        g = gcd(int(orig_sr), int(sr))
        return resample_poly(x.astype(np.float64), sr // g, orig_sr // g).astype(np.float32)
    return np.asarray(soxr.resample(x, orig_sr, sr, quality="HQ"), dtype=np.float32)


def _check_rate(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int (samples per second), not {type(v).__name__}")
    if not 1 <= int(v) <= 10_000_000:
        raise InvalidConfig(field=name, reason=f"must be a rate in 1..10000000 Hz (got {int(v)})")
    return int(v)


def _read_file(src: Any) -> tuple[np.ndarray, int]:
    import soundfile as sf

    name = os.fsdecode(src) if isinstance(src, (str, bytes, os.PathLike)) else getattr(src, "name", "<file>")
    if isinstance(src, (str, bytes, os.PathLike)):
        if not os.path.exists(src):
            raise _bad(f"cannot open '{name}': no such file")
        if os.path.isdir(src):
            raise _bad(f"cannot open '{name}': is a directory")
    try:
        data, rate = sf.read(src, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError, ValueError, TypeError) as e:
        raise _bad(f"cannot decode '{name}' as audio: {e}") from None
    return data, int(rate)


def load_audio(audio: AudioInput, sr: int = SAMPLE_RATE, *, orig_sr: int | None = None) -> np.ndarray:
    """float32 mono samples at ``sr`` Hz from a file or an array.

    ``audio``: a path (str/bytes/PathLike) or binary file object, decoded by
    soundfile (wav, flac, ogg, mp3, ...; the file's rate is used); or an array
    of samples at ``orig_sr`` Hz (default: already ``sr``), 1-D or 2-D
    ``(frames, channels)``, float or integer PCM. Errors: see the module.
    """
    sr = _check_rate(sr, "sr")
    if isinstance(audio, (str, bytes, os.PathLike)) or hasattr(audio, "read"):
        if orig_sr is not None:
            raise TypeError("orig_sr is for arrays: a file's rate is read from the file")
        data, rate = _read_file(audio)
    else:
        if isinstance(audio, (int, float, bool)) or audio is None:
            raise TypeError(f"audio must be a path, a binary file or an array of samples, not {type(audio).__name__}")
        try:
            a = np.asarray(audio)
        except (ValueError, TypeError) as e:
            raise TypeError(f"audio must be a path, a binary file or an array of samples: {e}") from None
        rate = sr if orig_sr is None else _check_rate(orig_sr, "orig_sr")
        if a.ndim == 0 or a.ndim > 2:
            raise ShapeMismatch(op="audio samples: 1-D, or 2-D (frames, channels)", expected=[-1], got=list(a.shape))
        data = _to_float32(a)
    x = _mono(data)
    if x.size == 0:
        raise _bad("audio is empty (0 samples)")
    if not np.isfinite(x).all():
        bad = int(np.flatnonzero(~np.isfinite(x))[0])
        raise _bad(f"sample {bad} is {'NaN' if np.isnan(x[bad]) else 'infinite'} (audio must hold finite values)")
    x = resample(np.ascontiguousarray(x, dtype=np.float32), rate, sr)
    return np.ascontiguousarray(x, dtype=np.float32)


def log_mel_spectrogram(audio: AudioInput, n_mels: int = 80, padding: int | str = "30s", threads: int = 0) -> np.ndarray:
    """Whisper's log-mel spectrogram float32[n_mels, frames] (the native frontend).

    ``audio``: anything ``load_audio`` takes (arrays are taken as 16 kHz).
    ``padding``: ``"30s"`` pads with zeros / trims to one 30 s window (3000
    frames, what one encoder pass takes); an int N >= 0 appends N zero
    samples and keeps the whole signal, ``(len + N) // 160`` frames (long-form
    transcription: ``padding=CHUNK_SAMPLES`` then 30 s windows slide over it).
    ``n_mels``: 80, or 128 for large-v3-shaped models. ``threads``: 0 = physical cores.
    """
    if isinstance(n_mels, bool) or not isinstance(n_mels, (int, np.integer)):
        raise TypeError(f"n_mels must be an int, not {type(n_mels).__name__}")
    x = load_audio(audio)
    if isinstance(padding, str):
        if padding != "30s":
            raise InvalidConfig(field="padding", reason=f"must be \"30s\" or a number of zero samples (got {padding!r})")
        return _core.log_mel(x, n_mels=int(n_mels), pad_to_30s=True, threads=threads)
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)):
        raise TypeError(f"padding must be \"30s\" or an int, not {type(padding).__name__}")
    return _core.log_mel(x, n_mels=int(n_mels), pad_to_30s=False, threads=threads, padding=int(padding))


__all__ = ["SAMPLE_RATE", "CHUNK_SAMPLES", "HOP_LENGTH", "load_audio", "log_mel_spectrogram", "resample"]
