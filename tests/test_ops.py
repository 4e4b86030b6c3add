"""The op test matrix: every op x every encoding/dtype x odd shapes, on EVERY
backend -- the cpu at each of its levels (_core.cpu_levels()), wgpu+rs (any
adapter, software ones such as lavapipe included) and nox -- against
independent oracles (numpy in float64 for the math, gguf.quants.dequantize for
the weight encodings). One case list; every backend gets the full row. A case
a backend does not implement is a skip whose reason is exactly
"not supported [<backend>]" (run_op falls back to the cpu and says so; the
matrix records that instead of judging the cpu twice; `pytest -rs` lists
them); with no wgpu adapter the wgpu+rs row is skipped saying why. The declines
are pinned: tests/data/expected_declines.json lists every (case, op) a backend
declines; a decline not listed, or a listed one the backend now runs, fails the
case until the file is regenerated (python tools/expected_declines.py) and the
change reviewed (docs/testing.md, "Expected declines").

Tolerances: read from docs/runtime.md, "Tolerances" (tests/tolerances.py), error =
max|a - b| / max|ref|: `op-f32` for a single op on f32 data vs the f64
reference (quantized weights judged on their dequantized bytes, 16-bit
activations on their dequantized values), `op-f16` when activations are stored
as f16 (an F16 KV cache judged against the unrounded keys/values), `fused-f32`
for fused vs unfused, `op-softcap-f32` for softcapped attention on a device
without f64, `cross-path` across execution paths.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from cyb_llm import _core

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GQ  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from placement import wgpu_skip_reason  # noqa: E402
from tolerances import tolerance  # noqa: E402

TOL_F32 = tolerance("op-f32")
TOL_F16 = tolerance("op-f16")
TOL_FUSED = tolerance("fused-f32")

DECLINES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "expected_declines.json")
# tools/expected_declines.py sets this to a file: the declines are appended there instead of checked
RECORD_DECLINES = os.environ.get("CYB_RECORD_DECLINES")


def _expected_declines() -> dict[str, set[str]]:
    """backend -> {"<test case>: <op>"} of tests/data/expected_declines.json."""
    with open(DECLINES_FILE, encoding="utf-8") as f:
        data = json.load(f)
    return {b: set(cases) for b, cases in data["declines"].items()}


EXPECTED_DECLINES = _expected_declines()


def _current_case() -> str:
    """The running test's name with its parameters, e.g. test_rms_norm[nox-False]."""
    cur = os.environ["PYTEST_CURRENT_TEST"]  # "tests/test_ops.py::test_rms_norm[nox-False] (call)"
    return cur.rsplit(" ", 1)[0].split("::", 1)[1]


LEVELS = _core.cpu_levels()
WGPU_SKIP = wgpu_skip_reason()  # None, or why the wgpu+rs row is skipped
# Every backend of the runtime: "cpu:<level>" for each cpu level, then the others.
BACKENDS = [f"cpu:{lvl}" for lvl in LEVELS] + ["wgpu+rs", "nox"]
QUANT = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
FLOAT = ["f32", "f16", "bf16"]
ENCODINGS = FLOAT + QUANT

