"""Whisper decoding and long-form transcription (docs/whisper.md, "Decoding and transcription").

The pipeline is plain Python over a `WhisperRuntime` (encoder + decoder sessions), so it does not
depend on how the native `whisper` family is exposed. It follows faster-whisper 1.x over
CTranslate2 step for step: the prompt, the suppressed tokens, the timestamp rules, greedy /
best-of sampling / beam search (beam size, patience, length penalty), the no-speech probability,
avg_logprob, the zlib compression ratio, the temperature fallback, the 30 s windows with seek
from the last timestamp, and word timestamps (cross-attention of the alignment heads, median
filter, DTW, word grouping and faster-whisper's timing rules). VAD is not here.

numpy, zlib and the `.model` tokenizer only: no torch, no transformers.
"""
from __future__ import annotations

import string
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, Union

import numpy as np

from ..errors import InvalidConfig
from . import audio

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
# logits rules
# --------------------------------------------------------------------------------------------

NEG_INF = np.float32(-np.inf)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    m = np.max(x, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        s = x - m
        return s - np.log(np.sum(np.exp(s), axis=-1, keepdims=True))


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    if m == -np.inf:
        return m
    return m + float(np.log(np.sum(np.exp(x.astype(np.float64) - m))))


@dataclass
class LogitRules:
    """The logits processors of one decode, in CTranslate2's order: suppressed tokens, blank
    suppression at the first sampled step, then the timestamp rules."""
    suppress: Sequence[int] = ()
    suppress_begin: Sequence[int] = ()       # empty: suppress_blank off
    timestamps: bool = True
    eot: int = 0
    no_timestamps: int = 0
    timestamp_begin: int = 0
    timestamp_end: int = 0
    max_initial_timestamp_index: Optional[int] = 50
    _suppress: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._suppress = np.asarray(sorted(set(int(t) for t in self.suppress)), dtype=np.int64)
        self._begin = np.asarray(list(self.suppress_begin), dtype=np.int64)

    def apply(self, logits: np.ndarray, generated: Sequence[int]) -> np.ndarray:
        """Rules for the next token after `generated` (the tokens sampled so far, prompt
        excluded), in place on a float32 [n_vocab] row; returns it."""
        step = len(generated)
        if self._suppress.size:
            logits[self._suppress] = NEG_INF
        if step == 0 and self._begin.size:
            logits[self._begin] = NEG_INF
        if self.timestamps:
            self._timestamp_rules(logits, generated)
        return logits

    def _timestamp_rules(self, logits: np.ndarray, seq: Sequence[int]) -> None:
        tb, te = self.timestamp_begin, self.timestamp_end
        logits[self.no_timestamps] = NEG_INF
        step = len(seq)
        check = False
        if step == 0:
            logits[:tb] = NEG_INF  # the first token is a timestamp
            if self.max_initial_timestamp_index is not None:
                logits[tb + self.max_initial_timestamp_index + 1:te + 1] = NEG_INF
        else:
            last = seq[-1]
            if last >= tb:
                penultimate = seq[-2] if step >= 2 else last
                if penultimate >= tb:      # a closed pair: the next one is text (or eot)
                    logits[tb:te + 1] = NEG_INF
                else:                      # an open pair: a timestamp (not earlier) or eot
                    logits[:self.eot] = NEG_INF
                    logits[tb:last] = NEG_INF
                    check = True
            else:
                check = True
                for t in reversed(seq):    # timestamps never decrease
                    if t >= tb:
                        logits[tb:t + 1] = NEG_INF
                        break
        if check:
            lp = log_softmax(logits)
            if _logsumexp(lp[tb:te + 1]) > float(np.max(lp[:tb])):
                logits[:tb] = NEG_INF


# --------------------------------------------------------------------------------------------
# search
# --------------------------------------------------------------------------------------------

@dataclass
class Hypothesis:
    tokens: list[int]     # sampled tokens, eot excluded
    cum_logprob: float    # sum of the log-probabilities of every sampled token, eot included
    score: float          # cum_logprob / len(tokens) ** length_penalty


def _finalize(tokens: list[int], cum: float, length_penalty: float) -> Hypothesis:
    n = len(tokens)
    if n == 0:
        score = -np.inf if cum < 0 else (np.nan if cum == 0 else np.inf)
    else:
        score = cum / (n ** length_penalty)
    return Hypothesis(tokens, cum, float(score))


def greedy(session: Session, logits: np.ndarray, rules: LogitRules, eot: int, max_steps: int,
           length_penalty: float = 1.0, temperature: float = 0.0,
           rng: Optional[np.random.Generator] = None) -> Hypothesis:
    """One sequence: argmax at temperature 0, else a sample from softmax(logprobs / T). `logits`
    are those of the last prompt token; `session` holds the prompt."""
    tokens: list[int] = []
    cum = 0.0
    row = np.array(logits, dtype=np.float32)
    for step in range(max_steps):
        rules.apply(row, tokens)
        lp = log_softmax(row)
        if temperature > 0:
            assert rng is not None
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                scaled = lp.astype(np.float64) / temperature
                p = np.exp(scaled - np.max(scaled))
            p /= p.sum()
            t = int(rng.choice(p.size, p=p))
        else:
            t = int(np.argmax(lp))
        cum += float(lp[t])
        if t == eot:
            break
        tokens.append(t)
        if step + 1 == max_steps:
            break
        row = np.array(session.forward([t])[-1], dtype=np.float32)
    return _finalize(tokens, cum, length_penalty)


def forward_step(sessions: Sequence[Session], tokens: Sequence[int]) -> np.ndarray:
    """float32 logits [n, n_vocab]: one token fed to each session (each advances by one). Sessions
    of one model that offers forward_batch(sessions, tokens) (python/cyb_llm/speech/model.py
    WhisperModel.forward_batch) run as one batched forward (the native forward_batch: the weights are read once for all n rows and beams that
    share a window's cross K/V take one cross-attention call); others one forward each."""
    model = getattr(sessions[0], "model", None)
    batch = getattr(model, "forward_batch", None)
    if len(sessions) > 1 and batch is not None and all(getattr(s, "model", None) is model for s in sessions):
        return batch(sessions, tokens)
    return np.stack([np.asarray(s.forward([int(t)])[-1], dtype=np.float32) for s, t in zip(sessions, tokens)])


def beam_search(session: Session, logits: np.ndarray, rules: LogitRules, eot: int, max_steps: int,
                beam_size: int = 5, patience: float = 1.0, length_penalty: float = 1.0) -> Hypothesis:
    """CTranslate2's beam search for one input: 2 * beam_size candidates a step from the summed
    log-probabilities; a candidate among the first beam_size that is eot (or any at the last
    step) finishes a hypothesis and its beam is refilled with the next non-eot candidate; the
    search stops once round(beam_size * patience) hypotheses are finished; the best finished
    hypothesis by cum_logprob / length ** length_penalty wins. The first step expands the one
    prompt state only."""
    n_cand = 2 * beam_size
    max_finished = int(round(beam_size * patience))
    finished: list[tuple[list[int], float]] = []
    # alive beams: (session, tokens, cum_logprob, next input token or None)
    rows = [np.array(logits, dtype=np.float32)]
    seqs: list[list[int]] = [[]]
    cums = [0.0]
    sessions: list[Session] = [session]
    for step in range(max_steps):
        last_step = step + 1 == max_steps
        total = []
        for row, seq, cum in zip(rows, seqs, cums):
            rules.apply(row, seq)
            total.append(log_softmax(row) + np.float32(cum))
        flat = np.concatenate(total).astype(np.float32)
        vocab = rows[0].size
        # top n_cand, best first (ties: lower flat index first)
        idx = np.argpartition(-flat, n_cand - 1)[:n_cand] if flat.size > n_cand else np.arange(flat.size)
        idx = idx[np.lexsort((idx, -flat[idx]))]
        cand = [(int(i) // vocab, int(i) % vocab, float(flat[i])) for i in idx]
        chosen: list[tuple[int, int, float]] = []
        secondary = beam_size
        for k in range(beam_size):
            origin, tok, score = cand[k]
            pick = k
            if tok == eot or last_step:
                toks = seqs[origin] + ([] if tok == eot else [tok])
                finished.append((toks, score))
                for j in range(secondary, len(cand)):
                    if cand[j][1] != eot:
                        pick = j
                        secondary = j + 1
                        break
            chosen.append(cand[pick])
        if last_step or len(finished) >= max_finished:
            break
        # new beams: clone the origin states first, then feed each its token
        uses: dict[int, int] = {}
        for origin, _, _ in chosen:
            uses[origin] = uses.get(origin, 0) + 1
        pool: dict[int, list[Session]] = {}
        for origin, n in uses.items():
            pool[origin] = [sessions[origin].clone() for _ in range(n - 1)] + [sessions[origin]]
        new_sessions = [pool[origin].pop(0) for origin, _, _ in chosen]
        logits_n = np.array(forward_step(new_sessions, [tok for _, tok, _ in chosen]), dtype=np.float32)
        seqs = [seqs[origin] + [tok] for origin, tok, _ in chosen]
        cums = [score for _, _, score in chosen]
        sessions, rows = new_sessions, list(logits_n)
    hyps = [_finalize(t, c, length_penalty) for t, c in finished]
    return max(hyps, key=lambda h: (h.score if not np.isnan(h.score) else -np.inf))


# --------------------------------------------------------------------------------------------
# one window
# --------------------------------------------------------------------------------------------

@dataclass
class WindowResult:
    tokens: list[int]
    avg_logprob: float
    temperature: float
    compression_ratio: float
    no_speech_prob: float
    score: float = 0.0


def compression_ratio(text: str) -> float:
    b = text.encode("utf-8")
    return len(b) / len(zlib.compress(b))


def build_prompt(tok: WhisperTokens, previous: Sequence[int], sot_sequence: Sequence[int],
                 without_timestamps: bool) -> list[int]:
    """[sot_prev] + the last 223 previous text tokens (when any) + sot sequence (+ no_timestamps)."""
    prompt: list[int] = []
    if previous:
        prompt.append(tok.sot_prev)
        prompt.extend(int(t) for t in previous[-(MAX_LENGTH // 2 - 1):])
    prompt.extend(sot_sequence)
    if without_timestamps:
        prompt.append(tok.no_timestamps)
    return prompt


@dataclass
class DecodeOptions:
    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES
    compression_ratio_threshold: Optional[float] = 2.4
    log_prob_threshold: Optional[float] = -1.0
    no_speech_threshold: Optional[float] = 0.6
    suppress_blank: bool = True
    suppress_tokens: Optional[Sequence[int]] = (-1,)
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    seed: Optional[int] = None


class WindowDecoder:
    """Decodes 30 s windows of one model with fixed options."""

    def __init__(self, runtime: WhisperRuntime, tok: WhisperTokens, opts: DecodeOptions,
                 begin_suppress: Optional[Sequence[int]] = None):
        self.runtime, self.tok, self.opts = runtime, tok, opts
        self.rng = np.random.default_rng(opts.seed)
        self._suppress = tok.suppressed_tokens(opts.suppress_tokens)
        self._begin = tok.blank_tokens(begin_suppress) if opts.suppress_blank else []
        self._max_initial = int(round(opts.max_initial_timestamp / TIME_PRECISION))

    def rules(self, prompt: Sequence[int]) -> LogitRules:
        t = self.tok
        return LogitRules(suppress=self._suppress, suppress_begin=self._begin,
                          timestamps=prompt[-1] != t.no_timestamps, eot=t.eot,
                          no_timestamps=t.no_timestamps, timestamp_begin=t.timestamp_begin,
                          timestamp_end=t.timestamp_end, max_initial_timestamp_index=self._max_initial)

    def generate(self, encoder_output: Any, prompt: Sequence[int], temperature: float) -> WindowResult:
        """One decode of a window at one temperature (no fallback)."""
        t, o = self.tok, self.opts
        prompt = [int(x) for x in prompt]
        base = self.runtime.session(encoder_output)
        plogits = base.forward(prompt)
        sot_index = prompt.index(t.sot)
        no_speech = float(np.exp(log_softmax(np.asarray(plogits[sot_index], dtype=np.float32))[t.no_speech]))
        last = np.asarray(plogits[-1], dtype=np.float32)
        max_steps = min(MAX_LENGTH // 2, MAX_LENGTH - (len(prompt) - 1))
        rules = self.rules(prompt)
        if temperature > 0:
            hyps = []
            n = max(1, int(o.best_of))
            for i in range(n):
                s = base.clone() if i < n - 1 else base
                hyps.append(greedy(s, last, rules, t.eot, max_steps, o.length_penalty, temperature, self.rng))
            best = max(hyps, key=lambda h: h.score if not np.isnan(h.score) else -np.inf)
        elif o.beam_size > 1:
            best = beam_search(base, last, rules, t.eot, max_steps, o.beam_size, o.patience, o.length_penalty)
        else:
            best = greedy(base, last, rules, t.eot, max_steps, o.length_penalty)
        n = len(best.tokens)
        avg = best.cum_logprob / (n + 1)
        text = t.decode(best.tokens).strip()
        return WindowResult(best.tokens, avg, temperature, compression_ratio(text), no_speech, best.score)

    def generate_with_fallback(self, encoder_output: Any, prompt: Sequence[int]) -> WindowResult:
        """Temperatures in order until the result passes the compression-ratio and avg-logprob
        thresholds (or is silence); when none passes, the best avg_logprob among those under the
        compression threshold (else among all), reported with the last temperature."""
        o = self.opts
        all_results: list[WindowResult] = []
        below_cr: list[WindowResult] = []
        temps = list(o.temperatures) or [0.0]
        for temperature in temps:
            r = self.generate(encoder_output, prompt, float(temperature))
            all_results.append(r)
            needs_fallback = False
            if o.compression_ratio_threshold is not None:
                if r.compression_ratio > o.compression_ratio_threshold:
                    needs_fallback = True
                else:
                    below_cr.append(r)
            if o.log_prob_threshold is not None and r.avg_logprob < o.log_prob_threshold:
                needs_fallback = True
            if (o.no_speech_threshold is not None and r.no_speech_prob > o.no_speech_threshold
                    and o.log_prob_threshold is not None and r.avg_logprob < o.log_prob_threshold):
                needs_fallback = False
            if not needs_fallback:
                return r
        best = max(below_cr or all_results, key=lambda x: x.avg_logprob)
        return WindowResult(best.tokens, best.avg_logprob, float(temps[-1]), best.compression_ratio,
                            best.no_speech_prob, best.score)


# --------------------------------------------------------------------------------------------
# long form
# --------------------------------------------------------------------------------------------

def pad_or_trim(mel: np.ndarray, length: int = N_FRAMES) -> np.ndarray:
    if mel.shape[-1] > length:
        mel = mel[..., :length]
    if mel.shape[-1] < length:
        mel = np.pad(mel, [(0, 0)] * (mel.ndim - 1) + [(0, length - mel.shape[-1])])
    return np.ascontiguousarray(mel, dtype=np.float32)


def split_segments_by_timestamps(tok: WhisperTokens, tokens: Sequence[int], time_offset: float,
                                 segment_size: int, segment_duration: float, seek: int
                                 ) -> tuple[list[dict], int, bool]:
    """The segments of one window's tokens (cut after each pair of consecutive timestamps) and the
    next seek: the window's end when the tokens end on a single timestamp or hold no pair, else
    the last complete segment's end timestamp."""
    tb = tok.timestamp_begin
    tokens = list(tokens)
    segments: list[dict] = []
    single_ending = len(tokens) >= 2 and tokens[-2] < tb <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= tb and tokens[i - 1] >= tb]
    if consecutive:
        slices = list(consecutive)
        if single_ending:
            slices.append(len(tokens))
        last = 0
        for cur in slices:
            part = tokens[last:cur]
            start = time_offset + (part[0] - tb) * TIME_PRECISION
            end = time_offset + (part[-1] - tb) * TIME_PRECISION
            segments.append(dict(seek=seek, start=start, end=end, tokens=part))
            last = cur
        if single_ending:
            seek += segment_size
        else:
            seek += (tokens[last - 1] - tb) * INPUT_STRIDE
    else:
        duration = segment_duration
        stamps = [t for t in tokens if t >= tb]
        if stamps and stamps[-1] != tb:
            duration = (stamps[-1] - tb) * TIME_PRECISION
        segments.append(dict(seek=seek, start=time_offset, end=time_offset + duration, tokens=tokens))
        seek += segment_size
    return segments, seek, single_ending


# --------------------------------------------------------------------------------------------
# word timestamps (docs/whisper.md, "Word timestamps")
# --------------------------------------------------------------------------------------------

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
TOKENS_PER_SECOND = SAMPLE_RATE // (HOP_LENGTH * INPUT_STRIDE)   # 50 encoder positions a second
MEDIAN_FILTER_WIDTH = 7
_NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a window of `width` (odd) along the last axis, the edges reflected without
    repeating the edge value (x[1], x[0], x[1], ...). Rows no longer than width // 2 come back
    unchanged."""
    x = np.asarray(x)
    r = width // 2
    n = x.shape[-1]
    if r == 0 or n <= r:
        return x.copy()
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(r, r)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1).astype(x.dtype)


def negative_dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotonic path through x [n, m] (float32) that maximizes the summed values: the
    (row, column) pairs from (0, 0) to (n-1, m-1). float32 costs; a step takes the diagonal when
    it is strictly cheapest, else the vertical one when strictly cheapest, else the horizontal
    one. Computed along anti-diagonals (every cell of one depends only on the two before)."""
    x = np.asarray(x, dtype=np.float32)
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    for k in range(2, n + m + 1):          # cells (i, j) with i + j = k, 1 <= i <= n, 1 <= j <= m
        i = np.arange(max(1, k - m), min(n, k - 1) + 1)
        j = k - i
        c0 = cost[i - 1, j - 1]
        c1 = cost[i - 1, j]
        c2 = cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2)).astype(np.int8)
        c = np.where(t == 0, c0, np.where(t == 1, c1, c2))
        cost[i, j] = -x[i - 1, j - 1] + c
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    rows: list[int] = []
    cols: list[int] = []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i -= 1
            j -= 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1], dtype=np.int64), np.array(cols[::-1], dtype=np.int64)


def _decode_text(tok: WhisperTokens, tokens: Sequence[int]) -> str:
    return tok.decode([t for t in tokens if t < tok.eot])


def split_tokens_on_unicode(tok: WhisperTokens, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
    """Cuts `tokens` where the decoded text is whole characters (no U+FFFD from a split UTF-8
    sequence, unless the full text has one there)."""
    full = _decode_text(tok, tokens)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for t in tokens:
        current.append(int(t))
        decoded = _decode_text(tok, current)
        bad = decoded.find("\ufffd")
        if bad < 0 or (bad + offset < len(full) and full[bad + offset] == "\ufffd"):
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    return words, word_tokens


def split_tokens_on_spaces(tok: WhisperTokens, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
    """Whole-character pieces joined into words: a piece starts a word when it is a special
    token, starts with a space or is punctuation."""
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for sub, sub_tokens in zip(*split_tokens_on_unicode(tok, tokens)):
        special = sub_tokens[0] >= tok.eot
        # `in string.punctuation` is a substring test (the empty text of a special token is in it)
        if special or sub.startswith(" ") or sub.strip() in string.punctuation or not words:
            words.append(sub)
            word_tokens.append(list(sub_tokens))
        else:
            words[-1] += sub
            word_tokens[-1].extend(sub_tokens)
    return words, word_tokens


def split_to_word_tokens(tok: WhisperTokens, tokens: Sequence[int], language: Optional[str]
                         ) -> tuple[list[str], list[list[int]]]:
    if language in _NO_SPACE_LANGUAGES:
        return split_tokens_on_unicode(tok, tokens)
    return split_tokens_on_spaces(tok, tokens)


def alignment_matrix(attn: np.ndarray, sot_len: int, n_text: int,
                     median_filter_width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """attn float32 [heads, tokens, frames] (the probabilities over the window's frames) ->
    the DTW input [n_text + 1, frames]: each head and frame standardized over the token axis
    (mean 0, variance 1; no epsilon), median-filtered along the frames, averaged over the
    heads, the rows of the positions that predict the text tokens and the end token."""
    w = np.asarray(attn, dtype=np.float32)
    n = np.float32(w.shape[1])
    mean = w.sum(axis=1, keepdims=True, dtype=np.float32) / n
    var = np.maximum((w * w).sum(axis=1, keepdims=True, dtype=np.float32) / n - mean * mean, np.float32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (w - mean) * (np.float32(1) / np.sqrt(var))
    w = median_filter(w, median_filter_width)
    w = w.mean(axis=0, dtype=np.float32)
    return np.ascontiguousarray(w[sot_len:sot_len + n_text + 1])


def find_alignment(runtime: WhisperRuntime, tok: WhisperTokens, encoder_output: Any, sot_sequence: Sequence[int],
                   text_tokens: Sequence[int], num_frames: int, heads: Sequence[Sequence[int]],
                   language: Optional[str], median_filter_width: int = MEDIAN_FILTER_WIDTH) -> list[dict]:
    """The words of `text_tokens` with their start / end (seconds from the window start) and
    probability (mean of the tokens' probabilities among the text tokens)."""
    text = [int(t) for t in text_tokens]
    frames = num_frames // INPUT_STRIDE
    if frames == 0:
        return []
    seq = list(sot_sequence) + [tok.no_timestamps] + text + [tok.eot]
    logits, attn = runtime.cross_attention(encoder_output, seq, [tuple(h) for h in heads], frames)
    logits = np.asarray(logits, dtype=np.float32)
    off = len(sot_sequence)
    text_logits = logits[off:off + len(text), :tok.eot]
    probs = np.exp(log_softmax(text_logits))
    token_probs = [float(probs[i, t]) for i, t in enumerate(text)]
    matrix = alignment_matrix(np.asarray(attn, dtype=np.float32), len(sot_sequence), len(text),
                              median_filter_width)
    text_idx, time_idx = negative_dtw(matrix)
    words, word_tokens = split_to_word_tokens(tok, text + [tok.eot], language)
    if len(word_tokens) <= 1:
        return []
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts = jump_times[bounds[:-1]]
    ends = jump_times[bounds[1:]]
    out = []
    for w, wt, s, e, i, j in zip(words, word_tokens, starts, ends, bounds[:-1], bounds[1:]):
        out.append(dict(word=w, tokens=wt, start=s, end=e, probability=float(np.mean(token_probs[i:j]))))
    return out


def merge_punctuations(alignment: list[dict], prepended: str, appended: str) -> None:
    """Prepended marks (a separate word starting with a space) join the next word, appended
    marks join the previous one; the emptied entries stay with word "" and no tokens."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        prev, foll = alignment[i], alignment[j]
        if prev["word"].startswith(" ") and prev["word"].strip() in prepended:
            foll["word"] = prev["word"] + foll["word"]
            foll["tokens"] = prev["tokens"] + foll["tokens"]
            prev["word"], prev["tokens"] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, foll = alignment[i], alignment[j]
        if not prev["word"].endswith(" ") and foll["word"] in appended:
            prev["word"] = prev["word"] + foll["word"]
            prev["tokens"] = prev["tokens"] + foll["tokens"]
            foll["word"], foll["tokens"] = "", []
        else:
            i = j
        j += 1


def add_word_timestamps(runtime: WhisperRuntime, tok: WhisperTokens, segments: list[dict], encoder_output: Any,
                        sot_sequence: Sequence[int], num_frames: int, heads: Sequence[Sequence[int]],
                        language: Optional[str], prepend_punctuations: str, append_punctuations: str,
                        last_speech_timestamp: float, median_filter_width: int = MEDIAN_FILTER_WIDTH) -> float:
    """Gives every segment of one window (split_segments_by_timestamps) its "words"
    [{"word", "start", "end", "probability"}] (seconds, rounded to 0.01) and moves the segment's
    start / end to its first / last word unless that word is implausibly long. Returns the end
    of the last segment with words (else `last_speech_timestamp`)."""
    if not segments:
        return last_speech_timestamp
    per_segment = [[t for t in s["tokens"] if t < tok.eot] for s in segments]
    text = [t for ts in per_segment for t in ts]
    alignment = find_alignment(runtime, tok, encoder_output, sot_sequence, text, num_frames, heads, language,
                               median_filter_width)
    durations = np.array([w["end"] - w["start"] for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations) if len(durations) > 0 else 0.0))
    max_duration = median * 2
    if len(durations) > 0:   # words at sentence boundaries no longer than twice the median
        ends = ".。!！?？"
        for i in range(1, len(alignment)):
            if alignment[i]["end"] - alignment[i]["start"] > max_duration:
                if alignment[i]["word"] in ends:
                    alignment[i]["end"] = alignment[i]["start"] + max_duration
                elif alignment[i - 1]["word"] in ends:
                    alignment[i]["start"] = alignment[i]["end"] - max_duration
    merge_punctuations(alignment, prepend_punctuations, append_punctuations)
    time_offset = segments[0]["seek"] / FRAMES_PER_SECOND
    k = 0
    for seg, seg_tokens in zip(segments, per_segment):
        saved = 0
        words: list[dict] = []
        while k < len(alignment) and saved < len(seg_tokens):
            timing = alignment[k]
            if timing["word"]:
                words.append(dict(word=timing["word"], start=round(time_offset + timing["start"], 2),
                                  end=round(time_offset + timing["end"], 2), probability=timing["probability"]))
            saved += len(timing["tokens"])
            k += 1
        if words:
            # the first and second word after a pause no longer than twice the median
            if words[0]["end"] - last_speech_timestamp > median * 4 and (
                    words[0]["end"] - words[0]["start"] > max_duration
                    or (len(words) > 1 and words[1]["end"] - words[0]["start"] > max_duration * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_duration:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - max_duration)
                    words[0]["end"] = words[1]["start"] = boundary
                words[0]["start"] = max(0, words[0]["end"] - max_duration)
            # the segment's start when the first word is too long, else the first word's start
            if seg["start"] < words[0]["end"] and seg["start"] - 0.5 > words[0]["start"]:
                words[0]["start"] = max(0, min(words[0]["end"] - median, seg["start"]))
            else:
                seg["start"] = words[0]["start"]
            # the segment's end when the last word is too long, else the last word's end
            if seg["end"] > words[-1]["start"] and seg["end"] + 0.5 < words[-1]["end"]:
                words[-1]["end"] = max(words[-1]["start"] + median, seg["end"])
            else:
                seg["end"] = words[-1]["end"]
            last_speech_timestamp = seg["end"]
        seg["words"] = words
    return last_speech_timestamp


def words_end(segments: list[dict]) -> Optional[float]:
    """The end of the last word of `segments`, else the last segment's end (None: no segment)."""
    return next((w["end"] for s in reversed(segments) for w in reversed(s.get("words") or [])),
                segments[-1]["end"] if segments else None)


def detect_language(runtime: WhisperRuntime, tok: WhisperTokens, mel_window: np.ndarray,
                    encoder_output: Any = None) -> tuple[str, float, list[tuple[str, float]]]:
    """(code, probability, all (code, probability) best first): softmax over the language
    tokens of the logits after <|startoftranscript|>."""
    if not tok.multilingual:
        return "en", 1.0, [("en", 1.0)]
    enc = encoder_output if encoder_output is not None else runtime.encode(pad_or_trim(mel_window))
    logits = np.asarray(runtime.session(enc).forward([tok.sot])[-1], dtype=np.float32)
    ids = np.asarray(tok.lang_ids)
    p = np.exp(log_softmax(logits[ids]).astype(np.float64))
    order = sorted(range(len(ids)), key=lambda i: -p[i])
    probs = [(tok._id_to_lang.get(int(ids[i]), str(int(ids[i]))), float(p[i])) for i in order]
    return probs[0][0], probs[0][1], probs


def _default_mel(n_mels: int) -> Callable[[np.ndarray], np.ndarray]:
    # the native log-mel frontend (docs/whisper.md)
    return lambda samples: audio.log_mel_spectrogram(samples, n_mels=n_mels, padding=HOP_LENGTH)


class WhisperPipeline:
    """transcribe / transcribe_stream over a runtime and a tokenizer.

    mel_fn(samples float32 16 kHz) -> float32 [n_mels, frames]: the log-mel of the whole input
    with HOP_LENGTH zero samples appended (frames = len // 160 + 1; the clamp to max - 8 is over
    the whole input), as faster-whisper computes it; the windows are slices of it."""

    def __init__(self, runtime: WhisperRuntime, tokens: WhisperTokens,
                 mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                 begin_suppress_tokens: Optional[Sequence[int]] = None,
                 alignment_heads: Optional[Sequence[Sequence[int]]] = None):
        self.runtime = runtime
        self.tok = tokens
        self.mel_fn = mel_fn
        self.begin_suppress_tokens = begin_suppress_tokens
        self.alignment_heads = [(int(l), int(h)) for l, h in alignment_heads] if alignment_heads else None

    @classmethod
    def from_modelfile(cls, runtime: WhisperRuntime, mf: Any, mel_fn=None) -> "WhisperPipeline":
        arch = mf.config["architecture"]
        return cls(runtime, WhisperTokens(arch, mf.tokenizer, runtime.n_vocab), mel_fn,
                   arch.get("begin_suppress_tokens"), arch.get("alignment_heads"))

    def _mel(self, audio: np.ndarray) -> np.ndarray:
        fn = self.mel_fn or _default_mel(self.runtime.n_mels)
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if not np.isfinite(samples).all():
            raise InvalidConfig(field="audio", reason="holds NaN or infinite samples")
        return np.asarray(fn(samples), dtype=np.float32)

    def transcribe(self, audio: np.ndarray, **kw: Any) -> dict:
        info: dict = {}
        segments = list(self.transcribe_stream(audio, _info=info, **kw))
        return {"text": "".join(s["text"] for s in segments).strip(), "language": info.get("language"),
                "language_probability": info.get("language_probability"), "segments": segments}

    def transcribe_stream(self, audio: np.ndarray, language: Optional[str] = None, task: str = "transcribe",
                          beam_size: int = 5, best_of: int = 5, patience: float = 1, length_penalty: float = 1,
                          temperature: Union[float, Sequence[float]] = DEFAULT_TEMPERATURES,
                          compression_ratio_threshold: Optional[float] = 2.4,
                          log_prob_threshold: Optional[float] = -1.0,
                          no_speech_threshold: Optional[float] = 0.6,
                          condition_on_previous_text: bool = True,
                          prompt_reset_on_temperature: float = 0.5,
                          initial_prompt: Optional[Union[str, Sequence[int]]] = None,
                          without_timestamps: bool = False, max_initial_timestamp: float = 1.0,
                          suppress_blank: bool = True, suppress_tokens: Optional[Sequence[int]] = (-1,),
                          seed: Optional[int] = None, word_timestamps: bool = False,
                          prepend_punctuations: str = PREPEND_PUNCTUATIONS,
                          append_punctuations: str = APPEND_PUNCTUATIONS,
                          _info: Optional[dict] = None) -> Iterator[dict]:
        """Segments as they are decoded (see `transcribe`)."""
        if word_timestamps:
            if not self.alignment_heads:
                raise InvalidConfig(field="alignment_heads", reason="word_timestamps needs the model's alignment "
                                    "heads ([architecture] alignment_heads of the .model; re-import the model)")
            if not callable(getattr(self.runtime, "cross_attention", None)):
                raise InvalidConfig(field="word_timestamps", reason="the runtime has no cross_attention()")
        if beam_size < 1 or best_of < 1 or patience <= 0:
            raise InvalidConfig(field="beam_size" if beam_size < 1 else "best_of" if best_of < 1 else "patience",
                                reason=f"beam_size and best_of must be >= 1, patience > 0 (got {beam_size}, "
                                       f"{best_of}, {patience})")
        temps = list(temperature) if isinstance(temperature, (list, tuple)) else [float(temperature)]
        tok = self.tok
        mel = self._mel(audio)
        content_frames = mel.shape[-1] - 1
        if language is None:
            if tok.multilingual:
                language, lang_prob, _ = detect_language(self.runtime, tok, mel[:, :N_FRAMES])
            else:
                language, lang_prob = "en", 1.0
        else:
            if not tok.multilingual:
                language = "en"
            else:
                tok.language_id(language)
            lang_prob = 1.0
        if _info is not None:
            _info.update(language=language, language_probability=lang_prob)
        opts = DecodeOptions(beam_size=beam_size, best_of=best_of, patience=patience, length_penalty=length_penalty,
                             temperatures=temps, compression_ratio_threshold=compression_ratio_threshold,
                             log_prob_threshold=log_prob_threshold, no_speech_threshold=no_speech_threshold,
                             suppress_blank=suppress_blank, suppress_tokens=suppress_tokens,
                             without_timestamps=without_timestamps, max_initial_timestamp=max_initial_timestamp,
                             seed=seed)
        dec = WindowDecoder(self.runtime, tok, opts, self.begin_suppress_tokens)
        sot_seq = tok.sot_sequence(language, task)
        all_tokens: list[int] = []
        if initial_prompt is not None:
            if isinstance(initial_prompt, str):
                all_tokens.extend(tok.encode(" " + initial_prompt.strip()))
            else:
                all_tokens.extend(int(t) for t in initial_prompt)
        prompt_reset_since = 0
        seek = 0
        idx = 0
        last_speech_timestamp = 0.0
        while seek < content_frames:
            time_offset = seek * TIME_PER_FRAME
            segment_size = min(N_FRAMES, content_frames - seek)
            window = pad_or_trim(mel[:, seek:seek + segment_size])
            segment_duration = segment_size * TIME_PER_FRAME
            previous = all_tokens[prompt_reset_since:]
            enc = self.runtime.encode(window)
            prompt = build_prompt(tok, previous, sot_seq, without_timestamps)
            r = dec.generate_with_fallback(enc, prompt)
            if no_speech_threshold is not None:
                skip = r.no_speech_prob > no_speech_threshold
                if log_prob_threshold is not None and r.avg_logprob > log_prob_threshold:
                    skip = False
                if skip:
                    seek += segment_size
                    continue
            previous_seek = seek
            current, seek, single_ending = split_segments_by_timestamps(tok, r.tokens, time_offset, segment_size,
                                                                        segment_duration, seek)
            if word_timestamps:
                add_word_timestamps(self.runtime, tok, current, enc, sot_seq, segment_size, self.alignment_heads,
                                    language, prepend_punctuations, append_punctuations, last_speech_timestamp)
                end = words_end(current)
                if not single_ending and end is not None and end > time_offset:
                    seek = round(end * FRAMES_PER_SECOND)
                if end is not None:
                    last_speech_timestamp = end
            for s in current:
                text = tok.decode(s["tokens"])
                if s["start"] == s["end"] or not text.strip():
                    continue
                all_tokens.extend(s["tokens"])
                idx += 1
                yield {"id": idx, "seek": previous_seek, "start": s["start"], "end": s["end"], "text": text,
                       "tokens": list(s["tokens"]), "temperature": r.temperature, "avg_logprob": r.avg_logprob,
                       "compression_ratio": r.compression_ratio, "no_speech_prob": r.no_speech_prob,
                       **({"words": s["words"]} if word_timestamps else {})}
            if not condition_on_previous_text or r.temperature > prompt_reset_on_temperature:
                prompt_reset_since = len(all_tokens)


def transcribe(runtime: WhisperRuntime, tokens: WhisperTokens, audio: np.ndarray, *,
               mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
               begin_suppress_tokens: Optional[Sequence[int]] = None,
               alignment_heads: Optional[Sequence[Sequence[int]]] = None, **kw: Any) -> dict:
    """{"text", "language", "language_probability", "segments": [...]} (WhisperPipeline.transcribe)."""
    return WhisperPipeline(runtime, tokens, mel_fn, begin_suppress_tokens, alignment_heads).transcribe(audio, **kw)


def transcribe_stream(runtime: WhisperRuntime, tokens: WhisperTokens, audio: np.ndarray, *,
                      mel_fn: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                      begin_suppress_tokens: Optional[Sequence[int]] = None,
                      alignment_heads: Optional[Sequence[Sequence[int]]] = None, **kw: Any) -> Iterator[dict]:
    return WhisperPipeline(runtime, tokens, mel_fn, begin_suppress_tokens,
                           alignment_heads).transcribe_stream(audio, **kw)


__all__ = ["WhisperRuntime", "Session", "WhisperTokens", "LogitRules", "WindowDecoder", "DecodeOptions",
           "WindowResult", "WhisperPipeline", "transcribe", "transcribe_stream", "detect_language",
           "split_segments_by_timestamps", "build_prompt", "compression_ratio", "greedy", "beam_search", "forward_step",
           "pad_or_trim", "find_alignment", "add_word_timestamps", "negative_dtw", "median_filter",
           "merge_punctuations", "split_to_word_tokens", "alignment_matrix"]
