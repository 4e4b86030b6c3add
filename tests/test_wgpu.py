"""The wgpu+rs backend beyond single ops: adapter facts, the fallback to the
cpu, and whole forwards of the tiny random families (precise logits within the
cross-path tolerance, identical greedy tokens). The per-op matrix (every op, every
weight encoding) is tests/test_ops.py, whose one case list runs on every
backend, wgpu+rs included. Runs on any adapter, software ones included
(lavapipe in CI); skips, saying why, only when no adapter exists.

Tolerances: docs/runtime.md, "Tolerances", read through tests/tolerances.py.
Every whole forward asserts from `model.dispatch_records` that all its ops ran
on wgpu+rs (tests/placement.py): a model that silently fell back to the CPU
would otherwise compare the CPU with itself and pass.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from cyb_llm import _core
from cyb_llm.errors import BackendInit

import test_ops as T
from placement import assert_ran_on
from tolerances import tolerance

try:
    INFO = _core.wgpu_info(True)
except BackendInit as e:  # no library or no adapter: say so
    INFO = None
    REASON = f"no wgpu+rs adapter: {e}"
if INFO is None:
    print(REASON)
    pytestmark = pytest.mark.skip(reason=REASON)

TOL_F32 = tolerance("op-f32")


def test_adapter_reported():
    assert INFO["adapter"] and INFO["backend_type"]
    assert INFO["max_storage_binding"] > 0
    print("wgpu+rs adapter:", INFO)


def test_unsupported_op_falls_back_to_cpu_and_says_so():
    """conv1d over more output rows than one dispatch's grid holds (65535) runs on the cpu, and says so."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 70000)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3)).astype(np.float16)
    attrs = {"stride": 1, "padding": 1, "channels_first": True, "precise": True}
    (y,) = _core.run_op("conv1d", [x, w], attrs, [[70000, 3]], "auto", "wgpu+rs")
    assert _core.last_run_op_backend() == "cpu (fallback)"
    (ref,) = _core.run_op("conv1d", [x, w], attrs, [[70000, 3]], "scalar")
    assert T.rel_err(y, ref) <= TOL_F32


@pytest.mark.parametrize("n", [1, 3, 33, 64])
def test_odd_sized_f16_outputs_arrive_intact(n):
    """An f16 tensor of an odd number of values ends inside a 4-byte word (the device copies
    whole words; copy.wgsl keeps the other half of the last word) and must arrive intact."""
    x = np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)
    (y,) = _core.run_op("copy", [x], {}, [np.zeros((1, n), np.float16)], "auto", "wgpu+rs")
    assert _core.last_run_op_backend() == "wgpu+rs"
    np.testing.assert_array_equal(y, x.astype(np.float16))


# ------------------------------------------------------------ whole forwards

CROSS_TOL = tolerance("cross-path")


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
    assert_ran_on(gpu, "wgpu+rs", family)
    assert_ran_on(cpu, "cpu", family)


def test_fast_mode_wgpu_close_to_precise(tiny_model):
    import cyb_llm

    family, path = tiny_model
    ids = np.random.default_rng(3).integers(0, 512, size=20).tolist()
    gpu = cyb_llm.load(path, backend="wgpu+rs")
    a = gpu.new_conversation(64).forward(ids, all_logits=True)
    b = cyb_llm.load(path, backend="cpu", precise=True).new_conversation(64).forward(ids, all_logits=True)
    assert T.rel_err(a, b) <= tolerance("fast-vs-precise/tiny-decoders"), family
    assert_ran_on(gpu, "wgpu+rs", family)