BLOCK = {"q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q8_0": (32, 34),
         "iq4_nl": (32, 18), "q2_k": (256, 84), "q3_k": (256, 110), "q4_k": (256, 144),
         "q5_k": (256, 176), "q6_k": (256, 210), "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2)}
# Byte offsets of the f16 scale fields inside a block (docs/quant.md layouts).
F16_FIELDS = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "iq4_nl": [0],
              "q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}
GGUF_TYPE = {"q4_0": GQ.Q4_0, "q4_1": GQ.Q4_1, "q5_0": GQ.Q5_0, "q5_1": GQ.Q5_1, "q8_0": GQ.Q8_0,
             "iq4_nl": GQ.IQ4_NL, "q2_k": GQ.Q2_K, "q3_k": GQ.Q3_K, "q4_k": GQ.Q4_K, "q5_k": GQ.Q5_K,
             "q6_k": GQ.Q6_K, "bf16": GQ.BF16}


def rel_err(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert a.shape == ref.shape, (a.shape, ref.shape)
    assert np.all(np.isfinite(a)), "non-finite output"
    denom = np.max(np.abs(ref))
    assert denom > 0
    return float(np.max(np.abs(a - ref)) / denom)


def row_lengths(enc):
    """Odd row lengths for an encoding: not multiples of 64 where the block allows it."""
    b = BLOCK[enc][0]
    if b == 1:
        return [37, 100]
    if b == 32:
        return [96, 160, 1824]  # 1824: 57 blocks, avx512 prefill groups of 8 over two K chunks
    return [256, 768]


def random_weight(enc, rows, k, rng):
    """Returns (tensor argument for run_op, dequantized float64 [rows, k])."""
    if enc == "f32":
        w = rng.standard_normal((rows, k)).astype(np.float32)
        return w, w.astype(np.float64)
    if enc == "f16":
        w = rng.standard_normal((rows, k)).astype(np.float16)
        return w, w.astype(np.float64)
    if enc == "bf16":
        bits = (rng.standard_normal((rows, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        raw = bits.view(np.uint8).reshape(rows, k * 2)
        deq = dequantize(raw, GGUF_TYPE["bf16"]).astype(np.float64)
        return (raw.reshape(-1), "bf16", (rows, k)), deq
    bs, bb = BLOCK[enc]
    nb = rows * k // bs
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for off in F16_FIELDS[enc]:
        d = (rng.uniform(0.002, 0.05, size=nb) * rng.choice([-1.0, 1.0], size=nb)).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    raw = raw.reshape(rows, k // bs * bb)
    deq = dequantize(raw, GGUF_TYPE[enc]).astype(np.float64)
    assert deq.shape == (rows, k) and np.all(np.isfinite(deq))
    return (raw.reshape(-1), enc, (rows, k)), deq


def q16_activations(x, bs=32):
    """The fast path's 16-bit activations, dequantized: per bs-block (32, or 256 for the
    avx512 K-quant path) d = amax/32767 (f32), q = round-half-even(x * (1/d)) (f32
    product), value d*q (exact in f64)."""
    x = np.asarray(x, dtype=np.float32)
    xb = x.reshape(*x.shape[:-1], x.shape[-1] // bs, bs)
    d = (np.abs(xb).max(-1) / np.float32(32767)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.round(xb * inv[..., None])
    assert np.all(np.abs(q) <= 32767)
    return (q.astype(np.float64) * d[..., None].astype(np.float64)).reshape(x.shape)


def cpu_level(backend):
    """The cpu level of a "cpu:<level>" backend, None for the other backends."""
    kind, _, lvl = backend.partition(":")
    return (lvl or "auto") if kind == "cpu" else None


# docs/cpu-backend.md, "Precise and fast mode": the fast path quantizes a matmul's activations to
# int16 for these weight encodings, one scale per 32 values, except at the avx2, avx512 and amx
# levels for the K-quants Q2_K/Q3_K/Q4_K/Q5_K/Q6_K (one per 256-value super-block; Q2_K and Q3_K
# only there); the scalar level (the reference) never does.
Q16_ACTIVATION_ENCODINGS = {"q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k"}
Q16K_ACTIVATION_ENCODINGS = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}


def activation_block(level, enc):
    """The spec's activation block of a fast-mode matmul at a cpu level: 32, 256 or 0 (f32)."""
    if level == "auto":
        level = _core.cpu_levels()[-1]  # docs/cpu-backend.md: `auto` is the last of them
    if level == "scalar":
        return 0
    if level in ("avx2", "avx512", "amx") and enc in Q16K_ACTIVATION_ENCODINGS:
        return 256
    return 32 if enc in Q16_ACTIVATION_ENCODINGS else 0


@pytest.mark.parametrize("level", LEVELS)
def test_activation_block_is_the_documented_one(level):
    """The runtime's own answer (_core.activation_block) agrees with the spec table above; the
    matmul oracles use the table, so a kernel that quantized otherwise fails them."""
    for enc in ENCODINGS:
        assert _core.activation_block(level, enc) == activation_block(level, enc), enc


def matmul_input(x, enc, backend, precise):
    """Activations as the kernel sees them: f32, or 16-bit blocks in the cpu's fast integer
    path (judged on the dequantized activations, as quantized weights are on their bytes)."""
    lvl = cpu_level(backend)
    bs = 0 if precise or lvl is None else activation_block(lvl, enc)
    if bs:
        return q16_activations(x, bs)
    return np.asarray(x, dtype=np.float64)


# docs/cpu-backend.md, "Precise and fast mode": at the amx level a fast-mode matmul of
# kPackedMinTokens (16) or more tokens on F32/F16/BF16 weights splits each value into two bf16
# numbers and sums xh.wh + xl.wh + xh.wl on AMX-BF16 tiles (xl.wl, below 2^-16, is dropped).
FLOAT_ENCODINGS = {"f32", "f16", "bf16"}


def bf16_split(level, enc, tokens):
    """The spec's answer: does this fast-mode matmul run as the bf16 split product?"""
    if level == "auto":
        level = _core.cpu_levels()[-1]
    return level == "amx" and enc in FLOAT_ENCODINGS and tokens >= 16


def bf16_parts(a):
    """(hi, lo) of an f32 array: hi = bf16(a), lo = bf16(a - hi), round to nearest even, in f64."""
    def rne(v):
        u = np.ascontiguousarray(v, np.float32).view(np.uint32).astype(np.uint64)
        r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)
        return r.view(np.float32)
    a = np.asarray(a, np.float32)
    hi = rne(a)
    return hi.astype(np.float64), rne(a - hi).astype(np.float64)


@pytest.mark.parametrize("level", LEVELS)
def test_bf16_split_is_the_documented_one(level):
    for enc in ENCODINGS:
        for tokens in (1, 15, 16, 300):
            assert _core.bf16_split_matmul(level, enc, tokens) == bf16_split(level, enc, tokens), (enc, tokens)


def mm_ref(x, deq, enc, backend, precise):
    """x @ deq.T in f64 as the kernel computes it: f32 activations, 16-bit blocks in the cpu's
    fast integer path, or the bf16 split product at the amx level."""
    lvl = cpu_level(backend)
    if not precise and lvl is not None and bf16_split(lvl, enc, len(x)):
        xh, xl = bf16_parts(x)
        wh, wl = bf16_parts(deq)
        return xh @ wh.T + xl @ wh.T + xh @ wl.T
    return matmul_input(x, enc, backend, precise) @ deq.T


# docs/runtime.md, "Precision modes" and "Tolerances" (`op-f16-sum`): with CYB_WGPU_GEMM=h16=1, in
# fast mode, wgpu+rs runs a matmul of 32 or more tokens on block-quantized weights as the f16 tiled
# GEMM (matmul.wgsl H16) where the adapter offers shader-f16: decoded weights rounded to f16, each token's activations
# scaled by a power of two per 64 values of K and rounded to f16, the products of each run of
# F16_SUM consecutive values of K (from 0) summed in f16 as two sums (its even and its odd
# values, in order), those sums added in f32.
F16_SUM = int(tolerance("op-f16-sum"))
U16 = 2.0 ** -11  # f16's unit roundoff


def wgpu_f16_gemm(backend, precise, enc, tokens):
    """The spec's answer: does this matmul run as the wgpu+rs f16 tiled GEMM? (Only with
    CYB_WGPU_GEMM=h16=1: tests/test_wgpu.py runs these cases so.)"""
    return (backend == "wgpu+rs" and not precise and enc in QUANT and tokens >= 32 and
            os.environ.get("CYB_WGPU_GEMM") == "h16=1" and bool(_core.wgpu_info(True)["shader_f16"]))


def f16r(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float64)


def r11(a):
    """Rounded to 11 significant bits (f16's precision) without f16's exponent limits: an
    activation as the f16 GEMM stages it, scaled by a power of two into f16's range."""
    m, e = np.frexp(np.asarray(a, np.float32).astype(np.float64))
    return np.ldexp(np.round(m * 2048.0) / 2048.0, e)


def f16_gemm_ref(x, deq):
    """(reference, per-output error bound) of the f16 GEMM: the f64 product of the rounded inputs
    (weights to f16, activations to f16's 11 significant bits: r11), and the running error bound of its f16 sums: each rounding of a sum is at most u of
    the partial sum it rounds (second order: u / (1 - m u), m = F16_SUM / 2 products a sum), so
    an output is within u / (1 - m u) * the sum of |S_j| over the partial sums S_j of all its f16
    sums. Absolute terms for f16's subnormal range (2^-25 a rounding, in the kernel's scaled
    units: at most 2 max|x| of the token): one per product, and one per input value rounded
    (scaled then rounded vs rounded: the same above the subnormals) times |w|."""
    n = F16_SUM
    m = n // 2
    x16, w16 = r11(x), f16r(deq)
    T, K = x16.shape
    kc = -(-K // n) * n
    wp = np.zeros((w16.shape[0], kc))
    wp[:, :K] = w16
    bound = np.empty((T, w16.shape[0]))
    for t in range(T):
        xp = np.zeros(kc)
        xp[:K] = x16[t]
        # [row][run][position in the sum][even / odd]
        partial = np.cumsum((wp * xp).reshape(len(wp), kc // n, m, 2), axis=2)
        bound[t] = np.abs(partial).sum(axis=(1, 2, 3))
    unscale = np.maximum(1.0, 2.0 * np.abs(x16).max(axis=1, keepdims=True))
    absolute = (kc * 2.0 ** -25 + np.abs(w16).sum(axis=1)[None, :] * 2.0 ** -24) * unscale
    return x16 @ w16.T, bound * (U16 / (1 - m * U16)) + absolute


# docs/webgpu-dawn.md, "Prompt GEMMs on the tensor cores": with CYB_WGPU_SM=f16, on a device with
# 16 x 16 x 16 f16 x f16 -> f32 subgroup matrices and subgroups of 32 lanes (webgpu:dawn on NVIDIA;
# the op matrix's wgpu+rs row runs there through bench/dawn_pytest_plugin.py), fast-mode matmuls of
# SM_MIN_TOKENS or more tokens run on the tensor cores with f16 inputs and f32 sums: each token's
# activations scaled by a power of two and rounded to f16, the decoded weights rounded to f16.
SM_MIN_TOKENS = 64  # wgpu_settings.h kSmMinTokens


def wgpu_sm_f16_gemm(backend, precise, tokens):
    """The spec's answer: does this matmul run as the f16 subgroup-matrix GEMM?"""
    if backend != "wgpu+rs" or precise or tokens < SM_MIN_TOKENS or os.environ.get("CYB_WGPU_SM") != "f16":
        return False
    i = _core.wgpu_info(True)
    return (bool(i.get("subgroup_matrix")) and "f16->f32 16x16x16" in (i.get("subgroup_matrix_configs") or [])
            and i["subgroup_min"] == 32 and i["subgroup_max"] == 32 and bool(i["shader_f16"]))


def sm_f16_gemm_ref(x, deq):
    """(reference, per-output error bound) of the f16 subgroup-matrix GEMM: the f64 product of the
    unrounded inputs, and the bound of f16 inputs and f32 sums. Each input is one of the two f16
    values nearest it (WGSL leaves the choice to the device: at most one f16 unit, 2^-10 of it,
    after the token's scaling), so a product is within (2 * 2^-10 + 2^-20) of its size; the
    K products' f32 sums within K * 2^-23 of the sum of their sizes (a running bound that also
    holds for truncating adders). Absolute terms for f16's subnormal range as f16_gemm_ref's."""
    x64, w64 = np.asarray(x, np.float64), np.asarray(deq, np.float64)
    K = x64.shape[1]
    size = np.abs(x64) @ np.abs(w64).T
    unscale = np.maximum(1.0, 2.0 * np.abs(x64).max(axis=1, keepdims=True))
    absolute = np.abs(w64).sum(axis=1)[None, :] * 2.0 ** -24 * unscale
    return x64 @ w64.T, size * (2 * 2.0 ** -10 + 2.0 ** -20 + K * 2.0 ** -23) + absolute


def assert_within(y, ref, bound, what=None):
    """Every output within its bound (plus `op-f32` of the largest reference value: the f32 part)."""
    y = np.asarray(y, np.float64)
    excess = np.abs(y - ref) / (bound + TOL_F32 * np.max(np.abs(ref)))
    assert excess.max() <= 1.0, (what, float(excess.max()))


def assert_mm(y, x, deq, enc, backend, precise, add=0.0, what=None):
    """y = x @ deq.T + add as the kernel computes it: within `op-f32` of mm_ref, or, for the
    wgpu+rs f16 GEMM, each output within the bound of its f16 sums."""
    if wgpu_f16_gemm(backend, precise, enc, len(x)) or wgpu_sm_f16_gemm(backend, precise, len(x)):
        ref, bound = (f16_gemm_ref if wgpu_f16_gemm(backend, precise, enc, len(x)) else sm_f16_gemm_ref)(x, deq)
        assert_within(y, ref + add, bound, what)
    else:
        assert rel_err(y, mm_ref(x, deq, enc, backend, precise) + add) <= TOL_F32, what


SILU_SLOPE = 1.1  # the largest |silu'(v)| (1.0998 at v = 2.40)
GELU_SLOPE = 1.13  # the largest |gelu'(v)| (erf 1.1289, tanh form 1.1293, at v = 1.4-1.5)


def assert_swiglu(y, x, dg, du, enc, backend, precise, what=None):
    """silu(x @ dg.T) * (x @ du.T) as the kernel computes it (see assert_mm): for the f16 GEMM the
    bounds of gate (eg) and up (eu) carried through: |silu(g) u - silu(g') u'| <= 1.1 eg (|u| + eu)
    + |silu(g)| eu."""
    if wgpu_f16_gemm(backend, precise, enc, len(x)) or wgpu_sm_f16_gemm(backend, precise, len(x)):
        gemm_ref = f16_gemm_ref if wgpu_f16_gemm(backend, precise, enc, len(x)) else sm_f16_gemm_ref
        g, eg = gemm_ref(x, dg)
        u, eu = gemm_ref(x, du)
        assert_within(y, silu64(g) * u, SILU_SLOPE * eg * (np.abs(u) + eu) + np.abs(silu64(g)) * eu, what)
    else:
        ref = silu64(mm_ref(x, dg, enc, backend, precise)) * mm_ref(x, du, enc, backend, precise)
        assert rel_err(y, ref) <= TOL_F32, what


def run(op, inputs, attrs=None, outputs=None, backend="cpu:auto"):
    """Runs one op on a backend of the matrix; skips with "not supported [backend]" when
    the backend does not implement the case (the dispatcher fell back to the cpu) and
    tests/data/expected_declines.json lists the decline; fails on a decline it does not list and
    on a listed one the backend ran."""
    lvl = cpu_level(backend)
    if lvl is not None:
        return _core.run_op(op, inputs, attrs or {}, outputs, lvl, "cpu")
    res = _core.run_op(op, inputs, attrs or {}, outputs, "scalar", backend)
    ran = _core.last_run_op_backend()
    key = f"{_current_case()}: {op}"
    expected = key in EXPECTED_DECLINES.get(backend, set())
    regenerate = "regenerate it with `python tools/expected_declines.py` and review the diff"
    if ran != backend:
        print(f"{op}: not supported [{backend}] (ran on {ran})")
        if RECORD_DECLINES:
            with open(RECORD_DECLINES, "a", encoding="utf-8") as f:
                f.write(json.dumps([backend, key]) + "\n")
        elif not expected:
            pytest.fail(f"{backend} newly declines {key} (ran on {ran}); tests/data/expected_declines.json "
                        f"does not list it: {regenerate}", pytrace=False)
        pytest.skip(f"not supported [{backend}]")
    if expected and not RECORD_DECLINES:
        pytest.fail(f"{backend} now runs {key}, which tests/data/expected_declines.json lists as declined: "
                    f"{regenerate}", pytrace=False)
    return res


def test_expected_declines_name_cases_of_the_matrix():
    """Every entry of tests/data/expected_declines.json names a test of this module run on that
    backend and an op of the schema (a renamed case would otherwise leave its entry behind)."""
    ops = set(_core.op_names())
    for be, cases in EXPECTED_DECLINES.items():
        assert be in BACKENDS and cpu_level(be) is None, be
        for key in cases:
            case, op = key.rsplit(": ", 1)
            name, _, params = case.partition("[")
            assert callable(globals().get(name)) and name.startswith("test_"), key
            assert be in params.rstrip("]").split("-"), key
            assert op in ops, key


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    return request.param


@pytest.fixture(params=[True, False], ids=["precise", "fast"])
def precise(request):
    return request.param


# ------------------------------------------------------------------ encodings


@pytest.mark.parametrize("enc", ENCODINGS)
def test_embedding_every_encoding(enc, backend):
    rng = np.random.default_rng(1)
    k = row_lengths(enc)[-1]
    w, deq = random_weight(enc, 9, k, rng)
    ids = np.array([3, 0, 8, 3, 5], dtype=np.int32)
    (y,) = run("embedding", [ids, w], {"scale": 1.5}, backend=backend)
    assert rel_err(y, deq[ids] * 1.5) <= TOL_F32


def test_embedding_more_ids_than_a_grid_row(backend):
    """More ids than one dimension of a GPU dispatch holds (65535 workgroups: a batch of 256 x 512
    tokens): every token's row, the last ones too."""
    rng = np.random.default_rng(4)
    w, deq = random_weight("f32", 50, 32, rng)
    ids = rng.integers(0, 50, size=70000).astype(np.int32)
    (y,) = run("embedding", [ids, w], {"scale": 1.0}, backend=backend)
    assert rel_err(y, deq[ids]) <= TOL_F32


@pytest.mark.parametrize("enc", ENCODINGS)
@pytest.mark.parametrize("T", [1, 5, 9, 40])  # 9: the tile paths (avx512 8-token tiles, amx); 40: cpu packed float GEMM
def test_matmul_every_encoding(enc, T, backend, precise):
    rng = np.random.default_rng(2 + T)
    for k in row_lengths(enc):
        n = 33
        w, deq = random_weight(enc, n, k, rng)
        x = rng.standard_normal((T, k)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        (y,) = run("matmul", [x, w], {"precise": precise}, backend=backend)
        assert_mm(y, x, deq, enc, backend, precise, what=(enc, k))
        (yb,) = run("matmul", [x, w, bias], {"precise": precise}, backend=backend)
        assert_mm(yb, x, deq, enc, backend, precise, add=bias, what=(enc, k))


@pytest.mark.parametrize("enc", ["f32", "f16", "bf16", "q4_1", "q4_k", "q6_k", "q8_0"])
def test_matmul_many_rows_threads(enc, backend, precise):
    """Enough output rows and tokens to spread over threads and tiles."""
    rng = np.random.default_rng(7)
    k = 512
    w, deq = random_weight(enc, 301, k, rng)
    for T in (1, 3, 17, 40):
        x = rng.standard_normal((T, k)).astype(np.float32)
        (y,) = run("matmul", [x, w], {"precise": precise}, backend=backend)
        assert_mm(y, x, deq, enc, backend, precise, what=T)


@pytest.mark.parametrize("enc", ["f16", "q8_0", "q4_1", "q5_0", "q4_k", "q6_k"])
def test_matmul_one_token_many_rows(enc, backend, precise):
    """One token over 4099 rows (a ragged last workgroup of rows), with a bias and the fused SwiGLU."""
    rng = np.random.default_rng(41)
    k, n = 256, 4099
    w, deq = random_weight(enc, n, k, rng)
    wu, du = random_weight(enc, n, k, rng)
    x = rng.standard_normal((1, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    (y,) = run("matmul", [x, w, bias], {"precise": precise}, backend=backend)
    assert rel_err(y, mm_ref(x, deq, enc, backend, precise) + bias) <= TOL_F32
    (g,) = run("fused_swiglu", [x, w, wu], {"precise": precise}, backend=backend)
    assert rel_err(g, silu64(mm_ref(x, deq, enc, backend, precise)) * mm_ref(x, du, enc, backend, precise)) <= TOL_F32


@pytest.mark.parametrize("encs", [("q4_k", "q4_k", "q6_k"), ("q8_0", "q5_0", "q4_1"), ("f16", "f32", "bf16"),
                                  ("q4_k", "q3_k", "q8_0")])
@pytest.mark.parametrize("T", [1, 3, 6, 40])
def test_fused_qkv(encs, T, backend, precise):
    """fused_qkv = three matmuls (wgpu+rs: one matvec dispatch over weights of three encodings for
    few tokens, matvec.wgsl QKV; three matmuls for 32+ tokens or a row-kernel encoding (q3_k)):
    row counts of a GQA layer (q 160, k and v 64), with and without the three biases."""
    rng = np.random.default_rng(43 + T)
    k = 256
    ws = [random_weight(e, n, k, rng) for e, n in zip(encs, (160, 64, 64))]
    x = rng.standard_normal((T, k)).astype(np.float32)
    bs = [rng.standard_normal(n).astype(np.float32) for n in (160, 64, 64)]
    shapes = [[T, 160], [T, 64], [T, 64]]
    got = run("fused_qkv", [x] + [w for w, _ in ws], {"precise": precise}, shapes, backend=backend)
    for g, (w, deq), e in zip(got, ws, encs):
        assert_mm(g, x, deq, e, backend, precise, what=encs)
    got = run("fused_qkv", [x] + [w for w, _ in ws] + bs, {"precise": precise}, shapes, backend=backend)
    for g, (w, deq), e, b in zip(got, ws, encs, bs):
        assert_mm(g, x, deq, e, backend, precise, add=b, what=encs)


def test_fused_qkv_takes_all_biases_or_none():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 32)).astype(np.float32)
    x = np.zeros((1, 32), np.float32)
    with pytest.raises(Exception, match="all three biases or none"):
        _core.run_op("fused_qkv", [x, w, w, w, np.zeros(8, np.float32)], {}, [[1, 8]] * 3, "auto", "cpu")


@pytest.mark.parametrize("enc", ["q4_k", "q5_k", "q6_k", "q4_0", "q4_1", "q5_0", "q8_0"])
def test_matmul_quant_rows_over_several_k_chunks(enc, backend, precise):
    """Rows of 2304 values (9 K-quant super-blocks, 72 32-value blocks: more than one K chunk of
    the prefill kernels (6 super-blocks, 32 blocks): partial sums accumulate over chunks, the last
    one short), 37 rows and 19 tokens (ragged row blocks and token tiles)."""
    rng = np.random.default_rng(29)
    k, n = 9 * 256, 37
    w, deq = random_weight(enc, n, k, rng)
    for T in (1, 19):
        x = rng.standard_normal((T, k)).astype(np.float32)
        (y,) = run("matmul", [x, w], {"precise": precise}, backend=backend)
        assert rel_err(y, mm_ref(x, deq, enc, backend, precise)) <= TOL_F32, T


@pytest.mark.parametrize("enc", ["f32", "f16", "bf16"] + QUANT)
def test_matmul_many_tokens_many_rows(enc, backend, precise):
    """Enough tokens and output rows for the wgpu tiled GEMM (>= 64 output tiles of 64 x 64,
    ragged at both edges; its per-encoding four-value decoders) and the cpu packed GEMM; bias
    and the fused SwiGLU variant too. Float rows of 100 values end inside a 32-value chunk."""
    rng = np.random.default_rng(23)
    k, n, T = (100 if enc in ("f32", "f16", "bf16") else 256), 1030, 257
    w, deq = random_weight(enc, n, k, rng)
    wu, du = random_weight(enc, n, k, rng)
    x = rng.standard_normal((T, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    (y,) = run("matmul", [x, w, bias], {"precise": precise}, backend=backend)
    assert_mm(y, x, deq, enc, backend, precise, add=bias)
    (g,) = run("fused_swiglu", [x, w, wu], {"precise": precise}, backend=backend)
    assert_swiglu(g, x, deq, du, enc, backend, precise)


@pytest.mark.parametrize("enc", ["q4_k", "q6_k", "q8_0"])
@pytest.mark.parametrize("scale", [1e-6, 1e5])
def test_matmul_activation_range(enc, scale, backend, precise):
    """Activations far from 1 (1e5 is past f16's largest value, 65504; 1e-6 inside its subnormal
    range), one value 50 times the rest: 40 tokens, the wgpu+rs f16 GEMM's per-token scaling."""
    rng = np.random.default_rng(53)
    w, deq = random_weight(enc, 70, 512, rng)
    x = (rng.standard_normal((40, 512)) * scale).astype(np.float32)
    x[3, 7] *= 50
    (y,) = run("matmul", [x, w], {"precise": precise}, backend=backend)
    assert_mm(y, x, deq, enc, backend, precise)


def test_dequantize_random_blocks(backend):
    """Decoding matches gguf on many random blocks of every encoding."""
    rng = np.random.default_rng(3)
    for enc in QUANT + ["bf16", "f16"]:
        w, deq = random_weight(enc, 64, BLOCK[enc][0] * 2 if BLOCK[enc][0] > 1 else 64, rng)
        ids = np.arange(64, dtype=np.int32)
        (y,) = run("embedding", [ids, w], {"scale": 1.0}, backend=backend)
        assert rel_err(y, deq) <= TOL_F32, enc


# ------------------------------------------------------------------ norms


@pytest.mark.parametrize("plus_one", [False, True])
def test_rms_norm(plus_one, backend):
    rng = np.random.default_rng(4)
    for T, D in ((1, 67), (6, 256)):
        x = rng.standard_normal((T, D)).astype(np.float32)
        w = rng.standard_normal(D).astype(np.float32)
        eps = 1e-5
        x64 = x.astype(np.float64)
        ref = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * ((1 + w) if plus_one else w)
        (y,) = run("rms_norm", [x, w], {"eps": eps, "plus_one": plus_one}, backend=backend)
        assert rel_err(y, ref) <= TOL_F32


@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm(with_bias, backend):
    rng = np.random.default_rng(5)
    T, D = 5, 131
    x = (rng.standard_normal((T, D)) * 3 + 1).astype(np.float32)
    w = rng.standard_normal(D).astype(np.float32)
    b = rng.standard_normal(D).astype(np.float32)
    eps = 1e-6
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(var + eps) * w + (b if with_bias else 0)
    ins = [x, w, b] if with_bias else [x, w]
    (y,) = run("layer_norm", ins, {"eps": eps}, backend=backend)
    assert rel_err(y, ref) <= TOL_F32


def l2_normalize_ref(x, eps):
    x64 = x.astype(np.float64)
    return x64 / np.maximum(np.sqrt((x64 * x64).sum(-1, keepdims=True)), eps)


@pytest.mark.parametrize("shape", [(1, 67), (5, 300), (2, 3, 128)])
def test_l2_normalize(shape, backend):
    rng = np.random.default_rng(20)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1, shape[-1])[0] *= 1e-9  # a row whose norm is below eps: divided by eps
    eps = 1e-6
    (y,) = run("l2_normalize", [x], {"eps": eps}, backend=backend)
    assert y.shape == x.shape
    assert rel_err(y, l2_normalize_ref(x, eps)) <= TOL_F32
    z = np.zeros((2, 33), np.float32)  # all-zero rows stay zero
    (yz,) = run("l2_normalize", [z], {"eps": eps}, backend=backend)
    assert not np.any(yz)


L2_NODE = """[[nodes]]
name = "final_l2"
op = "l2_normalize"
tag = 24
inputs = ["final_norm"]
outputs = ["final_l2"]
attrs = { eps = 1e-6 }

[[nodes]]
name = "last_rows"
op = "last_rows"
tag = 23
inputs = ["final_l2", "rows"]"""


@pytest.mark.parametrize("backend_name", ["cpu", "nox", "wgpu+rs"])
def test_l2_normalize_in_a_graph(backend_name, tmp_path):
    """End to end: a graph node op = "l2_normalize" parses (schema arity, attributes,
    symbolic shape rule) and runs on each backend's graph path. lm_head is linear, so
    every logits row is the plain model's row divided by its hidden state's norm."""
    import cyb_llm
    import graph_util

    if backend_name == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    old = """[[nodes]]
name = "last_rows"
op = "last_rows"
tag = 23
inputs = ["final_norm", "rows"]"""
    text = graph_util.llama_graph()
    assert old in text
    plain = graph_util.write_tiny(tmp_path / "plain.model")
    l2 = graph_util.write_tiny(tmp_path / "l2.model", graph=text.replace(old, L2_NODE))
    ids = [5, 9, 2, 33, 7, 1]
    ref = cyb_llm.load(plain, precise=True).new_conversation(32).forward(ids, all_logits=True)
    m = cyb_llm.load(l2, backend=backend_name, precise=True)
    got = m.new_conversation(32).forward(ids, all_logits=True)
    ran = {r["op"]: r["backend"] for r in m.dispatch_records}
    assert ran["l2_normalize"] == backend_name, ran
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    c = (got * ref).sum(-1) / (got * got).sum(-1)  # per row: ||h||
    assert np.all(c > 2)  # ||h|| of an rms-normed row of 32 values is about sqrt(32)
    assert rel_err(got * c[:, None], ref) <= tolerance("cross-path")


def masked_pool_ref(x, mask, mode):
    x64 = x.astype(np.float64)
    if mode == "cls":
        return x64[..., 0, :]
    out = np.zeros(x.shape[:-2] + x.shape[-1:])
    for idx in np.ndindex(*x.shape[:-2]):
        rows = x64[idx][mask[idx] != 0]
        if len(rows):
            out[idx] = rows.mean(0) if mode == "mean" else rows.max(0)
    return out


@pytest.mark.parametrize("mode", ["cls", "mean", "max"])
def test_masked_pool(mode, backend):
    rng = np.random.default_rng(21)
    # three sequences of 7 tokens: full, 3 real tokens, and one without any (pools to 0)
    x = (rng.standard_normal((3, 7, 37)) * 2).astype(np.float32)
    mask = np.zeros((3, 7), np.float32)
    mask[0] = 1
    mask[1, :3] = 1
    (y,) = run("masked_pool", [x, mask], {"mode": mode}, backend=backend)
    assert y.shape == (3, 37)
    assert rel_err(y, masked_pool_ref(x, mask, mode)) <= TOL_F32
    # one sequence [S, D] with a ragged mask
    x2 = rng.standard_normal((9, 300)).astype(np.float32)
    m2 = (rng.random(9) < 0.6).astype(np.float32)
    m2[4] = 1
    (y2,) = run("masked_pool", [x2, m2], {"mode": mode}, backend=backend)
    assert y2.shape == (300,)
    assert rel_err(y2, masked_pool_ref(x2, m2, mode)) <= TOL_F32


def test_masked_pool_bad_mode_is_an_error():
    with pytest.raises(Exception, match="cls"):
        run("masked_pool", [np.zeros((2, 4), np.float32), np.ones(2, np.float32)], {"mode": "sum"})


# ------------------------------------------------------------------ schema


def test_op_names_are_the_schema_table():
    names = _core.op_names()
    tags = sorted(names.values())
    # stable tags, none missing up to 44; from 45 on, blocks reserved per group (op.h) fill as
    # their ops land, so gaps there are allowed (never duplicates)
    assert tags[:44] == list(range(1, 45)) and len(set(tags)) == len(tags)
    assert all(t < 90 for t in tags)  # 85-89: the fusion pass's graph-v2 ops (attention_nd 85, elementwise 86)
    assert names["matmul"] == 2 and names["l2_normalize"] == 24 and names["masked_pool"] == 25
    for name in names:
        sch = _core.op_schema(name)
        assert sch["name"] == name and sch["tag"] == names[name]
        assert 0 < sch["min_inputs"] <= sch["max_inputs"] and sch["outputs"] >= 1
    assert _core.op_schema("rms_norm")["attrs"]["eps"] == {"type": "a number", "required": True}
    assert _core.op_schema("masked_pool")["attrs"]["mode"]["choices"] == "cls|mean|max"
    assert names["encoder_attention"] == 26 and names["conv1d"] == 28


def test_attributes_come_from_the_schema():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(Exception, match="has no attribute 'eps'"):
        run("silu", [x], {"eps": 1e-5})
    (y,) = run("rms_norm", [x, np.ones(8, np.float32)], {"eps": 0.0, "norm_plus_one": True})
    assert np.allclose(y, 2.0)


@pytest.mark.parametrize("backend_name", ["cpu", "wgpu+rs", "nox"])
def test_validation_is_the_same_on_every_backend(backend_name):
    """The dispatcher validates each op once, from the schema, before any backend is
    asked: the same structured errors whatever the backend."""
    if backend_name == "wgpu+rs" and WGPU_SKIP:
        pytest.skip(WGPU_SKIP)
    x = np.zeros((2, 64), dtype=np.float32)
    with pytest.raises(Exception, match="shape mismatch"):
        _core.run_op("matmul", [x, np.zeros((3, 65), np.float32)], {}, None, "auto", backend_name)
    with pytest.raises(Exception, match="shape mismatch"):
        _core.run_op("rms_norm", [x, np.ones(63, np.float32)], {"eps": 1e-5}, None, "auto", backend_name)
    with pytest.raises(Exception, match="exceed the KV cache"):
        kc = np.zeros((2, 8, 32), np.float32)
        _core.run_op("attention", [x, kc, kc], {"n_heads": 2, "n_kv_heads": 2, "head_dim": 32, "pos0": 7,
                                                "scale": 0.1}, None, "auto", backend_name)
    with pytest.raises(Exception, match="not supported"):  # a dtype the schema does not allow
        _core.run_op("silu", [np.zeros((2, 4), np.int32)], {}, None, "auto", backend_name)


def test_run_op_unknown_backend_is_an_error():
    with pytest.raises(Exception, match=r"cpu, wgpu\+rs and nox"):
        _core.run_op("silu", [np.ones((1, 4), np.float32)], {}, None, "auto", "tpu")


# ------------------------------------------------------------------ rope


def rope_ref(x, cos, sin, n_heads, head_dim, rot, neox, pos0):
    T = x.shape[0]
    xh = x.astype(np.float64).reshape(T, n_heads, head_dim).copy()
    half = rot // 2
    c = cos[pos0:pos0 + T].astype(np.float64)[:, None, :]
    s = sin[pos0:pos0 + T].astype(np.float64)[:, None, :]
    if neox:
        i0, i1 = np.arange(half), np.arange(half) + half
    else:
        i0, i1 = np.arange(half) * 2, np.arange(half) * 2 + 1
    a, b = xh[:, :, i0].copy(), xh[:, :, i1].copy()
    xh[:, :, i0] = a * c - b * s
    xh[:, :, i1] = b * c + a * s
    return xh.reshape(T, n_heads * head_dim)


ROPE_CASES = [
    ("default", None),
    ("linear", {"rope_type": "linear", "factor": 4.0}),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
]


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot", [64, 32])  # 32 of 64: partial rotary
@pytest.mark.parametrize("T,pos0", [(1, 0), (1, 13), (7, 5)])
@pytest.mark.parametrize("name,scaling", [ROPE_CASES[0], ROPE_CASES[3]], ids=["default", "yarn"])
def test_rope(neox, rot, T, pos0, name, scaling, backend):
    """The op (which builds its own table from theta and the scaling) against the rotation
    applied with transformers' table (tests/oracles.py: hf_rope_table), not ours."""
    pytest.importorskip("transformers")
    from oracles import hf_rope_table

    rng = np.random.default_rng(6)
    nh, hd, max_pos = 3, 64, 40
    cos, sin = hf_rope_table(rot, max_pos, 10000.0, scaling)
    x = rng.standard_normal((T, nh * hd)).astype(np.float32)
    rope = {"rot_dims": rot, "neox": neox, "max_pos": max_pos, "theta": 10000.0}
    if scaling:
        rope["scaling"] = dict(scaling)
    attrs = {"n_heads": nh, "head_dim": hd, "pos0": pos0, "rope": rope}
    (y,) = run("rope", [x], attrs, backend=backend)
    assert rel_err(y, rope_ref(x, cos, sin, nh, hd, rot, neox, pos0)) <= TOL_F32


def test_rope_position_outside_table_is_an_error():
    x = np.zeros((2, 64), dtype=np.float32)
    attrs = {"n_heads": 1, "head_dim": 64, "pos0": 9,
             "rope": {"rot_dims": 64, "max_pos": 10, "theta": 10000.0}}
    with pytest.raises(Exception, match="exceed the RoPE table"):
        run("rope", [x], attrs)


@pytest.mark.parametrize("name,scaling", ROPE_CASES, ids=[c[0] for c in ROPE_CASES])
@pytest.mark.parametrize("theta", [10000.0, 500000.0, 1000000.0])
@pytest.mark.parametrize("rot", [128, 64, 32])
def test_rope_table_matches_transformers(name, scaling, theta, rot):
    """Our (cos, sin) tables against transformers' over a grid of theta x rotated dims x scaling."""
    pytest.importorskip("transformers")
    from oracles import hf_rope_table

    max_pos = 300
    c_ref, s_ref = hf_rope_table(rot, max_pos, theta, scaling)
    cos, sin = _core.rope_table(rot, max_pos, theta, dict(scaling or {}))
    assert np.max(np.abs(cos - c_ref)) <= TOL_F32 * np.max(np.abs(c_ref))
    assert np.max(np.abs(sin - s_ref)) <= TOL_F32 * np.max(np.abs(s_ref))


# ------------------------------------------------------------------ attention


def attention_ref(q, kc, vc, nh, nkv, hd, pos0, window, scale, softcap):
    T = q.shape[0]
    q64 = q.astype(np.float64).reshape(T, nh, hd)
    k64, v64 = kc.astype(np.float64), vc.astype(np.float64)
    out = np.zeros((T, nh, hd))
    g = nh // nkv
    for t in range(T):
        p = pos0 + t
        lo = max(0, p - window + 1) if window > 0 else 0
        for h in range(nh):
            kk, vv = k64[h // g, lo:p + 1], v64[h // g, lo:p + 1]
            s = kk @ q64[t, h] * scale
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ vv
    return out.reshape(T, nh * hd)


ATT_CASES = [  # (n_heads, n_kv_heads, head_dim, T, pos0, window, softcap)
    (4, 4, 64, 1, 0, 0, 0.0),
    (6, 2, 64, 1, 17, 0, 0.0),
    (8, 1, 32, 5, 9, 0, 0.0),
    (4, 2, 80, 6, 11, 4, 0.0),
    (4, 2, 64, 1, 20, 5, 50.0),
    (2, 1, 40, 3, 3, 0, 20.0),
    # >= 8 query tokens: the f16 cache is widened once per op (kernels_x86_ops.inc)
    (6, 2, 64, 12, 5, 0, 0.0),
    (4, 2, 128, 9, 3, 6, 0.0),
    (3, 1, 72, 10, 0, 0, 30.0),
    (2, 2, 36, 8, 1, 0, 0.0),
    # the avx512 query tiles (head_dim a multiple of 16, <= 128): tile widths 4 and 2
    (4, 1, 32, 11, 2, 0, 25.0),
    (2, 1, 80, 8, 0, 5, 0.0),
    (4, 4, 16, 13, 4, 0, 0.0),
    # decode over more than one tile of 64 keys: wgpu+rs splits the keys over workgroups
    # (attention.wgsl SPLIT/COMBINE): a ragged last tile, several tokens, softcap, a window
    # that starts mid-cache, head_dim 256
    (6, 2, 64, 1, 200, 0, 0.0),
    (4, 2, 128, 3, 150, 0, 30.0),
    (4, 1, 64, 2, 300, 100, 0.0),
    (2, 2, 256, 1, 129, 0, 0.0),
    # decode in one dispatch (attention.wgsl DEC, f16 cache): tiles of 256 keys (the running max
    # rescales the sums of the tiles before), softcap, a window (past 1024 keys: tests/test_wgpu.py)
    (4, 2, 128, 2, 700, 0, 30.0),
    (4, 2, 64, 3, 520, 300, 0.0),
    # prompts (attention.wgsl FLASH: blocks of 16 tokens over staged tiles of 16 keys): ragged
    # last blocks and tiles, softcap, a window starting inside a block, head_dim 32, 64, 96, 128,
    # 22 tiles of keys (the running max over many tiles)
    (4, 2, 128, 70, 30, 0, 0.0),
    (8, 2, 64, 40, 300, 0, 0.0),
    (6, 2, 64, 40, 0, 0, 30.0),
    (4, 1, 96, 67, 20, 24, 0.0),
    (2, 2, 32, 33, 5, 0, 0.0),
]


@pytest.mark.parametrize("case", ATT_CASES, ids=[str(c) for c in ATT_CASES])
@pytest.mark.parametrize("cache", ["f32", "f16"])
def test_attention(case, cache, backend, precise):
    nh, nkv, hd, T, pos0, window, softcap = case
    rng = np.random.default_rng(8)
    max_ctx = max(32, pos0 + T + 3)
    q = (rng.standard_normal((T, nh * hd)) * 2).astype(np.float32)
    dt = np.float32 if cache == "f32" else np.float16
    kc = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
    vc = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
    scale = 1.0 / math.sqrt(hd) * (8.0 if softcap else 1.0)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "window": window,
             "scale": scale, "softcap": softcap, "precise": precise}
    (y,) = run("attention", [q, kc, vc], attrs, backend=backend)
    ref = attention_ref(q, kc, vc, nh, nkv, hd, pos0, window, scale, softcap)
    # The cache values are the stored (possibly f16) ones: f32 math tolerance.
    err = rel_err(y, ref)
    tol = TOL_F32
    if backend == "wgpu+rs" and softcap > 0:
        # docs/runtime.md, `op-softcap-f32`: a device without f64 rounds the capped logits
        # cap * tanh(s / cap) in f32, an absolute error of a few ulp of cap (2^-24 * cap
        # each) that the softmax carries into the output, added to op-f32.
        tol = TOL_F32 + tolerance("op-softcap-f32") * softcap * 2.0 ** -24
    assert err <= tol


@pytest.mark.parametrize("cache", ["f32", "f16"])
@pytest.mark.parametrize("neox,rot", [(True, 64), (False, 32)])
@pytest.mark.parametrize("T,pos0", [(1, 0), (1, 13), (5, 7)])
def test_fused_rope_kv(cache, neox, rot, T, pos0, backend):
    """fused_rope_kv = rope(q), rope(k), kv_write(k'), kv_write(v): q' and k' against the rotation
    in f64 (our table; test_rope judges the table against transformers'), the caches exactly
    k' and v in the cache dtype at pos0.., every other cache row untouched."""
    rng = np.random.default_rng(12)
    nh, nkv, hd, max_ctx, max_pos = 4, 2, 64, 24, 40
    dt = np.float32 if cache == "f32" else np.float16
    q = rng.standard_normal((T, nh * hd)).astype(np.float32)
    k = rng.standard_normal((T, nkv * hd)).astype(np.float32)
    v = rng.standard_normal((T, nkv * hd)).astype(np.float32)
    kc0 = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
    vc0 = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0,
             "rope": {"rot_dims": rot, "neox": neox, "max_pos": max_pos, "theta": 10000.0}}
    qo, ko, kc, vc = run("fused_rope_kv", [q, k, v], attrs, [list(q.shape), list(k.shape), kc0, vc0],
                         backend=backend)
    cos, sin = _core.rope_table(rot, max_pos, 10000.0, {})
    assert rel_err(qo, rope_ref(q, cos, sin, nh, hd, rot, neox, pos0)) <= TOL_F32
    assert rel_err(ko, rope_ref(k, cos, sin, nkv, hd, rot, neox, pos0)) <= TOL_F32
    assert kc.dtype == dt and vc.dtype == dt
    k_rows = ko.reshape(T, nkv, hd).transpose(1, 0, 2).astype(dt)
    v_rows = v.reshape(T, nkv, hd).transpose(1, 0, 2).astype(dt)
    np.testing.assert_array_equal(kc[:, pos0:pos0 + T], k_rows)
    np.testing.assert_array_equal(vc[:, pos0:pos0 + T], v_rows)
    for got, init in ((kc, kc0), (vc, vc0)):
        np.testing.assert_array_equal(got[:, :pos0], init[:, :pos0])
        np.testing.assert_array_equal(got[:, pos0 + T:], init[:, pos0 + T:])


ROPE_ATT_CASES = [  # (n_heads, n_kv_heads, head_dim, rot_dims, neox, T, pos0, window, softcap)
    (4, 2, 64, 64, True, 1, 0, 0, 0.0),
    (6, 2, 64, 32, False, 1, 13, 0, 0.0),
    (4, 1, 128, 128, True, 1, 300, 0, 30.0),    # two tiles of 256 keys, softcap
    (4, 2, 64, 64, True, 1, 520, 200, 0.0),     # a window starting mid-cache
    (8, 8, 32, 16, False, 1, 40, 0, 0.0),       # no grouping, partial rotation
    (2, 1, 256, 256, True, 1, 7, 0, 0.0),
    # not DEC's one token on wgpu+rs: fused_rope_kv then attention (several tokens, head_dim 80,
    # more keys than DEC takes)
    (4, 2, 64, 64, True, 3, 9, 0, 0.0),
    (4, 2, 80, 80, False, 1, 5, 0, 0.0),
    (4, 2, 64, 64, True, 1, 1100, 0, 0.0),
]


# the q / k norms on a few shapes: one DEC token of each kind, several tokens, head_dim 80
ROPE_ATT_NORM_CASES = [(c, "") for c in ROPE_ATT_CASES] + [
    (c, n) for c in ROPE_ATT_CASES[:3] + ROPE_ATT_CASES[6:8] for n in ("qk", "qk+1")]


@pytest.mark.parametrize("case,norms", ROPE_ATT_NORM_CASES, ids=[f"{c}{n}" for c, n in ROPE_ATT_NORM_CASES])
@pytest.mark.parametrize("cache", ["f32", "f16"])
def test_fused_rope_attention(case, norms, cache, backend, precise):
    """fused_rope_attention = fused_rope_kv, then attention over the caches (wgpu+rs: one dispatch
    for one token, attention.wgsl DEC + ROPE, the new key and value taken from the workgroup for
    the token's own position): y within op-f32 of the backend's own two ops and of the f64
    reference over the rotated q and the caches; the new cache rows are rotated k and v in the cache
    dtype, every other row untouched; q and k are left as they were. norms: with the q and k head
    norms (Qwen3, Gemma 3; qk+1: Gemma's 1 + w), judged against the backend's rms_norm, then the two
    ops."""
    nh, nkv, hd, rot, neox, T, pos0, window, softcap = case
    rng = np.random.default_rng(14 + pos0)
    max_ctx, max_pos = pos0 + T + 5, pos0 + T + 9
    dt = np.float32 if cache == "f32" else np.float16
    q = (rng.standard_normal((T, nh * hd)) * 2).astype(np.float32)
    k = rng.standard_normal((T, nkv * hd)).astype(np.float32)
    # values of mean 0.5: over 1100 keys, zero-mean values sum to outputs ~30x smaller than the
    # terms, and the f32 sums' rounding (2e-6 of the largest output on the cpu levels) to that scale
    v = (rng.standard_normal((T, nkv * hd)) + 0.5).astype(np.float32)
    kc0 = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
    vc0 = (rng.standard_normal((nkv, max_ctx, hd)) + 0.5).astype(dt)
    q_in, k_in = q.copy(), k.copy()
    scale = 1.0 / math.sqrt(hd) * (8.0 if softcap else 1.0)
    rope = {"rot_dims": rot, "neox": neox, "max_pos": max_pos, "theta": 10000.0}
    heads = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "precise": precise}
    att = {"scale": scale, "softcap": softcap, "window": window}
    extra, qn, kn, norm_attrs = [], q, k, {}
    if norms:
        nattrs = {"eps": 1e-6, "plus_one": norms == "qk+1", "precise": precise}
        norm_attrs = {"eps": nattrs["eps"], "plus_one": nattrs["plus_one"]}
        extra = [rng.standard_normal(hd).astype(np.float32), rng.standard_normal(hd).astype(np.float32)]
        (qn,) = run("rms_norm", [q.reshape(-1, hd), extra[0]], nattrs, backend=backend)
        (kn,) = run("rms_norm", [k.reshape(-1, hd), extra[1]], nattrs, backend=backend)
        qn, kn = qn.reshape(q.shape), kn.reshape(k.shape)
    y, kc, vc = run("fused_rope_attention", [q, k, v] + extra, dict(heads, rope=rope, **att, **norm_attrs),
                    [list(q.shape), kc0, vc0], backend=backend)
    np.testing.assert_array_equal(q, q_in)
    np.testing.assert_array_equal(k, k_in)
    # the backend's own ops (rms_norm above, where the op has the norms)
    qo, _, kc1, vc1 = run("fused_rope_kv", [qn, kn, v], dict(heads, rope=rope),
                          [list(q.shape), list(k.shape), kc0, vc0], backend=backend)
    (y1,) = run("attention", [qo, kc1, vc1], dict(heads, **att), backend=backend)
    assert rel_err(y, y1) <= TOL_F32
    # the f64 reference (over the backend's rotated q, which test_fused_rope_kv judges: the f32
    # rotation's rounding is not the attention's)
    cos, sin = _core.rope_table(rot, max_pos, 10000.0, {})
    assert rel_err(qo, rope_ref(qn, cos, sin, nh, hd, rot, neox, pos0)) <= TOL_F32
    k_rows = rope_ref(kn, cos, sin, nkv, hd, rot, neox, pos0).reshape(T, nkv, hd).transpose(1, 0, 2)
    v_rows = v.reshape(T, nkv, hd).transpose(1, 0, 2)
    assert kc.dtype == dt and vc.dtype == dt
    tol_row = TOL_F32 if cache == "f32" else TOL_F16
    assert rel_err(kc[:, pos0:pos0 + T], k_rows.astype(dt)) <= tol_row
    np.testing.assert_array_equal(vc[:, pos0:pos0 + T], v_rows.astype(dt))
    for got, init in ((kc, kc0), (vc, vc0)):
        np.testing.assert_array_equal(got[:, :pos0], init[:, :pos0])
        np.testing.assert_array_equal(got[:, pos0 + T:], init[:, pos0 + T:])
    ref = attention_ref(qo, kc.astype(np.float64), vc.astype(np.float64), nh, nkv, hd, pos0, window, scale, softcap)
    tol = TOL_F32
    if backend == "wgpu+rs" and softcap > 0:  # as test_attention: `op-softcap-f32`
        tol = TOL_F32 + tolerance("op-softcap-f32") * softcap * 2.0 ** -24
    assert rel_err(y, ref) <= tol


def test_fused_rope_attention_takes_both_norms_or_none():
    z = np.zeros((1, 128), np.float32)
    attrs = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 64, "pos0": 0, "scale": 0.125,
             "rope": {"rot_dims": 64, "max_pos": 40, "theta": 10000.0}}
    kc = np.zeros((2, 8, 64), np.float32)
    with pytest.raises(Exception, match="both or none"):
        _core.run_op("fused_rope_attention", [z, z, z, np.ones(64, np.float32)], attrs, [[1, 128], kc, kc.copy()],
                     "auto", "cpu")


def test_fused_rope_kv_positions_past_the_cache_are_an_error():
    z = np.zeros((1, 128), np.float32)
    attrs = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 64, "pos0": 8,
             "rope": {"rot_dims": 64, "max_pos": 40, "theta": 10000.0}}
    kc = np.zeros((2, 8, 64), np.float32)
    with pytest.raises(Exception, match="exceed the KV cache"):
        _core.run_op("fused_rope_kv", [z, z, z], attrs, [[1, 128], [1, 128], kc, kc.copy()], "auto", "cpu")


@pytest.mark.parametrize("cache", ["f32", "f16"])
def test_kv_write_then_attention(cache, backend):
    """KvWrite into a cache then attention, judged against the unrounded keys/values."""
    rng = np.random.default_rng(9)
    nh, nkv, hd, max_ctx, T, pos0 = 4, 2, 64, 24, 5, 7
    dt = np.float32 if cache == "f32" else np.float16
    k_all = rng.standard_normal((pos0 + T, nkv * hd)).astype(np.float32)
    v_all = rng.standard_normal((pos0 + T, nkv * hd)).astype(np.float32)
    kc = np.zeros((nkv, max_ctx, hd), dtype=dt)
    vc = np.zeros((nkv, max_ctx, hd), dtype=dt)
    kv = {"n_kv_heads": nkv, "head_dim": hd}
    # prefix token by token, the rest in bulk
    for p in range(pos0):
        (kc,) = run("kv_write", [k_all[p:p + 1]], dict(kv, pos0=p), [kc], backend=backend)
        (vc,) = run("kv_write", [v_all[p:p + 1]], dict(kv, pos0=p), [vc], backend=backend)
    (kc,) = run("kv_write", [k_all[pos0:]], dict(kv, pos0=pos0), [kc], backend=backend)
    (vc,) = run("kv_write", [v_all[pos0:]], dict(kv, pos0=pos0), [vc], backend=backend)
    assert kc.dtype == dt
    k_exp = k_all.reshape(pos0 + T, nkv, hd).transpose(1, 0, 2)
    v_exp = v_all.reshape(pos0 + T, nkv, hd).transpose(1, 0, 2)
    # Stored values: exact (f32) or correctly rounded (f16).
    np.testing.assert_array_equal(kc[:, :pos0 + T], k_exp.astype(dt))
    np.testing.assert_array_equal(vc[:, :pos0 + T], v_exp.astype(dt))
    assert not np.any(kc[:, pos0 + T:])
    q = rng.standard_normal((T, nh * hd)).astype(np.float32)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "scale": hd ** -0.5}
    (y,) = run("attention", [q, kc, vc], attrs, backend=backend)
    full_k = np.zeros((nkv, max_ctx, hd))
    full_v = np.zeros((nkv, max_ctx, hd))
    full_k[:, :pos0 + T] = k_exp
    full_v[:, :pos0 + T] = v_exp
    ref = attention_ref(q, full_k, full_v, nh, nkv, hd, pos0, 0, hd ** -0.5, 0.0)
    assert rel_err(y, ref) <= (TOL_F32 if cache == "f32" else TOL_F16)


def test_attention_bad_shapes_are_errors():
    q = np.zeros((1, 128), dtype=np.float32)
    kc = np.zeros((2, 8, 64), dtype=np.float32)
    attrs = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 64, "pos0": 8, "scale": 0.1}
    with pytest.raises(Exception, match="exceed the KV cache"):
        run("attention", [q, kc, kc], attrs)
    with pytest.raises(Exception, match="not a multiple"):
        run("attention", [q, kc, kc], dict(attrs, pos0=0, n_kv_heads=3))


def encoder_attention_ref(q, k, v, mask, nh, nkv, hd, scale, window=0):
    """q [B,T,nh,hd], k/v [B,S,nkv,hd], mask [B,S]: every query t of b over the real keys s of b
    (with |t - s| <= window when window > 0)."""
    B, T, S = q.shape[0], q.shape[1], k.shape[1]
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    out = np.zeros((B, T, nh, hd))
    g = nh // nkv
    for b in range(B):
        for t in range(T):
            vis = np.asarray(mask[b]) != 0
            if window > 0:
                vis = vis & (np.abs(np.arange(S) - t) <= window)
            if not vis.any():
                continue
            for h in range(nh):
                kk, vv = k64[b, vis, h // g], v64[b, vis, h // g]
                s = kk @ q64[b, t, h] * scale
                e = np.exp(s - s.max())
                out[b, t, h] = (e / e.sum()) @ vv
    return out


ENC_ATT_CASES = [  # (B, T, S, n_heads, n_kv_heads, head_dim, window): S != T is cross-attention
    (1, 1, 1, 1, 1, 8, 0),
    (3, 7, 7, 4, 4, 16, 0),
    (2, 5, 9, 6, 2, 64, 0),
    (2, 12, 12, 2, 1, 80, 0),
    (4, 3, 17, 3, 3, 40, 0),
    (2, 11, 11, 2, 2, 36, 2),   # ModernBERT's local layers: |t - s| <= window
    (3, 20, 20, 4, 2, 16, 5),
    # one sequence, every key real, 16+ queries: the panel GEMMs of both modes (kernels_x86_ops.inc
    # encoder_attention_gemm); 300 queries take two blocks of rows
    (1, 40, 40, 3, 3, 32, 0),
    (1, 300, 24, 4, 2, 20, 0),
    # head_dim 32 / 64 (wgpu: encoder_attention_tiled.wgsl, 64 queries a workgroup, keys in tiles
    # of 32): several query blocks and key tiles, partial last ones, grouped heads, windows
    (3, 70, 70, 2, 2, 32, 0),
    (2, 33, 57, 4, 2, 64, 0),
    (4, 130, 40, 2, 1, 32, 9),
    (2, 64, 64, 3, 3, 64, 20),
]


@pytest.mark.parametrize("case", ENC_ATT_CASES, ids=[str(c) for c in ENC_ATT_CASES])
@pytest.mark.parametrize("mask_dtype", ["f32", "i32"])
def test_encoder_attention(case, mask_dtype, backend):
    B, T, S, nh, nkv, hd, window = case
    rng = np.random.default_rng(31)
    q = (rng.standard_normal((B, T, nh, hd)) * 2).astype(np.float32)
    k = rng.standard_normal((B, S, nkv, hd)).astype(np.float32)
    v = rng.standard_normal((B, S, nkv, hd)).astype(np.float32)
    # ragged real lengths: full, shorter, and (batch > 2) a sequence without any real key
    mask = np.zeros((B, S), np.float32 if mask_dtype == "f32" else np.int32)
    for b in range(B):
        n = [S, max(1, S // 2), 0, S - 1][b % 4]
        mask[b, :n] = 1
    if B > 1 and S > 2:
        mask[1, 0] = 0  # a hole that is not a suffix: the mask, not a length, decides
        mask[1, S - 1] = 1
    scale = 1.0 / math.sqrt(hd)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "scale": scale, "window": window}
    (y,) = run("encoder_attention", [q, k, v, mask], attrs, backend=backend)
    assert y.shape == q.shape
    ref = encoder_attention_ref(q, k, v, mask, nh, nkv, hd, scale, window)
    assert rel_err(y, ref) <= TOL_F32
    if mask.any() and not mask.all():  # the mask matters: an all-ones reference is far away
        unmasked = encoder_attention_ref(q, k, v, np.ones_like(mask), nh, nkv, hd, scale, window)
        assert rel_err(y, unmasked) > tolerance("op-ablation")
    if window:  # so does the window
        assert rel_err(y, encoder_attention_ref(q, k, v, mask, nh, nkv, hd, scale)) > tolerance("op-ablation")


def test_encoder_attention_bad_shapes_are_errors():
    q = np.zeros((2, 3, 2, 8), np.float32)
    k = np.zeros((2, 5, 2, 8), np.float32)
    attrs = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8, "scale": 0.3}
    with pytest.raises(Exception, match="shape mismatch"):  # key_mask of another length than k
        run("encoder_attention", [q, k, k, np.ones((2, 4), np.float32)], attrs)
    with pytest.raises(Exception, match="shape mismatch"):  # v unlike k
        run("encoder_attention", [q, k, k[:, :4], np.ones((2, 5), np.float32)], attrs)
    with pytest.raises(Exception, match="not a multiple"):
        run("encoder_attention", [q, k, k, np.ones((2, 5), np.float32)], dict(attrs, n_kv_heads=3))


def conv1d_ref(x, w, b, stride, pad, channels_first):
    """x [B, C, L] (channels_first) or [B, L, C], w [O, C, k]: out [B, L_out, O] in float64."""
    x64 = np.asarray(x, np.float64)
    if not channels_first:
        x64 = x64.transpose(0, 2, 1)
    B, C, L = x64.shape
    O, _, k = w.shape
    xp = np.pad(x64, ((0, 0), (0, 0), (pad, pad)))
    L_out = (L + 2 * pad - k) // stride + 1
    out = np.zeros((B, L_out, O))
    for t in range(L_out):
        win = xp[:, :, t * stride:t * stride + k]  # [B, C, k]
        out[:, t] = np.einsum("bcj,ocj->bo", win, np.asarray(w, np.float64))
    return out + (0.0 if b is None else np.asarray(b, np.float64))


CONV_CASES = [  # (B, C_in, L, C_out, k, stride, padding, channels_first, batched): Whisper's conv1 / conv2
    (1, 80, 60, 48, 3, 1, 1, True, False),
    (1, 48, 60, 48, 3, 2, 1, False, False),
    (2, 7, 19, 5, 3, 2, 1, True, True),
    (3, 5, 11, 9, 4, 3, 0, False, True),
    (1, 3, 2, 4, 3, 1, 1, True, False),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(c) for c in CONV_CASES])
@pytest.mark.parametrize("wdtype", ["f32", "f16"])
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d(case, wdtype, bias, backend):
    B, C, L, O, k, stride, pad, cf, batched = case
    rng = np.random.default_rng(41)
    x = rng.standard_normal((B, C, L) if cf else (B, L, C)).astype(np.float32)
    w = rng.standard_normal((O, C, k)).astype(np.float32)
    if wdtype == "f16":
        w = w.astype(np.float16)
    b = rng.standard_normal(O).astype(np.float32) if bias else None
    L_out = (L + 2 * pad - k) // stride + 1
    xin = x if batched else x[0]
    out_shape = [B, L_out, O] if batched else [L_out, O]
    attrs = {"stride": stride, "padding": pad, "channels_first": cf, "precise": True}
    (y,) = run("conv1d", [xin, w] + ([b] if bias else []), attrs, outputs=[out_shape], backend=backend)
    ref = conv1d_ref(x, w.astype(np.float32), b, stride, pad, cf)
    assert rel_err(np.asarray(y).reshape(ref.shape), ref) <= TOL_F32
    if pad:  # the padding matters: without it the taps shift
        assert rel_err(np.asarray(y).reshape(ref.shape)[:, 1:], ref[:, :-1]) > tolerance("op-ablation")


def test_conv1d_bad_shapes_are_errors():
    x = np.zeros((4, 10), np.float32)
    w = np.zeros((6, 4, 3), np.float32)
    attrs = {"stride": 1, "padding": 1, "channels_first": True}
    with pytest.raises(Exception, match="shape mismatch"):  # weight of another C_in
        run("conv1d", [x, np.zeros((6, 5, 3), np.float32)], attrs, outputs=[[10, 6]])
    with pytest.raises(Exception, match="shape mismatch"):  # output of the wrong length
        run("conv1d", [x, w], attrs, outputs=[[9, 6]])
    with pytest.raises(Exception, match="shape mismatch"):  # bias of another C_out
        run("conv1d", [x, w, np.zeros(5, np.float32)], attrs, outputs=[[10, 6]])
    with pytest.raises(Exception, match="stride"):
        run("conv1d", [x, w], dict(attrs, stride=0), outputs=[[10, 6]])
    with pytest.raises(Exception, match="shorter than the kernel"):
        run("conv1d", [np.zeros((4, 1), np.float32), w], dict(attrs, padding=0), outputs=[[1, 6]])


# ------------------------------------------------------------------ elementwise


def _erf(x):
    return np.vectorize(math.erf)(x)


def gelu_tanh64(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def silu64(x):
    return x * 0.5 * (1 + np.tanh(x / 2))  # x * sigmoid(x), without overflow


UNARY = {
    "silu": (silu64, {}),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), {}),
    "gelu_tanh": (gelu_tanh64, {}),
    "scale": (lambda x: x * np.float64(np.float32(0.37)), {"scale": 0.37}),
    "softcap": (lambda x: 30.0 * np.tanh(x / 30.0), {"softcap": 30.0}),
    "relu": (lambda x: np.maximum(x, 0.0), {}),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, backend):
    rng = np.random.default_rng(10)
    f, attrs = UNARY[name]
    for shape in ((1, 67), (5, 300)):
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        if name == "softcap":
            x *= 20
        (y,) = run(name, [x], attrs, backend=backend)
        assert rel_err(y, f(x.astype(np.float64))) <= TOL_F32, shape


@pytest.mark.parametrize("name", ["tanh", "softcap"])
def test_tanh_of_small_values_to_a_relative_error(name, backend):
    """tanh near 0 within `op-f32` of each value (not only of the largest): 1 - 2 / (exp(2x) + 1)
    alone, a difference of two numbers near 1, was 7% off at 1e-6, and a layer whose outputs are all
    small (a pooler's tanh) carried that as 1e-5 of its largest output; the SIMD tanh takes an odd
    polynomial below 0.55."""
    f, attrs = UNARY[name] if name in UNARY else (np.tanh, {})
    x = np.concatenate([np.geomspace(1e-7, 0.7, 3001), -np.geomspace(1e-7, 0.7, 3001)]).astype(np.float32)[None]
    if name == "softcap":
        x *= 30
    (y,) = run(name, [x], attrs, backend=backend)
    ref = f(x.astype(np.float64))
    assert float(np.max(np.abs(y - ref) / np.abs(ref))) <= TOL_F32


@pytest.mark.parametrize("op", ["softmax", "softmax_axis"])
def test_softmax_of_rows_at_the_lowest_float(op, backend):
    """A row whose every value is the lowest finite f32 (transformers' and DeBERTa's fill for masked
    scores: a padded row of attention is all of it) is uniform, as onnxruntime gives it; a row with one
    such value among others gives it 0. wgpu+rs started its running max at -3.4e38, above that value:
    exp underflowed to 0 everywhere, 0 / 0 = NaN, and the NaN spread through the next layers."""
    lo = np.finfo(np.float32).min
    x = np.array([[lo] * 8, [lo, 1.0, 2.0, 0.5, -1.0, 3.0, 0.0, 1.5]], np.float32)
    (y,) = run(op, [x], {"axis": -1} if op == "softmax_axis" else {}, backend=backend)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    assert np.isfinite(y).all() and rel_err(y, e / e.sum(-1, keepdims=True)) <= TOL_F32


def test_softmax(backend):
    rng = np.random.default_rng(11)
    for shape in ((1, 7), (4, 301)):
        x = (rng.standard_normal(shape) * 5).astype(np.float32)
        (y,) = run("softmax", [x], backend=backend)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        assert rel_err(y, e / e.sum(-1, keepdims=True)) <= TOL_F32


BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "swiglu": lambda g, u: silu64(g) * u,
    "geglu": lambda g, u: gelu_tanh64(g) * u,
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name, backend):
    rng = np.random.default_rng(12)
    for shape in ((1, 67), (5, 300)):
        a = (rng.standard_normal(shape) * 3).astype(np.float32)
        b = rng.standard_normal(shape).astype(np.float32)
        (y,) = run(name, [a, b], backend=backend)
        assert rel_err(y, BINARY[name](a.astype(np.float64), b.astype(np.float64))) <= TOL_F32


def test_geglu_erf(backend):
    rng = np.random.default_rng(13)
    g = (rng.standard_normal((3, 129)) * 3).astype(np.float32)
    u = rng.standard_normal((3, 129)).astype(np.float32)
    (y,) = run("geglu", [g, u], {"gelu_erf": True}, backend=backend)
    g64 = g.astype(np.float64)
    assert rel_err(y, 0.5 * g64 * (1 + _erf(g64 / math.sqrt(2))) * u) <= TOL_F32


@pytest.mark.parametrize("name", ["add", "mul"])
def test_row_broadcast(name, backend):
    rng = np.random.default_rng(14)
    a = rng.standard_normal((4, 33)).astype(np.float32)
    b = rng.standard_normal(33).astype(np.float32)
    (y,) = run(name, [a, b], backend=backend)
    assert rel_err(y, BINARY[name](a.astype(np.float64), b.astype(np.float64)[None, :])) <= TOL_F32


def test_copy_conversions(backend):
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((3, 77)) * 100).astype(np.float32)
    x[0, :6] = [65504.0, 65520.0, 1e-8, -3e-5, 6.1e-5, np.inf]
    # exact ties, which round to the even neighbour: f16 normals and subnormals, bf16
    x[1, :8] = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.0**-25, -3 * 2.0**-25, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
                -(2.0**-24 + 2.0**-25), 65504 + 16]
    (h,) = run("copy", [x], outputs=[(np.zeros(x.size * 2, np.uint8), "f16", x.shape)], backend=backend)
    with np.errstate(over="ignore"):  # 65520 -> inf on purpose
        np.testing.assert_array_equal(h.view(np.uint16), x.astype(np.float16).view(np.uint16))
    (back,) = run("copy", [h], outputs=[x.shape], backend=backend)
    np.testing.assert_array_equal(back, h.astype(np.float32))
    (bf,) = run("copy", [x], outputs=[(np.zeros(x.size * 2, np.uint8), "bf16", x.shape)], backend=backend)
    u = x.view(np.uint32).astype(np.uint64)
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bf, rne)


