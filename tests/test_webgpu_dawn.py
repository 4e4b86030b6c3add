"""webgpu:dawn (docs/webgpu-dawn.md): the wgpu+rs backend on Dawn's WebGPU procedures, handed over
by the wgpudawn package (cyb_llm.webgpu_dawn).

Dawn finds no adapter on lavapipe, so what runs here is the seam: the backend name parses and,
without wgpudawn, fails naming the extra to install; the procedure table reports every procedure an
implementation lacks by name; a declaration mismatch is reported. Where wgpudawn is importable
(`pip install "cyb_llm[gpu-dawn]"`), its declarations must match the core's, and on Dawn's Null
backend (CYB_WEBGPU_DAWN_BACKEND=null: Tint compiles every kernel and Dawn validates every call,
nothing is computed) a tiny model runs every op on webgpu:dawn, in a process of its own (one WebGPU
implementation a process). Numbers on a real GPU: bench/dawn_check.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cyb_llm import _core, errors, webgpu_dawn
from cyb_llm.format import write_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_wgpu = pytest.mark.skipif(not _core.wgpu_compiled(), reason="the wgpu backend is compiled out")


def _has_wgpudawn() -> bool:
    return webgpu_dawn.available()


def tiny_llama(path: str, seed: int = 0) -> str:
    """A 2-layer llama of random weights (f16, q8_0, q4_k, q4_1: the float and block decoders)."""
    H, F, V, L = 256, 512, 512, 2
    rng = np.random.default_rng(seed)
    arch = {"hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "num_hidden_layers": L, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 512,
            "rope_theta": 10000.0, "rope_style": "neox", "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
            "attention_bias": False, "hidden_act": "silu"}
    blocks = {enc: (b, nb) for enc, _n, b, nb, q in _core.encodings() if q}

    def quant(enc, shape):  # random blocks whose f16 scales (the first field) are small and finite
        b, nb = blocks[enc]
        n = int(np.prod(shape)) // b
        raw = rng.integers(0, 256, size=(n, nb), dtype=np.uint8)
        d = (rng.uniform(0.5, 1.0, n) * (0.0005 if enc.endswith("_k") else 0.01)).astype(np.float16)
        raw[:, 0:2] = d.view(np.uint8).reshape(n, 2)
        if enc in ("q4_k", "q4_1"):
            raw[:, 2:4] = d.view(np.uint8).reshape(n, 2)
        return raw.reshape(-1)

    t = [("model.embed_tokens.weight", "q8_0", [V, H], quant("q8_0", [V, H])),
         ("model.norm.weight", "f32", [H], (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))]
    for i in range(L):
        p = f"model.layers.{i}."
        enc = "q4_k" if i == 0 else "q4_1"
        for n, shape in (("self_attn.q_proj", [H, H]), ("self_attn.k_proj", [128, H]), ("self_attn.v_proj", [128, H]),
                         ("mlp.gate_proj", [F, H]), ("mlp.up_proj", [F, H])):
            t.append((p + n + ".weight", enc, shape, quant(enc, shape)))
        t.append((p + "self_attn.o_proj.weight", "f16", [H, H], (0.02 * rng.standard_normal(H * H)).astype(np.float16)))
        t.append((p + "mlp.down_proj.weight", "q8_0", [H, F], quant("q8_0", [H, F])))
        for n in ("input_layernorm", "post_attention_layernorm"):
            t.append((p + n + ".weight", "f32", [H], (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)))
    write_model(path, name="tiny llama (random)", config={"model_type": "llama", "architecture": arch}, tensors=t)
    return path


def _without_wgpudawn(monkeypatch):
    for mod in ("wgpudawn", "wgpudawn._lib"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError


def test_backend_name_parses_and_needs_wgpudawn(monkeypatch, tmp_path):
    """backend="webgpu:dawn" is a known name: without wgpudawn the load fails with BackendInit naming
    the extra to install (not "unknown backend"), before any device starts."""
    _without_wgpudawn(monkeypatch)
    mf = _core.ModelFile.open(tiny_llama(str(tmp_path / "t.model")))
    with pytest.raises(errors.BackendInit, match=r'pip install "cyb_llm\[gpu-dawn\]"') as e:
        _core.load(mf, "webgpu:dawn")
    assert "wgpudawn" in str(e.value) and e.value.fields["backend"] == "webgpu:dawn"
    with pytest.raises(errors.BackendInit, match=r'cyb_llm\[gpu-dawn\]'):
        _core.run_op("add", [np.ones(4, np.float32), np.ones(4, np.float32)], {}, None, "auto", "webgpu:dawn")
    with pytest.raises(errors.BackendInit, match="webgpu:dawn"):  # the list of known names has it
        _core.load(mf, "webgpu:nope")
    assert not _core.wgpu_dawn_handed()


def test_cyb_llm_load_names_the_extra(monkeypatch, tmp_path):
    import cyb_llm

    _without_wgpudawn(monkeypatch)
    with pytest.raises(errors.BackendInit, match=r'pip install "cyb_llm\[gpu-dawn\]"'):
        cyb_llm.load(tiny_llama(str(tmp_path / "t.model")), backend="webgpu:dawn")


@needs_wgpu
def test_proc_table_reports_missing_procedures_by_name():
    native, dawn = _core.wgpu_proc_names("wgpu-native"), _core.wgpu_proc_names("dawn")
    common = set(native) & set(dawn)
    assert "wgpuDeviceCreateBuffer" in common
    # wgpu-native's extensions are asked of wgpu-native only; their standard stand-ins of Dawn only
    for n in ("wgpuDevicePoll", "wgpuQueueSubmitForIndex", "wgpuInstanceEnumerateAdapters",
              "wgpuDeviceCreateShaderModuleTrusted", "wgpuGenerateReport", "wgpuGetVersion"):
        assert n in native and n not in dawn, n
    for n in ("wgpuQueueSubmit", "wgpuInstanceWaitAny", "wgpuInstanceRequestAdapter"):
        assert n in dawn and n not in native, n
    assert _core.wgpu_fill_check("dawn", []) == []
    assert _core.wgpu_fill_check("wgpu-native", []) == []
    # every missing one, by name, in table order
    assert _core.wgpu_fill_check("dawn", ["wgpuInstanceWaitAny", "wgpuDeviceCreateBuffer"]) == [
        "wgpuDeviceCreateBuffer", "wgpuInstanceWaitAny"]
    assert _core.wgpu_fill_check("wgpu-native", ["wgpuGetVersion", "wgpuDevicePoll"]) == [
        "wgpuDevicePoll", "wgpuGetVersion"]
    # a procedure the implementation is not asked for is not reported
    assert _core.wgpu_fill_check("wgpu-native", ["wgpuInstanceWaitAny"]) == []
    assert _core.wgpu_fill_check("dawn", ["wgpuDevicePoll"]) == []
    assert _core.wgpu_fill_check("dawn", dawn) == dawn
    with pytest.raises(errors.InvalidConfig):
        _core.wgpu_fill_check("metal", [])


@needs_wgpu
def test_abi_mismatch_is_reported():
    """A module whose declarations differ is named entry by entry (a stand-in ffi / lib)."""
    abi = _core.wgpu_abi()
    assert abi["sizeof WGPULimits"] > 0 and abi["WGPUSType_ShaderSourceWGSL"] == 2
    assert abi["WGPUFeatureName_ChromiumExperimentalSubgroupMatrix"] == 0x50034

    class FFI:
        def sizeof(self, s):
            return abi["sizeof " + s] + (8 if s == "WGPULimits" else 0)

        def offsetof(self, s, f):
            return abi[f"offsetof {s}.{f}"]

    class Lib:
        def __getattr__(self, name):
            if name == "WGPUWaitStatus_Error":
                raise AttributeError(name)
            return abi[name]

    bad = webgpu_dawn.abi_mismatches(FFI(), Lib())
    assert len(bad) == 2, bad
    assert f"sizeof WGPULimits: core {abi['sizeof WGPULimits']}, dawn {abi['sizeof WGPULimits'] + 8}" in bad
    assert any(b.startswith("WGPUWaitStatus_Error: core 3, dawn unknown") for b in bad), bad


@needs_wgpu
@pytest.mark.skipif(not _has_wgpudawn(), reason='wgpudawn is not installed (pip install "cyb_llm[gpu-dawn]")')
def test_wgpudawn_declarations_match_the_core():
    from wgpudawn._lib import ffi, lib

    assert webgpu_dawn.abi_mismatches(ffi, lib) == []


# The Null backend computes nothing: what a forward reads back is whatever the buffers held, and the
# runtime's check of the outputs may call it non-finite after every dispatch was recorded, validated
# and submitted. That one error is accepted; any other fails.
NULL_RUN = """
def null_run(f):
    try:
        f()
    except errors.FormatError as e:
        assert "non-finite" in str(e), str(e)
