"""The Whisper decoding pipeline (python/cyb_llm/speech/: search.py, pipeline.py).

(a) each logits rule against transformers' processors on random logits and token histories;
(b) on the real whisper-tiny (English-only) and whisper-base (multilingual) weights, with the
runtime from transformers (tests/whisper_oracle.py): per-window tokens against CTranslate2's
Whisper.generate on the same features and prompt, long-form transcription against
faster-whisper (float32, every option explicit), language detection against CTranslate2.
Beam 5 and whisper-base long-form are in tests/slow/test_whisper_decode_slow.py."""
from __future__ import annotations

import numpy as np
import pytest
from tolerances import tolerance

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.generation.logits_process import (  # noqa: E402
    SuppressTokensAtBeginLogitsProcessor, SuppressTokensLogitsProcessor, WhisperTimeStampLogitsProcessor)

from cyb_llm.speech.pipeline import split_segments_by_timestamps  # noqa: E402
from cyb_llm.speech.search import LogitRules, _top, build_prompt, compression_ratio  # noqa: E402

# a tiny.en-shaped vocabulary layout (the real ids: eot 50256, notimestamps 50362, timestamps 50363..51863)
EOT, SOT, NO_TS, TB, V = 50256, 50257, 50362, 50363, 51864


def _hf_rules(prompt_len, suppress, begin, max_initial):
    gc = transformers.GenerationConfig(no_timestamps_token_id=NO_TS, eos_token_id=EOT,
                                       max_initial_timestamp_index=max_initial)
    return [SuppressTokensLogitsProcessor(suppress, device="cpu"),
            SuppressTokensAtBeginLogitsProcessor(begin, prompt_len, device="cpu"),
            WhisperTimeStampLogitsProcessor(gc, begin_index=prompt_len)]


def _history(rng, n):
    """A plausible generated sequence: timestamp pairs around text, ending anywhere."""
    seq, t = [], int(rng.integers(0, 40))
    seq.append(TB + t)
    while len(seq) < n:
        r = rng.random()
        if seq[-1] >= TB and (len(seq) < 2 or seq[-2] < TB):
            # an opening timestamp (or a closing one followed by text)
            seq.append(int(rng.integers(0, 50000)))
        elif r < 0.25 and seq[-1] < TB:
            t += int(rng.integers(0, 30))
            seq += [TB + t] if rng.random() < 0.5 else [TB + t, TB + t]
        else:
            seq.append(int(rng.integers(0, 50000)))
    return seq[:n]


@pytest.mark.parametrize("seed", range(6))
def test_rules_match_transformers_processors(seed):
    rng = np.random.default_rng(seed)
    suppress = sorted(set(rng.integers(0, 50000, 80).tolist()) | {SOT, NO_TS - 1})
    begin = [220, EOT]
    prompt = [SOT]
    rules = LogitRules(suppress=suppress, suppress_begin=begin, timestamps=True, eot=EOT, no_timestamps=NO_TS,
                       timestamp_begin=TB, timestamp_end=V - 1, max_initial_timestamp_index=50)
    hf = _hf_rules(len(prompt), suppress, begin, 50)
    checked = {"forced": 0, "steps": 0}
    for case in range(40):
        n = int(rng.integers(0, 12)) if case else 0
        gen = _history(rng, n) if n else []
        logits = rng.normal(0, 3, V).astype(np.float32)
        if case % 3 == 0:  # make the timestamp mass win now and then
            logits[TB:TB + 200] += 6
        ours = rules.apply(logits.copy(), gen)
        ids = torch.tensor([prompt + gen])
        scores = torch.from_numpy(logits.copy())[None]
        for p in hf:
            scores = p(ids, scores)
        theirs = scores[0].numpy()
        np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(theirs))
        np.testing.assert_array_equal(ours[np.isfinite(ours)], theirs[np.isfinite(theirs)])
        checked["steps"] += 1
        checked["forced"] += bool(gen) and bool(np.isneginf(ours[:TB]).all())
    assert checked["forced"] > 0  # the forced-timestamp branch was exercised