# ------------------------------------------------------------------ fused ops


@pytest.mark.parametrize("plus_one", [False, True])
def test_fused_skip_norm(plus_one, backend):
    rng = np.random.default_rng(16)
    for T, D in ((1, 67), (4, 256)):
        x = rng.standard_normal((T, D)).astype(np.float32)
        r = rng.standard_normal((T, D)).astype(np.float32)
        w = rng.standard_normal(D).astype(np.float32)
        attrs = {"eps": 1e-6, "plus_one": plus_one}
        y, s = run("fused_skip_norm", [x, r, w], attrs, backend=backend)
        s64 = (x + r).astype(np.float64)
        ref = s64 / np.sqrt(np.mean(s64 ** 2, -1, keepdims=True) + 1e-6) * ((1 + w) if plus_one else w)
        assert rel_err(s, x.astype(np.float64) + r) <= TOL_F32
        assert rel_err(y, ref) <= TOL_F32
        (s_u,) = run("add", [x, r], backend=backend)
        (y_u,) = run("rms_norm", [s_u, w], attrs, backend=backend)
        assert rel_err(y, y_u) <= TOL_FUSED


@pytest.mark.parametrize("enc", ["f32", "f16", "q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q6_k", "q3_k"])
def test_fused_norm_matmul(enc, backend, precise):
    rng = np.random.default_rng(17)
    k = row_lengths(enc)[0]
    w, deq = random_weight(enc, 19, k, rng)
    wn = rng.standard_normal(k).astype(np.float32)
    bias = rng.standard_normal(19).astype(np.float32)
    for T in (1, 4, 40):  # 40: wgpu+rs normalizes the rows, then the tiled GEMM
        x = rng.standard_normal((T, k)).astype(np.float32)
        x64 = x.astype(np.float64)
        xn = x64 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + 1e-5) * wn
        attrs = {"eps": 1e-5, "precise": precise}
        (y,) = run("fused_norm_matmul", [x, wn, w, bias], attrs, backend=backend)
        (n_u,) = run("rms_norm", [x, wn], attrs, backend=backend)
        bs = 0 if precise or cpu_level(backend) is None else activation_block(cpu_level(backend), enc)
        if bs:
            xn = q16_activations(n_u, bs)  # the normalized row, as the kernel quantized it
        if wgpu_f16_gemm(backend, precise, enc, T) or wgpu_sm_f16_gemm(backend, precise, T):
            assert_mm(y, n_u, deq, enc, backend, precise, add=bias, what=T)  # its f16 GEMM's bound
        else:
            assert rel_err(y, xn @ deq.T + bias) <= TOL_F32, T
        (y_u,) = run("matmul", [n_u, w, bias], {"precise": precise}, backend=backend)
        assert rel_err(y, y_u) <= TOL_FUSED


