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


def verbose_json(result: Mapping[str, Any], task: str = "transcribe") -> dict:
    """OpenAI's verbose_json transcription object."""
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
    return {"task": task, "language": result.get("language"), "duration": dur, "text": result.get("text", ""),
            "segments": segs}


def render(result: Mapping[str, Any], fmt: str, task: str = "transcribe") -> str:
    """The result as text in one of FORMATS (json: {"text"}; verbose_json: verbose_json())."""
    if fmt == "text":
        return result.get("text", "").strip() + "\n"
    if fmt == "srt":
        return to_srt(result.get("segments", []))
    if fmt == "vtt":
        return to_vtt(result.get("segments", []))
    if fmt == "json":
        return json.dumps({"text": result.get("text", "")}, ensure_ascii=False)
    if fmt == "verbose_json":
        return json.dumps(verbose_json(result, task), ensure_ascii=False)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
