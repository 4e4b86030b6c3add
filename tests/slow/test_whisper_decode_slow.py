"""Slow tier of tests/test_whisper_decode.py: beam search (beam 5, patience 1, length penalty 1)
per window against CTranslate2 and long-form against faster-whisper, and the multilingual
whisper-base cases (language detection on 4 languages, transcription)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import test_whisper_decode as base  # noqa: E402
from test_whisper_decode import _compare, _ct2, wo  # noqa: E402
from tolerances import tolerance  # noqa: E402

test_language_detection_base_matches_ctranslate2 = base.check_language_detection_base
test_transcribe_base_short_matches_faster_whisper = base.check_transcribe_base_short


@pytest.mark.parametrize("name", ["whisper-tiny", "whisper-base"])
def test_window_beam5_matches_ctranslate2(name):
    pipe, mf, folder = wo.load(name)
    ct2, model = _ct2(folder)
    from cyb_llm.speech.pipeline import pad_or_trim
    from cyb_llm.speech.search import DecodeOptions, WindowDecoder, build_prompt

    audio = wo.english_clip(wo.ENGLISH[3:6])
    mel = pipe._mel(audio)
    window = pad_or_trim(mel[:, :mel.shape[-1] - 1])
    tok = pipe.tok
    dec = WindowDecoder(pipe.runtime, tok, DecodeOptions(beam_size=5, patience=1, length_penalty=1),
                        pipe.begin_suppress_tokens)
    enc = pipe.runtime.encode(window)
    feats = ct2.StorageView.from_array(window[None])
    prompt = build_prompt(tok, tok.encode(" Hello there."), tok.sot_sequence("en", "transcribe"), False)
    ours = dec.generate(enc, prompt, 0.0)
    theirs = model.generate(feats, [prompt], beam_size=5, patience=1, length_penalty=1, max_length=448,
                            return_scores=True, return_no_speech_prob=True, suppress_blank=True,
                            suppress_tokens=tok.suppressed_tokens([-1]), max_initial_timestamp_index=50)[0]
    assert ours.tokens == theirs.sequences_ids[0]
    assert abs(ours.score - theirs.scores[0]) < tolerance("whisper-logprob")
    assert len(ours.tokens) > 20


def test_transcribe_tiny_long_form_beam5_matches_faster_whisper():
    pipe, mf, folder = wo.load("whisper-tiny")
    audio = wo.english_clip(wo.ENGLISH)
    assert len(audio) / wo.SR >= 60
    ours = pipe.transcribe(audio, **wo.ours_options(5))
    segs, info = wo.faster_whisper_transcribe(folder, audio, **wo.fw_options(5))
    _compare(ours, segs, info)
    assert ours["segments"][-1]["end"] > 55


def test_transcribe_base_long_form_matches_faster_whisper():
    """Multilingual long-form: language detected on the first window, greedy."""
    pipe, mf, folder = wo.load("whisper-base")
    audio = wo.english_clip(wo.ENGLISH)
    ours = pipe.transcribe(audio, **wo.ours_options(1))
    segs, info = wo.faster_whisper_transcribe(folder, audio, **wo.fw_options(1))
    _compare(ours, segs, info)
    assert ours["language"] == "en"
