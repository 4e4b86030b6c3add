"""The terrain one-step sampler (cyb_llm.diffusion.terrain) with the real terrain-diffusion
consistency UNet on our runtime, against the package's own TerrainGenerator.generate (on
onnxruntime's cpu) for the same seed and size: 128x128 (one sample), 100x100 (one sample,
resized) and 256x256 (nine blended 128x128 windows). One UNet call takes a few seconds here.

Needs adaptive-terrain-diffusion 0.4.2 installed without its onnxruntime-gpu requirement
(``pip install --no-deps adaptive_terrain_diffusion-0.4.2-py3-none-any.whl``) and onnxruntime,
onnx (the importer) in the environment."""
from __future__ import annotations

import importlib.resources

import numpy as np
import pytest

pytestmark = pytest.mark.slow

td = pytest.importorskip("terrain_diffusion.generator")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from cyb_llm.diffusion.terrain import generate_terrain  # noqa: E402
from tolerances import tolerance  # noqa: E402

TOL = tolerance("terrain-vs-package")  # metres, on heights up to 22 m


@pytest.fixture(scope="module")
def unet(tmp_path_factory):
    import cyb_llm
    from cyb_llm.convert import import_model

    onnx_path = importlib.resources.files("terrain_diffusion").joinpath(
        "weights/terrain_consistency_unet_difficulty100.onnx")
    out = tmp_path_factory.mktemp("terrain") / "terrain_unet.model"
    import_model(str(onnx_path), str(out))
    return cyb_llm.load(str(out))


@pytest.fixture(scope="module")
def package():
    return td.TerrainGenerator(device="cpu")


@pytest.mark.parametrize("seed,size,difficulty", [(0, 128, "random"), (11, 100, 77), (3, 256, 40)])
def test_matches_terrain_generator(unet, package, seed, size, difficulty):
    ref, ref_d = package.generate(1, shape=size, difficulty=difficulty, seed=seed, return_difficulties=True)
    ours, d = generate_terrain(unet, seed, size=size, difficulty=difficulty, return_difficulty=True)
    assert d == int(ref_d[0])
    assert ours.shape == (size, size) and ours.dtype == np.float32
    assert ref[0].max() > 0.5  # a real terrain, not a flat one
    err = float(np.abs(ours - ref[0]).max())
    assert err <= TOL, f"max |ours - package| = {err:.3g} m"
