"""Native sampler (cyb_llm._core.Sampler) against HF transformers' logits processors."""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import InvalidConfig, ShapeMismatch

from tolerances import tolerance

LOGITS_TOL = tolerance("sampler-logits")  # docs/runtime.md, "Tolerances"
PROBS_TOL = tolerance("sampler-probs")
LOGPROB_TOL = tolerance("sampler-logprob")

VOCAB = 1000


def hf_process(logits, history, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0):
    """The same stages with HF's processors, in docs/generation.md order (HF's own order too)."""
    import torch
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    procs = []
    if repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(repetition_penalty))
    if temperature != 1.0:
        procs.append(TemperatureLogitsWarper(temperature))
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    if min_p > 0.0:
        procs.append(MinPLogitsWarper(min_p))
    ids = torch.tensor([list(history) or [0]], dtype=torch.long)
    scores = torch.from_numpy(logits.copy())[None]
    for p in procs:
        scores = p(ids, scores)
    return scores[0].numpy()


def ours(logits, history, **kw):
    s = _core.Sampler(penalty_last_n=-1, **kw)
    s.accept_many(list(history))
    return s.process(logits)


def assert_same_processed(a, b):
    kept_a, kept_b = np.isfinite(a), np.isfinite(b)
    np.testing.assert_array_equal(kept_a, kept_b)
    np.testing.assert_allclose(a[kept_a], b[kept_b], rtol=LOGITS_TOL, atol=0)


def random_case(seed, scale=3.0):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(VOCAB) * scale).astype(np.float32)
    history = rng.integers(0, VOCAB, size=40)
    return logits, history


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "params",
    [
        dict(repetition_penalty=1.3),
        dict(temperature=0.7),
        dict(temperature=1.8),
        dict(top_k=1),
        dict(top_k=37),
        dict(top_p=0.5),
        dict(top_p=0.93),
        dict(min_p=0.05),
        dict(min_p=0.3),
    ],
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()),
)
def test_single_stage_matches_hf(seed, params):
    logits, history = random_case(seed)
    hist = history if "repetition_penalty" in params else []
    assert_same_processed(ours(logits, hist, **params), hf_process(logits, hist, **params))


@pytest.mark.parametrize("seed", range(8))
def test_composition_matches_hf(seed):
    logits, history = random_case(100 + seed)
    params = dict(repetition_penalty=1.2, temperature=0.8, top_k=200, top_p=0.9, min_p=0.02)
    want = hf_process(logits, history, **params)
    assert_same_processed(ours(logits, history, **params), want)
    # Each stage does something here, so a wrong order would show.
    assert np.isfinite(want).sum() < 200


def test_order_matters_and_is_the_specified_one():
    # top-k then top-p differs from top-p then top-k on this input; ours must be the former.
    logits, history = random_case(7, scale=1.0)
    params = dict(temperature=0.5, top_k=50, top_p=0.6)
    got = ours(logits, [], **params)
    assert_same_processed(got, hf_process(logits, [], **params))
    import torch
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = torch.from_numpy(logits.copy())[None]
    ids = torch.zeros((1, 1), dtype=torch.long)
    for p in (TemperatureLogitsWarper(0.5), TopPLogitsWarper(0.6), TopKLogitsWarper(50)):
        scores = p(ids, scores)
    swapped = scores[0].numpy()
    assert not np.array_equal(np.isfinite(swapped), np.isfinite(got))


def test_repetition_penalty_counts_each_token_once_and_window():
    logits = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    s = _core.Sampler(repetition_penalty=2.0, penalty_last_n=-1)
    s.accept_many([0, 0, 1])
    np.testing.assert_allclose(s.process(logits), [1.0, -4.0, 1.0, 0.5])
    s = _core.Sampler(repetition_penalty=2.0, penalty_last_n=2)  # only the last 2 tokens
    s.accept_many([2, 0, 1])
    np.testing.assert_allclose(s.process(logits), [1.0, -4.0, 1.0, 0.5])
    s = _core.Sampler(repetition_penalty=2.0, penalty_last_n=0)  # disabled
    s.accept_many([2, 0, 1])
    np.testing.assert_allclose(s.process(logits), logits)


