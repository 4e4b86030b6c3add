"""Voice activity detection for transcription (docs/whisper.md, "VAD filter"): the Silero VAD v6
graph that faster-whisper 1.2.1 ships (faster_whisper/assets/silero_vad_v6.onnx), imported once
into a `.model` (hub name "silero-vad") and run natively as a GraphModel; the segment rules,
padding, chunk collection and timestamp restoring follow faster-whisper's vad.py so that
`transcribe(vad_filter=True)` keeps the same audio and gives the same times.

    opts = vad_options({"min_silence_duration_ms": 500})      # dict / VadOptions / None, validated
    probs = speech_probabilities(samples)                     # one probability per 512 samples
    chunks = get_speech_timestamps(samples, opts)             # [{"start": s, "end": e}] in samples
    speech, chunks = collect_chunks(samples, chunks)          # the speech only, concatenated
    ts = SpeechTimestampsMap(chunks); ts.original_time(t)     # a time of `speech` -> of `samples`

No onnxruntime, torch or transformers: numpy and the native graph runtime only.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from typing import Any, Iterable, Iterator, Mapping, Optional

import numpy as np

from ..errors import InvalidConfig

SAMPLING_RATE = 16000
WINDOW = 512    # samples per probability (32 ms)
CONTEXT = 64    # samples of the previous window put in front of each (the graph's input is 576 wide)
BATCH = 10000   # windows per graph call (the LSTM state is carried from call to call)
VAD_MODEL = "silero-vad"   # the hub name of the graph (cyb_llm.hub.MODELS)


@dataclasses.dataclass
class VadOptions:
    """The VAD's parameters, named and defaulted as faster-whisper 1.2.1's VadOptions.

    threshold: a window whose speech probability is >= this is speech.
    neg_threshold: below this a window is silence (None: max(threshold - 0.15, 0.01)); between
      the two a window continues the speech it follows.
    min_speech_duration_ms: speech chunks not longer than this are dropped.
    max_speech_duration_s: longer chunks are split (at the last silence over 98 ms if any).
    min_silence_duration_ms: the silence that must pass before a chunk ends.
    speech_pad_ms: the padding added on each side of a chunk.
    """

    threshold: float = 0.5
    neg_threshold: Optional[float] = None
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400

    def validate(self) -> "VadOptions":
        """Raises InvalidConfig naming the field (vad_parameters.NAME) of a value out of range."""
        def bad(name: str, reason: str) -> InvalidConfig:
            return InvalidConfig(field=f"vad_parameters.{name}", reason=reason)

        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "neg_threshold" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise bad(f.name, f"must be a number, got {v!r}")
            if math.isnan(float(v)):
                raise bad(f.name, "must be a number, got NaN")
        for name in ("threshold", "neg_threshold"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= float(v) <= 1.0:
                raise bad(name, f"must be a probability in [0, 1], got {v!r}")
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms"):
            v = float(getattr(self, name))
            if v < 0 or math.isinf(v):
                raise bad(name, f"must be a finite duration >= 0, got {getattr(self, name)!r}")
        if not float(self.max_speech_duration_s) > 0:
            raise bad("max_speech_duration_s", f"must be > 0 (inf: no limit), got {self.max_speech_duration_s!r}")
        return self


_FIELDS = tuple(f.name for f in dataclasses.fields(VadOptions))


def vad_options(params: Any = None, **overrides: Any) -> VadOptions:
    """VadOptions from None (the defaults), a dict of VadOptions fields, or a VadOptions (ours, or
    any object with those attributes such as faster-whisper's), then `overrides`; validated.
    An unknown key raises InvalidConfig(field="vad_parameters.KEY")."""
    if params is None:
        values: dict = {}
    elif isinstance(params, Mapping):
        values = dict(params)
    elif all(hasattr(params, n) for n in _FIELDS):
        values = {n: getattr(params, n) for n in _FIELDS}
    else:
        raise InvalidConfig(field="vad_parameters", reason=f"must be a dict or VadOptions, got {type(params).__name__}")
    values.update(overrides)
    unknown = [k for k in values if k not in _FIELDS]
    if unknown:
        raise InvalidConfig(field=f"vad_parameters.{unknown[0]}",
                            reason=f"unknown VAD parameter (known: {', '.join(_FIELDS)})")
    return VadOptions(**values).validate()


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------

_models: dict = {}
_lock = threading.Lock()


def load_vad_model(model: Any = None) -> Any:
    """The Silero VAD GraphModel: `model` as is when it is one already, else loaded (once per
    path) from a `.model` path, or from the hub's "silero-vad" (fetched from the faster-whisper
    1.2.1 wheel and imported into the cache on first use) when None. Runs on the cpu, one
    thread (the graph is small and sequential: more threads only contend)."""
    if model is not None and not isinstance(model, (str, bytes)) and hasattr(model, "run"):
        return model
    with _lock:
        key = model
        m = _models.get(key)
        if m is None:
            from ..base import load
            from ..hub import fetch

            path = fetch(VAD_MODEL, progress=False) if model is None else model
            m = load(path, backend="cpu", threads=1)
            if getattr(m, "kind", None) != "graph" or [i.name for i in m.inputs] != ["input", "h", "c"]:
                raise InvalidConfig(field="vad_model",
                                    reason=f"{path} is not the Silero VAD graph (inputs input, h, c)")
            _models[key] = m
        return m


def _windows(samples: np.ndarray) -> np.ndarray:
    """The graph's input rows: the audio zero-padded to whole windows (always by at least one
    sample, as faster-whisper pads), each window behind the last CONTEXT samples of the window
    before (zeros before the first). faster-whisper's input also has the last CONTEXT samples of
    the last window zeroed (its context slice is a view it zeroes in place); so is this one, for
    the same probabilities."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    n = x.size // WINDOW + 1
    padded = np.zeros(n * WINDOW, np.float32)
    padded[:x.size] = x
    win = padded.reshape(n, WINDOW)
    win[-1, -CONTEXT:] = 0.0
    rows = np.empty((n, CONTEXT + WINDOW), np.float32)
    rows[0, :CONTEXT] = 0.0
    rows[1:, :CONTEXT] = win[:-1, -CONTEXT:]
    rows[:, CONTEXT:] = win
    return rows


