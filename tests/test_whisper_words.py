"""Word timestamps (docs/whisper.md, "Word timestamps").

- The native cross-attention probabilities (WhisperSession.cross_attention, csrc/families/whisper.cc)
  against transformers' `cross_attentions` (output_attentions=True, eager attention) of a tiny
  random WhisperForConditionalGeneration (tests/test_whisper_tiny.py builds it), within
  `precise-vs-transformers`: over all 1500 frames, and over the first n_frames only (transformers'
  probabilities renormalized over those frames).
- `transcribe(word_timestamps=True)` on the real whisper-tiny (English-only) against faster-whisper
  (float32, every option explicit, word_timestamps=True, vad_filter False) on a ~17 s clip of the
  Piper voice: the same words, every start / end within 0.02 s, the same segments.

The comparison bites: on this clip a median filter of width 5 instead of 7 moves 2 words by
0.08 s, width 9 moves 4 words (0.12 s), and a softmax over all 1500 encoder frames instead of the
window's num_frames // 2 moves 10 words (up to 0.08 s) (measured by running the whole transcription
so mutated). test_mutations_fail_the_comparison recomputes the words of the clip's window with
the width-5 filter and with the 1500-frame softmax and asserts that each misses faster-whisper's
times by more than 0.02 s, so the clip keeps telling those apart.
"""
from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

from cyb_llm import _core, errors
from cyb_llm.speech import alignment as wa
from cyb_llm.speech import common as wc
from cyb_llm.speech import pipeline as wp
from cyb_llm.speech.model import WhisperModel
from placement import assert_ran_on, wgpu_skip_reason
from tolerances import tolerance

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

TOL = tolerance("precise-vs-transformers")
WGPU_SKIP = wgpu_skip_reason()
HEADS = [(0, 1), (1, 0), (1, 3)]
IDS = [3, 7, 11, 5, 9, 2, 4]
SLACK = tolerance("seconds-slack")
WORD_TOL = tolerance("whisper-time") + SLACK  # seconds (the times are rounded to 0.01 on both sides)


def rel_err(a, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(a, np.float64) - ref)) / np.max(np.abs(ref)))