@pytest.mark.parametrize("encs", [("q4_k", "q4_k", "q6_k"), ("q8_0", "q5_0", "q4_1"), ("f16", "f32", "bf16"),
                                  ("q4_k", "q3_k", "q8_0")])
@pytest.mark.parametrize("T", [1, 3, 6, 40])
def test_fused_norm_qkv_and_swiglu(encs, T, backend, precise):
    """fused_norm_qkv / fused_norm_swiglu = rms_norm, then fused_qkv / fused_swiglu (wgpu+rs: the norm
    folded into the matrix-vector kernel for few tokens, matvec.wgsl NORM; for 32+ tokens or a
    row-kernel encoding (q3_k) the rows normalized first): within `fused-f32` of the backend's own
    rms_norm -> product, and that product's rows against the f64 reference, with and without the
    biases, with and without plus_one (Gemma's 1 + w)."""
    rng = np.random.default_rng(61 + T)
    k = 256
    x = (rng.standard_normal((T, k)) * 3).astype(np.float32)
    nw = rng.standard_normal(k).astype(np.float32)
    ws = [random_weight(e, n, k, rng) for e, n in zip(encs, (160, 64, 64))]
    wu, du = random_weight(encs[0], 160, k, rng)
    bs = [rng.standard_normal(n).astype(np.float32) for n in (160, 64, 64)]
    shapes = [[T, 160], [T, 64], [T, 64]]
    mm = {"precise": precise}
    for plus_one in (False, True):
        attrs = {"eps": 1e-5, "plus_one": plus_one, "precise": precise}
        (xn,) = run("rms_norm", [x, nw], attrs, backend=backend)
        for biases in ([], bs):
            got = run("fused_norm_qkv", [x, nw] + [w for w, _ in ws] + biases, attrs, shapes, backend=backend)
            want = run("fused_qkv", [xn] + [w for w, _ in ws] + biases, mm, shapes, backend=backend)
            for i, (g, wt, (w, deq), e) in enumerate(zip(got, want, ws, encs)):
                assert rel_err(g, wt) <= TOL_FUSED, (encs, i)
                assert_mm(g, xn, deq, e, backend, precise, add=biases[i] if biases else 0.0, what=(encs, i))
        (y,) = run("fused_norm_swiglu", [x, nw, ws[0][0], wu], attrs, backend=backend)
        (y_u,) = run("fused_swiglu", [xn, ws[0][0], wu], mm, backend=backend)
        assert rel_err(y, y_u) <= TOL_FUSED
        assert_swiglu(y, xn, ws[0][1], du, encs[0], backend, precise, what=encs)