def speech_probabilities(samples: np.ndarray, model: Any = None) -> np.ndarray:
    """float32 [len(samples) // 512 + 1]: the speech probability of each 512-sample window of
    16 kHz audio, the LSTM state carried from window to window (BATCH windows per graph call)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if not np.isfinite(x).all():
        raise InvalidConfig(field="audio", reason="holds NaN or infinite samples")
    m = load_vad_model(model)
    rows = _windows(x)
    h = np.zeros((1, 1, 128), np.float32)
    c = np.zeros((1, 1, 128), np.float32)
    out = []
    for i in range(0, rows.shape[0], BATCH):
        r = m.run({"input": rows[i:i + BATCH], "h": h, "c": c})
        out.append(np.asarray(r["speech_probs"], np.float32).reshape(-1))
        h, c = r["hn"], r["cn"]
    return np.concatenate(out)


# --------------------------------------------------------------------------------------------
# speech chunks
# --------------------------------------------------------------------------------------------

def speech_chunks(probs: Iterable[Any], n_samples: int, options: Optional[VadOptions] = None,
                  sampling_rate: int = SAMPLING_RATE) -> list[dict]:
    """The speech chunks [{"start", "end"}] (samples) of the window probabilities `probs` of
    audio of `n_samples` samples: a chunk starts at a window >= threshold, ends after
    min_silence_duration_ms below neg_threshold (or is split past max_speech_duration_s), is
    dropped when not longer than min_speech_duration_ms, then padded by speech_pad_ms (half the
    gap each side where two chunks are closer than twice the padding). The comparisons are of the
    float32 probabilities with the thresholds as given, as faster-whisper makes them."""
    o = options if options is not None else VadOptions()
    threshold = o.threshold
    neg = o.neg_threshold if o.neg_threshold is not None else max(threshold - 0.15, 0.01)
    min_speech = sampling_rate * o.min_speech_duration_ms / 1000
    pad = sampling_rate * o.speech_pad_ms / 1000
    max_speech = sampling_rate * o.max_speech_duration_s - WINDOW - 2 * pad
    min_silence = sampling_rate * o.min_silence_duration_ms / 1000
    min_silence_at_max = sampling_rate * 98 / 1000

    found: list[list] = []     # [start, end]
    start: Optional[int] = None  # the open chunk's start (None: not in speech)
    silence_from = 0           # where the current run below neg began (0: none)
    last_gap_end = 0           # end of the last long-enough silence inside the open chunk
    resume_at = 0              # where speech came back after it
    for i, p in enumerate(np.asarray(probs, np.float32).reshape(-1)):
        pos = WINDOW * i
        loud = p >= threshold
        if loud and silence_from:
            silence_from = 0
            if resume_at < last_gap_end:
                resume_at = pos
        if loud and start is None:
            start = pos
            continue
        if start is not None and pos - start > max_speech:
            if last_gap_end:   # cut at the last silence seen
                found.append([start, last_gap_end])
                start = None if resume_at < last_gap_end else resume_at
                last_gap_end = resume_at = silence_from = 0
            else:              # none: cut here
                found.append([start, pos])
                start = None
                last_gap_end = resume_at = silence_from = 0
                continue
        if start is not None and p < neg:
            if not silence_from:
                silence_from = pos
            if pos - silence_from > min_silence_at_max:
                last_gap_end = silence_from
            if pos - silence_from < min_silence:
                continue
            if silence_from - start > min_speech:
                found.append([start, silence_from])
            start = None
            last_gap_end = resume_at = silence_from = 0
            continue
    if start is not None and n_samples - start > min_speech:
        found.append([start, n_samples])

    for k, ch in enumerate(found):
        if k == 0:
            ch[0] = int(max(0, ch[0] - pad))
        if k + 1 < len(found):
            nxt = found[k + 1]
            gap = nxt[0] - ch[1]
            if gap < 2 * pad:
                ch[1] += int(gap // 2)
                nxt[0] = int(max(0, nxt[0] - gap // 2))
            else:
                ch[1] = int(min(n_samples, ch[1] + pad))
                nxt[0] = int(max(0, nxt[0] - pad))
        else:
            ch[1] = int(min(n_samples, ch[1] + pad))
    return [{"start": int(s), "end": int(e)} for s, e in found]


def get_speech_timestamps(samples: np.ndarray, options: Any = None, model: Any = None,
                          sampling_rate: int = SAMPLING_RATE) -> list[dict]:
    """[{"start", "end"}] in samples: the speech chunks of 16 kHz `samples` (speech_chunks over
    speech_probabilities). `options`: VadOptions, a dict of its fields, or None."""
    if sampling_rate != SAMPLING_RATE:
        raise InvalidConfig(field="sampling_rate", reason=f"the Silero VAD runs at {SAMPLING_RATE} Hz here")
    opts = vad_options(options)
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    return speech_chunks(speech_probabilities(x, model), x.size, opts, sampling_rate)


def collect_chunks(samples: np.ndarray, chunks: list[dict]) -> np.ndarray:
    """The samples of the chunks, concatenated (an empty float32 array when there are none)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if not chunks:
        return np.zeros(0, np.float32)
    return np.concatenate([x[c["start"]:c["end"]] for c in chunks]).astype(np.float32, copy=False)


