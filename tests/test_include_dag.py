"""The module DAG of csrc/ (tools/check_includes.py): every quoted #include goes
down the layers core <- format <- dispatch <- {backends/<name>, graph} <- model
<- families <- runtime <- python (sampling: core only). A back edge fails here."""
from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _checker():
    spec = importlib.util.spec_from_file_location("check_includes", os.path.join(ROOT, "tools", "check_includes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tree_follows_the_module_dag():
    errors = _checker().check(ROOT)
    assert errors == [], "include edges against the module DAG:\n" + "\n".join(errors)


@pytest.mark.parametrize(
    "src, include",
    [
        ("graph/graph.h", "runtime/model.h"),              # graph -> runtime
        ("graph/fusion.cc", "backends/cpu/cpu_backend.h"),  # graph -> a backend (siblings)
        ("backends/nox/nox_backend.cc", "graph/executor.h"),  # nox uses no graph types
        ("backends/wgpu/wgpu_backend.cc", "backends/cpu/cpu_backend.h"),  # backends do not call each other
        ("core/rope.h", "dispatch/op.h"),                   # core is the bottom
        ("format/toml.cc", "dispatch/op.h"),
        ("dispatch/op.h", "graph/graph.h"),
        ("model/model.h", "families/families.h"),           # model interfaces below families
        ("families/decoder.cc", "runtime/model.h"),         # families below runtime
        ("sampling/sampler.cc", "dispatch/op.h"),           # sampling: core only
    ],
)
def test_planted_back_edge_fails(tmp_path, src, include):
    root = tmp_path / "repo"
    shutil.copytree(os.path.join(ROOT, "csrc"), root / "csrc")
    chk = _checker()
    assert chk.check(str(root)) == []
    path = root / "csrc" / src
    path.write_text(path.read_text() + f'\n#include "{include}"\n')
    errors = chk.check(str(root))
    assert len(errors) == 1 and src in errors[0] and include in errors[0], errors
    assert chk.main(["check_includes.py", str(root)]) == 1


def test_free_modules_and_down_edges_pass(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(os.path.join(ROOT, "csrc"), root / "csrc")
    for src, include in [("tests/test_core.cc", "runtime/model.h"), ("python/module.cc", "families/families.h"),
                         ("runtime/model.cc", "backends/cpu/cpu_backend.h"), ("graph/graph.cc", "core/quant.h")]:
        p = root / "csrc" / src
        p.write_text(p.read_text() + f'\n#include "{include}"\n')
    assert _checker().check(str(root)) == []
