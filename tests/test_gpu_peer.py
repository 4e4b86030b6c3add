"""The GPU benchmark's llama.cpp peer, the parts that run without a GPU: same-shaped GGUF headers
(bench/gguf_shapes.py) extended with zeros load in llama.cpp (llama-cpp-python) and read back
with the spec's names, types and shapes; the llama7b spec follows llama.cpp's Q4_K_M rule;
llama-bench's JSON (a sample captured from a CPU build of the same llama.cpp) parses."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from oracles import llama_cpp, peer_import  # noqa: E402

gguf = peer_import("gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gguf_shapes as G  # noqa: E402
import llamacpp_peer as P  # noqa: E402

SPECS = G.load_specs()


def _gguf_name(hf: str, arch: str, n_layers: int) -> str:
    return gguf.get_tensor_name_map({"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[arch],
                                    n_layers).get_name(hf, try_suffixes=(".weight", ".bias"))


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("gguf"))
    sizes = G.write_headers(d, ["smollm2"])
    return G.extend(d, "smollm2", os.path.join(d, "smollm2.gguf")), sizes["smollm2"]


def test_header_extended_with_zeros_reads_back_as_the_spec(smollm2_gguf):
    path, size = smollm2_gguf
    spec = SPECS["smollm2"]
    assert os.path.getsize(path) == size
    r = gguf.GGUFReader(path)
    a = spec["config"]["architecture"]
    want = {_gguf_name(n, "llama", a["num_hidden_layers"]): (enc.upper(), list(reversed(shape)))
            for n, enc, shape in spec["tensors"]}
    got = {t.name: (t.tensor_type.name, [int(x) for x in t.shape]) for t in r.tensors}
    assert got == want
    end = max(int(t.data_offset) + int(t.n_bytes) for t in r.tensors)
    assert end <= size
    assert r.fields["llama.block_count"].contents() == a["num_hidden_layers"]
    assert len(r.fields["tokenizer.ggml.tokens"].contents()) == a["vocab_size"]


def test_llama_cpp_loads_and_runs_the_zero_file(smollm2_gguf):
    """llama.cpp reads the written GGUF: its dimensions, and zero logits from zero weights. Run in a
    fresh interpreter: in the suite's process, other llama.cpp models loaded before once left
    non-zero values (2^64, ~2) in this model's logits, which a process of its own never showed."""
    import subprocess
    import sys

    llama_cpp()  # skips where llama-cpp-python is missing; under CYB_REQUIRE_PEERS=1 fails
    path, _ = smollm2_gguf
    a = SPECS["smollm2"]["config"]["architecture"]
    code = (
        "import sys, numpy as np, llama_cpp\n"
        "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False)\n"
        "toks = m.tokenize(b'hello')\n"
        "m.eval(toks)\n"
        "logits = np.asarray(m.scores[len(toks) - 1])\n"
        "print(m.n_vocab(), m.n_embd(), logits.shape[0], int(np.all(np.isfinite(logits))), "
        "float(np.max(np.abs(logits))))\n")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    n_vocab, n_embd, n_logits, finite, biggest = r.stdout.split()[-5:]
    assert int(n_vocab) == a["vocab_size"] and int(n_embd) == a["hidden_size"] and int(n_logits) == a["vocab_size"]
    # zero weights: zero logits. The peer's kernels on some CPUs leave values at the scale of the
    # smallest normal float (2.4e-38 on a CI machine) where the sum is exactly zero; a weight read
    # wrong gives logits many orders of magnitude larger, so "zero" here is |x| < 1e-30.
    assert int(finite) == 1 and float(biggest) < 1e-30


def test_llama7b_spec_is_llama_cpp_q4_k_m():
    spec = SPECS["llama7b"]
    assert spec == json.loads(json.dumps(G.llama_q4_k_m_spec()))  # the stored entry is the generated one
    a = spec["config"]["architecture"]
    assert (a["hidden_size"], a["num_hidden_layers"], a["num_attention_heads"], a["intermediate_size"],
            a["vocab_size"]) == (4096, 32, 32, 11008, 32000)
    assert spec["config"]["parameters"] == 6738415616  # Llama-2-7B
    enc = {n: e for n, e, _ in spec["tensors"]}
    # llama.cpp (src/llama-quant.cpp, use_more_bits): the first and last 4 of 32 layers and every third between
    q6 = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    for proj in ("self_attn.v_proj", "mlp.down_proj"):
        assert [i for i in range(32) if enc[f"model.layers.{i}.{proj}.weight"] == "q6_k"] == q6
    assert enc["lm_head.weight"] == "q6_k" and enc["model.embed_tokens.weight"] == "q4_k"
    assert {e for n, e in enc.items() if n.endswith("norm.weight")} == {"f32"}
    others = {e for n, e in enc.items() if not n.endswith("norm.weight") and n != "lm_head.weight"
              and "v_proj" not in n and "down_proj" not in n}
    assert others == {"q4_k"}


def test_llama7b_tensors_fit_one_binding(tmp_path):
    size = G.write_header("llama7b", SPECS["llama7b"], str(tmp_path / "l.hdr"))
    assert 2**31 < size < 4.2e9  # ~4.08 GB, like llama.cpp's Llama-2-7B Q4_K_M
    for _, enc, shape in SPECS["llama7b"]["tensors"]:
        qt = gguf.GGMLQuantizationType[enc.upper()]
        block, nbytes = gguf.GGML_QUANT_SIZES[qt]
        assert int(np.prod(shape)) // block * nbytes < 2**31


def test_llama_bench_json_parses():
    with open(os.path.join(ROOT, "tests", "data", "llama_bench", "smollm2_cpu.json")) as f:
        text = f.read()
    res = P.parse_llama_bench(text)
    raw = json.loads(text)
    assert sorted(res) == ["pp16", "pp32", "tg4"]
    for t in raw:
        key = f"pp{t['n_prompt']}" if t["n_prompt"] else f"tg{t['n_gen']}"
        assert res[key]["median_ts"] == statistics.median(t["samples_ts"])
        assert res[key]["repeats"] == len(t["samples_ts"]) == 2
        assert res[key]["model_size"] == 96576768 and res[key]["flash_attn"] == 1


def test_gpu_bench_help():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_bench.py"), "--help"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--peer" in r.stdout and "--skip-ours" in r.stdout and "llama7b" in r.stdout