def test_presence_and_frequency_penalties_openai_definition():
    # logit[j] -= count[j] * frequency + (count[j] > 0) * presence
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(50).astype(np.float32)
    history = [3, 3, 3, 7, 9, 9]
    s = _core.Sampler(presence_penalty=0.4, frequency_penalty=0.25, penalty_last_n=-1)
    s.accept_many(history)
    want = logits.astype(np.float64)
    counts = np.bincount(history, minlength=50)
    want -= counts * 0.25 + (counts > 0) * 0.4
    np.testing.assert_allclose(s.process(logits), want, rtol=LOGITS_TOL)


def test_probs_are_softmax_of_processed():
    logits, history = random_case(11)
    s = _core.Sampler(temperature=0.9, top_k=100, top_p=0.95, repetition_penalty=1.1)
    s.accept_many(list(history))
    proc = s.process(logits).astype(np.float64)
    e = np.exp(proc - proc.max())
    want = e / e.sum()
    assert np.max(np.abs(s.probs(logits) - want)) <= PROBS_TOL * np.max(want)


def test_greedy_is_argmax_after_penalties():
    rng = np.random.default_rng(5)
    for _ in range(20):
        logits = rng.standard_normal(VOCAB).astype(np.float32)
        assert _core.Sampler(temperature=0.0).sample(logits) == int(np.argmax(logits))
    logits = np.array([1.0, 3.0, 2.9], dtype=np.float32)
    s = _core.Sampler(temperature=0.0, repetition_penalty=1.5)
    s.accept(1)
    assert s.sample(logits) == 2  # 3.0 / 1.5 = 2.0 < 2.9


def test_seed_determinism_and_history():
    rng = np.random.default_rng(9)
    rows = rng.standard_normal((64, VOCAB)).astype(np.float32)

    def draw(seed):
        s = _core.Sampler(temperature=1.0, top_p=0.95, seed=seed)
        return [s.sample(r) for r in rows], s

    a, sa = draw(1234)
    b, _ = draw(1234)
    c, _ = draw(4321)
    assert a == b
    assert a != c
    assert sa.history == a
    sa.reset(1234)
    assert sa.history == [] and [sa.sample(r) for r in rows] == a


def test_draw_follows_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    s = _core.Sampler(seed=7)
    n = 20000
    counts = np.bincount([s.sample(logits, accept=False) for _ in range(n)], minlength=4)
    # `sampler-draw-sigmas` standard deviations of a binomial count
    for p, c in zip([0.5, 0.3, 0.15, 0.05], counts):
        assert abs(c - n * p) < tolerance("sampler-draw-sigmas") * np.sqrt(n * p * (1 - p))
    # top-k / min-p never draw a removed token
    s = _core.Sampler(top_k=2, seed=1)
    assert set(s.sample(logits, accept=False) for _ in range(500)) == {0, 1}
    s = _core.Sampler(min_p=0.5, seed=1)  # keeps p >= 0.25
    assert set(s.sample(logits, accept=False) for _ in range(500)) == {0, 1}


def test_large_vocab_top_p_without_top_k_matches_hf():
    # 150k vocab, top-p alone: exercises the growing partial sort.
    rng = np.random.default_rng(21)
    logits = (rng.standard_normal(151_936) * 2).astype(np.float32)
    for top_p in (0.1, 0.9, 0.999):
        assert_same_processed(ours(logits, [], top_p=top_p), hf_process(logits, [], top_p=top_p))


def test_masked_logits_and_ties():
    logits = np.array([-np.inf, 1.0, 1.0, 0.0, -np.inf], dtype=np.float32)
    s = _core.Sampler(top_k=1)  # ties at the k-th value are kept (HF)
    out = s.process(logits)
    assert list(np.isfinite(out)) == [False, True, True, False, False]
    s = _core.Sampler(seed=3)
    assert all(s.sample(logits, accept=False) in (1, 2, 3) for _ in range(200))


def test_top_logprobs():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal(VOCAB).astype(np.float32)
    ref = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum())
    lp, ids, lps = _core.top_logprobs(logits, 17, 5)
    assert lp == pytest.approx(ref[17], abs=LOGPROB_TOL)
    np.testing.assert_array_equal(ids, np.argsort(-ref)[:5])
    np.testing.assert_allclose(lps, np.sort(ref)[::-1][:5], atol=LOGPROB_TOL)


