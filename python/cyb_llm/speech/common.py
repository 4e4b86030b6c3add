"""What the Whisper decoding modules share (docs/whisper.md, "Decoding and transcription"): the
audio and decoder constants, the runtime interface the decoding runs over (`WhisperRuntime`: an
encoder and decoder sessions, so it does not depend on how the native `whisper` family is
exposed), the special ids of a Whisper vocabulary (`WhisperTokens`) and `log_softmax`.

numpy and the `.model` tokenizer only: no torch, no transformers.
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np

from ..errors import InvalidConfig

SAMPLE_RATE = 16000
HOP_LENGTH = 160
N_FRAMES = 3000                      # frames of one 30 s window
TIME_PER_FRAME = HOP_LENGTH / SAMPLE_RATE   # 0.01 s
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH
INPUT_STRIDE = 2                     # encoder frames per decoder timestamp step
TIME_PRECISION = 0.02                # seconds per timestamp token
MAX_LENGTH = 448                     # decoder positions
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


# --------------------------------------------------------------------------------------------
# runtime interface
# --------------------------------------------------------------------------------------------

class Session(Protocol):
    """Decoder state over one encoder output."""

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Append `tokens` to the cache; float32 logits [len(tokens), n_vocab]."""

    def clone(self) -> "Session":
        """An independent copy of the state (for beams and best-of samples)."""


class WhisperRuntime(Protocol):
    n_mels: int
    n_vocab: int

    def encode(self, mel: np.ndarray) -> Any:
        """mel: float32 [n_mels, 3000] -> an encoder output the sessions take."""

    def session(self, encoder_output: Any) -> Session:
        """An empty decoder session over `encoder_output`."""

    # Optional (word_timestamps=True needs it):
    # def cross_attention(self, encoder_output, tokens, heads, n_frames) -> (logits, attn)
    #     runs `tokens` from position 0 on a new session over `encoder_output`: logits float32
    #     [len(tokens), n_vocab] and, for heads[i] = (layer, head), attn[i] float32
    #     [len(tokens), n_frames]: the cross-attention probabilities of that head, the softmax
    #     over the first n_frames encoder positions only.


# --------------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------------

class WhisperTokens:
    """The special ids of a Whisper vocabulary and the text tokenizer.

    `arch`: the `[architecture]` table of a whisper `.model` (convert/whisper_common.py,
    `whisper_config`); `tokenizer`: a cyb_llm.tokenizer.Tokenizer (or anything with
    `encode(text, add_special_tokens=False)`, `decode(ids)` and `token_to_id`)."""

    def __init__(self, arch: dict, tokenizer: Any, n_vocab: Optional[int] = None):
        self.tokenizer = tokenizer
        self.n_vocab = int(n_vocab if n_vocab is not None else arch["vocab_size"])
        self.multilingual = bool(arch.get("is_multilingual", self.n_vocab >= 51865))
        self.eot = int(arch["eos_token_id"])
        self.sot = int(arch["decoder_start_token_id"])
        tid = getattr(tokenizer, "token_to_id", lambda t: None)

        def special(key: str, text: str) -> Optional[int]:
            if key in arch:
                return int(arch[key])
            v = tid(text)
            return None if v is None else int(v)

        self.no_timestamps = special("no_timestamps_token_id", "<|notimestamps|>")
        self.sot_prev = special("prev_sot_token_id", "<|startofprev|>")
        self.sot_lm = tid("<|startoflm|>")
        ns = special("no_speech_token_id", "<|nospeech|>")
        self.no_speech = ns if ns is not None else special("no_captions_token_id", "<|nocaptions|>")
        tasks = arch.get("task_to_id") or {}
        self.transcribe = tasks.get("transcribe", tid("<|transcribe|>"))
        self.translate = tasks.get("translate", tid("<|translate|>"))
        self.timestamp_begin = int(arch.get("timestamp_begin", self.no_timestamps + 1))
        self.timestamp_end = self.n_vocab - 1
        self.lang_to_id: dict[str, int] = {k[2:-2]: int(v) for k, v in (arch.get("lang_to_id") or {}).items()}
        ids = arch.get("lang_ids") or sorted(self.lang_to_id.values())
        self.lang_ids = [int(i) for i in ids]
        self._id_to_lang = {v: k for k, v in self.lang_to_id.items()}

    @classmethod
    def from_modelfile(cls, mf: Any) -> "WhisperTokens":
        return cls(mf.config["architecture"], mf.tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of the text tokens (< eot) of `tokens`."""
        ids = [int(t) for t in tokens if t < self.eot]
        raw = getattr(self.tokenizer, "raw", None)
        if raw is not None:
            return raw.decode(ids)
        return self.tokenizer.decode(ids)

    def language_id(self, code: str) -> int:
        if code not in self.lang_to_id:
            raise InvalidConfig(field="language",
                                reason=f"unknown language code {code!r} (known: {', '.join(sorted(self.lang_to_id))})")
        return self.lang_to_id[code]

    def sot_sequence(self, language: Optional[str], task: str) -> list[int]:
        """[sot] on English-only models; [sot, <|lang|>, <|task|>] on multilingual ones."""
        if not self.multilingual:
            return [self.sot]
        if task not in ("transcribe", "translate"):
            raise InvalidConfig(field="task", reason=f"must be 'transcribe' or 'translate', got {task!r}")
        return [self.sot, self.language_id(language or "en"), self.transcribe if task == "transcribe" else self.translate]

    def non_speech_tokens(self) -> list[int]:
        """The symbols that `suppress_tokens=[-1]` stands for: speaker tags, music notes and
        brackets, keeping plain punctuation (hyphen and quote only inside words)."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(miscellaneous):
            for toks in (self.encode(symbol), self.encode(" " + symbol)):
                if len(toks) == 1 or symbol in miscellaneous:
                    result.add(toks[0])
        return sorted(result)

    def suppressed_tokens(self, suppress_tokens: Optional[Sequence[int]]) -> list[int]:
        """The ids a decode never samples: `suppress_tokens` (-1 = the non-speech symbols) plus
        the task/control tokens; empty when `suppress_tokens` is empty or None."""
        if not suppress_tokens:
            return []
        out = [int(t) for t in suppress_tokens if t >= 0]
        if -1 in suppress_tokens:
            out.extend(self.non_speech_tokens())
        out.extend(t for t in (self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm, self.no_speech)
                   if t is not None)
        return sorted(set(out))

    def blank_tokens(self, arch_begin: Optional[Sequence[int]] = None) -> list[int]:
        """Suppressed at the first sampled position: " " and eot (the model's begin_suppress_tokens)."""
        if arch_begin:
            return [int(t) for t in arch_begin]
        return self.encode(" ") + [self.eot]


# --------------------------------------------------------------------------------------------
# log-probabilities
# --------------------------------------------------------------------------------------------

NEG_INF = np.float32(-np.inf)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    m = np.max(x, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        s = x - m
        return s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True))


__all__ = ["SAMPLE_RATE", "HOP_LENGTH", "N_FRAMES", "TIME_PER_FRAME", "FRAMES_PER_SECOND", "INPUT_STRIDE",
           "TIME_PRECISION", "MAX_LENGTH", "DEFAULT_TEMPERATURES", "WhisperRuntime", "Session", "WhisperTokens",
           "NEG_INF", "log_softmax"]
