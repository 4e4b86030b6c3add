"""The image comparisons of tests/test_diffusion_pipeline.py over the ONNX route (each stage exported
with torch.onnx.export and imported with import_onnx_stages): every scheduler, with and without
guidance, against diffusers f32. The default tier runs them over the folder route."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import test_diffusion_pipeline as base  # noqa: E402
from test_diffusion_pipeline import model, routes, tiny  # noqa: E402,F401  (the fixtures)


@pytest.mark.parametrize("guidance", [7.5, 1.0])
@pytest.mark.parametrize("scheduler", list(base.SCHEDULERS))
def test_image_matches_diffusers_onnx_route(tiny, routes, scheduler, guidance):  # noqa: F811
    base.test_image_matches_diffusers(tiny, routes, scheduler, guidance, "onnx")
