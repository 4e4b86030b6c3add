"""Golden logits at EVERY position, against the reference summaries that
tools/make_golden_fixtures.py stores in tests/data/golden/{name}.positions.npz (transformers f32 on
the same GGUF; prompt ids from a reference tokenizer, tests/oracles.py: reference_encoder).

At each position of each prompt (and of the long prompt) the reference stores its k largest
(id, value) pairs (k = 64; 16 on the long prompt), max |logit| M and the log-sum-exp L over the
full vocabulary. Precise mode must be within PRECISE_TOL * M of every stored value (docs/runtime.md,
`precise-vs-transformers`: max |ours - ref| / max |ref|). The other checks follow from that same bound, so they take
the same tolerance, not a wider one: max |.| and log-sum-exp are 1-Lipschitz in the max norm, so
|M_ours - M| <= tol*M and |L_ours - L| <= tol*M; every id outside the reference's top k has a
reference logit <= its k-th value v_k, so our logits there are <= v_k + tol*M. (The top-k bound
already puts our argmax on the reference's top-1 wherever its top-2 margin exceeds 2*tol*M, so that
is not checked separately.) test_checks_bite shows each of the four checks fails on its own.

CYB_GOLDEN=short: the first 2 prompts and no long prompt; CYB_GOLDEN_MODELS / CYB_GOLDEN_BACKEND
as in tests/test_golden.py.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import cyb_llm
from cyb_llm import hub

from oracles import PROMPTS, logit_summary
from tolerances import tolerance

SHORT = os.environ.get("CYB_GOLDEN", "full") == "short"
MODELS = os.environ.get("CYB_GOLDEN_MODELS", "smollm2,qwen05,gemma3").split(",")
BACKEND = os.environ.get("CYB_GOLDEN_BACKEND") or None
DATA = os.path.join(os.path.dirname(__file__), "data", "golden")
PRECISE_TOL = tolerance("precise-vs-transformers")  # docs/runtime.md: precise whole forward vs transformers f32


def load_positions(name: str) -> tuple[dict, dict]:
    """The model's JSON fixture and its per-position arrays, as {prefix: {field: array}}."""
    with open(os.path.join(DATA, f"{name}.json")) as f:
        ref = json.load(f)
    with np.load(os.path.join(DATA, f"{name}.positions.npz")) as z:
        arrays: dict[str, dict] = {}
        for key in z.files:
            prefix, field = key.split("_", 1)
            arrays.setdefault(prefix, {})[field] = z[key]
    return ref, arrays


def position_errors(logits: np.ndarray, pos: dict) -> list[str]:
    """Every violated bound of the module docstring, one line per (position, check); [] if none."""
    x = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    ids, vals = pos["top_ids"].astype(np.int64), pos["top_values"].astype(np.float64)
    m_ref, lse_ref = pos["max_abs"].astype(np.float64), pos["lse"]
    assert x.shape[0] == ids.shape[0], (x.shape, ids.shape)
    assert np.isfinite(x).all(), "non-finite logits"
    ours = logit_summary(x, 1)
    tol = PRECISE_TOL * m_ref
    outside = x.copy()
    np.put_along_axis(outside, ids, -np.inf, -1)
    checks = {
        "top-k values": np.abs(np.take_along_axis(x, ids, -1) - vals).max(-1),
        "max |logit|": np.abs(ours["max_abs"] - m_ref),
        "log-sum-exp": np.abs(ours["lse"] - lse_ref),
        "outside top-k above v_k": np.maximum(outside.max(-1) - vals[:, -1], 0.0),
    }
    bad = []
    for what, err in checks.items():
        for p in np.nonzero(err > tol)[0]:
            bad.append(f"position {p}: {what} error {err[p] / m_ref[p]:.2e} of max|ref| > {PRECISE_TOL}")
    return bad


def test_checks_bite():
    """Each check of position_errors fails alone on a perturbation just past the bound that the
    others do not see (synthetic logits; the summary is computed as the fixture maker does)."""
    rng = np.random.default_rng(0)
    ref = rng.normal(0.0, 2.0, size=(3, 5000))
    ref[:, 7] = 12.0  # a clear top-1, positive, so max |logit| is 12
    pos = logit_summary(ref, 64)
    assert position_errors(ref, pos) == []
    eps = 2 * PRECISE_TOL * 12.0
    outside = [int(np.setdiff1d(np.arange(5000), pos["top_ids"][1])[i]) for i in (0, 1)]

    def only(x, what):
        bad = position_errors(x, pos)
        assert bad and all(f"position 1: {what}" in b for b in bad), bad

    x = ref.copy(); x[1, pos["top_ids"][1, 5]] += eps
    only(x, "top-k values")
    x = ref.copy(); x[1, outside[0]] = -12.0 - eps  # a larger |logit|, far below the top
    only(x, "max |logit|")
    x = ref.copy(); x[1, outside] = pos["top_values"][1, -1] + eps
    only(x, "outside top-k above v_k")
    x = ref.copy(); x[1, np.setdiff1d(np.arange(5000), pos["top_ids"][1])] = -12.0  # mass outside top-k gone
    only(x, "log-sum-exp")


@pytest.fixture(scope="module", params=MODELS)
def golden(request):
    name = request.param
    ref, arrays = load_positions(name)
    return name, cyb_llm.load(hub.fetch(name), precise=True, backend=BACKEND), ref, arrays


def test_fixture_is_complete(golden):
    """Every prompt of tests/oracles.py has per-position summaries of its own length."""
    name, _, ref, arrays = golden
    assert [c["prompt"] for c in ref["cases"]] == PROMPTS
    for i, c in enumerate(ref["cases"]):
        pos = arrays[f"case{i}"]
        assert pos["top_ids"].shape == pos["top_values"].shape == (len(c["ids"]), 64)
        assert pos["max_abs"].shape == pos["lse"].shape == (len(c["ids"]),)
        assert (np.diff(pos["top_values"], axis=-1) <= 0).all()
    assert arrays["long"]["top_ids"].shape[0] == len(ref["long"]["ids"])


def test_every_position_matches_reference(golden):
    name, model, ref, arrays = golden
    bad = []
    for i, c in enumerate(ref["cases"][: 2 if SHORT else None]):
        logits = model.new_conversation(256).forward(c["ids"], all_logits=True)
        bad += [f"{name} {c['prompt']!r} {b}" for b in position_errors(logits, arrays[f"case{i}"])]
    assert not bad, "\n".join(bad[:20])


@pytest.mark.skipif(SHORT, reason="long inputs run in the full tier")
def test_every_position_of_long_prompt_matches_reference(golden):
    name, model, ref, arrays = golden
    ids = ref["long"]["ids"]
    logits = model.new_conversation(len(ids) + 1).forward(ids, all_logits=True)
    bad = position_errors(logits, arrays["long"])
    assert not bad, f"{name} {len(ids)}-token prompt:\n" + "\n".join(bad[:20])
