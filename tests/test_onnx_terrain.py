"""ONNX import + the graph path on the op patterns of the terrain consistency UNet (issue 44; the
real model is compared in tests/slow/test_onnx_terrain.py): a small UNet-like network exported from
torch in the test — noise-level embedding through Gemm and Split, Conv 3x3 / 1x1, GroupNorm
(InstanceNormalization between reshapes), SiLU as Sigmoid * Mul, FiLM scale / shift broadcast over
the image, AveragePool, attention as Einsum bct,bcs->bts / Softmax / Einsum bts,bcs->bct, nearest
Resize, Concat skip — imported with `cyb-llm import` and run on the cpu against onnxruntime (the
test-only oracle) within `onnx-vs-onnxruntime`, at batch 1 and 2, at the default level in this
process and at every cpu level in a child (CYB_CPU_LEVEL is read once per process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core
from tolerances import tolerance
from serve_proc import child_env  # noqa: E402  (a child imports the package this test imported)

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TOL = tolerance("onnx-vs-onnxruntime")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TinyUNet(torch.nn.Module):
    def __init__(self, c: int = 16) -> None:
        super().__init__()
        nn = torch.nn
        self.c = c
        self.emb = nn.Linear(2, 2 * c)
        self.conv_in = nn.Conv2d(1, c, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.norm2 = nn.GroupNorm(4, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.proj = nn.Conv2d(c, c, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.conv_out = nn.Conv2d(2 * c, 1, 3, padding=1)

    def forward(self, noisy, sigma, difficulty):
        F = torch.nn.functional
        e = self.emb(torch.stack([torch.log(sigma) / 4, difficulty], -1))
        scale, shift = torch.split(e, [self.c, self.c], 1)
        h = self.conv_in(noisy)
        h = F.silu(self.norm1(h)) * (1 + scale[:, :, None, None]) + shift[:, :, None, None]
        h = self.conv1(h)
        d = self.pool(h)
        b, c, hh, ww = d.shape
        q, k, v = self.qkv(F.silu(self.norm2(d))).reshape(b, 3, c, hh * ww).unbind(1)
        w = torch.softmax(torch.einsum("bct,bcs->bts", q, k) / c ** 0.5, -1)
        a = torch.einsum("bts,bcs->bct", w, v).reshape(b, c, hh, ww)
        d = d + self.proj(a)
        return self.conv_out(torch.cat([h, self.up(d)], 1))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_unet")
    src, out = str(d / "tiny_unet.onnx"), str(d / "tiny_unet.model")
    torch.manual_seed(44)
    m = TinyUNet().eval()
    args = (torch.randn(1, 1, 24, 20), torch.rand(1) + 0.1, torch.rand(1))
    torch.onnx.export(m, args, src, input_names=["noisy", "sigma", "difficulty"], output_names=["denoised"],
                      dynamic_axes={"noisy": {0: "batch"}, "sigma": {0: "batch"}, "difficulty": {0: "batch"}},
                      opset_version=17, dynamo=False)
    ops = {n.op_type for n in onnx.load(src).graph.node}
    assert {"Conv", "Gemm", "InstanceNormalization", "Sigmoid", "Einsum", "Softmax", "AveragePool", "Resize",
            "Concat", "Split"} <= ops, ops
    from cyb_llm.cli import main

    assert main(["import", src, "-o", out]) == 0
    return src, out


def _feeds(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"noisy": rng.standard_normal((batch, 1, 24, 20)).astype(np.float32),
            "sigma": rng.uniform(0.05, 3.0, batch).astype(np.float32),
            "difficulty": rng.uniform(0.0, 1.0, batch).astype(np.float32)}


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def test_tiny_unet_matches_onnxruntime(tiny):
    src, path = tiny
    with open(path, "rb") as f:  # the graph section (TOML) is at the file's start
        head = f.read(1 << 20)
    assert head.count(b'op = "silu"') == 2 and b'op = "sigmoid"' not in head  # x * Sigmoid(x) -> one silu
    m = cyb_llm.load(path, backend="cpu", threads=2)
    assert [(i.name, i.shape) for i in m.inputs] == [
        ("noisy", ("batch", 1, 24, 20)), ("sigma", ("batch",)), ("difficulty", ("batch",))]
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    for batch, seed in ((1, 1), (2, 2), (1, 3)):
        f = _feeds(batch, seed)
        (ref,) = sess.run(None, f)
        got = m.session().run(f)["denoised"]
        assert _err(ref, got) <= TOL, (batch, seed, _err(ref, got))


_CHILD = r"""
import json, sys, numpy as np, cyb_llm
path, feeds = sys.argv[1], np.load(sys.argv[2])
m = cyb_llm.load(path, backend="cpu", threads=2)
out = {k: m.session().run({n: feeds[f"{k}-{n}"] for n in ("noisy", "sigma", "difficulty")})["denoised"]
       for k in ("b1", "b2")}
np.savez(sys.argv[3], **out)
"""


@pytest.mark.parametrize("level", _core.cpu_levels())
def test_tiny_unet_every_level(tiny, level, tmp_path):
    src, path = tiny
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    feeds = {"b1": _feeds(1, 5), "b2": _feeds(2, 6)}
    fp, op = str(tmp_path / "feeds.npz"), str(tmp_path / "out.npz")
    np.savez(fp, **{f"{k}-{n}": a for k, f in feeds.items() for n, a in f.items()})
    env = child_env(CYB_CPU_LEVEL=level)
    r = subprocess.run([sys.executable, "-c", _CHILD, path, fp, op], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    got = np.load(op)
    for k, f in feeds.items():
        (ref,) = sess.run(None, f)
        assert _err(ref, got[k]) <= TOL, (level, k, _err(ref, got[k]))


def test_tiny_unet_on_wgpu_matches_onnxruntime(tiny):
    """The same UNet loaded with backend="wgpu+rs" (lavapipe in CI): within `onnx-vs-onnxruntime` at
    batch 1 and 2; by its dispatch records every node runs on the device except the attention scale's
    shape computation (Shape -> Gather -> Cast -> Pow of c ** 0.5: host shape computations, flagged
    host_shape), and nothing falls back."""
    from placement import wgpu_skip_reason

    reason = wgpu_skip_reason()
    if reason:
        pytest.skip(reason)
    src, path = tiny
    m = cyb_llm.load(path, backend="wgpu+rs")
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    for batch, seed in ((1, 4), (2, 5)):
        f = _feeds(batch, seed)
        (ref,) = sess.run(None, f)
        got = m.session().run(f)["denoised"]
        assert _err(ref, got) <= TOL, (batch, seed, _err(ref, got))
    off = [(r["label"], r["op"]) for r in m.dispatch_records
           if (r["fallback"] or r["backend"] != "wgpu+rs") and not r["host_shape"]]
    assert off == [], off
    assert {r["op"] for r in m.dispatch_records if r["host_shape"]} == {"shape", "gather", "cast", "sqrt"}
