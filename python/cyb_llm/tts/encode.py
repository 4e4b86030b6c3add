"""Speech audio to bytes, for `cyb-llm speak` and the server's /v1/audio/speech (docs/tts.md).

    pcm    raw 16-bit signed little-endian mono samples (OpenAI's "pcm"), streamed per chunk
    wav    16-bit PCM WAV; streamed: a header whose RIFF and data sizes are 0xFFFFFFFF (the length
           is unknown when the first sentence goes out), then PCM chunks
    flac   16-bit FLAC through soundfile (libsndfile), written once the audio is complete
    mp3, opus   through PyAV (FFmpeg's libmp3lame / libopus in an Ogg container) when it is
           installed, once the audio is complete; without it, InvalidConfig naming the format

Samples are float32 in [-1, 1]; 16-bit output is x * 32767 clipped and truncated (`int16`), as
piper-tts writes it, for every format (soundfile and PyAV are given the integers).
"""
from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import InvalidConfig

FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
STREAMED = ("wav", "pcm")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg",
               "opus": "audio/ogg", "aac": "audio/aac"}
_AV_CODECS = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus")}


def int16(audio: np.ndarray) -> np.ndarray:
    """float32 samples as 16-bit integers, as piper-tts converts them: x * 32767 clipped to
    [-32767, 32767], truncated toward zero."""
    return np.clip(np.asarray(audio, np.float32) * 32767.0, -32767, 32767).astype("<i2")


def pcm16(audio: np.ndarray) -> bytes:
    """float32 samples as 16-bit little-endian PCM bytes (int16's values)."""
    return int16(audio).tobytes()


def wav_stream_header(sample_rate: int) -> bytes:
    """A 44-byte PCM WAV header (mono, 16-bit) for a stream of unknown length (sizes 0xFFFFFFFF)."""
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 0xFFFFFFFF, b"WAVE", b"fmt ", 16, 1, 1, sample_rate,
                       sample_rate * 2, 2, 16, b"data", 0xFFFFFFFF)


def check_format(fmt: object) -> str:
    """The format name, or InvalidConfig(field="response_format") for one this install cannot write."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise InvalidConfig(field="response_format", reason=f"{fmt!r} is not supported: one of "
                                                            f"{', '.join(supported_formats())}")
    if fmt in _AV_CODECS and not _have_av(_AV_CODECS[fmt][1]):
        raise InvalidConfig(field="response_format", reason=(
            f"{fmt!r} needs an {fmt} encoder (PyAV: pip install av), which is not installed; "
            f"available: {', '.join(supported_formats())}"))
    return fmt


def supported_formats() -> list[str]:
    return [f for f in FORMATS if f not in _AV_CODECS or _have_av(_AV_CODECS[f][1])]


def encode_stream(chunks: Iterable[np.ndarray], sample_rate: int, fmt: str) -> Iterator[bytes]:
    """The bytes of `fmt` for the audio chunks: pcm and wav as each chunk arrives, the others at the end."""
    fmt = check_format(fmt)
    if fmt in STREAMED:
        if fmt == "wav":
            yield wav_stream_header(sample_rate)
        for c in chunks:
            if c.size:
                yield pcm16(c)
        return
    parts = [np.asarray(c, np.float32) for c in chunks]
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    yield encode(audio, sample_rate, fmt)


def encode(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """The whole audio as one `fmt` file."""
    fmt = check_format(fmt)
    audio = np.asarray(audio, np.float32).reshape(-1)
    if fmt == "pcm":
        return pcm16(audio)
    if fmt in ("wav", "flac"):
        import soundfile

        buf = io.BytesIO()
        soundfile.write(buf, int16(audio), sample_rate, format=fmt.upper(), subtype="PCM_16")
        return buf.getvalue()
    return _encode_av(audio, sample_rate, fmt)


def _have_av(codec: str) -> bool:
    try:
        import av
    except ImportError:
        return False
    try:
        av.codec.Codec(codec, "w")
    except Exception:  # noqa: BLE001 - an FFmpeg build without the encoder
        return False
    return True


def _encode_av(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    import av

    container_fmt, codec = _AV_CODECS[fmt]
    rate = 48000 if fmt == "opus" else sample_rate  # libopus takes 8/12/16/24/48 kHz: FFmpeg resamples
    buf = io.BytesIO()
    with av.open(buf, "w", format=container_fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        samples = int16(audio)[None]
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = sample_rate
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout="mono", rate=rate)
        frames = resampler.resample(frame) if samples.size else []
        for f in list(frames) + list(resampler.resample(None)):
            for packet in stream.encode(f):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


__all__ = ["FORMATS", "STREAMED", "MEDIA_TYPES", "int16", "pcm16", "wav_stream_header", "check_format", "supported_formats",
           "encode_stream", "encode"]
