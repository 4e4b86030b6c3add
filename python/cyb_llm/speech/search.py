"""Whisper decoding of one 30 s window (docs/whisper.md, "Decoding and transcription"), as
faster-whisper 1.x over CTranslate2 does it step for step: the prompt, the suppressed tokens, the
timestamp rules (`LogitRules`), greedy / best-of sampling / beam search (beam size, patience,
length penalty: `greedy`, `beam_search`), the no-speech probability, avg_logprob, the zlib
compression ratio and the temperature fallback (`WindowDecoder`).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from .. import _core
from .common import (DEFAULT_TEMPERATURES, MAX_LENGTH, NEG_INF, TIME_PRECISION, Session, WhisperRuntime,
                     WhisperTokens, log_softmax)


# --------------------------------------------------------------------------------------------
# logits rules
# --------------------------------------------------------------------------------------------

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
        self._base_mask: dict[int, np.ndarray] = {}

    def apply(self, logits: np.ndarray, generated: Sequence[int]) -> np.ndarray:
        """Rules for the next token after `generated` (the tokens sampled so far, prompt
        excluded), in place on a float32 [n_vocab] row; returns it. (Sampling at a temperature
        uses this; greedy and beam steps take `mask` and the native candidates.)"""
        step = len(generated)
        if self._suppress.size:
            logits[self._suppress] = NEG_INF
        if step == 0 and self._begin.size:
            logits[self._begin] = NEG_INF
        ranges, check = self._timestamp_ranges(generated)
        for lo, hi in ranges:
            logits[lo:hi] = NEG_INF
        if check:
            lp = log_softmax(logits)
            if _logsumexp(lp[self.timestamp_begin:self.timestamp_end + 1]) > float(np.max(lp[:self.timestamp_begin])):
                logits[:self.timestamp_begin] = NEG_INF
        return logits

    def mask(self, generated: Sequence[int], n_vocab: int) -> tuple[np.ndarray, bool]:
        """The same rules as `apply` for the candidates on the device (`_core.forward_batch_beam`,
        csrc/sampling/beam.h): the allowed tokens as uint32 [ceil(n_vocab / 32)] (bit t of
        word t // 32), and whether the timestamp check runs (over [timestamp_begin, timestamp_end];
        the kernel drops the text tokens when the timestamps' log-sum beats every text token)."""
        base = self._base_mask.get(n_vocab)
        if base is None:
            base = np.ones(-(-n_vocab // 32) * 32, dtype=bool)
            base[n_vocab:] = False
            base[self._suppress[self._suppress < n_vocab]] = False
            self._base_mask[n_vocab] = base
        allowed = base.copy()
        if not generated and self._begin.size:
            allowed[self._begin[self._begin < n_vocab]] = False
        ranges, check = self._timestamp_ranges(generated)
        for lo, hi in ranges:
            allowed[lo:hi] = False
        return np.packbits(allowed, bitorder="little").view("<u4").astype(np.uint32), check

    def _timestamp_ranges(self, seq: Sequence[int]) -> tuple[list[tuple[int, int]], bool]:
        """The token ranges [lo, hi) the timestamp rules forbid after `seq`, and whether the
        timestamp check (a timestamp more likely than every text token drops the text) runs."""
        if not self.timestamps:
            return [], False
        tb, te = self.timestamp_begin, self.timestamp_end
        ranges = [(self.no_timestamps, self.no_timestamps + 1)]
        step = len(seq)
        check = False
        if step == 0:
            ranges.append((0, tb))  # the first token is a timestamp
            if self.max_initial_timestamp_index is not None:
                ranges.append((tb + self.max_initial_timestamp_index + 1, te + 1))
        else:
            last = seq[-1]
            if last >= tb:
                penultimate = seq[-2] if step >= 2 else last
                if penultimate >= tb:      # a closed pair: the next one is text (or eot)
                    ranges.append((tb, te + 1))
                else:                      # an open pair: a timestamp (not earlier) or eot
                    ranges += [(0, self.eot), (tb, last)]
                    check = True
            else:
                check = True
                for t in reversed(seq):    # timestamps never decrease
                    if t >= tb:
                        ranges.append((tb, t + 1))
                        break
        return ranges, check


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
    if temperature <= 0 and _device_model([session]) is not None:  # argmax: the candidate (k = 1) on the device
        _, t, cum = _host_candidates(np.array(logits, dtype=np.float32)[None], rules, [tokens], [cum], 1)[0]
        for step in range(max_steps):
            if t == eot:
                break
            tokens.append(t)
            if step + 1 == max_steps:
                break
            _, t, cum = _step_candidates([session], [t], rules, [tokens], [cum], 1)[0]
        return _finalize(tokens, cum, length_penalty)
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


def _host_candidates(rows: np.ndarray, rules: LogitRules, seqs: Sequence[Sequence[int]], cums: Sequence[float],
                     k: int) -> list[tuple[int, int, float]]:
    """The k best (beam, token, score) of float32 logits rows [beams, vocab] (row i after seqs[i],
    its cumulative log-probability cums[i]; the rules applied to `rows` in place): every beam's
    log-probabilities plus its cumulative one as one [beams * vocab] row, its k best by (score
    desc, flat index asc)."""
    for row, seq in zip(rows, seqs):
        rules.apply(row, seq)
    flat = (log_softmax(rows) + np.asarray(cums, dtype=np.float32)[:, None]).ravel()
    vocab = rows.shape[1]
    return [(int(i) // vocab, int(i) % vocab, float(flat[i])) for i in _top(flat, k)]


def _device_model(sessions: Sequence[Session]) -> Any:
    """The model of `sessions` when they all belong to one model that takes its decode steps'
    candidates on the device (WhisperModel.device_beams: wgpu+rs), else None."""
    model = getattr(sessions[0], "model", None)
    if not getattr(model, "device_beams", False) or any(getattr(s, "model", None) is not model for s in sessions):
        return None
    return model


def _step_candidates(sessions: Sequence[Session], tokens: Sequence[int], rules: LogitRules,
                     seqs: Sequence[Sequence[int]], cums: Sequence[float], k: int) -> list[tuple[int, int, float]]:
    """Feeds tokens[i] to sessions[i] (each advances by one) and returns the k best candidates of
    the next step as _host_candidates does. On a model that takes them on the device
    (forward_batch_beam: the rules as bitsets and check flags, the step's logits never read back:
    csrc/sampling/beam.h, shaders/wgsl/beam.wgsl) so; else forward_step, then _host_candidates."""
    model = _device_model(sessions)
    if model is None:
        return _host_candidates(np.asarray(forward_step(sessions, tokens), dtype=np.float32), rules, seqs, cums, k)
    pairs = [rules.mask(seq, model.n_vocab) for seq in seqs]
    ts = (rules.timestamp_begin, rules.timestamp_end + 1) if rules.timestamps else (0, 0)
    beams, toks, scores = model.forward_batch_beam(sessions, tokens, np.stack([m for m, _ in pairs]),
                                                   [c for _, c in pairs], [float(c) for c in cums], *ts,
                                                   min(k, model.n_vocab))
    return [(int(r), int(t), float(v)) for r, t, v in zip(beams, toks, scores)]


def _top(flat: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest values of flat, best first (ties: lower index first; all of them
    when flat has n or fewer): one native pass (`_core.top_indices`)."""
    return _core.top_indices(flat, min(n, flat.size))


def _copy_of(src: Session, spare: list[Session]) -> Session:
    """A session holding src's state: a spare one overwritten (copy_from) where the runtime offers
    it, else a clone."""
    if spare and hasattr(spare[-1], "copy_from"):
        s = spare.pop()
        s.copy_from(src)  # type: ignore[attr-defined]
        return s
    return src.clone()


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
    seqs: list[list[int]] = [[]]
    sessions: list[Session] = [session]
    # the best n_cand of every beam's log-probabilities plus its cumulative one (the [beams *
    # vocab] row in flat order): (beam, token, score)
    cand = _host_candidates(np.array(logits, dtype=np.float32)[None], rules, seqs, [0.0], n_cand)
    for step in range(max_steps):
        last_step = step + 1 == max_steps
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
        # a beam chosen n times needs n - 1 copies of its state: into the sessions of beams not
        # chosen (copy_from: no new caches; on wgpu+rs a copy on the device), else clones
        spare = [sessions[i] for i in range(len(sessions)) if i not in uses]
        pool: dict[int, list[Session]] = {}
        for origin, n in uses.items():
            pool[origin] = [_copy_of(sessions[origin], spare) for _ in range(n - 1)] + [sessions[origin]]
        new_sessions = [pool[origin].pop(0) for origin, _, _ in chosen]
        seqs = [seqs[origin] + [tok] for origin, tok, _ in chosen]
        cand = _step_candidates(new_sessions, [tok for _, tok, _ in chosen], rules, seqs,
                                [score for _, _, score in chosen], n_cand)
        sessions = new_sessions
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


__all__ = ["LogitRules", "Hypothesis", "greedy", "forward_step", "beam_search", "WindowResult", "compression_ratio",
           "build_prompt", "DecodeOptions", "WindowDecoder"]
