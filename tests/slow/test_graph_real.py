"""The graph path on real weights (slow tier): smollm2 and qwen05 imported with
`--graph`; curated vs graph vs nox logits within the cross-path tolerance
(precise), the same 32 greedy tokens, and a nox digest that does not depend on
the run or the thread setting. Plus the cross-compiler nox golden check."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import cyb_llm
from cyb_llm.convert import import_model

from oracles import greedy, rel_err
from tolerances import tolerance

CROSS_PATH_TOL = tolerance("cross-path")  # docs/runtime.md: precise paths across curated, graph, nox
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module", params=["smollm2", "qwen05"])
def real_graph(request, real_source, tmp_path_factory):
    out = str(tmp_path_factory.mktemp(request.param) / f"{request.param}_graph.model")
    import_model(real_source(request.param), out, progress=False, graph=True)
    return request.param, out


def test_real_curated_graph_nox(real_graph):
    name, path = real_graph
    ids = [1, 504, 3458, 282, 253, 1345, 30, 378, 1159, 2060, 314, 4100, 16, 20, 8, 9]
    curated = cyb_llm.load(path, precise=True)
    graph = cyb_llm.load(path, precise=True, exec_path="graph")
    nox = cyb_llm.load(path, backend="nox")
    ref = curated.new_conversation(64).forward(ids, all_logits=True)
    for label, m in (("graph", graph), ("nox", nox)):
        out = m.new_conversation(64).forward(ids, all_logits=True)
        assert np.isfinite(out).all()
        assert rel_err(out, ref) <= CROSS_PATH_TOL, f"{name} {label}: {rel_err(out, ref):.2e}"
    prompt = ids[:8]
    t_cur = greedy(curated.new_conversation(64), prompt, 32, set())
    assert greedy(graph.new_conversation(64), prompt, 32, set()) == t_cur
    assert greedy(nox.new_conversation(64), prompt, 32, set()) == t_cur


def test_real_nox_digest_stable(real_graph):
    name, path = real_graph
    if name != "smollm2":
        pytest.skip("one model is enough for the digest stability check")
    ids = [1, 504, 3458, 282, 253]
    digests, outs = [], []
    for threads in (1, 2, 1):
        m = cyb_llm.load(path, backend="nox", threads=threads)
        out = m.new_conversation(16).forward(ids, all_logits=True)
        digests.append(m.last_digest)
        outs.append(out.tobytes())
    assert len(set(digests)) == 1 and len(digests[0]) == 64
    assert len(set(outs)) == 1


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None, reason="no C++ compiler")
def test_nox_golden_across_compilers_and_opt_levels():
    r = subprocess.run([os.path.join(ROOT, "tools", "nox_golden.sh")], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    import importlib.util

    if importlib.util.find_spec("faster_whisper") and importlib.util.find_spec("onnx"):  # the graph-v2 half ran
        assert "silero (graph v2)" in r.stdout and "skip the Silero" not in r.stdout, r.stdout
