"""A packed weight's original pages leave the resident set (docs/diffusion.md, "Memory"): the cpu
backend keeps packed copies of convolution weights (core/weight_cache.h); once a copy is built, the
original's whole pages are handed back (ModelFile::release_pages): madvise(MADV_DONTNEED) in the
read-only mapping (CYB_HUGE_PAGES=0), the file's pages mapped over the huge-page copy otherwise.
One Conv whose weight is most of a >64 MiB file (a mapped file, not read at open), imported from
ONNX, its weight f32 or (f16 values) f16 (the packed copy widened from the f16 bytes, whose pages
are handed back the same way); each setting in a child (CYB_HUGE_PAGES is read once a process). In the child the weight's
pages are touched, the conv runs, and /proc/self/pagemap says which of the weight's whole pages are
present: none may be. A second model on the same file repacks from the handed-back pages (they
fault in again from the file): its output must be the first's bit for bit, and both within
`onnx-vs-onnxruntime` of onnxruntime. A MatMul weight (read in place, not packed) stays present
after a run until release_memory(weights=True) hands its pages back; the next run reads them again
from the file, to the same output.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from serve_proc import child_env
from tolerances import tolerance

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/pagemap is Linux's")

THP = "/sys/kernel/mm/transparent_hugepage/enabled"
# W [O, C, 3, 3]: f32 75.5 MB, or f16 values (written f16 by the importer) 75.5 MB with twice the
# channels: the file above the 64 MiB read threshold either way
SHAPES = {"f32": (1024, 2048), "f16": (1024, 4096)}

_CHILD = r"""
import ctypes, json, os, sys
import numpy as np
from cyb_llm import _core
from cyb_llm.format import ModelFile
from cyb_llm.named_arrays import NamedArrayModel

path, x_path, out_path = sys.argv[1:4]
mf = ModelFile(path)

def load():
    return NamedArrayModel._over(mf, _core.load(mf._native, "cpu", False, 2, "", True, None, ""), backend="cpu", stage="")

def weight_range(name):
    info = mf.tensors[name]
    view = mf.tensor_bytes(name)
    if not view.flags.owndata:  # the huge-page copy (a view of the process's own bytes)
        return view.ctypes.data, info.size, "huge"
    for line in open("/proc/self/maps"):  # the read-only mapping of the file, from offset 0
        f = line.split()
        if len(f) >= 6 and f[5] == os.path.realpath(path) and int(f[2], 16) == 0:
            return int(f[0].split("-")[0], 16) + mf.weights_offset + info.offset, info.size, "mapping"
    raise SystemExit("the file is neither mapped nor in huge pages")

def present(a, n):
    pg = os.sysconf("SC_PAGE_SIZE")
    lo, hi = (a + pg - 1) // pg, (a + n) // pg  # the whole pages inside
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo * 8)
        e = np.frombuffer(f.read((hi - lo) * 8), np.uint64)
    return int(((e >> np.uint64(63)) & np.uint64(1)).sum()), hi - lo

m1 = load()
a, n, where = weight_range("W")
am, nm, _ = weight_range("mm.weight")  # the importer keeps MatMul weights transposed
np.frombuffer((ctypes.c_char * n).from_address(a), np.uint8)[::256].sum()  # every page touched
before, pages = present(a, n)
x = np.load(x_path)
xm = np.ones((4, 512), np.float32)
r1 = m1.run({"x": x, "xm": xm})
y1 = r1["y"]
after, _ = present(a, n)
mem = m1.last_run_memory()
m_run, m_pages = present(am, nm)
m_released = m1.release_memory(weights=True)
m_after, _ = present(am, nm)
z2 = m1.run({"x": x, "xm": xm})["z"]
y2 = load().run({"x": x, "xm": xm})["y"]  # a fresh cache: packed again from the handed-back pages
after2, _ = present(a, n)
np.savez(out_path, y1=y1, y2=y2, z1=r1["z"], z2=z2)
print(json.dumps({"where": where, "pages": pages, "before": before, "after": after, "after2": after2,
                  "page_size": os.sysconf("SC_PAGE_SIZE"), "mem": mem, "m_pages": m_pages, "m_run": m_run,
                  "m_released": m_released, "m_after": m_after}))
"""


@pytest.fixture(scope="module", params=sorted(SHAPES))
def conv_file(tmp_path_factory, request):
    O, C = SHAPES[request.param]
    d = tmp_path_factory.mktemp("release")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((O, C, 3, 3), dtype=np.float32) / np.sqrt(C)).astype(np.float32)
    if request.param == "f16":  # f16 values: the conv weight is written f16 (2 bytes a value)
        w = w.astype(np.float16).astype(np.float32)
    b = rng.standard_normal(O, dtype=np.float32)
    mm = rng.standard_normal((512, 1024), dtype=np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("MatMul", ["xm", "M"], ["z"], name="mm")], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 1, 2]),
                           helper.make_tensor_value_info("xm", TensorProto.FLOAT, [4, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
                           numpy_helper.from_array(mm, "M")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = str(d / "conv.onnx")
    onnx.save(m, src)
    from cyb_llm.convert import import_model
    out = str(d / "conv.model")
    import_model(src, out, progress=False)
    assert os.path.getsize(out) > 64 << 20  # mapped at open, not read (docs/errors.md)
    from cyb_llm.format import ModelFile
    assert ModelFile(out).tensors["W"].encoding == request.param
    x = rng.standard_normal((1, C, 1, 2), dtype=np.float32)
    np.save(d / "x.npy", x)
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(["y"], {"x": x, "xm": np.ones((4, 512), np.float32)})[0]
    return out, str(d / "x.npy"), ref, w.size


@pytest.mark.parametrize("huge", ["0", "1"])
def test_packed_weight_pages_leave_the_resident_set(conv_file, tmp_path, huge):
    if huge == "1" and (not os.path.exists(THP) or "[never]" in open(THP).read()):
        pytest.skip("no transparent huge pages")
    path, x_path, ref, w_values = conv_file
    out = tmp_path / "y.npz"
    r = subprocess.run([sys.executable, "-c", _CHILD, path, x_path, str(out)], capture_output=True, text=True,
                       env=child_env(CYB_HUGE_PAGES=huge), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["where"] == ("huge" if huge == "1" else "mapping"), res
    assert res["before"] == res["pages"] > 0, res  # touched: the page map sees them
    assert res["after"] == 0, res  # packed: the original's whole pages handed back
    assert res["after2"] == 0, res  # packed again from them (faulted in from the file), handed back again
    assert res["mem"]["released_weight_bytes"] == res["pages"] * res["page_size"], res
    assert res["mem"]["weight_cache_bytes"] >= w_values * np.dtype(np.float32).itemsize, res  # the packed copy (f32)
    assert res["m_run"] == res["m_pages"] > 0, res  # the MatMul weight, read in place by the run
    assert res["m_released"] >= res["m_pages"] * res["page_size"], res  # release_memory(weights=True)
    assert res["m_after"] == 0, res
    y = np.load(out)
    assert np.array_equal(y["z1"], y["z2"])  # read again from the file
    assert np.array_equal(y["y1"], y["y2"])  # the same bytes read back from the file
    err = float(np.abs(y["y1"] - ref).max() / np.abs(ref).max())
    assert err <= tolerance("onnx-vs-onnxruntime"), err
