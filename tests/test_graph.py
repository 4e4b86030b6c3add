"""The graph path (docs/graph.md): graph section, executor, fusion, nox.

Tiny random checkpoints of every curated decoder family (built with
transformers as in test_families_tiny.py) are imported with `--graph`; the
curated path, the graph path (fused and unfused) and nox must agree within
docs/runtime.md's cross-path and fused-op tolerances and give the same greedy
tokens; each asserts from `model.dispatch_records` that its ops ran on its own
backend (nox on nox, no silent CPU). Real weights: tests/slow/test_graph_real.py.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import cyb_llm
from cyb_llm.convert import import_model
from cyb_llm.errors import BackendInit, FormatError, InvalidConfig, ShapeMismatch, UnsupportedOp

import graph_util
import nox_golden
from oracles import greedy, rel_err
from placement import assert_ran_on
from tolerances import tolerance

CROSS_PATH_TOL = tolerance("cross-path")  # precise vs precise across paths (curated, graph, nox)
FUSED_TOL = tolerance("fused-f32")        # fused vs unfused (f32)
CURATED = ["llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3"]


@pytest.fixture(scope="module", params=CURATED)
def tiny_graph(request, tmp_path_factory):
    import test_families_tiny as tf

    family = request.param
    _, path = tf._build(family, tmp_path_factory)  # HF folder + its plain import
    gpath = path.replace(".model", "_graph.model")
    import_model(os.path.dirname(path), gpath, progress=False, graph=True)
    return family, gpath


def _ids(n, seed=0):
    return np.random.default_rng(seed).integers(0, 512, size=n).tolist()


def test_curated_graph_nox_agree(tiny_graph):
    family, path = tiny_graph
    ids = _ids(24)  # longer than the tiny sliding windows
    curated = cyb_llm.load(path, precise=True)
    assert curated.execution_path == "curated"
    graph = cyb_llm.load(path, precise=True, exec_path="graph")
    unfused = cyb_llm.load(path, precise=True, exec_path="graph", fuse=False)
    nox = cyb_llm.load(path, backend="nox")
    assert graph.execution_path == unfused.execution_path == nox.execution_path == "graph"
    ref = curated.new_conversation(64).forward(ids, all_logits=True)
    outs = {name: m.new_conversation(64).forward(ids, all_logits=True)
            for name, m in (("graph", graph), ("unfused", unfused), ("nox", nox))}
    for name, o in outs.items():
        assert np.isfinite(o).all(), (family, name)
        assert rel_err(o, ref) <= CROSS_PATH_TOL, f"{family} {name}: {rel_err(o, ref):.2e}"
    assert rel_err(outs["graph"], outs["unfused"]) <= FUSED_TOL
    # the same greedy continuation, 32 steps, on every path
    prompt = _ids(6, seed=1)
    tokens = {name: greedy(m.new_conversation(64), prompt, 32, set())
              for name, m in (("curated", curated), ("graph", graph), ("nox", nox))}
    assert tokens["graph"] == tokens["curated"], family
    assert tokens["nox"] == tokens["curated"], family
    for name, m, backend in (("curated", curated, "cpu"), ("graph", graph, "cpu"), ("unfused", unfused, "cpu"),
                             ("nox", nox, "nox")):
        assert_ran_on(m, backend, f"{family} {name}")


def test_fusion_report_on_llama_graph(tmp_path):
    path = graph_util.write_tiny(tmp_path / "t.model", model_type="llama")
    L = graph_util.ARCH["num_hidden_layers"]
    m = cyb_llm.load(path, precise=True, exec_path="graph")
    fused = m.fusions
    count = lambda p: sum(1 for pat, _ in fused if pat == p)
    # every residual add whose sum is used again feeds the next norm: 2 per layer but the last
    assert count("fused_skip_norm") == 2 * L - 1
    assert count("fused_swiglu") == L
    assert sorted(n for p, n in fused if p == "fused_norm_matmul") == \
        ["layers.0.k_proj", "layers.0.q_proj", "layers.0.v_proj"]
    assert ("fused_swiglu", "layers.1.mlp") in fused
    assert "flash_attention: not fused: no backend supports it" in m.fusion_report
    conv = m.new_conversation(16)
    conv.forward([1, 2, 3])
    ops = {r["label"]: r["op"] for r in m.dispatch_records}
    assert ops["layers.1.mlp"] == "fused_swiglu" and "layers.1.act" not in ops
    assert ops["layers.0.attention"] == "attention"
    off = cyb_llm.load(path, precise=True, exec_path="graph", fuse=False)
    assert off.fusions == [] and "disabled" in off.fusion_report
    off.new_conversation(16).forward([1, 2, 3])
    ops = {r["label"]: r["op"] for r in off.dispatch_records}
    assert ops["layers.1.act"] == "silu" and ops["layers.1.mlp"] == "mul"


def test_unknown_model_type_runs_on_graph(tmp_path):
    g = graph_util.write_tiny(tmp_path / "mystery.model", model_type="mystery")
    c = graph_util.write_tiny(tmp_path / "llama.model", model_type="llama")
    mg = cyb_llm.load(g, precise=True)
    assert mg.execution_path == "graph"
    ids = [5, 9, 2, 33, 7]
    a = mg.new_conversation(32).forward(ids, all_logits=True)
    b = cyb_llm.load(c, precise=True).new_conversation(32).forward(ids, all_logits=True)
    assert rel_err(a, b) <= CROSS_PATH_TOL
    with pytest.raises(InvalidConfig):
        cyb_llm.load(g, exec_path="curated")


def test_curated_model_without_graph_section(tmp_path):
    # a plain import: the graph path uses the emitted graph; nox refuses it
    path = graph_util.write_tiny(tmp_path / "x.model", model_type="llama")
    from cyb_llm.format import ModelFile, write_model

    mf = ModelFile(path)
    plain = str(tmp_path / "plain.model")
    write_model(plain, name="plain", config=mf.config, tensors=graph_util.tiny_tensors())
    m = cyb_llm.load(plain, precise=True, exec_path="graph")
    assert m.execution_path == "graph"
    with pytest.raises(BackendInit, match="graph section"):
        cyb_llm.load(plain, backend="nox")


# --- malformed graphs: each the right structured error at load ------------------------------

def _mutate(text, old, new, count=1):
    assert old in text, old
    return text.replace(old, new, count)


MALFORMED = {
    # layers.0.attn_norm reads the output of a later node (cycle through the residual stream)
    "cycle": (lambda t: _mutate(t, 'inputs = ["embed_tokens", "model.layers.0.input_layernorm.weight"]',
                                'inputs = ["layers.0.attn_residual", "model.layers.0.input_layernorm.weight"]'),
              FormatError, "cycle"),
    "undefined_input": (lambda t: _mutate(t, 'inputs = ["layers.0.attention", "model.layers.0.self_attn.o_proj.weight"]',
                                          'inputs = ["layers.0.no_such_value", "model.layers.0.self_attn.o_proj.weight"]'),
                        FormatError, "no_such_value"),
    "unknown_op": (lambda t: _mutate(t, 'op = "silu"\ntag = 11', 'op = "frobnicate"'), UnsupportedOp, "frobnicate"),
    # the decoder family's fusion of rope and kv_write is not a graph op
    "family_fusion_op": (lambda t: _mutate(t, 'op = "silu"\ntag = 11', 'op = "fused_rope_kv"'), UnsupportedOp,
                         "write rope and kv_write"),
    # nor are its norm-folded products
    "family_norm_fusion_op": (lambda t: _mutate(t, 'op = "silu"\ntag = 11', 'op = "fused_norm_swiglu"'),
                              UnsupportedOp, "write rms_norm and the product's nodes"),
    # nor its position work with the attention
    "family_attention_fusion_op": (lambda t: _mutate(t, 'op = "silu"\ntag = 11', 'op = "fused_rope_attention"'),
                                   UnsupportedOp, "write rope, kv_write and attention nodes"),
    "wrong_attribute_type": (lambda t: _mutate(t, "attrs = { eps = 1.0000000000000001e-05", 'attrs = { eps = "tiny"'),
                             InvalidConfig, "eps"),
    "shape_mismatch": (lambda t: _mutate(t, 'inputs = ["layers.0.attn_norm", "model.layers.0.self_attn.q_proj.weight"]',
                                         'inputs = ["layers.0.attn_norm", "model.layers.0.mlp.down_proj.weight"]'),
                       ShapeMismatch, "layers.0.q_proj"),
    "wrong_tag": (lambda t: _mutate(t, 'op = "silu"\ntag = 11', 'op = "silu"\ntag = 12'), InvalidConfig, "tag"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_graph_errors(case, tmp_path):
    mutate, cls, needle = MALFORMED[case]
    path = graph_util.write_tiny(tmp_path / f"{case}.model", graph=mutate(graph_util.llama_graph()))
    with pytest.raises(cls) as ei:
        cyb_llm.load(path)
    assert needle in str(ei.value), str(ei.value)


def test_graph_text_layout_is_unfused():
    text = graph_util.llama_graph()
    ops = re.findall(r'^op = "([a-z_]+)"', text, flags=re.M)
    assert "fused_skip_norm" not in ops and "fused_swiglu" not in ops
    assert {"rms_norm", "matmul", "add", "silu", "mul", "rope", "kv_write", "attention"} <= set(ops)


# --- nox -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def golden_model(tmp_path_factory):
    return nox_golden.write(str(tmp_path_factory.mktemp("nox") / "golden.model"))


def test_nox_golden_digest_and_output(golden_model):
    assert nox_golden.run(golden_model) == nox_golden.GOLDEN


def test_nox_same_digest_across_runs_and_threads(golden_model):
    assert nox_golden.run(golden_model, threads=1) == nox_golden.run(golden_model, threads=2)


def test_nox_digest_depends_on_input(golden_model):
    m = cyb_llm.load(golden_model, backend="nox")
    m.new_conversation(8).forward([1, 2])
    a = m.last_digest
    m.new_conversation(8).forward([1, 3])
    assert len(a) == 64 and m.last_digest != a
