"""The scalar level's real-model no-allocation runs that the default tier leaves out
(tests/test_native.py SCALAR_SLOW: about 90 s of reference kernels on 2 cores)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_native import SCALAR_SLOW, _models, check_no_alloc  # noqa: E402


def test_no_alloc_scalar_slow_models():
    models = _models(only=SCALAR_SLOW)
    if not models:
        pytest.skip("CYB_NO_ALLOC_MODELS names none of " + ", ".join(SCALAR_SLOW) + " (tools/test.sh sets it)")
    check_no_alloc("scalar", models)