def test_fused_norm_qkv_takes_all_biases_or_none():
    w = np.zeros((8, 32), np.float32)
    x, nw = np.zeros((1, 32), np.float32), np.ones(32, np.float32)
    with pytest.raises(Exception, match="all three biases or none"):
        _core.run_op("fused_norm_qkv", [x, nw, w, w, w, np.zeros(8, np.float32)], {"eps": 1e-5}, [[1, 8]] * 3,
                     "auto", "cpu")


@pytest.mark.parametrize("enc", ["f32", "bf16", "q4_1", "q5_1", "iq4_nl", "q4_k", "q5_k", "q2_k"])
def test_fused_swiglu(enc, backend, precise):
    rng = np.random.default_rng(18)
    k = row_lengths(enc)[0]
    wg, dg = random_weight(enc, 21, k, rng)
    wu, du = random_weight(enc, 21, k, rng)
    for T in (1, 3, 40):  # 40: the wgpu row kernel over several token groups
        x = rng.standard_normal((T, k)).astype(np.float32)
        (y,) = run("fused_swiglu", [x, wg, wu], {"precise": precise}, backend=backend)
        assert_swiglu(y, x, dg, du, enc, backend, precise, what=T)
        (g,) = run("matmul", [x, wg], {"precise": precise}, backend=backend)
        (u,) = run("matmul", [x, wu], {"precise": precise}, backend=backend)
        (y_u,) = run("swiglu", [g, u], backend=backend)
        assert rel_err(y, y_u) <= TOL_FUSED


