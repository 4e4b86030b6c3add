"""Slow tier: the live full-vocabulary comparison of tests/test_golden.py (all positions' logits,
greedy text and the long prompt against transformers run now); the default tier checks the same
models against the stored fixtures (tests/data/golden) only."""
from __future__ import annotations

import pytest

import test_golden as golden


@pytest.mark.parametrize("name", ["smollm2", "qwen05", "gemma3"])
def test_live_transformers_comparison(name):
    pytest.importorskip("transformers")
    golden.test_live_transformers_comparison(name)
