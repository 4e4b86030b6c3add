"""Opt-in and tuning settings of wgpu+rs over tests/test_ops.py's cases, each in a fresh process
(settings are read once per process): the slow tier, about a minute on 2 cores together, moved out of
the default tier (tests/test_wgpu.py) for CI's 30-minute budget. The default settings' kernels are in
the default tier's op matrix."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_wgpu import INFO, op_cases_with_setting  # noqa: E402

if INFO is None:
    pytestmark = pytest.mark.skip(reason="no wgpu+rs adapter")


def test_f16_gemm_op_cases_through_the_setting():
    """CYB_WGPU_GEMM=h16=1 (read once per process: a subprocess; off by default) runs fast-mode
    matmuls of 32+ tokens on block-quantized weights as the f16 tiled GEMM (matmul.wgsl H16) where
    the adapter offers shader-f16: the op matrix's wgpu+rs fast-mode matmul, SwiGLU and q/k/v
    cases then judge each of those outputs within the bound of its f16 sums (test_ops.py
    `assert_mm`, docs/runtime.md `op-f16-sum`)."""
    if not INFO["shader_f16"]:
        pytest.skip("the adapter offers no shader-f16: the f32 kernel runs, the op matrix covers it")
    op_cases_with_setting("CYB_WGPU_GEMM", "h16=1", "wgpu and not precise and (matmul or swiglu or qkv)")


def test_gemm_tile_setting_runs_the_op_cases_on_128_token_tiles():
    """CYB_WGPU_TILE=128 (read once per process: a subprocess) runs every tiled GEMM on 128-token
    tiles (matmul.wgsl T128, 8 tokens x 4 rows a thread) where the device allows its workgroup
    memory: the op matrix's wgpu+rs matmul, SwiGLU and q/k/v cases, judged as for the default tiles
    (the rule in wgpu_settings.cc `gemm_tile_tokens` picks 64 for their shapes). Fast mode only: both
    modes run the same f32 kernel (the f16 one is opt-in), and tests/test_wgpu.py's bit-identity test covers
    precise mode's products."""
    op_cases_with_setting("CYB_WGPU_TILE", "128", "wgpu and fast and (matmul or swiglu or qkv)")
