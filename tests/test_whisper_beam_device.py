"""Whisper's decode steps with their candidates taken on the device (csrc/sampling/beam.h,
shaders/wgsl/beam.wgsl; docs/whisper.md, "Decoding on the device").

1. `LogitRules.mask` (the bitset the kernel reads) forbids exactly the tokens `LogitRules.apply`
   sets to -inf, on random token histories.
2. The wgpu+rs kernel (`_core.wgpu_beam_rows`) against the numpy statement of the step: random
   rows, masks, check flags and cumulative log-probabilities (masked rows, rows whose timestamps
   drop the text, exact ties, logits whose exponentials underflow, k up to 64, vocabularies of 37
   to 51,865 tokens), and on the Whisper rules' own masks against the search's host step
   (`search._host_candidates`). Tokens equal where the wanted scores are not within
   `device-beam-score` of each other, every score within it; a NaN or infinite logit is an error
   naming its row and token (the model's step then rolls back, as forward_batch does).
3. whisper-tiny on wgpu+rs: the first steps of beam 5 and greedy decoding, the candidates on the
   device, give the hypotheses of the same model with its candidates taken on the host
   (device_beams off, so forward_batch's logits come back); the cpu model refuses
   forward_batch_beam. The whole window: tests/slow/test_whisper_beam_device_slow.py.
4. Bad input: k out of range, a timestamp range outside the vocabulary, masks, flags or
   cumulative log-probabilities of the wrong shape or value: InvalidConfig / ShapeMismatch.
"""
from __future__ import annotations

import numpy as np
import pytest

from placement import wgpu_skip_reason
from tolerances import tolerance

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch
from cyb_llm.speech.common import log_softmax
from cyb_llm.speech.search import LogitRules, _host_candidates

WGPU = wgpu_skip_reason()
needs_wgpu = pytest.mark.skipif(WGPU is not None, reason=WGPU or "")
TOL = tolerance("device-beam-score")
EOT, NO_TS, TB, V = 50256, 50362, 50363, 51864  # a tiny.en-shaped vocabulary layout


def _rules(rng) -> LogitRules:
    suppress = sorted(set(rng.integers(0, 50000, 80).tolist()) | {NO_TS - 1})
    return LogitRules(suppress=suppress, suppress_begin=[220, EOT], timestamps=True, eot=EOT, no_timestamps=NO_TS,
                      timestamp_begin=TB, timestamp_end=V - 1, max_initial_timestamp_index=50)


def _history(rng, n):
    seq, t = [TB + int(rng.integers(0, 40))], 0
    while len(seq) < n:
        if seq[-1] >= TB and (len(seq) < 2 or seq[-2] < TB):
            seq.append(int(rng.integers(0, 50000)))
        elif rng.random() < 0.25 and seq[-1] < TB:
            t += int(rng.integers(0, 30))
            seq += [TB + t] if rng.random() < 0.5 else [TB + t, TB + t]
        else:
            seq.append(int(rng.integers(0, 50000)))
    return seq[:n]


def _numpy_step(x, masks, checks, cums, ts0, ts1, k):
    """The step as beam.h states it, in numpy: masked tokens -inf; where checked, the text tokens
    dropped when the timestamps' log-sum beats every text token; log-softmax plus the cumulative
    log-probability; the k best of the flat [rows * n] array by (score desc, index asc)."""
    rows, n = x.shape
    y = np.array(x, dtype=np.float32)
    if masks is not None:
        bits = np.unpackbits(masks.astype("<u4").view(np.uint8), axis=1, bitorder="little")[:, :n]
        y[bits == 0] = -np.inf
    for r in range(rows):
        if checks[r] and ts0 < ts1 and np.max(y[r, ts0:ts1]) > -np.inf:
            s = y[r, ts0:ts1].astype(np.float64)
            lse = np.max(s) + np.log(np.sum(np.exp(s - np.max(s))))
            if lse > np.max(y[r, :ts0], initial=-np.inf):
                y[r, :ts0] = -np.inf
    with np.errstate(invalid="ignore"):
        flat = (log_softmax(y) + np.asarray(cums, np.float32)[:, None]).ravel()
    flat = np.where(np.isnan(flat), -np.inf, flat)  # a row with nothing allowed scores -inf
    order = np.lexsort((np.arange(flat.size), -flat))[:k]
    return order // n, order % n, flat[order]


