"""cyb_llm.diffusion.terrain without the UNet: the sampler's noise draws, tiling, blending,
height decoding and resizing against adaptive-terrain-diffusion's TerrainGenerator.generate with
the same stand-in denoiser on both sides (one whose output depends on the position in the
window, so a wrong window layout or blend shows); input checks; the PNG writer.
The real UNet is compared in tests/slow/test_terrain_sampler.py."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from cyb_llm.diffusion import terrain as T
from cyb_llm.errors import InvalidConfig
from tolerances import tolerance

TOL = tolerance("terrain-standin")  # metres (docs/runtime.md)


def _standin(noisy: np.ndarray, sigma: np.ndarray, difficulty: np.ndarray) -> np.ndarray:
    n = noisy.shape[-1]
    ramp = np.linspace(-0.6, 0.4, n, dtype=np.float32)
    return np.tanh(noisy / sigma[:, None, None, None] + difficulty[:, None, None, None]
                   + ramp[None, None, None, :] + 0.5 * ramp[None, None, :, None]).astype(np.float32)


class FakeUNet:
    """Our side: a GraphModel-shaped stand-in."""
    def __init__(self):
        self.calls = 0

    def run(self, feeds):
        self.calls += 1
        return {"denoised": _standin(feeds["noisy"], feeds["sigma"], feeds["difficulty"])}


class FakeSession:
    """The package's side: an onnxruntime-session-shaped stand-in."""
    def run(self, names, feeds):
        return [_standin(feeds["noisy"], feeds["sigma"], feeds["difficulty"])]


@pytest.fixture(scope="module")
def package():
    gen = pytest.importorskip("terrain_diffusion.generator")
    g = object.__new__(gen.TerrainGenerator)
    g.session = FakeSession()
    return g


@pytest.mark.parametrize("seed,size,difficulty,overlap", [
    (0, 128, "random", 32), (1, 64, 5, 32), (2, (90, 200), 100, 32), (3, 256, 40, 32),
    (4, 300, 1, 17), (5, (129, 128), "random", 0), (6, 128, None, 32)])
def test_matches_package_sampling(package, seed, size, difficulty, overlap):
    ref, ref_d = package.generate(1, shape=size, difficulty=difficulty, seed=seed, tile_overlap=overlap,
                                  return_difficulties=True)
    ours, d = T.generate_terrain(FakeUNet(), seed, size=size, difficulty=difficulty, tile_overlap=overlap,
                                 return_difficulty=True)
    assert d == int(ref_d[0])
    assert ours.shape == ref[0].shape and ours.dtype == np.float32
    assert float(np.abs(ours - ref[0]).max()) <= TOL


@pytest.mark.parametrize("mode", ["tile", "resize"])
def test_size_modes_and_batches(package, mode):
    ref = package.generate(1, shape=200, difficulty=50, seed=9, size_mode=mode, batch_size=3)[0]
    fake = FakeUNet()
    ours = T.generate_terrain(fake, 9, size=200, difficulty=50, size_mode=mode, batch_size=3)
    assert float(np.abs(ours - ref).max()) <= TOL
    assert fake.calls == (2 if mode == "tile" else 1)  # 2x2 windows (starts 0, 72), 3 a call


def test_zero_floor_off(package):
    ref = package.generate(1, shape=128, difficulty=50, seed=1, zero_floor=False)[0]
    ours = T.generate_terrain(FakeUNet(), 1, difficulty=50, zero_floor=False)
    assert float(np.abs(ours - ref).max()) <= TOL and ours.min() > 0


@pytest.mark.parametrize("kw,field", [
    ({"size": 0}, "size"), ({"size": (1, 2, 3)}, "size"), ({"size": "big"}, "size"),
    ({"difficulty": 0}, "difficulty"), ({"difficulty": 101}, "difficulty"), ({"difficulty": 2.5}, "difficulty"),
    ({"difficulty": "hard"}, "difficulty"), ({"tile_overlap": 128}, "tile_overlap"),
    ({"batch_size": 0}, "batch_size"), ({"size_mode": "crop"}, "size_mode"), ({"seed": -1}, "seed"),
    ({"seed": "x"}, "seed"),
])
def test_bad_arguments_name_the_field(kw, field):
    args = {"seed": 0, **kw}
    with pytest.raises(InvalidConfig) as e:
        T.generate_terrain(FakeUNet(), **args)
    assert e.value.fields["field"] == field


def test_model_checks():
    with pytest.raises(InvalidConfig) as e:
        T.generate_terrain(object(), 0)
    assert e.value.fields["field"] == "model"

    class Wrong:
        def run(self, feeds):
            return {"denoised": np.zeros((1, 1, 64, 64), np.float32)}
    with pytest.raises(InvalidConfig) as e:
        T.generate_terrain(Wrong(), 0)
    assert e.value.fields["field"] == "model"


def _read_png_gray16(data: bytes) -> np.ndarray:
    """A minimal reader for the test: 16-bit gray, filter 0 rows, IDAT chunks joined."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    h = w = None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        assert zlib.crc32(kind + body) == int.from_bytes(data[pos + 8 + n:pos + 12 + n], "big")
        if kind == b"IHDR":
            w, h = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
            assert body[8:10] == b"\x10\x00"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    rows = np.frombuffer(raw, np.uint8).reshape(h, 1 + 2 * w)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].copy().view(">u2").astype(np.uint16).reshape(h, w)


@pytest.mark.parametrize("use_pillow", [False, None])
def test_png_writer(tmp_path, use_pillow):
    if use_pillow is None:
        pytest.importorskip("PIL")
    rng = np.random.default_rng(0)
    hm = (rng.random((37, 53)) * 22).astype(np.float32)
    p = T.save_heightmap_png(hm, tmp_path / "h.png", use_pillow=use_pillow)
    want = np.rint((hm.astype(np.float64) - hm.min()) * 65535.0 / (float(hm.max()) - float(hm.min()))).astype(np.uint16)
    if use_pillow is False:
        got = _read_png_gray16(p.read_bytes())
    else:
        from PIL import Image
        got = np.asarray(Image.open(p)).astype(np.uint16)
    np.testing.assert_array_equal(got, want)
    assert got.min() == 0 and got.max() == 65535


def test_png_writer_checks(tmp_path):
    for bad in (np.zeros((2, 2, 2)), np.array([[np.nan, 1.0]]), np.zeros((0, 3))):
        with pytest.raises(InvalidConfig) as e:
            T.save_heightmap_png(bad, tmp_path / "x.png")
        assert e.value.fields["field"] == "arr"
    flat = T.save_heightmap_png(np.ones((4, 4)), tmp_path / "flat.png", use_pillow=False)
    assert (_read_png_gray16(flat.read_bytes()) == 0).all()