@pytest.mark.parametrize("enc", ["f32", "f16", "bf16", "q8_0", "q4_k"])
def test_fused_matmul_epilogues(enc, backend, precise):
    """fused_matmul_gelu (erf and tanh) and fused_matmul_add, with and without bias, against the
    f64 reference and against the unfused matmul + gelu / add. T = 40, N = 37: on the amx
    level's bf16 split GEMM a full block (32 x 32, stored straight into y, its epilogue run
    there) and ragged ones at both edges."""
    rng = np.random.default_rng(29)
    k = row_lengths(enc)[0]
    w, deq = random_weight(enc, 37, k, rng)
    for T in (1, 40):
        x = rng.standard_normal((T, k)).astype(np.float32)
        bias = rng.standard_normal(37).astype(np.float32)
        res = rng.standard_normal((T, 37)).astype(np.float32)
        mm = mm_ref(x, deq, enc, backend, precise)
        # within: the f64 reference of y = f(mm + add), f of slope <= slope; for the f16 GEMM each
        # output within its bound (assert_mm), the matmul's bound times the slope
        if wgpu_f16_gemm(backend, precise, enc, T):
            mm, bound = f16_gemm_ref(x, deq)

            def within(y, f, add, slope, what):
                assert_within(y, f(mm + add), slope * bound, what)
        else:
            def within(y, f, add, slope, what):
                assert rel_err(y, f(mm + add)) <= TOL_F32, what
        attrs = {"precise": precise}
        for erf, f in ((True, UNARY["gelu"][0]), (False, gelu_tanh64)):
            (y,) = run("fused_matmul_gelu", [x, w, bias], dict(attrs, gelu_erf=erf), backend=backend)
            within(y, f, bias, GELU_SLOPE, (T, erf))
            (m,) = run("matmul", [x, w, bias], attrs, backend=backend)
            (u,) = run("gelu" if erf else "gelu_tanh", [m], backend=backend)
            assert rel_err(y, u) <= TOL_FUSED, (T, erf)
        (y,) = run("fused_matmul_gelu", [x, w], dict(attrs, gelu_erf=True), backend=backend)
        within(y, UNARY["gelu"][0], 0.0, GELU_SLOPE, T)
        (y,) = run("fused_matmul_add", [x, w, res, bias], attrs, backend=backend)
        within(y, lambda v: v, bias + res, 1.0, T)
        (y,) = run("fused_matmul_add", [x, w, res], attrs, backend=backend)
        within(y, lambda v: v, res, 1.0, T)