def test_long_prompt_runs_in_chunks_of_512_on_wgpu(tmp_path_factory):
    """wgpu+rs runs a long forward in chunks of 512 tokens (cpu: 256): a 600-token prompt is one
    chunk of 512 and one of 88 there (the progress hook runs once, after 512), and its logits at
    every position match the cpu's, which ran it as 256 + 256 + 88."""
    import cyb_llm
    import test_families_tiny as F

    _, path = F._build("llama", tmp_path_factory, max_position_embeddings=1024)
    cpu = cyb_llm.load(path, backend="cpu", precise=True)
    gpu = cyb_llm.load(path, backend="wgpu+rs", precise=True)
    assert (cpu.forward_chunk_tokens, gpu.forward_chunk_tokens) == (_core.forward_chunk_tokens(), 512)
    assert _core.forward_chunk_tokens() == 256
    ids = np.random.default_rng(5).integers(0, F.VOCAB, size=600).tolist()
    calls = []
    _core._set_forward_chunk_hook(lambda done, total: calls.append((done, total)))
    try:
        b = gpu.new_conversation(640).forward(ids, all_logits=True)
        gpu_calls, calls[:] = list(calls), []
        a = cpu.new_conversation(640).forward(ids, all_logits=True)
    finally:
        _core._set_forward_chunk_hook(None)
    assert gpu_calls == [(512, 600)], gpu_calls
    assert calls == [(256, 600), (512, 600)], calls
    assert T.rel_err(b, a) <= CROSS_TOL
    assert_ran_on(gpu, "wgpu+rs", "llama")


def test_memory_counter_follows_buffers(tmp_path_factory):
    """`_core.wgpu_memory()` counts the device buffers a model holds: loading and running one
    adds at least its weight bytes, the peak is at least the live bytes, and dropping the model
    (and its conversation) gives every byte back."""
    import gc

    import cyb_llm
    import test_families_tiny as F
    from cyb_llm.format import ModelFile

    _, path = F._build("llama", tmp_path_factory)
    weights = sum(t.size for t in ModelFile(path).tensors.values())
    gc.collect()
    base = _core.wgpu_memory(reset_peak=True)["live_bytes"]
    m = cyb_llm.load(path, backend="wgpu+rs", precise=True)
    c = m.new_conversation(64)
    c.forward(list(range(16)))
    mem = _core.wgpu_memory()
    assert mem["live_bytes"] - base >= weights, (mem, base, weights)
    assert mem["peak_bytes"] >= mem["live_bytes"]
    del c, m
    gc.collect()
    assert _core.wgpu_memory()["live_bytes"] == base


def test_prompt_frames_do_not_grow_with_layers(tmp_path_factory):
    """A forward's activation frames are taken once and reused by every layer (dispatch/backend.h):
    the device bytes a 48-token prompt adds over the loaded model and its cache are the same for a
    2-layer and an 8-layer model of the same widths (frames per layer made them grow 4x)."""
    import gc

    import cyb_llm
    import test_families_tiny as F

    added = {}
    for layers in (2, 8):
        _, path = F._build("llama", tmp_path_factory, num_hidden_layers=layers)
        gc.collect()
        m = cyb_llm.load(path, backend="wgpu+rs")
        c = m.new_conversation(64)
        c.forward([1])  # weights uploaded, cache made
        live = _core.wgpu_memory(reset_peak=True)["live_bytes"]
        c.forward(list(range(2, 50)))
        added[layers] = _core.wgpu_memory()["peak_bytes"] - live
        del c, m
        gc.collect()
    assert added[8] <= tolerance("wgpu-memory-layers") * added[2], added


# ------------------------------------------------------------ settings read once per process

def run_with_setting(name, value, code, timeout=300):
    """Runs `code` in a fresh interpreter (the settings are read once per process) with the
    environment variable `name` set to `value`; TESTS in the code is this folder."""
    import os
    import subprocess
    import sys

    code = f"TESTS = {os.path.dirname(os.path.abspath(__file__))!r}\n" + code
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **{name: value}),
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------ matvec variants

