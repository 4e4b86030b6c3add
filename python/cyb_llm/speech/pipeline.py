"""Whisper long-form transcription (docs/whisper.md, "Decoding and transcription"): the log-mel of
the whole input, 30 s windows with seek from the last timestamp, the previous text as prompt,
language detection, segments and their word timestamps, as faster-whisper 1.x does it. One
window's decoding is search.py, word timestamps alignment.py, the shared pieces common.py, the
VAD filter (vad_filter=True: only the speech chunks are decoded, the times moved back) vad.py.

The pipeline is plain Python over a `WhisperRuntime` (common.py): numpy, zlib and the `.model`
tokenizer only, no torch, no transformers.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ..errors import InvalidConfig
from . import audio
from .alignment import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS, add_word_timestamps, words_end
from .common import (DEFAULT_TEMPERATURES, FRAMES_PER_SECOND, HOP_LENGTH, INPUT_STRIDE, N_FRAMES, TIME_PER_FRAME,
                     TIME_PRECISION, WhisperRuntime, WhisperTokens, log_softmax)
from .search import DecodeOptions, WindowDecoder, build_prompt
from .vad import SAMPLING_RATE as VAD_RATE
from .vad import SpeechTimestampsMap, collect_chunks, get_speech_timestamps, restore_segment, vad_options


# --------------------------------------------------------------------------------------------
# long form
# --------------------------------------------------------------------------------------------

def pad_or_trim(mel: np.ndarray, length: int = N_FRAMES) -> np.ndarray:
    if mel.shape[-1] > length:
        mel = mel[..., :length]
    if mel.shape[-1] < length:
        mel = np.pad(mel, [(0, 0)] * (mel.ndim - 1) + [(0, length - mel.shape[-1])])
    return np.ascontiguousarray(mel, dtype=np.float32)


def split_segments_by_timestamps(tok: WhisperTokens, tokens: Sequence[int], time_offset: float,
                                 segment_size: int, segment_duration: float, seek: int
                                 ) -> tuple[list[dict], int, bool]:
    """The segments of one window's tokens (cut after each pair of consecutive timestamps) and the
    next seek: the window's end when the tokens end on a single timestamp or hold no pair, else
    the last complete segment's end timestamp."""
    tb = tok.timestamp_begin
    tokens = list(tokens)
    segments: list[dict] = []
    single_ending = len(tokens) >= 2 and tokens[-2] < tb <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= tb and tokens[i - 1] >= tb]
    if consecutive:
        slices = list(consecutive)
        if single_ending:
            slices.append(len(tokens))
        last = 0
        for cur in slices:
            part = tokens[last:cur]
            start = time_offset + (part[0] - tb) * TIME_PRECISION
            end = time_offset + (part[-1] - tb) * TIME_PRECISION
            segments.append(dict(seek=seek, start=start, end=end, tokens=part))
            last = cur
        if single_ending:
            seek += segment_size
        else:
            seek += (tokens[last - 1] - tb) * INPUT_STRIDE
    else:
        duration = segment_duration
        stamps = [t for t in tokens if t >= tb]
        if stamps and stamps[-1] != tb:
            duration = (stamps[-1] - tb) * TIME_PRECISION
        segments.append(dict(seek=seek, start=time_offset, end=time_offset + duration, tokens=tokens))
        seek += segment_size
    return segments, seek, single_ending


def detect_language(runtime: WhisperRuntime, tok: WhisperTokens, mel_window: np.ndarray,
                    encoder_output: Any = None) -> tuple[str, float, list[tuple[str, float]]]:
    """(code, probability, all (code, probability) best first): softmax over the language
    tokens of the logits after <|startoftranscript|>."""
    if not tok.multilingual:
        return "en", 1.0, [("en", 1.0)]
    enc = encoder_output if encoder_output is not None else runtime.encode(pad_or_trim(mel_window))
    logits = np.asarray(runtime.session(enc).forward([tok.sot])[-1], dtype=np.float32)
    ids = np.asarray(tok.lang_ids)
    p = np.exp(log_softmax(logits[ids]).astype(np.float64))
    order = sorted(range(len(ids)), key=lambda i: -p[i])
    probs = [(tok._id_to_lang.get(int(ids[i]), str(int(ids[i]))), float(p[i])) for i in order]
    return probs[0][0], probs[0][1], probs


def _default_mel(n_mels: int) -> Callable[[np.ndarray], np.ndarray]:
    # the native log-mel frontend (docs/whisper.md)
    return lambda samples: audio.log_mel_spectrogram(samples, n_mels=n_mels, padding=HOP_LENGTH)


