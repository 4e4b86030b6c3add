"""Transcript formats (python/cyb_llm/speech/transcript.py): SRT and WebVTT parsed back by a subtitle
reader written here from the two formats' rules, timestamps, OpenAI verbose_json keys."""
import json
import re

import pytest

from cyb_llm.speech.transcript import format_timestamp, render, to_srt, to_vtt, verbose_json

SEGS = [
    {"id": 0, "start": 0.0, "end": 2.5, "text": " Hello world."},
    {"id": 1, "start": 2.5, "end": 3661.042, "text": " A long one --> with an arrow\nand a newline."},
]
RESULT = {"text": " Hello world. A long one.", "language": "en", "segments": SEGS}


def _seconds(ts: str) -> float:
    parts = ts.replace(",", ".").split(":")
    return sum(float(p) * 60 ** i for i, p in enumerate(reversed(parts)))


def _cues(text: str, srt: bool):
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    if not srt:
        assert blocks[0].startswith("WEBVTT")
        blocks = blocks[1:]
    cues = []
    for n, b in enumerate(blocks, 1):
        lines = b.split("\n")
        if srt:
            assert lines[0] == str(n)
            lines = lines[1:]
        m = re.fullmatch(r"(\S+) --> (\S+)", lines[0])
        assert m, lines[0]
        cues.append((_seconds(m.group(1)), _seconds(m.group(2)), "\n".join(lines[1:])))
    return cues


@pytest.mark.parametrize("srt", [True, False])
def test_subtitles_parse_back(srt):
    text = to_srt(SEGS) if srt else to_vtt(SEGS)
    cues = _cues(text, srt)
    assert [(a, b) for a, b, _ in cues] == [(s["start"], s["end"]) for s in SEGS]
    assert cues[0][2] == "Hello world."
    assert "-->" not in cues[1][2] and "\n" not in cues[1][2]


def test_timestamps():
    assert format_timestamp(0) == "00:00.000"
    assert format_timestamp(3661.042, ",", True) == "01:01:01,042"
    assert format_timestamp(59.9996) == "01:00.000"
    with pytest.raises(ValueError):
        format_timestamp(float("nan"))


def test_render_formats():
    assert render(RESULT, "text") == "Hello world. A long one.\n"
    assert json.loads(render(RESULT, "json")) == {"text": RESULT["text"]}
    v = json.loads(render(RESULT, "verbose_json", task="translate"))
    assert v["task"] == "translate" and v["language"] == "en" and v["duration"] == SEGS[-1]["end"]
    assert set(v["segments"][0]) == {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                                     "compression_ratio", "no_speech_prob"}
    assert verbose_json({"segments": []})["duration"] == 0.0
    with pytest.raises(ValueError):
        render(RESULT, "docx")


def test_word_granularity():
    words = [[{"word": " Hello", "start": 0.0, "end": 0.4, "probability": 0.9},
              {"word": " world.", "start": 0.4, "end": 1.1, "probability": 0.8}],
             [{"word": " A", "start": 2.5, "end": 2.6, "probability": 0.7}]]
    res = dict(RESULT, segments=[dict(s, words=w) for s, w in zip(SEGS, words)])
    v = verbose_json(res, granularities=["word"])
    assert "segments" not in v  # OpenAI: segments only when asked for
    assert v["words"] == [{"word": "Hello", "start": 0.0, "end": 0.4}, {"word": "world.", "start": 0.4, "end": 1.1},
                          {"word": "A", "start": 2.5, "end": 2.6}]
    both = json.loads(render(res, "verbose_json", granularities=("segment", "word")))
    assert both["words"] == v["words"] and len(both["segments"]) == 2 and "words" not in both["segments"][0]
    assert json.loads(render(res, "json", granularities=("word",))) == {"text": RESULT["text"], "words": v["words"]}
    assert "words" not in json.loads(render(res, "json"))
    with pytest.raises(ValueError, match="word_timestamps"):  # a result transcribed without them
        verbose_json(RESULT, granularities=["word"])