def test_rules_without_timestamps_and_begin():
    rules = LogitRules(suppress=[5, 7], suppress_begin=[220, EOT], timestamps=False, eot=EOT, no_timestamps=NO_TS,
                       timestamp_begin=TB, timestamp_end=V - 1)
    x = rules.apply(np.zeros(V, np.float32), [])
    assert np.isneginf(x[[5, 7, 220, EOT]]).all() and np.isfinite(x).sum() == V - 4
    y = rules.apply(np.zeros(V, np.float32), [300])  # blank suppression only at the first step
    assert np.isneginf(y[[5, 7]]).all() and np.isfinite(y).sum() == V - 2


class _Tok:
    timestamp_begin = TB
    sot_prev = 50360
    no_timestamps = NO_TS


def test_split_segments_and_seek():
    tok = _Tok()
    # two closed segments then an unfinished one: seek to the last closing timestamp
    toks = [TB, 10, 11, TB + 100, TB + 100, 12, TB + 200, TB + 210, 13]
    segs, seek, single = split_segments_by_timestamps(tok, toks, 5.0, 3000, 30.0, 500)
    assert [(s["start"], s["end"]) for s in segs] == [(5.0, 5.0 + 100 * 0.02), (5.0 + 100 * 0.02, 5.0 + 200 * 0.02)]
    assert seek == 500 + 200 * 2 and not single
    # single timestamp ending: the whole window is consumed
    toks = [TB, 10, TB + 50, TB + 50, 11, TB + 90]
    segs, seek, single = split_segments_by_timestamps(tok, toks, 0.0, 2500, 25.0, 0)
    assert single and seek == 2500 and len(segs) == 2 and segs[-1]["tokens"] == [TB + 50, 11, TB + 90]
    # no pair: one segment ending at the last timestamp
    segs, seek, _ = split_segments_by_timestamps(tok, [TB, 10, 11, TB + 70], 1.0, 3000, 30.0, 100)
    assert len(segs) == 1 and segs[0]["end"] == 1.0 + 70 * 0.02 and seek == 3100


def test_prompt_and_compression_ratio():
    tok = _Tok()
    prev = list(range(300))
    p = build_prompt(tok, prev, [SOT, 50259, 50359], True)
    assert p[0] == tok.sot_prev and p[1:224] == prev[-223:] and p[224:] == [SOT, 50259, 50359, NO_TS]
    assert build_prompt(tok, [], [SOT], False) == [SOT]
    assert compression_ratio("ab" * 100) > 2.4 > compression_ratio("The quick brown fox jumps over the lazy dog.")


# ---- real weights ---------------------------------------------------------------------------

wo = pytest.importorskip("whisper_oracle")


def _ct2(folder):
    ct2 = pytest.importorskip("ctranslate2")
    return ct2, ct2.models.Whisper(folder, device="cpu", compute_type="float32", intra_threads=2)


