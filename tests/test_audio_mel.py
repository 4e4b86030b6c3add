"""The native log-mel frontend (csrc/audio/mel.cc, _core.log_mel) and audio input
(python/cyb_llm/speech/audio.py) against the reference recipes (docs/whisper.md, "Audio frontend").

References:
- transformers' WhisperFeatureExtractor, numpy path (`_np_extract_fbank_features`):
  FFT in float64, spectrum stored as complex64, mel and log in float64. The native
  frontend computes in float64 and rounds once at the end, so the two agree to a
  few f32 ulps of the output (values in [-1.5, 2.5], ulp <= 2.4e-7): `mel-vs-numpy`.
  Measured: max 2.4e-7 over every signal below.
- The torch STFT recipe (torch.stft, float32 throughout; WhisperFeatureExtractor's
  default path when torch is installed): its own f32 rounding of a 400-point
  STFT and of the mel product moves quiet bins, measured up to 7.3e-5 on the
  log-mel scale here; `mel-vs-torch`.
The bounds are rows of docs/runtime.md, "Tolerances".
Both tolerances are far below what a wrong recipe gives (no clamp: 0.7 and more;
symmetric Hann window: 0.07 and more; see the "bites" tests).
"""
from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.speech import audio
from cyb_llm.errors import InvalidConfig, ShapeMismatch
from tolerances import tolerance

sf = pytest.importorskip("soundfile")
transformers = pytest.importorskip("transformers")
from transformers import WhisperFeatureExtractor  # noqa: E402

SR = 16000
NP_TOL = tolerance("mel-vs-numpy")
TORCH_TOL = tolerance("mel-vs-torch")
WRONG = tolerance("mel-ablation")  # a wrong recipe is at least this far
AUDIO_TOL = tolerance("audio-f32")
PCM16_STEP = 2.0 ** -15

try:
    import torch
except ImportError:  # pragma: no cover - torch is in the test extra
    torch = None


def _fe(n_mels):
    return WhisperFeatureExtractor(feature_size=n_mels)


