"""The wgpu+rs backend against the CPU reference: the op matrix (every op the
curated decoders use, every weight encoding) and whole forwards of the tiny
random families (precise logits within the cross-path 1e-4, identical greedy
tokens). Runs on any adapter, software ones included (lavapipe in CI); skips,
saying why, only when no adapter exists.

Tolerances (docs/runtime.md): single op 1e-6 (f32 data; quantized weights judged on
their dequantized bytes through the f64 scalar reference), 1e-3 with an f16 KV
cache, precise whole forward across backends 1e-4.
"""
from __future__ import annotations

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import BackendInit

import test_ops as T

try:
    INFO = _core.wgpu_info(True)
except BackendInit as e:  # no library or no adapter: say so
    INFO = None
    REASON = f"no wgpu+rs adapter: {e}"
if INFO is None:
    print(REASON)
    pytestmark = pytest.mark.skip(reason=REASON)

TOL_F32, TOL_F16 = 1e-6, 1e-3


def both(op, inputs, attrs=None, outputs=None):
    """(wgpu+rs outputs, f64 scalar reference outputs); asserts wgpu+rs ran the op itself."""
    got = _core.run_op(op, inputs, attrs or {}, outputs, "auto", "wgpu+rs")
    assert _core.last_run_op_backend() == "wgpu+rs", _core.last_run_op_backend()
    ref = _core.run_op(op, inputs, attrs or {}, outputs, "scalar")
    return got, ref


def test_adapter_reported():
    assert INFO["adapter"] and INFO["backend_type"]
    assert INFO["max_storage_binding"] > 0
    print("wgpu+rs adapter:", INFO)


@pytest.mark.parametrize("enc", T.ENCODINGS)
@pytest.mark.parametrize("t", [1, 5, 11])
def test_matmul_every_encoding(enc, t):
    rng = np.random.default_rng(7)
    k = T.row_lengths(enc)[-1]
    w, deq = T.random_weight(enc, 67, k, rng)
    x = rng.standard_normal((t, k)).astype(np.float32)
    (y,), _ = both("matmul", [x, w])
    assert T.rel_err(y, x.astype(np.float64) @ deq.T) <= TOL_F32


def test_matmul_bias_and_swiglu():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    w, deq = T.random_weight("q8_0", 40, 96, rng)
    b = rng.standard_normal(40).astype(np.float32)
    (y,), _ = both("matmul", [x, w, b])
    assert T.rel_err(y, x.astype(np.float64) @ deq.T + b) <= TOL_F32
    g, gd = T.random_weight("q4_k", 40, 256, rng)
    u, ud = T.random_weight("q6_k", 40, 256, rng)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    (y,), (r,) = both("fused_swiglu", [x, g, u])
    assert T.rel_err(y, r) <= T.TOL_FUSED


@pytest.mark.parametrize("enc", ["f32", "f16", "q8_0", "q4_1", "q4_k", "q5_0", "q6_k", "q3_k"])
def test_embedding(enc):
    rng = np.random.default_rng(2)
    k = T.row_lengths(enc)[0]
    w, deq = T.random_weight(enc, 50, k, rng)
    ids = np.array([3, 0, 49, 7, 3], dtype=np.int32)
    (y,), _ = both("embedding", [ids, w], {"scale": 1.5})
    assert T.rel_err(y, deq[ids] * 1.5) <= TOL_F32


@pytest.mark.parametrize("plus_one", [False, True])
def test_norms(plus_one):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 576)).astype(np.float32)
    r = rng.standard_normal((5, 576)).astype(np.float32)
    w = rng.standard_normal(576).astype(np.float32)
    attrs = {"eps": 1e-5, "plus_one": plus_one}
    (y,), (ref,) = both("rms_norm", [x, w], attrs)
    assert T.rel_err(y, ref) <= TOL_F32
    (y, s), (ry, rs) = both("fused_skip_norm", [x, r, w], attrs)
    assert T.rel_err(y, ry) <= TOL_F32 and T.rel_err(s, rs) <= TOL_F32


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot", [64, 32])
def test_rope(neox, rot):
    rng = np.random.default_rng(4)
    nh, hd, t, pos0 = 3, 64, 4, 5
    x = rng.standard_normal((t, nh * hd)).astype(np.float32)
    attrs = {"n_heads": nh, "head_dim": hd, "pos0": pos0,
             "rope": {"rot_dims": rot, "neox": neox, "max_pos": 32, "theta": 10000.0}}
    (y,), (ref,) = both("rope", [x], attrs)
    assert T.rel_err(y, ref) <= TOL_F32