class _Tiny:
    pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random checkpoint (test_whisper_tiny.make_folder), imported; transformers' encoder
    output of a random mel (both sides start from it) and its cross_attentions / logits of IDS."""
    from cyb_llm.convert import import_model
    from test_whisper_tiny import make_folder

    t = _Tiny()
    folder = make_folder(tmp_path_factory.mktemp("words"), 80)
    t.path = folder + ".model"
    import_model(folder, t.path, progress=False)
    hf = tf.WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    mel = np.random.default_rng(5).standard_normal((80, 3000)).astype(np.float32)
    with torch.no_grad():
        enc = hf.model.encoder(torch.tensor(mel[None])).last_hidden_state
        out = hf(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([IDS]), output_attentions=True)
    t.enc = enc[0].numpy()
    t.ref_cross = np.stack([out.cross_attentions[l][0, h].numpy() for l, h in HEADS])   # [heads, T, 1500]
    t.ref_logits = out.logits[0].numpy()
    return t


@pytest.fixture(autouse=True)
def _restore_level():
    before = _core.cpu_level()
    yield
    _core.set_cpu_level(before)


@pytest.mark.parametrize("backend", ["cpu", "wgpu+rs"])
def test_cross_attention_matches_transformers(tiny, backend):
    if backend == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    m = WhisperModel(tiny.path, backend=backend, precise=True)
    enc = tiny.enc
    s = m.new_session()
    s.start(enc)
    logits, attn = s.cross_attention(IDS[:3], HEADS)          # the prompt, then a continuation
    logits2, attn2 = s.cross_attention(IDS[3:], HEADS)
    assert s.position == len(IDS)
    assert attn.shape == (len(HEADS), 3, 1500) and attn2.shape == (len(HEADS), len(IDS) - 3, 1500)
    attn_all = np.concatenate([attn, attn2], axis=1)
    assert rel_err(attn_all, tiny.ref_cross) <= TOL
    assert np.allclose(attn_all.sum(-1), 1.0, atol=tolerance("probs-sum"))
    assert rel_err(np.concatenate([logits, logits2]), tiny.ref_logits) <= TOL
    # over the first n_frames only: transformers' probabilities renormalized over those frames
    n = 700
    _, part = m.cross_attention(enc, IDS, HEADS, n)
    ref = tiny.ref_cross[:, :, :n] / tiny.ref_cross[:, :, :n].sum(-1, keepdims=True)
    assert part.shape == (len(HEADS), len(IDS), n)
    assert rel_err(part, ref) <= TOL
    if backend == "wgpu+rs":   # the decoder ran on the device; q and the cross K came down for the rows
        assert_ran_on(m, "wgpu+rs", "whisper cross_attention")


def test_cross_attention_errors(tiny):
    m = WhisperModel(tiny.path, backend="cpu", precise=True)
    s = m.session(tiny.enc)
    with pytest.raises(errors.InvalidConfig):
        s.cross_attention(IDS, [(2, 0)])          # 2 decoder layers
    with pytest.raises(errors.InvalidConfig):
        s.cross_attention(IDS, [(0, 4)])          # 4 heads
    with pytest.raises(errors.InvalidConfig):
        s.cross_attention(IDS, HEADS, 0)
    with pytest.raises(errors.InvalidConfig):
        s.cross_attention(IDS, HEADS, 1501)
    with pytest.raises(errors.InvalidConfig):
        m.new_session().cross_attention(IDS, HEADS)   # not started
    assert s.position == 0


# ---- real weights against faster-whisper ---------------------------------------------------

wo = pytest.importorskip("whisper_oracle")


@functools.lru_cache(maxsize=None)
def _run():
    """(model, audio, our result, faster-whisper's segments) of the ~17 s clip, greedy."""
    wo.peer_import("faster_whisper")
    path, folder = wo.fetch_or_skip("whisper-tiny")  # a failure under CYB_REQUIRE_PEERS=1
    m = WhisperModel(path)
    audio = wo.english_clip(wo.ENGLISH[:4])
    ours = m.transcribe(audio, word_timestamps=True, prepend_punctuations=wa.PREPEND_PUNCTUATIONS,
                        append_punctuations=wa.APPEND_PUNCTUATIONS, **wo.ours_options(1))
    segs, _ = wo.faster_whisper_transcribe(folder, audio, **{**wo.fw_options(1), "word_timestamps": True,
                                                             "prepend_punctuations": wa.PREPEND_PUNCTUATIONS,
                                                             "append_punctuations": wa.APPEND_PUNCTUATIONS})
    return m, audio, ours, segs


def _time_errors(words, fw_words):
    assert [w["word"] for w in words] == [w.word for w in fw_words]
    return [max(abs(a["start"] - b.start), abs(a["end"] - b.end)) for a, b in zip(words, fw_words)]


def test_words_match_faster_whisper():
    m, audio, ours, segs = _run()
    assert 15 <= len(audio) / wo.SR <= 20
    assert len(ours["segments"]) == len(segs) >= 3
    fw_words = [w for s in segs for w in s.words]
    assert len(fw_words) >= 40
    for a, b in zip(ours["segments"], segs):
        assert a["text"] == b.text
        assert abs(a["start"] - b.start) <= WORD_TOL and abs(a["end"] - b.end) <= WORD_TOL
        assert [w["word"] for w in a["words"]] == [w.word for w in b.words]
        for w in a["words"]:
            assert set(w) == {"word", "start", "end", "probability"}
            assert a["start"] - SLACK <= w["start"] <= w["end"] <= a["end"] + SLACK
    words = [w for s in ours["segments"] for w in s["words"]]
    assert max(_time_errors(words, fw_words)) <= WORD_TOL
    for a, b in zip(words, fw_words):
        assert abs(a["probability"] - b.probability) < tolerance("whisper-logprob")
    assert "".join(w["word"] for w in words).strip() == ours["text"]


def _window_words(m, audio, ours, *, width=wa.MEDIAN_FILTER_WIDTH, full_softmax=False):
    """The words of the clip's one window recomputed from our tokens (the segments as split
    before the word rules moved them), with a chosen median filter width or with the softmax
    taken over all 1500 frames and cut to the window's frames afterwards."""
    pipe = m._pipeline()
    tok = pipe.tok
    mel = pipe._mel(audio)
    content = mel.shape[-1] - 1
    assert content <= wc.N_FRAMES and {s["seek"] for s in ours["segments"]} == {0}
    tokens = [t for s in ours["segments"] for t in s["tokens"]]
    segments, _, _ = wp.split_segments_by_timestamps(tok, tokens, 0.0, content, content * wc.TIME_PER_FRAME, 0)
    enc = m.encode(wp.pad_or_trim(mel[:, :content]))

    class Runtime:
        def cross_attention(self, e, toks, heads, n_frames):
            if not full_softmax:
                return m.cross_attention(e, toks, heads, n_frames)
            logits, attn = m.cross_attention(e, toks, heads, None)
            return logits, attn[:, :, :n_frames]

    segments = copy.deepcopy(segments)
    wa.add_word_timestamps(Runtime(), tok, segments, enc, tok.sot_sequence("en", "transcribe"), content,
                           pipe.alignment_heads, "en", wa.PREPEND_PUNCTUATIONS, wa.APPEND_PUNCTUATIONS, 0.0,
                           median_filter_width=width)
    return [w for s in segments for w in s["words"]]


def test_mutations_fail_the_comparison():
    m, audio, ours, segs = _run()
    fw_words = [w for s in segs for w in s.words]
    same = _window_words(m, audio, ours)
    assert same == [w for s in ours["segments"] for w in s["words"]]   # the recomputation is the pipeline's
    assert max(_time_errors(same, fw_words)) <= WORD_TOL
    assert max(_time_errors(_window_words(m, audio, ours, width=5), fw_words)) > WORD_TOL
    assert max(_time_errors(_window_words(m, audio, ours, full_softmax=True), fw_words)) > WORD_TOL


def test_word_timestamps_need_alignment_heads():
    m, audio, _, _ = _run()
    pipe = wp.WhisperPipeline(m, m._pipeline().tok)            # no alignment heads given
    with pytest.raises(errors.InvalidConfig):
        pipe.transcribe(audio[:16000], word_timestamps=True, beam_size=1)


# ---- the pieces -------------------------------------------------------------------------------

def test_median_filter_and_dtw():
    x = np.array([[5, 1, 9, 2, 7, 3, 8, 4, 6, 0]], np.float32)
    got = wa.median_filter(x, 3)
    # reflected edges: [1, 5, 1, ...] and [..., 6, 0, 6]
    assert got.tolist() == [[1, 5, 2, 7, 3, 7, 4, 6, 4, 6]]
    assert wa.median_filter(x[:, :1], 3).tolist() == x[:, :1].tolist()   # shorter than the radius + 1
    # the path follows the largest values: rows 0, 1, 2 at columns 0-1, 2-3, 4
    v = np.full((3, 5), -1, np.float32)
    v[0, :2] = v[1, 2:4] = v[2, 4] = 1
    rows, cols = wa.negative_dtw(v)
    assert rows.tolist() == [0, 0, 1, 1, 2] and cols.tolist() == [0, 1, 2, 3, 4]


def test_merge_punctuations():
    al = [dict(word=w, tokens=[i]) for i, w in enumerate([" (", "Hello", ",", " world", ".", "\""])]
    wa.merge_punctuations(al, wa.PREPEND_PUNCTUATIONS, wa.APPEND_PUNCTUATIONS)
    assert [a["word"] for a in al] == ["", " (Hello,", "", " world.\"", "", ""]
    assert al[1]["tokens"] == [0, 1, 2] and al[3]["tokens"] == [3, 4, 5]