def test_window_tokens_match_ctranslate2_tiny():
    """Greedy, timestamps on and off, with and without a previous-text prompt: CTranslate2's
    generate on the same features and prompt gives the same tokens, no-speech probability and
    score."""
    pipe, mf, folder = wo.load("whisper-tiny")
    ct2, model = _ct2(folder)
    from cyb_llm.speech.pipeline import pad_or_trim
    from cyb_llm.speech.search import DecodeOptions, WindowDecoder

    audio = wo.english_clip(wo.ENGLISH[:2])
    mel = pipe._mel(audio)
    window = pad_or_trim(mel[:, :mel.shape[-1] - 1])
    tok = pipe.tok
    dec = WindowDecoder(pipe.runtime, tok, DecodeOptions(beam_size=1), pipe.begin_suppress_tokens)
    enc = pipe.runtime.encode(window)
    feats = ct2.StorageView.from_array(window[None])
    prev = tok.encode(" The museum opens at nine.")
    n_checked = 0
    for prompt in (build_prompt(tok, [], tok.sot_sequence(None, "transcribe"), False),
                   build_prompt(tok, [], tok.sot_sequence(None, "transcribe"), True),
                   build_prompt(tok, prev, tok.sot_sequence(None, "transcribe"), False)):
        ours = dec.generate(enc, prompt, 0.0)
        theirs = model.generate(feats, [prompt], beam_size=1, max_length=448, return_scores=True,
                                return_no_speech_prob=True, suppress_blank=True,
                                suppress_tokens=tok.suppressed_tokens([-1]), max_initial_timestamp_index=50)[0]
        assert ours.tokens == theirs.sequences_ids[0]
        assert abs(ours.no_speech_prob - theirs.no_speech_prob) < tolerance("whisper-no-speech-window")
        assert abs(ours.score - theirs.scores[0]) < tolerance("whisper-logprob")
        assert len(ours.tokens) > 10
        n_checked += 1
    assert n_checked == 3


def _compare(ours, segs, info=None):
    text_fw = "".join(s.text for s in segs).strip()
    assert ours["text"] == text_fw
    assert len(ours["segments"]) == len(segs)
    for a, b in zip(ours["segments"], segs):
        assert a["text"] == b.text
        time_tol = tolerance("whisper-time")
        assert abs(a["start"] - b.start) <= time_tol and abs(a["end"] - b.end) <= time_tol
        assert a["seek"] == b.seek and a["temperature"] == b.temperature
        assert abs(a["no_speech_prob"] - b.no_speech_prob) < tolerance("whisper-logprob")
        assert abs(a["avg_logprob"] - b.avg_logprob) < tolerance("whisper-logprob")
    if info is not None:
        assert ours["language"] == info.language


def test_transcribe_tiny_greedy_matches_faster_whisper():
    pipe, mf, folder = wo.load("whisper-tiny")
    audio = wo.english_clip(wo.ENGLISH[:3])
    ours = pipe.transcribe(audio, **wo.ours_options(1))
    segs, info = wo.faster_whisper_transcribe(folder, audio, **wo.fw_options(1))
    assert len(segs) >= 2 and "fox" in ours["text"]
    _compare(ours, segs, info)
    assert ours["language"] == "en" and ours["language_probability"] == 1.0


def test_transcribe_tiny_long_form_greedy_matches_faster_whisper():
    """A 60 s+ clip: three windows, seek from the last timestamp, the previous text as prompt."""
    pipe, mf, folder = wo.load("whisper-tiny")
    audio = wo.english_clip(wo.ENGLISH)
    assert len(audio) / wo.SR >= 60
    streamed = list(pipe.transcribe_stream(audio, **wo.ours_options(1)))
    segs, info = wo.faster_whisper_transcribe(folder, audio, **wo.fw_options(1))
    ours = {"text": "".join(s["text"] for s in streamed).strip(), "language": "en", "segments": streamed}
    assert len({s["seek"] for s in streamed}) >= 3
    assert streamed[-1]["end"] > 55
    _compare(ours, segs, info)


LANG_TEXTS = {
    "fr": ("fr", "Bonjour à tous. Aujourd'hui nous allons parler de la cuisine française et de ses traditions."),
    "de": ("de", "Guten Morgen. Heute sprechen wir über die Geschichte der Stadt und ihre schönen alten Gebäude."),
    "es": ("es", "Buenos días a todos. Hoy vamos a hablar de la música tradicional y de sus instrumentos."),
}