def _signal(kind: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SR
    secs = max(n / SR, 1e-9)
    if kind == "sine":
        x = 0.5 * np.sin(2 * np.pi * 440 * t)
    elif kind == "chirp":  # 100 Hz -> 7 kHz
        x = 0.3 * np.sin(2 * np.pi * (100 * t + (7000 - 100) / (2 * secs) * t * t))
    elif kind == "noise":
        x = 0.1 * rng.standard_normal(n)
    elif kind == "silence":
        x = np.zeros(n)
    elif kind == "mix":  # a tone in the first half, faint noise throughout: the clamp matters
        x = 0.2 * np.sin(2 * np.pi * 300 * t) * (t < secs / 2) + 1e-3 * rng.standard_normal(n)
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def _pad30(x: np.ndarray) -> np.ndarray:
    out = np.zeros(audio.CHUNK_SAMPLES, np.float32)
    m = min(len(x), audio.CHUNK_SAMPLES)
    out[:m] = x[:m]
    return out


def _torch_ref(x, n_mels, pad30=True, padding=0, periodic=True, clamp=True):
    """Whisper's recipe in torch (f32): centered reflect-padded STFT, |X|^2 without
    the last frame, mel filters, log10 / clamp at max-8 / scale."""
    a = torch.from_numpy(np.asarray(x, np.float32))
    if padding:
        a = torch.nn.functional.pad(a, (0, padding))
    if pad30:
        a = torch.from_numpy(_pad30(a.numpy()))
    st = torch.stft(a, 400, 160, window=torch.hann_window(400, periodic=periodic), return_complex=True)
    mag = st[..., :-1].abs() ** 2
    mel = torch.from_numpy(_fe(n_mels).mel_filters.T.astype(np.float32)) @ mag
    ls = torch.clamp(mel, min=1e-10).log10()
    if clamp:
        ls = torch.maximum(ls, ls.max() - 8.0)
    return ((ls + 4.0) / 4.0).numpy()


needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

KINDS = ["sine", "chirp", "noise", "silence", "mix"]
LENGTHS = [1, 10 * SR, 45 * SR]


# ---- the filterbank ----------------------------------------------------------------------------

@pytest.mark.parametrize("n_mels", [80, 128])
def test_filters_equal_the_slaney_filterbank(n_mels):
    ours = _core.mel_filters(n_mels)
    assert ours.shape == (n_mels, 201)
    np.testing.assert_allclose(ours, _fe(n_mels).mel_filters.T, rtol=tolerance("mel-filters-rtol"),
                               atol=tolerance("mel-filters-atol"))
    try:
        import librosa
    except ImportError:
        return
    lib = librosa.filters.mel(sr=SR, n_fft=400, n_mels=n_mels, dtype=np.float64)
    np.testing.assert_allclose(ours, lib, rtol=tolerance("mel-filters-librosa-rtol"),
                               atol=tolerance("mel-filters-librosa-atol"))


# ---- 30 s windows against both references ------------------------------------------------------

@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", LENGTHS)
def test_30s_window_matches_references(n_mels, kind, n):
    x = _signal(kind, n)
    y = _core.log_mel(x, n_mels=n_mels, threads=2)
    assert y.shape == (n_mels, 3000) and y.dtype == np.float32
    ref_np = _fe(n_mels)._np_extract_fbank_features(_pad30(x)[None], "cpu")[0]
    assert np.abs(y - ref_np).max() <= NP_TOL
    # the extractor's public call (its torch path when torch is installed, else numpy)
    ref_call = _fe(n_mels)(x, sampling_rate=SR, return_tensors="np").input_features[0]
    assert np.abs(y - ref_call).max() <= TORCH_TOL
    if torch is not None:
        assert np.abs(y - _torch_ref(x, n_mels)).max() <= TORCH_TOL


def test_silence_is_the_floor():
    y = _core.log_mel(np.zeros(SR, np.float32))
    # log10(1e-10) = -10 everywhere, the max is -10: (-10 + 4) / 4
    assert np.all(y == np.float32(-1.5))


@needs_torch
@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("kind", ["chirp", "mix", "noise"])
@pytest.mark.parametrize("padding", [0, 480000])
def test_long_audio_matches_torch(n_mels, kind, padding):
    """Long form: the whole signal (plus `padding` zeros), one global max."""
    x = _signal(kind, 45 * SR + 123)
    y = _core.log_mel(x, n_mels=n_mels, pad_to_30s=False, padding=padding, threads=2)
    assert y.shape == (n_mels, (len(x) + padding) // 160)
    ref = _torch_ref(x, n_mels, pad30=False, padding=padding)
    assert ref.shape == y.shape
    assert np.abs(y - ref).max() <= TORCH_TOL
    ys = audio.log_mel_spectrogram(x, n_mels=n_mels, padding=padding)
    np.testing.assert_array_equal(ys, y)


def test_long_audio_matches_numpy_reference():
    x = _signal("mix", 40 * SR + 77)
    y = _core.log_mel(x, pad_to_30s=False, padding=audio.CHUNK_SAMPLES)
    xp = np.concatenate([x, np.zeros(audio.CHUNK_SAMPLES, np.float32)])
    ref = _fe(80)._np_extract_fbank_features(xp[None], "cpu")[0]
    assert ref.shape == y.shape
    assert np.abs(y - ref).max() <= NP_TOL


def test_threads_do_not_change_the_result():
    x = _signal("chirp", 75 * SR)
    base = _core.log_mel(x, pad_to_30s=False, threads=1)
    for th in (2, 3, 0):
        np.testing.assert_array_equal(_core.log_mel(x, pad_to_30s=False, threads=th), base)


def test_trim_and_short_inputs():
    x = _signal("noise", 45 * SR)
    np.testing.assert_array_equal(_core.log_mel(x), _core.log_mel(x[: audio.CHUNK_SAMPLES]))
    # fewer samples than one hop without padding: no frames
    assert _core.log_mel(np.ones(100, np.float32), pad_to_30s=False).shape == (80, 0)
    # a non-contiguous view is read as its values
    y = _signal("sine", 2 * SR)
    np.testing.assert_array_equal(_core.log_mel(np.repeat(y, 2)[::2]), _core.log_mel(y))


# ---- the comparisons bite ----------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("kind", ["mix", "chirp"])
def test_dropping_the_clamp_fails_the_comparison(kind):
    x = _signal(kind, 10 * SR)
    y = _core.log_mel(x)
    assert np.abs(y - _torch_ref(x, 80)).max() <= TORCH_TOL
    assert np.abs(y - _torch_ref(x, 80, clamp=False)).max() > WRONG


@needs_torch
@pytest.mark.parametrize("kind", ["mix", "chirp"])
def test_symmetric_window_fails_the_comparison(kind):
    x = _signal(kind, 10 * SR)
    y = _core.log_mel(x)
    assert np.abs(y - _torch_ref(x, 80)).max() <= TORCH_TOL
    assert np.abs(y - _torch_ref(x, 80, periodic=False)).max() > WRONG


# ---- errors ------------------------------------------------------------------------------------

def test_native_argument_errors():
    x = np.zeros(1000, np.float32)
    with pytest.raises(TypeError, match="float32"):
        _core.log_mel(x.astype(np.float64))
    with pytest.raises(ShapeMismatch):
        _core.log_mel(np.zeros((2, 1000), np.float32))
    for bad in (0, 257, -1):
        with pytest.raises(InvalidConfig) as e:
            _core.log_mel(x, n_mels=bad)
        assert e.value.field == "n_mels"
    with pytest.raises(InvalidConfig) as e:
        _core.log_mel(x, padding=-1, pad_to_30s=False)
    assert e.value.field == "padding"
    with pytest.raises(InvalidConfig) as e:
        _core.log_mel(x, threads=-2)
    assert e.value.field == "threads"
    for v, word in ((np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")):
        y = x.copy()
        y[7] = v
        with pytest.raises(InvalidConfig, match=f"sample 7 is {word}") as e:
            _core.log_mel(y)
        assert e.value.field == "samples"


def test_python_input_errors(tmp_path):
    with pytest.raises(InvalidConfig, match="empty") as e:
        audio.log_mel_spectrogram(np.zeros(0, np.float32))
    assert e.value.field == "audio"
    bad = _signal("sine", SR)
    bad[100] = np.nan
    with pytest.raises(InvalidConfig, match="sample 100 is NaN"):
        audio.load_audio(bad)
    with pytest.raises(InvalidConfig, match="dtype complex64"):
        audio.load_audio(np.zeros(10, np.complex64))
    with pytest.raises(InvalidConfig, match="dtype bool"):
        audio.load_audio(np.zeros(10, bool))
    with pytest.raises(ShapeMismatch):
        audio.load_audio(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ShapeMismatch):  # channels-first stereo is refused, not read as 16000 channels
        audio.load_audio(np.zeros((2, 16000), np.float32))
    with pytest.raises(TypeError):
        audio.load_audio(None)
    with pytest.raises(InvalidConfig) as e:
        audio.log_mel_spectrogram(bad[:10] * 0, padding="max")
    assert e.value.field == "padding"
    with pytest.raises(InvalidConfig) as e:
        audio.load_audio(np.zeros(10, np.float32), sr=0)
    assert e.value.field == "sr"


def test_file_errors(tmp_path):
    missing = tmp_path / "nope.wav"
    with pytest.raises(InvalidConfig, match="no such file") as e:
        audio.load_audio(missing)
    assert e.value.field == "audio"
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio\n" * 100)
    with pytest.raises(InvalidConfig, match="cannot decode") as e:
        audio.load_audio(text)
    assert e.value.field == "audio"
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(InvalidConfig, match="cannot decode"):
        audio.load_audio(empty)
    with pytest.raises(InvalidConfig, match="is a directory"):
        audio.load_audio(tmp_path)
    no_frames = tmp_path / "zero.wav"
    sf.write(no_frames, np.zeros(0, np.float32), SR)
    with pytest.raises(InvalidConfig, match="empty"):
        audio.load_audio(no_frames)


# ---- loading files -----------------------------------------------------------------------------

@pytest.mark.parametrize("subtype, step", [("PCM_U8", 1 / 128), ("PCM_16", 1 / 32768), ("PCM_24", 2.0 ** -23),
                                           ("PCM_32", 2.0 ** -31), ("FLOAT", 0.0)])
def test_wav_subtypes(tmp_path, subtype, step):
    x = 0.8 * _signal("chirp", SR)
    p = tmp_path / f"{subtype}.wav"
    sf.write(p, x, SR, subtype=subtype)
    y = audio.load_audio(p)
    assert y.dtype == np.float32 and y.shape == x.shape
    # within one quantization step of the original (a wrong scale is off by far more)
    assert np.abs(y - x).max() <= step + AUDIO_TOL


@pytest.mark.parametrize("dtype, scale, offset", [(np.int8, 128, 0), (np.uint8, 128, 128), (np.int16, 32768, 0),
                                                  (np.int32, 2 ** 31, 0)])
def test_integer_arrays_are_scaled(dtype, scale, offset):
    x = 0.9 * _signal("sine", 1000)
    q = np.round(x * (scale - 1)).astype(np.int64) + offset
    y = audio.load_audio(q.astype(dtype))
    np.testing.assert_allclose(y, (q - offset) / scale, atol=AUDIO_TOL)


def test_stereo_is_averaged(tmp_path):
    left, right = _signal("sine", SR), _signal("noise", SR)
    p = tmp_path / "stereo.wav"
    sf.write(p, np.stack([left, right], axis=1), SR, subtype="FLOAT")
    np.testing.assert_allclose(audio.load_audio(p), (left + right) / 2, atol=AUDIO_TOL)
    np.testing.assert_allclose(audio.load_audio(np.stack([left, right], axis=1)), (left + right) / 2, atol=AUDIO_TOL)


def test_44k_is_resampled_with_soxr(tmp_path):
    soxr = pytest.importorskip("soxr")
    n = 44100 * 2
    t = np.arange(n) / 44100
    x = np.stack([0.5 * np.sin(2 * np.pi * 1000 * t), 0.5 * np.sin(2 * np.pi * 1000 * t)], axis=1).astype(np.float32)
    p = tmp_path / "cd.wav"
    sf.write(p, x, 44100, subtype="PCM_16")
    y = audio.load_audio(p)
    data, _ = sf.read(p, dtype="float32", always_2d=True)
    np.testing.assert_array_equal(y, soxr.resample(data.mean(axis=1).astype(np.float32), 44100, SR, quality="HQ"))
    assert abs(len(y) - n * SR / 44100) <= 1
    spec = np.abs(np.fft.rfft(y[4000:-4000]))
    # the tone stays at 1 kHz
    assert abs(np.argmax(spec) * SR / len(y[4000:-4000]) - 1000) < tolerance("audio-tone-resampled")


def test_resample_poly_fallback(monkeypatch):
    signal = pytest.importorskip("scipy.signal")
    x = _signal("chirp", 22050)
    monkeypatch.setitem(sys.modules, "soxr", None)  # import soxr -> ImportError
    y = audio.load_audio(x, orig_sr=22050)
    ref = signal.resample_poly(x.astype(np.float64), 320, 441).astype(np.float32)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("fmt, subtype", [("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_compressed_formats(tmp_path, fmt, subtype):
    if fmt not in sf.available_formats() or subtype not in sf.available_subtypes(fmt):
        pytest.skip(f"libsndfile here has no {fmt}/{subtype}")
    x = 0.5 * _signal("sine", 2 * SR)
    p = tmp_path / f"a.{fmt.lower()}"
    sf.write(p, x, SR, format=fmt, subtype=subtype)
    y = audio.load_audio(p)
    if fmt == "FLAC":
        assert len(y) == len(x) and np.abs(y - x).max() <= PCM16_STEP + AUDIO_TOL
    else:  # lossy: the 440 Hz tone survives (mp3 adds encoder delay frames)
        assert abs(len(y) - len(x)) < SR * tolerance("audio-lossy-length")
        spec = np.abs(np.fft.rfft(y))
        assert abs(np.argmax(spec) * SR / len(y) - 440) < tolerance("audio-tone-lossy")
    # a binary file object works as a path does
    with open(p, "rb") as f:
        np.testing.assert_array_equal(audio.load_audio(io.BytesIO(f.read())), y)


def test_file_to_mel_end_to_end(tmp_path):
    x = _signal("mix", 12 * SR)
    p = tmp_path / "clip.wav"
    sf.write(p, x, SR, subtype="FLOAT")
    y = audio.log_mel_spectrogram(str(p), n_mels=128)
    assert y.shape == (128, 3000)
    np.testing.assert_array_equal(y, _core.log_mel(x, n_mels=128))


def test_one_sample_and_ten_minutes_peak_memory():
    import tracemalloc

    assert audio.log_mel_spectrogram(np.array([0.25], np.float32)).shape == (80, 3000)
    x = (0.01 * np.random.default_rng(3).standard_normal(600 * SR)).astype(np.float32)
    tracemalloc.start()
    try:
        y = _core.log_mel(x, pad_to_30s=False, threads=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert y.shape == (80, 60000)
    # the output (19.2 MB) and nothing proportional besides: the samples are read in place
    assert peak <= y.nbytes + (1 << 20), peak


def test_no_torch_or_transformers_in_the_runtime():
    src = open(os.path.join(os.path.dirname(audio.__file__), "audio.py")).read()
    assert "import torch" not in src and "transformers" not in src