@pytest.mark.parametrize("tuning", ["tpr=8", "tpr=16,unroll=1", "tpr=8,unroll=1", "tpr=64", "tpr=128", "tpr=fill", "ks=1", "ks=all,rows=1"])
def test_matvec_variants_through_the_tuning_override(tuning):
    """The matrix-vector kernel's other variants (fewer lanes a row: subgroup shuffles where the
    adapter's subgroups hold a row, as lavapipe's 8 do; two chunks a step) through
    CYB_WGPU_MATVEC (read once per process: a subprocess), against the f64 product."""
    code = r"""
import numpy as np, sys
sys.path.insert(0, TESTS)
import test_ops as T
from cyb_llm import _core
rng = np.random.default_rng(17)
worst = 0.0
for enc in ("q4_k", "q6_k", "q8_0", "q5_0", "f16"):
    for n, k in SHAPES:
        w, deq = T.random_weight(enc, n, k, rng)
        wu, du = T.random_weight(enc, n, k, rng)
        for t in (1, 3, 5):
            x = rng.standard_normal((t, k)).astype(np.float32)
            (y,) = _core.run_op("matmul", [x, w], {"precise": True}, None, "scalar", "wgpu+rs")
            assert _core.last_run_op_backend() == "wgpu+rs"
            worst = max(worst, T.rel_err(y, x.astype(np.float64) @ deq.T))
            # fused_qkv: one dispatch over three weights (the matvec kernel's QKV variant)
            ys = _core.run_op("fused_qkv", [x, w, wu, w], {"precise": True}, [[t, n]] * 3, "scalar", "wgpu+rs")
            assert _core.last_run_op_backend() == "wgpu+rs"
            for yq, d in zip(ys, (deq, du, deq)):
                worst = max(worst, T.rel_err(yq, x.astype(np.float64) @ d.T))
            (g,) = _core.run_op("fused_swiglu", [x, w, wu], {"precise": True}, None, "scalar", "wgpu+rs")
            a, b = x.astype(np.float64) @ deq.T, x.astype(np.float64) @ du.T
            worst = max(worst, T.rel_err(g, a / (1 + np.exp(-a)) * b))
print(worst)
"""
    # a few long rows: where tpr=fill takes 64 lanes (the two-chunk variant measures 1.2-1.6e-6 there
    # against the f64 product, over the op tolerance: it is not the default, docs/gpu-bench.md)
    shapes = [(61, 256), (33, 1536)] + ([] if "unroll=1" in tuning else [(5, 2048)])
    r = run_with_setting("CYB_WGPU_MATVEC", tuning, f"SHAPES = {shapes!r}\n" + code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.strip().splitlines()[-1]) <= TOL_F32


@pytest.mark.parametrize("name,value,tokens", [("CYB_WGPU_MATVEC", "tpr=7", 1), ("CYB_WGPU_SPLITK", "-3", 64),
                                                ("CYB_WGPU_SHADER_CHECKS", "maybe", 1),
                                                ("CYB_WGPU_REPEAT", "matvec:0", 1), ("CYB_WGPU_REPEAT", "matvec", 1),
                                                ("CYB_WGPU_GEMM", "h16=2", 64), ("CYB_WGPU_TILE", "96", 64),
                                                ("CYB_WGPU_TILE", "big", 64), ("CYB_WGPU_SUBMIT", "-1", 64),
                                                ("CYB_WGPU_SUBMIT_MAX", "0", 64)])
def test_settings_reject_unknown_values(name, value, tokens):
    """A bad tuning setting is an error naming the variable and the value, at the first product."""
    code = (f"import numpy as np\nfrom cyb_llm import _core\nx = np.ones(({tokens}, 64), np.float32)\n"
            "_core.run_op('matmul', [x, x], {}, None, 'scalar', 'wgpu+rs')\n")
    r = run_with_setting(name, value, code, timeout=120)
    assert r.returncode != 0 and name in r.stderr and value in r.stderr


def op_cases_with_setting(name, value, selection):
    """tests/test_ops.py's cases chosen by `selection` (pytest -k) in a fresh process with the
    environment variable `name` set to `value` (settings are read once per process): all pass."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(here, "test_ops.py"), "-k", selection],
                       env=dict(os.environ, **{name: value}), capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize("flash", ["0", "1", "on"])
def test_prompt_attention_setting(flash):
    """CYB_WGPU_FLASH (read once per process: a subprocess): 0 keeps one workgroup per (head, token)
    for prompts, 1 (the default) the blocks of 16 tokens (attention.wgsl FLASH): both against the
    f64 reference on a 70-token prompt over an f16 cache; another value is an error naming it."""
    code = r"""