"""

NULL_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, cyb_llm
    from cyb_llm import _core, errors, webgpu_dawn
    path = sys.argv[1]
    webgpu_dawn.attach()
    info = _core.wgpu_info(True)
    assert info["impl"] == "dawn" and info["backend_type"] == "null", info
    assert _core.wgpu_report() == {}
    # 12 tokens: neither the tiled GEMM (>= 32 tokens) nor flash attention (>= 16), whose 17 and
    # 28 KiB of workgroup memory the Null adapter's limit (16 KiB, WebGPU's default) refuses
    ids = np.random.default_rng(0).integers(0, 512, size=12).tolist()
""") + textwrap.dedent(NULL_RUN) + textwrap.dedent("""
    for precise in (True, False):
        m = cyb_llm.load(path, backend="webgpu:dawn", precise=precise)
        assert m.backend == "webgpu:dawn" or m._native.backends()[0] == "webgpu:dawn", m._native.backends()
        c = m.new_conversation(64)
        null_run(lambda: c.forward(ids))    # a prompt: several tokens a dispatch
        for t in (1, 2, 3):
            null_run(lambda: c.forward([t]))  # matrix-vector kernels, decode attention
        off = sorted({(r["op"], r["backend"], r["fallback"]) for r in m.dispatch_records
                      if r["backend"] != "webgpu:dawn" or r["fallback"]})
        assert not off, off
    try:
        cyb_llm.load(path, backend="wgpu+rs")
        raise SystemExit("wgpu+rs started in a process that runs Dawn")
    except errors.BackendInit as e:
        assert "one WebGPU implementation a process" in str(e), str(e)
    print("NULL-OK", len(m.dispatch_records))
""")


