"""Golden end-to-end tests on real weights against transformers f32.

transformers loads the same GGUF and dequantizes it to f32, so both sides run
the same weights. Precise mode (f32 activations and KV cache) must match its
logits within 1e-4 and its greedy 32-token text on >= 11 of 12 prompts
(docs/runtime.md). The references of every model are fixtures written by
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

SHORT = os.environ.get("CYB_GOLDEN", "full") == "short"
N_PROMPTS = 2 if SHORT else len(PROMPTS)
N_TOKENS = 8 if SHORT else 32
MODELS = os.environ.get("CYB_GOLDEN_MODELS", "smollm2,qwen05,gemma3").split(",")
LIVE = set(os.environ.get("CYB_GOLDEN_LIVE", "smollm2").split(","))
BACKEND = os.environ.get("CYB_GOLDEN_BACKEND") or None
DATA = os.path.join(os.path.dirname(__file__), "data", "golden")

PRECISE_TOL = 1e-4  # docs/runtime.md: precise whole forward vs transformers f32
FAST_TOL = 5e-2     # docs/runtime.md: fast path vs precise path


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
    assert err <= PRECISE_TOL, f"{name} {label}: error {err:.2e} > {PRECISE_TOL}"
    if last["margin"] > 2 * PRECISE_TOL * last["max_abs"]:
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


def test_precise_greedy_matches_reference(case):
    name, model, ref = case
    eos = set(ref["eos"])
    same, report = 0, []
    for c in ref["cases"][:N_PROMPTS]:
        want = c["greedy"][:N_TOKENS]
        got = greedy(model.new_conversation(256), c["ids"], len(want), eos)
        same += got == want
        report.append((c["prompt"], got == want))
    need = math.ceil(N_PROMPTS * 11 / 12)
    print(f"{name}: precise greedy identical on {same}/{N_PROMPTS} ({N_TOKENS} tokens)")
    assert same >= need, f"{name}: identical on {same}/{N_PROMPTS}, need {need}: {report}"


@pytest.mark.skipif(SHORT, reason="long inputs run in the full tier")
def test_long_input_matches_reference(case):
    """gemma3 past its 512-token sliding window, smollm2 over 2000 tokens, qwen05 700."""
    name, model, ref = case
    ids = ref["long"]["ids"]
    logits = model.new_conversation(len(ids) + 1).forward(ids)
    _check_last_logits(name, f"{len(ids)}-token prompt", logits, ref["long"]["last"])


@pytest.mark.skipif(SHORT, reason="the live transformers comparison runs in the full tier")
@pytest.mark.parametrize("name", sorted(LIVE & set(MODELS)))
def test_live_transformers_comparison(name):
    """All positions' logits and greedy text against transformers run now (smollm2 by default)."""
    with open(os.path.join(DATA, f"{name}.json")) as f:
        ref = json.load(f)
    model = cyb_llm.load(hub.fetch(name), precise=True, backend=BACKEND)
    hf = hf_from_gguf(hub.fetch_source(name))
    eos = set(ref["eos"])
    same = 0
    for c in ref["cases"]:
        ours = model.new_conversation(256).forward(c["ids"], all_logits=True)
        err = rel_err(ours, hf_logits(hf, c["ids"]))
        assert err <= PRECISE_TOL, f"{name}: {c['prompt']!r}: error {err:.2e}"
        want = hf_greedy(hf, c["ids"], N_TOKENS, eos)
        same += greedy(model.new_conversation(256), c["ids"], N_TOKENS, eos) == want
    assert same >= 11, f"{name}: live greedy identical on {same}/12"
    ids = ref["long"]["ids"]
    err = rel_err(model.new_conversation(len(ids) + 1).forward(ids), hf_logits(hf, ids)[-1])
    assert err <= PRECISE_TOL, f"{name}: long prompt error {err:.2e}"


def test_bulk_prefill_matches_token_by_token(case):
    name, model, ref = case
    ids = ref["cases"][2]["ids"]
    bulk = model.new_conversation(128).forward(ids, all_logits=True)
    conv = model.new_conversation(128)
    steps = np.stack([conv.forward([t]) for t in ids])
    assert rel_err(bulk, steps) <= PRECISE_TOL
    assert (bulk.argmax(-1) == steps.argmax(-1)).all()


def test_fast_path_close_to_precise(case):
    name, precise, ref = case
    fast = cyb_llm.load(hub.fetch(name), precise=False, backend=BACKEND)
    for c in ref["cases"][:N_PROMPTS]:
        a = fast.new_conversation(256).forward(c["ids"], all_logits=True)
        b = precise.new_conversation(256).forward(c["ids"], all_logits=True)
        assert np.isfinite(a).all()
        assert rel_err(a, b) <= FAST_TOL, f"{name}: fast vs precise {rel_err(a, b):.2e}"


# docs/runtime.md: llama.cpp reproduces transformers' 32-token greedy text on 5/12
# (smollm2), 9/12 (qwen05), 6/12 (gemma3) of these prompts; the fast path must
# do at least as well (measured live against llama.cpp in tests/slow).
LLAMACPP_GREEDY = {"smollm2": 5, "qwen05": 9, "gemma3": 6}


@pytest.mark.skipif(SHORT, reason="the full tier runs the 12-prompt greedy set")
def test_fast_greedy_at_least_as_faithful_as_llamacpp(case):
    name, _, ref = case
    fast = cyb_llm.load(hub.fetch(name), precise=False, backend=BACKEND)
    eos = set(ref["eos"])
    same = sum(greedy(fast.new_conversation(256), c["ids"], ref["n_tokens"], eos) == c["greedy"]
               for c in ref["cases"])
    assert same >= LLAMACPP_GREEDY[name], f"{name}: fast greedy identical on {same}/12"