import math, sys
import numpy as np
sys.path.insert(0, TESTS)
import test_ops as T
from cyb_llm import _core
rng = np.random.default_rng(31)
nh, nkv, hd, t, pos0 = 4, 2, 128, 70, 30
q = rng.standard_normal((t, nh * hd)).astype(np.float32)
kc = rng.standard_normal((nkv, 128, hd)).astype(np.float16)
vc = rng.standard_normal((nkv, 128, hd)).astype(np.float16)
attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "window": 0,
         "scale": 1.0 / math.sqrt(hd), "softcap": 0.0, "precise": True}
(y,) = _core.run_op("attention", [q, kc, vc], attrs, None, "scalar", "wgpu+rs")
assert _core.last_run_op_backend() == "wgpu+rs"
ref = np.zeros((t, nh * hd))
for i in range(t):
    for h in range(nh):
        k = kc[h // 2, :pos0 + i + 1].astype(np.float64)
        s = k @ q[i, h * hd:(h + 1) * hd].astype(np.float64) / math.sqrt(hd)
        e = np.exp(s - s.max())
        ref[i, h * hd:(h + 1) * hd] = e @ vc[h // 2, :pos0 + i + 1].astype(np.float64) / e.sum()
print(T.rel_err(y, ref))
"""
    r = run_with_setting("CYB_WGPU_FLASH", flash, code)
    if flash == "on":
        assert r.returncode != 0 and "CYB_WGPU_FLASH" in r.stderr and "'on'" in r.stderr
        return
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.strip().splitlines()[-1]) <= TOL_F32


def test_repeat_setting_repeats_idempotent_kernels_only():
    """CYB_WGPU_REPEAT (bench/gpu_kernel_cost.py) records a matching dispatch n times: a product,
    which does not read what it writes, gives the same values; a rope, which rotates in place,
    is refused with an error naming the setting."""
    code = r"""
import numpy as np
from cyb_llm import _core
rng = np.random.default_rng(3)
x = rng.standard_normal((1, 64)).astype(np.float32)
w = rng.standard_normal((48, 64)).astype(np.float32)
(y,) = _core.run_op('matmul', [x, w], {'precise': True}, None, 'scalar', 'wgpu+rs')
assert np.abs(y - x.astype(np.float64) @ w.T.astype(np.float64)).max() < 1e-4, y
q = rng.standard_normal((1, 128)).astype(np.float32)
attrs = {'n_heads': 2, 'head_dim': 64, 'pos0': 3, 'rope': {'rot_dims': 64, 'max_pos': 40, 'theta': 10000.0}}
try:
    _core.run_op('rope', [q], attrs, None, 'scalar', 'wgpu+rs')
except Exception as e:
    print('REFUSED', e)
"""
    r = run_with_setting("CYB_WGPU_REPEAT", "matvec:3", code, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_with_setting("CYB_WGPU_REPEAT", "rope:2", code, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED" in r.stdout and "CYB_WGPU_REPEAT" in r.stdout


# ------------------------------------------------------------ decode attention kernels

def _long_decode_case():
    """One token at position 1100 over an f16 cache (1101 keys), with its f64 reference."""
    import math

    nh, nkv, hd, pos0 = 4, 1, 64, 1100
    rng = np.random.default_rng(8)
    q = (rng.standard_normal((1, nh * hd)) * 2).astype(np.float32)
    kc = rng.standard_normal((nkv, pos0 + 4, hd)).astype(np.float16)
    vc = rng.standard_normal((nkv, pos0 + 4, hd)).astype(np.float16)
    attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "window": 0,
             "scale": 1.0 / math.sqrt(hd), "softcap": 0.0, "precise": True}
    return q, kc, vc, attrs, T.attention_ref(q, kc, vc, nh, nkv, hd, pos0, 0, attrs["scale"], 0.0)


def test_attention_split_setting(monkeypatch):
    """CYB_WGPU_ATTN=split (read at each call) sends few-token attention over f16 and f32 caches
    to the kernels before the one-dispatch decode kernel (attention.wgsl SPLIT/COMBINE past 64
    keys, else one workgroup per head and token); the decode cases of the op matrix against the
    f64 reference; a bad value is an error naming the setting."""
    import math

    monkeypatch.setenv("CYB_WGPU_ATTN", "split")
    for case, dt in itertools.product(T.ATT_CASES, (np.float16, np.float32)):
        nh, nkv, hd, t, pos0, window, softcap = case
        if t > 3 or softcap:
            continue
        rng = np.random.default_rng(8)
        max_ctx = max(32, pos0 + t + 3)
        q = (rng.standard_normal((t, nh * hd)) * 2).astype(np.float32)
        kc = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
        vc = rng.standard_normal((nkv, max_ctx, hd)).astype(dt)
        scale = 1.0 / math.sqrt(hd)
        attrs = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd, "pos0": pos0, "window": window,
                 "scale": scale, "softcap": 0.0, "precise": True}
        (y,) = _core.run_op("attention", [q, kc, vc], attrs, None, "scalar", "wgpu+rs")
        assert _core.last_run_op_backend() == "wgpu+rs"
        ref = T.attention_ref(q, kc, vc, nh, nkv, hd, pos0, window, scale, 0.0)
        assert T.rel_err(y, ref) <= TOL_F32, case
    monkeypatch.delenv("CYB_WGPU_ATTN")
    # past kDecAttentionMaxKeys (1024) keys a decode token takes the split kernels by default
    q, kc, vc, attrs, ref = _long_decode_case()
    (y,) = _core.run_op("attention", [q, kc, vc], attrs, None, "scalar", "wgpu+rs")
    assert T.rel_err(y, ref) <= TOL_F32
    monkeypatch.setenv("CYB_WGPU_ATTN", "fast")
    with pytest.raises(Exception, match="CYB_WGPU_ATTN"):
        _core.run_op("attention", [q, kc, vc], attrs, None, "scalar", "wgpu+rs")


# ------------------------------------------------------------ early submits

def test_forwards_submitted_in_chunks_give_the_same_results(tmp_path_factory):
    """CYB_WGPU_SUBMIT (read once per process: a subprocess) submits a forward's recording in chunks
    (the first after N dispatches, each later one after twice as many) so the GPU starts while the
    host records the rest: the same work in the same order, so the prompt's and the decode steps'
    logits and the overlapped generation loop's tokens are bit-identical with one submit a forward
    (0), the default, a first chunk of 3 dispatches and that with chunks capped at 4
    (CYB_WGPU_SUBMIT_MAX), and the host times count the early submits (none at 0, at least one a
    forward at 3, more with the cap)."""
    import test_families_tiny as F

    _, path = F._build("llama", tmp_path_factory)
    code = f"PATH = {path!r}\n" + r"""
import hashlib, json, numpy as np, cyb_llm
from cyb_llm import _core
m = cyb_llm.load(PATH, backend="wgpu+rs")
ids = np.random.default_rng(9).integers(0, 512, size=20).tolist()
_core.wgpu_take_host_times()
c = m.new_conversation(64)
h = hashlib.sha256(np.ascontiguousarray(c.forward(ids, all_logits=True)).tobytes())
tok = ids[-1]
for _ in range(5):
    lg = c.forward([tok])
    h.update(np.ascontiguousarray(lg).tobytes())
    tok = int(np.argmax(lg))
t = _core.wgpu_take_host_times()
from cyb_llm.text.generate import Generator
from cyb_llm.text.sampling import SamplingParams
s = Generator(m).generate(" ".join(f"t{i}" for i in ids[:6]), max_tokens=12, sampling=SamplingParams.greedy())
toks = [ch.token for ch in s if ch.token is not None]
print(json.dumps({"hash": h.hexdigest(), "toks": toks, "chunks": t["chunks"], "forwards": t["forwards"],
                  "on": s.stats.sampled_on}))
"""
    import json
    out = {}
    for value in ("0", "3", "3:4", None):
        first, _, cap = (value or "").partition(":")
        pre = "import os\n" + ("os.environ.pop('CYB_WGPU_SUBMIT', None)\n" if value is None else "") + \
            (f"os.environ['CYB_WGPU_SUBMIT_MAX'] = {cap!r}\n" if cap else "")
        r = run_with_setting("CYB_WGPU_SUBMIT", first, pre + code)
        assert r.returncode == 0, r.stderr[-2000:]
        out[value] = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["0"]["chunks"] == 0 and out["3"]["chunks"] >= out["3"]["forwards"] == 6, out
    assert out["3:4"]["chunks"] > out["3"]["chunks"], out  # the cap makes more, smaller chunks
    assert len(out["0"]["toks"]) == 12 and out["0"]["on"] == "device"
    for value in ("3", "3:4", None):
        assert out[value]["hash"] == out["0"]["hash"] and out[value]["toks"] == out["0"]["toks"], value


# ------------------------------------------------------------ split-K GEMM

@pytest.mark.parametrize("splitk", ["0", "100000"])
def test_tiled_gemm_split_k_setting(splitk):
    """CYB_WGPU_SPLITK (read once per process: a subprocess): 0 turns the split-K tiled GEMM off,
    a large workgroup count splits K into as many parts as the rows allow (4 chunks of 32 each;
    for K = 736, 23 chunks, parts of 5 and a last part of 3); both, with the bias and the residual
    epilogue, against the f64 product. The default split is covered by tests/test_ops.py."""
    code = r"""
import numpy as np, sys
sys.path.insert(0, TESTS)
import test_ops as T
from cyb_llm import _core
rng = np.random.default_rng(19)
worst = 0.0
for enc, K in (("q4_k", 1024), ("q8_0", 1024), ("f32", 1024), ("q8_0", 736), ("f32", 736)):
    w, deq = T.random_weight(enc, 96, K, rng)
    x = rng.standard_normal((70, K)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    res = rng.standard_normal((70, 96)).astype(np.float32)
    (y,) = _core.run_op("fused_matmul_add", [x, w, res, bias], {"precise": True}, None, "scalar", "wgpu+rs")
    assert _core.last_run_op_backend() == "wgpu+rs"
    worst = max(worst, T.rel_err(y, x.astype(np.float64) @ deq.T + bias + res))
print(worst)
"""
    r = run_with_setting("CYB_WGPU_SPLITK", splitk, code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.strip().splitlines()[-1]) <= TOL_F32


def test_gemm_tiles_of_128_tokens_sum_as_tiles_of_64():
    """A 128-token tile computes each output as a 64-token tile does (chunks of 32 summed apart,
    in order): without split K (CYB_WGPU_SPLITK=0) the products of 150 tokens are bit-identical for
    CYB_WGPU_TILE=64 and =128, in both modes."""
    import os
    import subprocess
    import sys
    code = r"""
import hashlib, numpy as np, sys
sys.path.insert(0, TESTS)
import test_ops as T
from cyb_llm import _core
rng = np.random.default_rng(23)
h = hashlib.sha256()
for enc, K in (("q4_k", 1024), ("q8_0", 736), ("f32", 512)):
    w, deq = T.random_weight(enc, 96, K, rng)
    x = rng.standard_normal((150, K)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    res = rng.standard_normal((150, 96)).astype(np.float32)
    for precise in (True, False):
        (y,) = _core.run_op("fused_matmul_add", [x, w, res, bias], {"precise": precise}, None, "scalar", "wgpu+rs")
        assert _core.last_run_op_backend() == "wgpu+rs"
        assert T.rel_err(y, x.astype(np.float64) @ deq.T + bias + res) < 1e-2
        h.update(np.ascontiguousarray(y).tobytes())
print(h.hexdigest())
"""
    code = f"TESTS = {os.path.dirname(os.path.abspath(__file__))!r}\n" + code
    out = {}
    for tile in ("64", "128"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, CYB_WGPU_SPLITK="0", CYB_WGPU_TILE=tile))
        out[tile] = r
    assert out["64"].returncode == 0 and out["128"].returncode == 0, out["64"].stderr[-2000:] + out["128"].stderr[-2000:]
    assert out["64"].stdout.split()[-1] == out["128"].stdout.split()[-1]


# ------------------------------------------------------------ workgroup memory

@pytest.mark.parametrize("limit", ["10000", "junk"])
def test_workgroup_memory_over_the_limit_is_a_clear_error(limit):
    """wgpu-native does not check a kernel's workgroup memory against the device's limit (past it
    the behaviour is undefined), so the backend checks each pipeline it builds. With the limit
    lowered to 10000 bytes (CYB_WGPU_WORKGROUP_LIMIT, read once: a subprocess) the tiled GEMM
    (17408 bytes) is refused with BackendInit naming the shader and both sizes, while a product of
    two tokens (the matrix-vector kernel, 2 KiB) still runs; a value that is not a byte count is
    InvalidConfig naming the setting."""
    code = r"""
import numpy as np, sys
sys.path.insert(0, TESTS)
import test_ops as T
from cyb_llm import _core
from cyb_llm.errors import BackendInit, InvalidConfig
rng = np.random.default_rng(3)
w, deq = T.random_weight("q8_0", 64, 256, rng)
x = rng.standard_normal((2, 256)).astype(np.float32)
try:
    (y,) = _core.run_op("matmul", [x, w], {"precise": True}, None, "scalar", "wgpu+rs")
except InvalidConfig as e:
    print("invalid:", e); sys.exit(0)
assert _core.last_run_op_backend() == "wgpu+rs"
assert T.rel_err(y, x.astype(np.float64) @ deq.T) <= 1e-5
x = rng.standard_normal((40, 256)).astype(np.float32)
try:
    _core.run_op("matmul", [x, w], {"precise": True}, None, "scalar", "wgpu+rs")
except BackendInit as e:
    print("refused:", e); sys.exit(0)
print("ran")
"""
    r = run_with_setting("CYB_WGPU_WORKGROUP_LIMIT", limit, code)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.strip().splitlines()[-1]
    if limit == "junk":
        assert out.startswith("invalid:") and "CYB_WGPU_WORKGROUP_LIMIT" in out, out
    else:
        assert out.startswith("refused:"), out
        assert "+TILED:q8_0" in out and "17408 bytes of workgroup memory" in out and "allows 10000" in out, out


# ------------------------------------------------------------ graph path

def test_graph_path_fuses_and_runs_on_wgpu(tmp_path):
    """The graph path on wgpu+rs: the fusion pass takes fused_norm_matmul (the op wgpu+rs now runs)
    as on the cpu, every op runs on wgpu+rs, and the logits match the cpu graph path's."""
    import cyb_llm
    import graph_util

    path = graph_util.write_tiny(tmp_path / "t.model", model_type="llama")
    cpu = cyb_llm.load(path, backend="cpu", precise=True, exec_path="graph")
    gpu = cyb_llm.load(path, backend="wgpu+rs", precise=True, exec_path="graph")
    assert sorted(gpu.fusions) == sorted(cpu.fusions)
    assert any(p == "fused_norm_matmul" for p, _ in gpu.fusions)
    ids = [1, 2, 3, 4, 5, 6, 7]
    a = cpu.new_conversation(16).forward(ids, all_logits=True)
    conv = gpu.new_conversation(16)
    b = conv.forward(ids[:5], all_logits=True)
    steps = np.stack([conv.forward([t]) for t in ids[5:]])
    assert T.rel_err(b, a[:5]) <= CROSS_TOL and T.rel_err(steps, a[5:]) <= CROSS_TOL
    assert_ran_on(gpu, "wgpu+rs", "llama graph")
    assert "fused_norm_matmul" in {r["op"] for r in gpu.dispatch_records}


def test_wgsl_roof_probe_runs():
    """bench/wgpu_gemm_roof.py (docs/gpu-bench.md, "WGSL roof") builds and runs its kernels, the
    product loop written out as well as looped, with finite outputs (here on the CI adapter)."""
    import os
    import subprocess
    import sys
    pytest.importorskip("wgpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = ["fma-f32", "tile-4x4-sums-u1", "tile-8x4-flat-u32"]
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "wgpu_gemm_roof.py"), "--quick",
                        "--only", ",".join(names)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [l for l in r.stdout.splitlines() if "TFLOP/s" in l]
    assert sorted(l.split()[0] for l in rows) == sorted(names), r.stdout
    assert all("finite outputs: True" in l for l in rows), r.stdout
