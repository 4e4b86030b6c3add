"""Slow tier: the live full-vocabulary comparison of tests/test_golden.py (all positions' logits,
greedy text and the long prompt against transformers run now) for the models the default tier
checks against stored fixtures only (qwen05, gemma3; smollm2 runs live in the default tier)."""
from __future__ import annotations

import pytest

import test_golden as golden


@pytest.mark.parametrize("name", ["qwen05", "gemma3"])
def test_live_transformers_comparison(name):
    pytest.importorskip("transformers")
    golden.test_live_transformers_comparison(name)