class WhisperPipeline:
    """transcribe / transcribe_stream over a runtime and a tokenizer.

    mel_fn(samples float32 16 kHz) -> float32 [n_mels, frames]: the log-mel of the whole input
    with HOP_LENGTH zero samples appended (frames = len // 160 + 1; the clamp to max - 8 is over
    the whole input), as faster-whisper computes it; the windows are slices of it."""

    def __init__(self, runtime: WhisperRuntime, tokens: WhisperTokens,
                 mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                 begin_suppress_tokens: Optional[Sequence[int]] = None,
                 alignment_heads: Optional[Sequence[Sequence[int]]] = None):
        self.runtime = runtime
        self.tok = tokens
        self.mel_fn = mel_fn
        self.begin_suppress_tokens = begin_suppress_tokens
        self.alignment_heads = [(int(l), int(h)) for l, h in alignment_heads] if alignment_heads else None

    @classmethod
    def from_modelfile(cls, runtime: WhisperRuntime, mf: Any, mel_fn=None) -> "WhisperPipeline":
        arch = mf.config["architecture"]
        return cls(runtime, WhisperTokens(arch, mf.tokenizer, runtime.n_vocab), mel_fn,
                   arch.get("begin_suppress_tokens"), arch.get("alignment_heads"))

    def _mel(self, audio: np.ndarray) -> np.ndarray:
        fn = self.mel_fn or _default_mel(self.runtime.n_mels)
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if not np.isfinite(samples).all():
            raise InvalidConfig(field="audio", reason="holds NaN or infinite samples")
        return np.asarray(fn(samples), dtype=np.float32)

    def transcribe(self, audio: np.ndarray, **kw: Any) -> dict:
        info: dict = {}
        segments = list(self.transcribe_stream(audio, _info=info, **kw))
        out = {"text": "".join(s["text"] for s in segments).strip(), "language": info.get("language"),
               "language_probability": info.get("language_probability"), "segments": segments}
        if "duration_after_vad" in info:
            out["duration_after_vad"] = info["duration_after_vad"]
            out["speech_chunks"] = info["speech_chunks"]
        return out

    def transcribe_stream(self, audio: np.ndarray, language: Optional[str] = None, task: str = "transcribe",
                          beam_size: int = 5, best_of: int = 5, patience: float = 1, length_penalty: float = 1,
                          temperature: Union[float, Sequence[float]] = DEFAULT_TEMPERATURES,
                          compression_ratio_threshold: Optional[float] = 2.4,
                          log_prob_threshold: Optional[float] = -1.0,
                          no_speech_threshold: Optional[float] = 0.6,
                          condition_on_previous_text: bool = True,
                          prompt_reset_on_temperature: float = 0.5,
                          initial_prompt: Optional[Union[str, Sequence[int]]] = None,
                          without_timestamps: bool = False, max_initial_timestamp: float = 1.0,
                          suppress_blank: bool = True, suppress_tokens: Optional[Sequence[int]] = (-1,),
                          seed: Optional[int] = None, word_timestamps: bool = False,
                          prepend_punctuations: str = PREPEND_PUNCTUATIONS,
                          append_punctuations: str = APPEND_PUNCTUATIONS,
                          vad_filter: bool = False, vad_parameters: Any = None, vad_model: Any = None,
                          _info: Optional[dict] = None) -> Iterator[dict]:
        """Segments as they are decoded (see `transcribe`). vad_filter: only the speech chunks
        that the Silero VAD finds (vad.py; vad_parameters: a dict of VadOptions fields or a
        VadOptions) are decoded, concatenated, and the segment and word times are moved back to
        the input's timeline, as faster-whisper's vad_filter; vad_model: the VAD's `.model` path
        or GraphModel (None: the hub's "silero-vad")."""
        if word_timestamps:
            if not self.alignment_heads:
                raise InvalidConfig(field="alignment_heads", reason="word_timestamps needs the model's alignment "
                                    "heads ([architecture] alignment_heads of the .model; re-import the model)")
            if not callable(getattr(self.runtime, "cross_attention", None)):
                raise InvalidConfig(field="word_timestamps", reason="the runtime has no cross_attention()")
        if beam_size < 1 or best_of < 1 or patience <= 0:
            raise InvalidConfig(field="beam_size" if beam_size < 1 else "best_of" if best_of < 1 else "patience",
                                reason=f"beam_size and best_of must be >= 1, patience > 0 (got {beam_size}, "
                                       f"{best_of}, {patience})")
        temps = list(temperature) if isinstance(temperature, (list, tuple)) else [float(temperature)]
        tok = self.tok
        ts_map: Optional[SpeechTimestampsMap] = None
        if vad_filter:
            opts = vad_options(vad_parameters)
            samples = np.asarray(audio, dtype=np.float32).reshape(-1)
            if not np.isfinite(samples).all():
                raise InvalidConfig(field="audio", reason="holds NaN or infinite samples")
            chunks = get_speech_timestamps(samples, opts, model=vad_model)
            audio = collect_chunks(samples, chunks)
            if chunks:
                ts_map = SpeechTimestampsMap(chunks, VAD_RATE)
            if _info is not None:
                _info.update(duration_after_vad=audio.size / VAD_RATE, speech_chunks=chunks)
        elif vad_parameters is not None:
            vad_options(vad_parameters)  # still validated
        mel = self._mel(audio)
        content_frames = mel.shape[-1] - 1
        if language is None:
            if tok.multilingual:
                language, lang_prob, _ = detect_language(self.runtime, tok, mel[:, :N_FRAMES])
            else:
                language, lang_prob = "en", 1.0
        else:
            if not tok.multilingual:
                language = "en"
            else:
                tok.language_id(language)
            lang_prob = 1.0
        if _info is not None:
            _info.update(language=language, language_probability=lang_prob)
        opts = DecodeOptions(beam_size=beam_size, best_of=best_of, patience=patience, length_penalty=length_penalty,
                             temperatures=temps, compression_ratio_threshold=compression_ratio_threshold,
                             log_prob_threshold=log_prob_threshold, no_speech_threshold=no_speech_threshold,
                             suppress_blank=suppress_blank, suppress_tokens=suppress_tokens,
                             without_timestamps=without_timestamps, max_initial_timestamp=max_initial_timestamp,
                             seed=seed)
        dec = WindowDecoder(self.runtime, tok, opts, self.begin_suppress_tokens)
        sot_seq = tok.sot_sequence(language, task)
        all_tokens: list[int] = []
        if initial_prompt is not None:
            if isinstance(initial_prompt, str):
                all_tokens.extend(tok.encode(" " + initial_prompt.strip()))
            else:
                all_tokens.extend(int(t) for t in initial_prompt)
        prompt_reset_since = 0
        seek = 0
        idx = 0
        last_speech_timestamp = 0.0
        while seek < content_frames:
            time_offset = seek * TIME_PER_FRAME
            segment_size = min(N_FRAMES, content_frames - seek)
            window = pad_or_trim(mel[:, seek:seek + segment_size])
            segment_duration = segment_size * TIME_PER_FRAME
            previous = all_tokens[prompt_reset_since:]
            enc = self.runtime.encode(window)
            prompt = build_prompt(tok, previous, sot_seq, without_timestamps)
            r = dec.generate_with_fallback(enc, prompt)
            if no_speech_threshold is not None:
                skip = r.no_speech_prob > no_speech_threshold
                if log_prob_threshold is not None and r.avg_logprob > log_prob_threshold:
                    skip = False
                if skip:
                    seek += segment_size
                    continue
            previous_seek = seek
            current, seek, single_ending = split_segments_by_timestamps(tok, r.tokens, time_offset, segment_size,
                                                                        segment_duration, seek)
            if word_timestamps:
                add_word_timestamps(self.runtime, tok, current, enc, sot_seq, segment_size, self.alignment_heads,
                                    language, prepend_punctuations, append_punctuations, last_speech_timestamp)
                end = words_end(current)
                if not single_ending and end is not None and end > time_offset:
                    seek = round(end * FRAMES_PER_SECOND)
                if end is not None:
                    last_speech_timestamp = end
            for s in current:
                text = tok.decode(s["tokens"])
                if s["start"] == s["end"] or not text.strip():
                    continue
                all_tokens.extend(s["tokens"])
                idx += 1
                seg = {"id": idx, "seek": previous_seek, "start": s["start"], "end": s["end"], "text": text,
                       "tokens": list(s["tokens"]), "temperature": r.temperature, "avg_logprob": r.avg_logprob,
                       "compression_ratio": r.compression_ratio, "no_speech_prob": r.no_speech_prob,
                       **({"words": s["words"]} if word_timestamps else {})}
                yield restore_segment(seg, ts_map) if ts_map is not None else seg
            if not condition_on_previous_text or r.temperature > prompt_reset_on_temperature:
                prompt_reset_since = len(all_tokens)


def transcribe(runtime: WhisperRuntime, tokens: WhisperTokens, audio: np.ndarray, *,
               mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
               begin_suppress_tokens: Optional[Sequence[int]] = None,
               alignment_heads: Optional[Sequence[Sequence[int]]] = None, **kw: Any) -> dict:
    """{"text", "language", "language_probability", "segments": [...]} (WhisperPipeline.transcribe)."""
    return WhisperPipeline(runtime, tokens, mel_fn, begin_suppress_tokens, alignment_heads).transcribe(audio, **kw)


def transcribe_stream(runtime: WhisperRuntime, tokens: WhisperTokens, audio: np.ndarray, *,
                      mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                      begin_suppress_tokens: Optional[Sequence[int]] = None,
                      alignment_heads: Optional[Sequence[Sequence[int]]] = None, **kw: Any) -> Iterator[dict]:
    return WhisperPipeline(runtime, tokens, mel_fn, begin_suppress_tokens,
                           alignment_heads).transcribe_stream(audio, **kw)


__all__ = ["WhisperPipeline", "transcribe", "transcribe_stream", "detect_language", "split_segments_by_timestamps",
           "pad_or_trim"]
