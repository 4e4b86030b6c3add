"""Speech to text at the user's surfaces (docs/whisper.md "Use"): `/v1/audio/transcriptions` and
`/v1/audio/translations` on `cyb-llm serve` through the official `openai` client and raw multipart,
and `cyb-llm transcribe` (text, SRT, JSON): real whisper-tiny weights, a synthesized English clip,
the transcript compared with `WhisperModel.transcribe` of the same audio (itself checked against
faster-whisper in tests/test_whisper_native.py)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("multipart")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
sf = pytest.importorskip("soundfile")

import cyb_llm  # noqa: E402
from serve_proc import child_env  # noqa: E402
from test_serve import serving  # noqa: E402
from whisper_oracle import english_clip, fetch_or_skip  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "The train to Boston leaves from platform seven in about twenty minutes."]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    audio = english_clip(SENTENCES)
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    sf.write(path, audio, 16000, subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def tiny():
    fetch_or_skip("whisper-tiny")
    return cyb_llm.load("whisper-tiny", threads=2)


@pytest.fixture(scope="module")
def expected(tiny, clip):
    return tiny.transcribe(clip)


@pytest.fixture(scope="module")
def with_words(tiny, clip):
    """transcribe(word_timestamps=True) (checked against faster-whisper in tests/test_whisper_words.py;
    as there, the words move the segments' start and end)."""
    return tiny.transcribe(clip, word_timestamps=True)


@pytest.fixture(scope="module")
def expected_words(with_words):
    """The words as OpenAI lists them: no surrounding spaces, no probability."""
    return [(w["word"].strip(), w["start"], w["end"]) for s in with_words["segments"] for w in s["words"]]


@pytest.fixture(scope="module")
def base(tiny):
    with serving({"whisper-tiny": tiny, "minilm": cyb_llm.load("minilm", threads=2)}) as url:
        yield url


def test_openai_client_transcription(base, clip, expected):
    assert "fox" in expected["text"] and "Boston" in expected["text"]
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    with open(clip, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-tiny", file=f)
    assert r.text == expected["text"]
    with open(clip, "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-tiny", file=f, response_format="verbose_json",
                                               timestamp_granularities=["segment"])
    assert v.text == expected["text"] and v.language == "en"
    assert [(s.start, s.end) for s in v.segments] == [(s["start"], s["end"]) for s in expected["segments"]]
    with open(clip, "rb") as f:
        srt = client.audio.transcriptions.create(model="whisper-tiny", file=f, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> ") and "fox" in srt


def test_openai_client_word_timestamps(base, clip, expected, with_words, expected_words):
    assert len(expected_words) >= 15 and expected_words[0][0] == "The"
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    with open(clip, "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-tiny", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word"])
    assert v.text == expected["text"]
    assert [(w.word, w.start, w.end) for w in v.words] == expected_words
    assert v.segments is None  # OpenAI: segments only when asked for
    with open(clip, "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-tiny", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word", "segment"])
    assert [(w.word, w.start, w.end) for w in v.words] == expected_words
    assert [(s.start, s.end) for s in v.segments] == [(s["start"], s["end"]) for s in with_words["segments"]]
    assert all(set(w.model_dump()) == {"word", "start", "end"} for w in v.words)


def test_translation_endpoint_runs_the_translate_task(base, clip, tiny):
    with open(clip, "rb") as f:
        r = httpx.post(base + "/v1/audio/translations", files={"file": ("clip.wav", f, "audio/wav")},
                       data={"model": "whisper-tiny", "response_format": "text"}, timeout=120)
    assert r.status_code == 200, r.text
    # whisper-tiny.en is English-only: the translate task token does not exist, its tokens are the
    # same as transcribe's; the answer is the transcript (as text)
    assert r.text.strip() == tiny.transcribe(clip, task="translate")["text"]


@pytest.mark.parametrize("case", [
    ("no file", {}, None, 400, "file"),
    ("not audio", {}, b"this is not audio at all", 400, "file"),
    ("bad format", {"response_format": "docx"}, "clip", 400, "response_format"),
    ("word timestamps as json", {"timestamp_granularities[]": "word"}, "clip", 400, "timestamp_granularities[]"),
    ("unknown granularity", {"timestamp_granularities[]": "sentence", "response_format": "verbose_json"}, "clip",
     400, "timestamp_granularities[]"),
    ("bad temperature", {"temperature": "hot"}, "clip", 400, "temperature"),
    ("text model", {"model": "minilm"}, "clip", 400, "model"),
    ("unknown model", {"model": "whisper-huge"}, "clip", 404, "model"),
], ids=lambda c: c[0])
def test_bad_audio_requests(base, clip, case):
    _, data, content, status, param = case
    files = None
    if content == "clip":
        files = {"file": ("clip.wav", open(clip, "rb"), "audio/wav")}
    elif content is not None:
        files = {"file": ("x.wav", io.BytesIO(content), "audio/wav")}
    r = httpx.post(base + "/v1/audio/transcriptions", files=files, data={"model": "whisper-tiny", **data}
                   if "model" not in data else data, timeout=60)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert httpx.get(base + "/health").status_code == 200


def test_json_body_is_refused(base):
    r = httpx.post(base + "/v1/audio/transcriptions", json={"model": "whisper-tiny"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "cyb_llm.cli", *args], capture_output=True, text=True,
                          env=child_env(), timeout=300)


def test_cli_transcribe_formats(clip, expected, tmp_path):
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected["text"]
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2", "--srt", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    srt = (tmp_path / "clip.srt").read_text()
    assert srt.count(" --> ") == len(expected["segments"])
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2", "--verbose-json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["text"] == expected["text"]


def test_cli_word_timestamps(clip, expected_words):
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2", "--verbose-json", "--word-timestamps")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert [(w["word"], w["start"], w["end"]) for w in v["words"]] == expected_words and v["segments"]
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2", "--json", "--word-timestamps")
    assert r.returncode == 0, r.stderr
    assert [(w["word"], w["start"], w["end"]) for w in json.loads(r.stdout)["words"]] == expected_words
    r = _cli("transcribe", "whisper-tiny", clip, "--threads", "2", "--srt", "--word-timestamps")
    assert r.returncode != 0 and "word_timestamps" in r.stderr and "Traceback" not in r.stderr


def test_cli_transcribe_errors(tmp_path):
    r = _cli("transcribe", "whisper-tiny", str(tmp_path / "missing.wav"))
    assert r.returncode != 0 and "missing.wav" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really")
    r = _cli("transcribe", "whisper-tiny", str(bad))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    r = _cli("transcribe", "minilm", str(bad))
    assert r.returncode != 0 and "Traceback" not in r.stderr