def check_language_detection_base():  # collected in tests/slow/test_whisper_decode_slow.py
    pipe, mf, folder = wo.load("whisper-base")
    ct2, model = _ct2(folder)
    from cyb_llm.speech.common import N_FRAMES
    from cyb_llm.speech.pipeline import detect_language, pad_or_trim

    clips = {"en": wo.english_clip(wo.ENGLISH[:2])}
    for code, (voice, text) in LANG_TEXTS.items():
        clips[code] = wo.speak_espeak(text, voice)
    detected = {}
    for code, audio in clips.items():
        window = pad_or_trim(pipe._mel(audio)[:, :N_FRAMES])
        lang, prob, _ = detect_language(pipe.runtime, pipe.tok, window)
        res = model.detect_language(ct2.StorageView.from_array(window[None]))[0]
        assert lang == res[0][0][2:-2], code
        assert abs(prob - res[0][1]) < tolerance("whisper-logprob")
        detected[code] = lang
    assert len(set(detected.values())) >= 3  # the clips really are in different languages


def check_transcribe_base_short():  # collected in tests/slow/test_whisper_decode_slow.py
    """Multilingual: detected language, [sot, lang, transcribe] prompt, greedy."""
    pipe, mf, folder = wo.load("whisper-base")
    audio = wo.speak_espeak(LANG_TEXTS["fr"][1], "fr")
    # this robotic clip fails the log-prob threshold at every temperature; the fallback's samples
    # come from different random generators, so both sides decode at temperature 0 only
    ours = pipe.transcribe(audio, **{**wo.ours_options(1), "temperature": [0.0]})
    segs, info = wo.faster_whisper_transcribe(folder, audio, **{**wo.fw_options(1), "temperature": [0.0]})
    assert all(s["temperature"] == 0.0 for s in ours["segments"]) and ours["language"] == "fr"
    _compare(ours, segs, info)
    assert abs(ours["language_probability"] - info.language_probability) < tolerance("whisper-logprob")


def test_beam_candidates_are_the_best_by_value_then_index():
    """beam_search's candidate selection (search._top: one native pass, `_core.top_indices`, keeping
    the n best in a heap) equals sorting every value by (value descending, index ascending) and
    taking the first n: peaked, flat and tied rows, n up to the row's size and past it; NaN ranks
    below every number; beams x vocab sized rows; a bad n is a clear error."""
    rng = np.random.default_rng(5)
    for trial in range(3000):
        n, size = int(rng.integers(1, 12)), int(rng.integers(1, 300))
        flat = [rng.standard_normal(size) * 30, rng.integers(-3, 3, size), rng.standard_normal(size) * 0.1][trial % 3]
        flat = flat.astype(np.float32)
        if trial % 7 == 0:
            flat[rng.integers(0, size, size // 3)] = -np.inf  # suppressed tokens
        want = np.lexsort((np.arange(size), -flat))[:n]
        assert np.array_equal(_top(flat, n), want), (trial, n, size)
    for trial in range(40):  # NaN below -inf; large rows
        size = int(rng.integers(1, 5 * 51865))
        flat = (rng.standard_normal(size) * [0.1, 3, 30][trial % 3]).astype(np.float32)
        flat[rng.integers(0, size, size // 10 + 1)] = [np.nan, -np.inf, 0.5][trial % 3]
        order = np.lexsort((np.arange(size), -np.nan_to_num(flat, nan=-np.inf), np.isnan(flat)))
        for n in (1, 10, min(size, 64)):
            assert np.array_equal(_top(flat, n), order[:n]), (trial, n, size)
    from cyb_llm import _core
    from cyb_llm.errors import InvalidConfig

    mostly_nan = np.array([np.nan, 1, np.nan, 2, np.nan, -np.inf], np.float32)  # NaN fills the rest, by index
    assert _top(mostly_nan, 5).tolist() == [3, 1, 5, 0, 2]
    assert _core.top_indices(np.ones(4, np.float32), 0).size == 0
    assert _core.top_indices(np.ones(4, np.float32), 4).tolist() == [0, 1, 2, 3]
    with pytest.raises(InvalidConfig, match="k"):
        _core.top_indices(np.ones(4, np.float32), 5)