def _agree(got, want, what):
    """Same candidates in the same order, except where the wanted scores of neighbours are within
    TOL (a near-tie the two sums may order either way); every score within TOL."""
    (gr, gt, gs), (wr, wt, ws) = got, want
    assert len(gs) == len(ws), what
    gs, ws = np.asarray(gs, np.float64), np.asarray(ws, np.float64)
    with np.errstate(invalid="ignore"):
        close = (gs == ws) | (np.abs(gs - ws) <= TOL)  # -inf on both sides, or within TOL
    assert np.all(close), (what, gs[~close], ws[~close])
    for j in range(len(ws)):
        if (gr[j], gt[j]) != (wr[j], wt[j]):
            near = [i for i in range(len(ws)) if ws[i] == ws[j] or abs(ws[i] - ws[j]) <= TOL]
            assert len(near) > 1, (what, j, (gr[j], gt[j]), (wr[j], wt[j]))


@pytest.mark.parametrize("seed", range(4))
def test_mask_forbids_what_apply_forbids(seed):
    """Seen failing with the bits packed in the other order (bitorder "big")."""
    rng = np.random.default_rng(seed)
    rules = _rules(rng)
    for trial in range(30):
        seq = [] if trial == 0 else _history(rng, int(rng.integers(1, 30)))
        row = rng.standard_normal(V + 1).astype(np.float32)
        row[TB:] -= 60.0  # timestamps unlikely: the check keeps the text, so apply masks only by the rules
        mask, _ = rules.mask(seq, V + 1)
        allowed = np.unpackbits(mask.astype("<u4").view(np.uint8), bitorder="little")[:V + 1].astype(bool)
        assert np.array_equal(allowed, np.isfinite(rules.apply(row, seq))), (seed, trial)


