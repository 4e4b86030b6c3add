"""The CPU benchmark's helpers (no timing assertions: speed is reported, not tested)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from cyb_llm import benchmark  # noqa: E402


def _tiny_gguf(path, tied: bool):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_uint32("llama.context_length", 64)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    emb = rng.standard_normal((8, 64)).astype(np.float32)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 64)).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", rng.standard_normal((8, 64)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return emb


@pytest.mark.parametrize("enc", ["q8_0", "f16"])
def test_requantize_gguf_keeps_metadata_and_values(tmp_path, enc):
    from gguf.quants import dequantize

    src = tmp_path / "src.gguf"
    _tiny_gguf(src, tied=True)
    dst = benchmark.requantize_gguf(str(src), tmp_path / f"dst-{enc}.gguf", enc)
    r0, r1 = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    assert r1.fields["llama.context_length"].contents() == 64
    assert r1.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
    want = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "f16": gguf.GGMLQuantizationType.F16}[enc]
    by_name = {t.name: t for t in r1.tensors}
    for t0 in r0.tensors:
        t1 = by_name[t0.name]
        a = dequantize(t0.data, t0.tensor_type).reshape(-1)
        b = dequantize(t1.data, t1.tensor_type).reshape(-1)
        if len(t0.shape) == 1:
            assert t1.tensor_type == gguf.GGMLQuantizationType.F32
            assert np.array_equal(a, b)
        else:
            assert t1.tensor_type == want
            # Q8_0: |error| <= half a step (amax/127/2) per 32-block; f16: relative 2^-11
            tol = np.abs(a).max() / 254 * 1.01 if enc == "q8_0" else np.abs(a).max() * 2.0 ** -11
            assert np.abs(a - b).max() <= tol


@pytest.mark.parametrize("tied", [True, False])
def test_weight_bytes_per_token_counts_the_head_not_the_lookup(tmp_path, tied):
    p = tmp_path / "m.gguf"
    _tiny_gguf(p, tied=tied)
    # f32: q 32x64, norm 64, and the 8x64 head (the embedding table itself when tied)
    assert benchmark.weight_bytes_per_token(str(p)) == 4 * (32 * 64 + 64 + 8 * 64)


def test_cli_bench_help_lists_its_options():
    r = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "bench", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for opt in ("--models", "--threads", "--reps", "--markdown", "--level"):
        assert opt in r.stdout


def test_level_children_get_the_level_and_its_llama_build(monkeypatch, tmp_path):
    import oracles

    oracles.llama_cpp()  # the level folders are named by the installed llama-cpp-python's version
    monkeypatch.setenv("CYB_LLM_CACHE", str(tmp_path))
    monkeypatch.delenv("CYB_CPU_LEVEL", raising=False)
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    ours = benchmark._child_env("cyb-fast", "avx2")
    assert ours["CYB_CPU_LEVEL"] == "avx2" and "LLAMA_CPP_LIB_PATH" not in ours
    peer = benchmark._child_env("llama.cpp", "avx2")
    assert "CYB_CPU_LEVEL" not in peer
    assert peer["LLAMA_CPP_LIB_PATH"] == str(benchmark.llama_level_dir("avx2"))
    assert peer["LLAMA_CPP_LIB_PATH"].startswith(str(tmp_path)) and peer["LLAMA_CPP_LIB_PATH"].endswith("avx2")
    plain = benchmark._child_env("llama.cpp", None)
    assert "CYB_CPU_LEVEL" not in plain and "LLAMA_CPP_LIB_PATH" not in plain


def test_level_check_rejects_a_child_at_another_level():
    avx2_info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | LLAMAFILE = 1 |"
    avx512_info = avx2_info + " AVX512 = 1 | AVX512_VNNI = 1 |"
    assert benchmark._level_check({"system_info": avx2_info}, "llama.cpp", "avx2") is None
    assert benchmark._level_check({"system_info": avx512_info}, "llama.cpp", "avx2")
    assert benchmark._level_check({"system_info": avx512_info}, "llama.cpp", "avx512") is None
    assert benchmark._level_check({"system_info": avx2_info}, "llama.cpp", "avx512")
    assert benchmark._level_check({"system_info": avx512_info + " AMX_INT8 = 1 |"}, "llama.cpp", "avx512")
    assert benchmark._level_check({"cpu_level": "avx2"}, "cyb-fast", "avx2") is None
    assert benchmark._level_check({"cpu_level": "amx"}, "cyb-fast", "avx512")
    assert benchmark._level_check({"cpu_level": "amx"}, "cyb-fast", None) is None