@pytest.mark.parametrize(
    "bad",
    [dict(temperature=-1.0), dict(top_k=-2), dict(top_p=1.5), dict(min_p=-0.1),
     dict(repetition_penalty=0.0), dict(temperature=float("nan")), dict(penalty_last_n=-5)],
)
def test_bad_parameters_raise(bad):
    with pytest.raises(InvalidConfig) as e:
        _core.Sampler(**bad)
    assert e.value.field == next(iter(bad))


def test_bad_logits_raise():
    s = _core.Sampler()
    with pytest.raises(InvalidConfig, match="NaN at token 1"):
        s.sample(np.array([0.0, np.nan], dtype=np.float32))
    with pytest.raises(ShapeMismatch):
        s.sample(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ShapeMismatch):
        s.sample(np.zeros(0, dtype=np.float32))


# --- every public entry point reaches the native sampler --------------------------------------
#
# At a high temperature unrestricted sampling leaves the greedy text at once (and differs across
# seeds); each restriction alone (top_k=1, a tiny top_p, min_p near 1) leaves one token per step,
# so the text must be the greedy one. An entry point that dropped a parameter on its way to
# _core.Sampler would sample unrestricted and fail. Real smollm2 weights, the chat prompt below.

HOT = 5.0
SEEDS = (1, 2, 3)
N_NEW = 8
MESSAGES = [{"role": "user", "content": "Name three colors."}]
OFF = dict(top_k=0, top_p=1.0, min_p=0.0)
RESTRICTIONS = {"top_k": dict(top_k=1), "top_p": dict(top_p=1e-6), "min_p": dict(min_p=0.999)}


@pytest.fixture(scope="module")
def smollm2():
    import cyb_llm
    from cyb_llm import hub

    path = hub.fetch("smollm2")
    return path, cyb_llm.load(path)


def _via_sampling_params(path, model, **kw):
    from cyb_llm.text.sampling import SamplingParams

    return model.generator().generate(MESSAGES, max_tokens=N_NEW, sampling=SamplingParams(**kw)).read()


def _via_generate_dict(path, model, **kw):
    return model.generator().generate(MESSAGES, max_tokens=N_NEW, sampling=dict(kw)).read()


def _via_chat_completion(path, model, **kw):
    from cyb_llm.text.generate import create_chat_completion

    out = create_chat_completion(model, MESSAGES, max_tokens=N_NEW, **kw)
    return out["choices"][0]["message"]["content"]


def _via_cli(path, model, **kw):
    import contextlib
    import io
    import json

    from cyb_llm import cli

    flags = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
             "seed": "--seed"}
    argv = ["run", path, MESSAGES[0]["content"], "--json", "-q", "--max-tokens", str(N_NEW)]
    for k, v in kw.items():
        argv += [flags[k], str(v)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(argv) == 0
    return json.loads(buf.getvalue())["text"]


ENTRY_POINTS = {"SamplingParams": _via_sampling_params, "generate(sampling=dict)": _via_generate_dict,
                "create_chat_completion": _via_chat_completion, "cyb-llm run": _via_cli}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_sampling_parameters_reach_the_native_sampler(entry, smollm2):
    path, model = smollm2
    run = lambda **kw: ENTRY_POINTS[entry](path, model, **kw)  # noqa: E731
    greedy_text = run(temperature=0.0, seed=1, **OFF)
    assert greedy_text, entry
    free = [run(temperature=HOT, seed=s, **OFF) for s in SEEDS]
    assert all(t != greedy_text for t in free), f"{entry}: unrestricted hot sampling gave the greedy text: {free}"
    assert len(set(free)) > 1, f"{entry}: the seed does not reach the sampler: {free}"
    for name, restrict in RESTRICTIONS.items():
        for s in SEEDS:
            got = run(temperature=HOT, seed=s, **{**OFF, **restrict})
            assert got == greedy_text, f"{entry}: {name}={restrict[name]} at T={HOT}, seed {s}: {got!r} != greedy"
