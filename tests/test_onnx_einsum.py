"""Einsum (convert/onnx_ops_nn.py, docs/import.md): of two operands with batch letters, one or more
contracted letters, zero, one or more free letters on each side; of one operand (a transpose, a
sum); with symbolic dims, against
onnxruntime on cpu, nox and wgpu+rs (lavapipe in CI)."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

from tolerances import tolerance  # noqa: E402

# equation, dims of each letter; the letters in SYM are symbolic in the graph's inputs
CASES = [
    ("ibh,hnd->ibnd", dict(i=5, b=2, h=8, n=3, d=4)),   # XLNet: two free letters on each side
    ("td,dnh->tnh", dict(t=6, d=8, n=2, h=5)),           # Funnel
    ("ibnd,jbnd->bnij", dict(i=5, j=7, b=2, n=3, d=4)),   # XLNet's scores
    ("bct,bcs->bts", dict(b=2, c=6, t=5, s=7)),          # the terrain UNet's attention
    ("ijk,jkl->il", dict(i=3, j=4, k=5, l=6)),           # two contracted letters
    ("bk,bkn->bn", dict(b=3, k=8, n=5)),                 # no free letter on A
    ("bnk,bk->bn", dict(b=3, k=8, n=5)),                 # none on B
    ("abc,cde->abde", dict(a=2, b=3, c=4, d=5, e=2)),    # two free letters each side, no batch
    ("ijbn->bnij", dict(i=5, j=4, b=2, n=3)),             # one operand: a transpose (XLNet)
    ("ibn->nb", dict(i=5, b=2, n=3)),                     # one operand: a sum, then a transpose
]
SYM = {"i": "seq", "t": "seq", "b": "batch"}


@pytest.mark.parametrize("backend", ["cpu", "nox", "wgpu+rs"])
def test_einsum_equations(tmp_path, backend):
    if backend == "wgpu+rs":
        from placement import wgpu_skip_reason

        if wgpu_skip_reason():
            pytest.skip(wgpu_skip_reason())
    from cyb_llm.convert import import_model

    rng = np.random.default_rng(0)
    for k, (eq, dims) in enumerate(CASES):
        operands = eq.split("->")[0].split(",")
        names = ["a", "b"][:len(operands)]
        ins = [helper.make_tensor_value_info(n, T.FLOAT, [SYM.get(c, dims[c]) for c in letters])
               for n, letters in zip(names, operands)]
        g = helper.make_graph([helper.make_node("Einsum", names, ["y"], equation=eq)], "e", ins,
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
        src, out = str(tmp_path / f"e{k}.onnx"), str(tmp_path / f"e{k}.model")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
        import_model(src, out, progress=False)
        m = cyb_llm.load(out, backend=backend)
        sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
        for grow in (0, 2):  # the symbolic dims at two sizes
            d = {c: v + (grow if c in SYM else 0) for c, v in dims.items()}
            feeds = {n: rng.standard_normal([d[c] for c in letters]).astype(np.float32)
                     for n, letters in zip(names, operands)}
            ref = sess.run(None, feeds)[0]
            got = m.run(feeds)["y"]
            assert got.shape == ref.shape, (eq, got.shape, ref.shape)
            assert np.abs(got - ref).max() <= tolerance("onnx-vs-onnxruntime") * np.abs(ref).max(), eq