@needs_wgpu
@pytest.mark.parametrize("n", [37, 1000, V + 1])
def test_kernel_matches_the_numpy_step(n):
    """Seen failing with the kernel's mask bits read in reverse within a word, with the text kept
    where the check drops it, and with ties taken by the higher token (shaders/wgsl/beam.wgsl)."""
    rng = np.random.default_rng(n)
    ts0, ts1 = (TB, V) if n > V else (n // 3, n - n // 5)
    for trial in range(10):
        rows = int(rng.integers(1, 6))
        x = (rng.standard_normal((rows, n)) * [0.5, 3.0, 8.0][trial % 3]).astype(np.float32)
        if trial % 4 == 1:
            x[:, ts0:ts1] += 12.0  # the check drops the text
        if trial % 4 == 2:
            x = np.round(x)  # many exact ties: broken by the lower token on both sides
        if trial % 5 == 3:
            x[rng.random(x.shape) < 0.3] = -1e30  # exp underflows to 0
        masks = rng.integers(0, 2**32, (rows, (n + 31) // 32), dtype=np.uint64).astype(np.uint32)
        masks[0] = 0xFFFFFFFF
        if rows > 2:
            masks[2] = 0  # nothing allowed: -inf scores, the lowest tokens
        checks = [bool(c) for c in rng.integers(0, 2, rows)]
        cums = (-rng.random(rows) * 30).astype(np.float32).tolist()
        k = int(rng.choice([1, 10, min(64, n)]))
        args = (masks if trial % 2 else None, checks, cums, ts0, ts1, k)
        _agree(_core.wgpu_beam_rows(x, *args), _numpy_step(x, *args), (n, trial))


@needs_wgpu
@pytest.mark.parametrize("seed", range(3))
def test_kernel_on_the_rules_matches_the_host_step(seed):
    """The Whisper rules' masks and checks (LogitRules.mask) through the kernel against the
    search's own host step (LogitRules.apply, log-softmax, the flat order) on the same logits."""
    rng = np.random.default_rng(seed)
    rules = _rules(rng)
    for trial in range(6):
        beams = int(rng.integers(1, 6))
        seqs = [[] if trial == 0 else _history(rng, int(rng.integers(1, 30))) for _ in range(beams)]
        cums = (-rng.random(beams) * 20).astype(np.float32).tolist()
        x = (rng.standard_normal((beams, V + 1)) * [0.5, 3.0, 8.0][trial % 3]).astype(np.float32)
        x[:, TB:] += [0.0, 6.0, 30.0][trial % 3]
        pairs = [rules.mask(q, V + 1) for q in seqs]
        k = int(rng.choice([1, 10]))
        got = _core.wgpu_beam_rows(x, np.stack([m for m, _ in pairs]), [c for _, c in pairs], cums, TB, V, k)
        want = _host_candidates(x.copy(), rules, seqs, cums, k)
        _agree(got, tuple(np.array(c) for c in zip(*want)), (seed, trial))


@needs_wgpu
def test_kernel_reports_nonfinite_logits():
    """Seen failing with the kernel's non-finite scan left out."""
    x = np.zeros((3, 100), np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        x[1, 57] = bad
        with pytest.raises(InvalidConfig, match="row 1: NaN or Inf at token 57"):
            _core.wgpu_beam_rows(x, None, [False] * 3, [0.0] * 3, 0, 0, 4)


@needs_wgpu
def test_bad_arguments_are_named():
    x = np.zeros((2, 100), np.float32)
    f = _core.wgpu_beam_rows
    with pytest.raises(InvalidConfig, match="k"):
        f(x, None, [False] * 2, [0.0] * 2, 0, 0, 0)
    with pytest.raises(InvalidConfig, match="k"):
        f(x, None, [False] * 2, [0.0] * 2, 0, 0, 101)
    with pytest.raises(InvalidConfig, match="timestamp_range"):
        f(x, None, [True] * 2, [0.0] * 2, 50, 101, 3)
    with pytest.raises(ShapeMismatch, match="masks"):
        f(x, np.zeros((2, 3), np.uint32), [False] * 2, [0.0] * 2, 0, 0, 3)
    with pytest.raises(ShapeMismatch, match="check"):
        f(x, None, [False], [0.0] * 2, 0, 0, 3)
    with pytest.raises(InvalidConfig, match="cums"):
        f(x, None, [False] * 2, [0.0, float("nan")], 0, 0, 3)


def window_on_wgpu(sentences: int = 1):
    """whisper-tiny on wgpu+rs over one window of `sentences` spoken sentences (the encoder run on
    the cpu: lavapipe takes a minute for it): (model, tokens, decoder of a beam size, prompt,
    encoder output)."""
    wo = pytest.importorskip("whisper_oracle")
    wo.fetch_or_skip("whisper-tiny")
    import cyb_llm
    from cyb_llm.speech.pipeline import pad_or_trim
    from cyb_llm.speech.search import DecodeOptions, WindowDecoder, build_prompt

    cpu = cyb_llm.load("whisper-tiny")
    pipe = cpu._pipeline()
    enc = cpu.encode(pad_or_trim(pipe._mel(wo.english_clip(wo.ENGLISH[:sentences]))[:, :-1]))
    gpu = cyb_llm.load("whisper-tiny", backend="wgpu+rs")
    tok = pipe.tok
    def decoder(beam: int) -> WindowDecoder:
        return WindowDecoder(gpu, tok, DecodeOptions(beam_size=beam), pipe.begin_suppress_tokens)
    return gpu, tok, decoder, build_prompt(tok, [], tok.sot_sequence("en", "transcribe"), False), enc


def on_host(monkeypatch):
    """WhisperModel with device_beams off: its steps read the logits back and the host step runs."""
    from cyb_llm.speech.model import WhisperModel
    monkeypatch.setattr(WhisperModel, "device_beams", property(lambda self: False))


@needs_wgpu
def test_tiny_steps_on_the_device_equal_the_host_candidates(monkeypatch):
    """whisper-tiny on wgpu+rs, the first steps of a window's beam search (beam 5) and greedy
    decode: the candidates on the device (the step's logits never read back) give the hypotheses
    of the same model with its candidates taken on the host. The whole window, beam 5 and greedy:
    tests/slow/test_whisper_beam_device_slow.py. Seen failing with the kernel's cumulative
    log-probability left out."""
    from cyb_llm.speech.search import beam_search, greedy

    gpu, tok, decoder, prompt, enc = window_on_wgpu()
    rules = decoder(5).rules(prompt)
    runs = {}
    for where in ("device", "host"):
        if where == "host":
            on_host(monkeypatch)
        out = []
        for search in (lambda s, last: beam_search(s, last, rules, tok.eot, 4, beam_size=5),
                       lambda s, last: greedy(s, last, rules, tok.eot, 4)):
            s = gpu.session(enc)
            out.append(search(s, np.asarray(s.forward(prompt)[-1], np.float32)))
        runs[where] = out
    for a, b in zip(runs["device"], runs["host"]):
        assert a.tokens == b.tokens and len(a.tokens) == 4
        assert abs(a.cum_logprob - b.cum_logprob) <= TOL
    import cyb_llm
    monkeypatch.undo()
    cpu = cyb_llm.load("whisper-tiny")
    assert gpu.device_beams and not cpu.device_beams
    s = cpu.session(enc)
    s.forward(prompt)
    with pytest.raises(InvalidConfig, match="backend"):
        cpu.forward_batch_beam([s], [tok.eot], None, [False], [0.0], 0, 0, 1)