def test_fused_matmul_add_residual_shape():
    x = np.zeros((3, 32), np.float32)
    w = np.zeros((5, 32), np.float32)
    from cyb_llm.errors import ShapeMismatch
    with pytest.raises(ShapeMismatch, match="residual"):
        _core.run_op("fused_matmul_add", [x, w, np.zeros((3, 4), np.float32)], {}, None, "auto", "cpu")


@pytest.mark.parametrize("enc", ["q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q6_k"])
def test_fused_swiglu_many_rows(enc, backend, precise):
    """Gate and up rows spread over several work items (one decode step shares one
    parallel region between the two matrices)."""
    rng = np.random.default_rng(19)
    k = 512
    wg, dg = random_weight(enc, 301, k, rng)
    wu, du = random_weight(enc, 301, k, rng)
    for T in (1, 2, 9, 70):
        x = rng.standard_normal((T, k)).astype(np.float32)
        (y,) = run("fused_swiglu", [x, wg, wu], {"precise": precise}, backend=backend)
        assert_swiglu(y, x, dg, du, enc, backend, precise, what=T)


# ------------------------------------------------------------------ errors and levels


def test_bad_inputs_are_structured_errors():
    x = np.zeros((2, 64), dtype=np.float32)
    w = np.zeros((3, 65), dtype=np.float32)
    with pytest.raises(Exception, match="shape mismatch"):
        run("matmul", [x, w])
    q = (np.zeros(18 * 3, np.uint8), "q4_0", (3, 32))
    with pytest.raises(Exception, match="shape mismatch"):
        run("matmul", [x, q])
    with pytest.raises(Exception, match="outside the vocabulary"):
        run("embedding", [np.array([5], np.int32), np.zeros((4, 8), np.float32)])
    with pytest.raises(Exception, match="not supported"):
        run("no_such_op", [x])
    with pytest.raises(Exception, match="expected 36 bytes"):
        run("matmul", [np.zeros((1, 32), np.float32), (np.zeros(35, np.uint8), "q4_0", (2, 32))])


def test_levels_and_selection():
    assert LEVELS[0] == "scalar"
    before = _core.cpu_level()
    try:
        for lvl in LEVELS:
            _core.set_cpu_level(lvl)
            assert _core.cpu_level() == lvl
        _core.set_cpu_level("auto")
        assert _core.cpu_level() == LEVELS[-1]
        with pytest.raises(Exception, match="cpu_level|CPU level"):
            _core.set_cpu_level("sse9")
    finally:
        _core.set_cpu_level(before)
