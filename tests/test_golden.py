"""Golden end-to-end tests on real weights against transformers f32.

transformers loads the same GGUF and dequantizes it to f32, so both sides run
the same weights. Precise mode (f32 activations and KV cache) must match its
logits and its greedy 32-token text on the share of prompts that
docs/runtime.md's "Tolerances" tables state per model; every bound here is
read from there (tests/tolerances.py). Every test also asserts from
`model.dispatch_records` that each op ran on the backend under test (no silent
fallback to the CPU). The references of every model are fixtures written by
tools/make_golden_fixtures.py (tests/data/golden/*.json); smollm2 is also
compared live against transformers in the full tier.

CYB_GOLDEN=short: 2 prompts x 8 tokens (CI's tier for the non-default paths).
CYB_GOLDEN_BACKEND: the backend under test (default: the platform default).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub

from oracles import PROMPTS, greedy, hf_from_gguf, hf_greedy, hf_logits, rel_err
from placement import assert_ran_on
from tolerances import count, tolerance

SHORT = os.environ.get("CYB_GOLDEN", "full") == "short"
N_PROMPTS = 2 if SHORT else len(PROMPTS)
N_TOKENS = 8 if SHORT else 32
MODELS = os.environ.get("CYB_GOLDEN_MODELS", "smollm2,qwen05,gemma3").split(",")
# the live transformers comparison: none by default (tests/slow/test_golden_live.py runs all three)
LIVE = set(filter(None, os.environ.get("CYB_GOLDEN_LIVE", "").split(",")))
BACKEND = os.environ.get("CYB_GOLDEN_BACKEND") or None
DATA = os.path.join(os.path.dirname(__file__), "data", "golden")



def precise_tol(name):  # precise whole forward vs transformers f32, this model
    return tolerance(f"precise-vs-transformers/{name}")


def fast_tol(name):  # fast whole forward vs precise, this model
    return tolerance(f"fast-vs-precise/{name}")


def need(key):
    """The number of the N_PROMPTS prompts that must match, from a bound written n/12."""
    n, of = count(key)
    return math.ceil(N_PROMPTS * n / of)


def on_backend(model):
    """The backend under test (CYB_GOLDEN_BACKEND, else the platform default the model chose):
    every op must have run there."""
    return BACKEND or model.backend


@pytest.fixture(scope="module", params=MODELS)
def case(request):
    name = request.param
    with open(os.path.join(DATA, f"{name}.json")) as f:
        ref = json.load(f)
    model = cyb_llm.load(hub.fetch(name), precise=True, backend=BACKEND)
    return name, model, ref


def _check_last_logits(name, label, logits, last):
    """Our last-position logits against the reference's 64 largest, normalized by its max |logit|;
    the top-1 must agree unless the reference's top-2 margin is a near-tie at this tolerance."""
    ids = np.array(last["top_ids"])
    err = float(np.max(np.abs(logits[ids].astype(np.float64) - np.array(last["top_values"])))) / last["max_abs"]
    assert np.isfinite(logits).all(), f"{name} {label}: non-finite logits"
    tol = precise_tol(name)
    assert err <= tol, f"{name} {label}: error {err:.2e} > {tol}"
    if last["margin"] > 2 * tol * last["max_abs"]:
        assert int(np.argmax(logits)) == ids[0], f"{name} {label}: top-1 differs"


def test_prompt_ids_are_the_fixture_ids(case):
    name, model, ref = case
    for c in ref["cases"][:N_PROMPTS]:
        assert model.tokenizer.encode(c["prompt"], add_special_tokens=True) == c["ids"], c["prompt"]


def test_precise_logits_match_reference(case):
    name, model, ref = case
    for c in ref["cases"][:N_PROMPTS]:
        logits = model.new_conversation(256).forward(c["ids"])
        _check_last_logits(name, repr(c["prompt"]), logits, c["last"])
    assert_ran_on(model, on_backend(model), name)


def test_precise_greedy_matches_reference(case):
    name, model, ref = case
    eos = set(ref["eos"])
    same, report = 0, []
    for c in ref["cases"][:N_PROMPTS]:
        want = c["greedy"][:N_TOKENS]
        got = greedy(model.new_conversation(256), c["ids"], len(want), eos)
        same += got == want
        report.append((c["prompt"], got == want))
    want = need("precise-greedy")
    print(f"{name}: precise greedy identical on {same}/{N_PROMPTS} ({N_TOKENS} tokens)")
    assert same >= want, f"{name}: identical on {same}/{N_PROMPTS}, need {want}: {report}"
    assert_ran_on(model, on_backend(model), name)


@pytest.mark.skipif(SHORT, reason="long inputs run in the full tier")
def test_long_input_matches_reference(case):
    """gemma3 past its 512-token sliding window, smollm2 over 2000 tokens, qwen05 700."""
    name, model, ref = case
    ids = ref["long"]["ids"]
    logits = model.new_conversation(len(ids) + 1).forward(ids)
    _check_last_logits(name, f"{len(ids)}-token prompt", logits, ref["long"]["last"])
    assert_ran_on(model, on_backend(model), name)