class SpeechTimestampsMap:
    """Times of the collected speech -> times of the original audio: a time falls in the chunk
    whose collected end (in samples) is the first above it (the end itself counts for an end
    time that lands exactly on it), and moves by the silence removed before that chunk; rounded
    to `precision` decimals."""

    def __init__(self, chunks: list[dict], sampling_rate: int = SAMPLING_RATE, precision: int = 2):
        self.sampling_rate = sampling_rate
        self.precision = precision
        self.ends: list[int] = []           # each chunk's end in the collected audio (samples)
        self.silence_before: list[float] = []  # seconds removed before each chunk
        removed = 0
        prev_end = 0
        for c in chunks:
            removed += c["start"] - prev_end
            prev_end = c["end"]
            self.ends.append(c["end"] - removed)
            self.silence_before.append(removed / sampling_rate)

    def chunk_index(self, t: float, is_end: bool = False) -> int:
        sample = int(t * self.sampling_rate)
        if is_end and sample in self.ends:
            return self.ends.index(sample)
        return min(bisect.bisect(self.ends, sample), len(self.ends) - 1)

    def original_time(self, t: float, chunk: Optional[int] = None, is_end: bool = False) -> float:
        if chunk is None:
            chunk = self.chunk_index(t, is_end)
        return round(self.silence_before[chunk] + t, self.precision)


def restore_segment(seg: dict, ts: SpeechTimestampsMap) -> dict:
    """A copy of the segment (a dict with "start", "end" and maybe "words") with its times moved
    from the collected speech back to the original audio. Words keep the chunk of their middle (a
    word never straddles two chunks) and give the segment its start and end; without words the
    start and end are moved on their own, as faster-whisper does."""
    words = seg.get("words")
    if words:
        moved = []
        for w in words:
            k = ts.chunk_index((w["start"] + w["end"]) / 2)
            moved.append(dict(w, start=ts.original_time(w["start"], k), end=ts.original_time(w["end"], k)))
        return dict(seg, words=moved, start=moved[0]["start"], end=moved[-1]["end"])
    return dict(seg, start=ts.original_time(seg["start"]), end=ts.original_time(seg["end"], is_end=True))


def restore_timestamps(segments: Iterable[dict], chunks: list[dict],
                       sampling_rate: int = SAMPLING_RATE) -> Iterator[dict]:
    """restore_segment over segments, for the chunks that get_speech_timestamps found (as is
    when there are none)."""
    if not chunks:
        yield from segments
        return
    ts = SpeechTimestampsMap(chunks, sampling_rate)
    for seg in segments:
        yield restore_segment(seg, ts)


__all__ = ["VadOptions", "vad_options", "load_vad_model", "speech_probabilities", "speech_chunks",
           "get_speech_timestamps", "collect_chunks", "SpeechTimestampsMap", "restore_segment",
           "restore_timestamps"]