@needs_wgpu
@pytest.mark.skipif(not _has_wgpudawn(), reason='wgpudawn is not installed (pip install "cyb_llm[gpu-dawn]")')
def test_null_backend_runs_every_op_of_a_model(tmp_path):
    """On Dawn's Null backend every kernel of a decoder's forward (a 12-token prompt and decode steps,
    both modes) compiles under Tint and every call passes Dawn's validation; ops never fall back; wgpu+rs
    then refuses to start in the same process."""
    path = tiny_llama(str(tmp_path / "t.model"))
    env = dict(os.environ, CYB_WEBGPU_DAWN_BACKEND="null")
    r = subprocess.run([sys.executable, "-c", NULL_SCRIPT, path], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "NULL-OK" in r.stdout, (r.stdout[-3000:], r.stderr[-6000:])


NULL_ENCODER_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, cyb_llm
    from cyb_llm import _core, errors, webgpu_dawn
    webgpu_dawn.attach()
    assert _core.wgpu_info(True)["backend_type"] == "null"
""") + textwrap.dedent(NULL_RUN) + textwrap.dedent("""
    # 2 x 8 tokens: below the tiled GEMM (32 tokens), whose workgroup memory the Null adapter refuses
    ids = np.random.default_rng(0).integers(5, 90, size=(2, 8)).astype(np.int32)
    for precise in (True, False):
        m = cyb_llm.load(sys.argv[1], backend="webgpu:dawn", precise=precise)
        null_run(lambda: m._native.embed(ids, np.ones_like(ids), None, "mean", True))
        off = sorted({(r["op"], r["backend"], r["fallback"]) for r in m.dispatch_records
                      if r["backend"] != "webgpu:dawn" or r["fallback"]})
        assert not off, off
    print("NULL-ENCODER-OK", len(m.dispatch_records))
""")


@needs_wgpu
@pytest.mark.skipif(not _has_wgpudawn(), reason='wgpudawn is not installed (pip install "cyb_llm[gpu-dawn]")')
def test_null_backend_runs_every_op_of_an_encoder(tmp_path):
    """On Dawn's Null backend a tiny BERT's embed (embeddings, layer norms, encoder attention, the
    matmul epilogues with GELU, pooling, both modes) compiles every kernel under Tint and passes
    Dawn's validation, no op off webgpu:dawn."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from encoder_fixtures import import_encoder

    path = import_encoder(str(tmp_path), "bert")
    env = dict(os.environ, CYB_WEBGPU_DAWN_BACKEND="null")
    r = subprocess.run([sys.executable, "-c", NULL_ENCODER_SCRIPT, path], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "NULL-ENCODER-OK" in r.stdout, (r.stdout[-3000:], r.stderr[-6000:])