@pytest.mark.skipif(SHORT, reason="the live transformers comparison runs in the full tier")
@pytest.mark.parametrize("name", sorted(LIVE & set(MODELS)))
def test_live_transformers_comparison(name):
    """All positions' logits and greedy text against transformers run now (the models in CYB_GOLDEN_LIVE;
    tests/slow/test_golden_live.py runs smollm2, qwen05 and gemma3)."""
    with open(os.path.join(DATA, f"{name}.json")) as f:
        ref = json.load(f)
    model = cyb_llm.load(hub.fetch(name), precise=True, backend=BACKEND)
    hf = hf_from_gguf(hub.fetch_source(name))
    eos = set(ref["eos"])
    same = 0
    for c in ref["cases"]:
        ours = model.new_conversation(256).forward(c["ids"], all_logits=True)
        err = rel_err(ours, hf_logits(hf, c["ids"]))
        assert err <= tolerance(f"precise-live/{name}"), f"{name}: {c['prompt']!r}: error {err:.2e}"
        want = hf_greedy(hf, c["ids"], N_TOKENS, eos)
        same += greedy(model.new_conversation(256), c["ids"], N_TOKENS, eos) == want
    assert same >= need("precise-greedy"), f"{name}: live greedy identical on {same}/12"
    ids = ref["long"]["ids"]
    err = rel_err(model.new_conversation(len(ids) + 1).forward(ids), hf_logits(hf, ids)[-1])
    assert err <= tolerance(f"precise-live/{name}"), f"{name}: long prompt error {err:.2e}"
    assert_ran_on(model, on_backend(model), name)


@pytest.fixture(scope="module")
def fast(case):
    name, _, _ = case
    return cyb_llm.load(hub.fetch(name), precise=False, backend=BACKEND)


def _bulk_and_steps(model, ids):
    bulk = model.new_conversation(128).forward(ids, all_logits=True)
    conv = model.new_conversation(128)
    return bulk, np.stack([conv.forward([t]) for t in ids])


def test_bulk_prefill_matches_token_by_token(case):
    name, model, ref = case
    bulk, steps = _bulk_and_steps(model, ref["cases"][2]["ids"])
    err, tol = rel_err(bulk, steps), tolerance("bulk-vs-token")
    assert err <= tol, f"{name}: precise bulk vs token-by-token {err:.2e} > {tol}"
    assert (bulk.argmax(-1) == steps.argmax(-1)).all()
    assert_ran_on(model, on_backend(model), name)


def test_fast_bulk_prefill_matches_token_by_token(case, fast):
    name, _, ref = case
    bulk, steps = _bulk_and_steps(fast, ref["cases"][2]["ids"])
    err, tol = rel_err(bulk, steps), tolerance(f"bulk-vs-token-fast/{name}")
    assert err <= tol, f"{name}: fast bulk vs token-by-token {err:.2e} > {tol}"
    assert (bulk.argmax(-1) == steps.argmax(-1)).all(), f"{name}: fast bulk and token-by-token argmax differ"
    assert_ran_on(fast, on_backend(fast), name)


def test_fast_path_close_to_precise(case, fast):
    name, precise, ref = case
    tol = fast_tol(name)
    for c in ref["cases"][:N_PROMPTS]:
        a = fast.new_conversation(256).forward(c["ids"], all_logits=True)
        b = precise.new_conversation(256).forward(c["ids"], all_logits=True)
        assert np.isfinite(a).all()
        assert rel_err(a, b) <= tol, f"{name}: fast vs precise {rel_err(a, b):.2e} > {tol}"
    assert_ran_on(fast, on_backend(fast), name)
    assert_ran_on(precise, on_backend(precise), name)


# The golden prompts are shorter than 32 tokens, from which prefill takes its multi-token kernels
# (the CPU levels' token tiles, wgpu+rs's tiled GEMMs); this prompt is the first LONG_PREFIX tokens
# of the model's long input.
LONG_PREFIX = 32


def test_fast_multi_token_prefill_within_bounds(case, fast):
    """Fast vs precise on all positions of a 32-token prompt within the model's `fast-vs-precise`
    bound; in the full tier also fast bulk prefill vs fast token-by-token within its
    `bulk-vs-token-fast` bound, with the same argmax."""
    name, precise, ref = case
    ids = ref["long"]["ids"][:LONG_PREFIX]
    bulk = fast.new_conversation(64).forward(ids, all_logits=True)
    assert np.isfinite(bulk).all(), f"{name}: non-finite fast logits"
    err, tol = rel_err(bulk, precise.new_conversation(64).forward(ids, all_logits=True)), fast_tol(name)
    assert err <= tol, f"{name}: fast vs precise on {len(ids)} tokens {err:.2e} > {tol}"
    if not SHORT:
        conv = fast.new_conversation(64)
        steps = np.stack([conv.forward([t]) for t in ids])
        err, tol = rel_err(bulk, steps), tolerance(f"bulk-vs-token-fast/{name}")
        assert err <= tol, f"{name}: fast bulk vs token-by-token on {len(ids)} tokens {err:.2e} > {tol}"
        assert (bulk.argmax(-1) == steps.argmax(-1)).all(), f"{name}: fast bulk and token-by-token argmax differ"
    assert_ran_on(fast, on_backend(fast), name)


def test_fast_greedy_matches_reference(case, fast):
    """docs/runtime.md states per model on how many of the 12 prompts the fast path's greedy text
    equals transformers' (measured at every CPU level); the short tier checks its share."""
    name, _, ref = case
    eos = set(ref["eos"])
    report = [(c["prompt"], greedy(fast.new_conversation(256), c["ids"], N_TOKENS, eos) == c["greedy"][:N_TOKENS])
              for c in ref["cases"][:N_PROMPTS]]
    same, want = sum(ok for _, ok in report), need(f"fast-greedy/{name}")
    print(f"{name}: fast greedy identical on {same}/{N_PROMPTS} ({N_TOKENS} tokens)")
    assert same >= want, f"{name}: fast greedy identical on {same}/{N_PROMPTS}, need {want}: {report}"
    assert_ran_on(fast, on_backend(fast), name)