@pytest.mark.parametrize("cache", ["f32", "f16"])
@pytest.mark.parametrize("case", [
    dict(nh=4, nkv=2, hd=64, t=1, pos0=9, window=0, softcap=0.0),
    dict(nh=4, nkv=1, hd=32, t=6, pos0=70, window=0, softcap=0.0),
    dict(nh=2, nkv=2, hd=16, t=5, pos0=12, window=8, softcap=50.0),
    dict(nh=6, nkv=2, hd=128, t=3, pos0=0, window=0, softcap=0.0),
])
def test_kv_write_and_attention(cache, case):
    rng = np.random.default_rng(5)
    nh, nkv, hd, t, pos0 = case["nh"], case["nkv"], case["hd"], case["t"], case["pos0"]
    max_ctx = 96
    dt = np.float32 if cache == "f32" else np.float16
    kc = (rng.standard_normal((nkv, max_ctx, hd))).astype(dt)
    vc = (rng.standard_normal((nkv, max_ctx, hd))).astype(dt)
    k = rng.standard_normal((t, nkv * hd)).astype(np.float32)
    attrs = {"n_kv_heads": nkv, "head_dim": hd, "pos0": pos0}
    (kc2,), (rkc,) = both("kv_write", [k], attrs, [kc])
    tol = TOL_F32 if cache == "f32" else TOL_F16
    assert T.rel_err(kc2.astype(np.float64), rkc.astype(np.float64)) <= tol
    q = rng.standard_normal((t, nh * hd)).astype(np.float32)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "window": case["window"],
             "scale": hd ** -0.5, "softcap": case["softcap"]}
    (y,), (ref,) = both("attention", [q, rkc.astype(dt), vc], attrs)
    assert T.rel_err(y, ref) <= TOL_F32


@pytest.mark.parametrize("op", ["silu", "gelu", "gelu_tanh", "scale", "softcap", "add", "mul", "swiglu", "geglu"])
def test_eltwise(op):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 300)).astype(np.float32)
    b = rng.standard_normal((3, 300)).astype(np.float32)
    binary = op in ("add", "mul", "swiglu", "geglu")
    attrs = {"scale": 0.7, "softcap": 2.0}
    (y,), (ref,) = both(op, [a, b] if binary else [a], attrs)
    assert T.rel_err(y, ref) <= TOL_F32


def test_unsupported_op_falls_back_to_cpu_and_says_so():
    x = np.random.default_rng(9).standard_normal((2, 33)).astype(np.float32)
    (y,) = _core.run_op("softmax", [x], {}, None, "auto", "wgpu+rs")
    assert _core.last_run_op_backend() == "cpu (fallback)"
    (ref,) = _core.run_op("softmax", [x], {}, None, "scalar")
    assert T.rel_err(y, ref) <= TOL_F32


# ------------------------------------------------------------ whole forwards

CROSS_TOL = 1e-4  # docs/runtime.md: precise vs precise across backends


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mistral"])
def tiny_model(request, tmp_path_factory):
    import os

    import test_families_tiny as F
    from tokenizers import Tokenizer, models, pre_tokenizers

    def bpe_tokenizer(d):  # the importer takes BPE tokenizers; ids are all these tests use
        tok = Tokenizer(models.BPE({f"t{i}": i for i in range(F.VOCAB)}, [], unk_token="t0"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(os.path.join(d, "tokenizer.json"))

    F._tokenizer_json = bpe_tokenizer
    _, path = F._build(request.param, tmp_path_factory)
    return request.param, path


def test_tiny_family_wgpu_matches_cpu(tiny_model):
    import cyb_llm

    family, path = tiny_model
    ids = np.random.default_rng(0).integers(0, 512, size=24).tolist()
    cpu = cyb_llm.load(path, backend="cpu", precise=True)
    gpu = cyb_llm.load(path, backend="wgpu+rs", precise=True)
    a = cpu.new_conversation(64).forward(ids, all_logits=True)
    conv = gpu.new_conversation(64)
    b = conv.forward(ids[:20], all_logits=True)
    assert T.rel_err(b, a[:20]) <= CROSS_TOL, family
    steps = np.stack([conv.forward([t]) for t in ids[20:]])  # decode steps over the cache
    assert T.rel_err(steps, a[20:]) <= CROSS_TOL, family
    # Greedy tokens identical in precise mode.
    from oracles import greedy

    assert greedy(gpu.new_conversation(64), ids[:6], 12, set()) == greedy(cpu.new_conversation(64), ids[:6], 12, set())
    recs = gpu.dispatch_records
    print(family, "records:", recs if not isinstance(recs, list) else recs[:3])


def test_fast_mode_wgpu_close_to_precise(tiny_model):
    import cyb_llm

    family, path = tiny_model
    ids = np.random.default_rng(3).integers(0, 512, size=20).tolist()
    a = cyb_llm.load(path, backend="wgpu+rs").new_conversation(64).forward(ids, all_logits=True)
    b = cyb_llm.load(path, backend="cpu", precise=True).new_conversation(64).forward(ids, all_logits=True)
    assert T.rel_err(a, b) <= 5e-2, family
