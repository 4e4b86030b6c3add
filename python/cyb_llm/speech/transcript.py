"""Transcription results as the formats people use: plain text, SRT, WebVTT, JSON and the OpenAI
`verbose_json` shape (docs/whisper.md). A result is the dict `transcribe` returns:
{"text", "language", "duration"?, "segments": [{"id", "start", "end", "text", ...}]}.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")


def format_timestamp(seconds: float, decimal_marker: str = ".", always_hours: bool = False) -> str:
    """hh:mm:ss.mmm (hours left out when zero unless always_hours), milliseconds rounded."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a timestamp must be a finite number >= 0, got {seconds!r}")
    ms = int(round(seconds * 1000.0))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    head = f"{h:02d}:" if always_hours or h > 0 else ""
    return f"{head}{m:02d}:{s:02d}{decimal_marker}{ms:03d}"


def _cue_text(text: str) -> str:
    # a blank line ends a cue in both formats; "-->" would read as a timing line
    return " ".join(text.strip().split()).replace("-->", "->")


def to_srt(segments: Iterable[Mapping[str, Any]]) -> str:
    """SubRip: numbered cues, hh:mm:ss,mmm --> hh:mm:ss,mmm, a blank line after each."""
    out = []
    for i, s in enumerate(segments, 1):
        out.append(f"{i}\n{format_timestamp(s['start'], ',', True)} --> {format_timestamp(s['end'], ',', True)}\n"
                   f"{_cue_text(s['text'])}\n")
    return "\n".join(out)


def to_vtt(segments: Iterable[Mapping[str, Any]]) -> str:
    """WebVTT: the WEBVTT header, then mm:ss.mmm --> mm:ss.mmm cues (hours when needed)."""
    out = ["WEBVTT\n"]
    for s in segments:
        out.append(f"{format_timestamp(s['start'])} --> {format_timestamp(s['end'])}\n{_cue_text(s['text'])}\n")
    return "\n".join(out)


GRANULARITIES = ("segment", "word")


def words_of(result: Mapping[str, Any]) -> list[dict]:
    """The words of every segment (transcribe(..., word_timestamps=True)) as OpenAI lists them:
    {"word" (no surrounding spaces), "start", "end"}."""
    out = []
    for s in result.get("segments", []):
        if "words" not in s:
            raise ValueError("the result has no word timestamps (transcribe with word_timestamps=True)")
        out.extend({"word": w["word"].strip(), "start": w["start"], "end": w["end"]} for w in s["words"])
    return out


def verbose_json(result: Mapping[str, Any], task: str = "transcribe",
                 granularities: Iterable[str] = ("segment",)) -> dict:
    """OpenAI's verbose_json transcription object: "segments" when `granularities` has "segment",
    "words" (words_of) when it has "word"."""
    granularities = set(granularities)
    segs = []
    for i, s in enumerate(result.get("segments", [])):
        segs.append({"id": s.get("id", i), "seek": s.get("seek", 0), "start": s["start"], "end": s["end"],
                     "text": s["text"], "tokens": list(s.get("tokens", [])),
                     "temperature": s.get("temperature", 0.0), "avg_logprob": s.get("avg_logprob", 0.0),
                     "compression_ratio": s.get("compression_ratio", 0.0),
                     "no_speech_prob": s.get("no_speech_prob", 0.0)})
    dur = result.get("duration")
    if dur is None:
        dur = segs[-1]["end"] if segs else 0.0
    out = {"task": task, "language": result.get("language"), "duration": dur, "text": result.get("text", "")}
    if "segment" in granularities:
        out["segments"] = segs
    if "word" in granularities:
        out["words"] = words_of(result)
    return out


def render(result: Mapping[str, Any], fmt: str, task: str = "transcribe",
           granularities: Iterable[str] = ("segment",)) -> str:
    """The result as text in one of FORMATS (json: {"text"}, with "words" (words_of) when
    `granularities` has "word"; verbose_json: verbose_json())."""
    granularities = tuple(granularities)
    if fmt == "text":
        return result.get("text", "").strip() + "\n"
    if fmt == "srt":
        return to_srt(result.get("segments", []))
    if fmt == "vtt":
        return to_vtt(result.get("segments", []))
    if fmt == "json":
        obj: dict[str, Any] = {"text": result.get("text", "")}
        if "word" in granularities:
            obj["words"] = words_of(result)
        return json.dumps(obj, ensure_ascii=False)
    if fmt == "verbose_json":
        return json.dumps(verbose_json(result, task, granularities), ensure_ascii=False)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
