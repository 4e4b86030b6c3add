"""python/cyb_llm/_core.pyi lists the whole native API: every public name of
cyb_llm._core (functions, classes, and the methods and properties of each
class) is in the stub, and the stub names nothing the module lacks. Regenerate
it with tools/gen_core_stub.py when a binding changes."""
from __future__ import annotations

import ast
import inspect
import os

import pytest

from cyb_llm import _core

STUB = os.path.join(os.path.dirname(__file__), "..", "python", "cyb_llm", "_core.pyi")
REGEN = "regenerate it: CYB_LLM_CORE_DIR=<build>/py PYTHONPATH=python python tools/gen_core_stub.py"


def _public(names):
    return {n for n in names if not n.startswith("__")}


def _stub() -> tuple[set[str], dict[str, set[str]], list[str]]:
    with open(STUB, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    top: set[str] = set()
    classes: dict[str, set[str]] = {}
    all_list: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "__all__":
            all_list = list(ast.literal_eval(node.value))
    return top, classes, all_list


def _module_names() -> set[str]:
    return {n for n in dir(_core) if not n.startswith("__")}


def _class_members(cls: type) -> set[str]:
    own = set()
    for n, v in vars(cls).items():
        if n.startswith("__") and n != "__init__":
            continue
        if n == "__init__" and not callable(v):
            continue
        own.add(n)
    return own


def test_stub_lists_every_module_name():
    top, _, all_list = _stub()
    have = _module_names()
    missing = have - top
    assert not missing, f"_core has {sorted(missing)} but _core.pyi does not; {REGEN}"
    extra = top - have
    assert not extra, f"_core.pyi lists {sorted(extra)} that _core does not have; {REGEN}"
    assert set(all_list) == {n for n in have if not n.startswith("_")}, REGEN


@pytest.mark.parametrize("name", sorted(n for n in dir(_core) if inspect.isclass(getattr(_core, n))
                                        and not n.startswith("_")))
def test_stub_lists_every_member_of(name):
    _, classes, _ = _stub()
    assert name in classes, f"class {name} missing from _core.pyi; {REGEN}"
    cls = getattr(_core, name)
    have = {n for n in _class_members(cls) if not n.startswith("_") or n == "__init__"}
    # pybind11 gives every class an __init__; the stub writes it only when it is bound.
    stub = classes[name]
    missing = {n for n in have - stub if n != "__init__"}
    assert not missing, f"{name}: {sorted(missing)} missing from _core.pyi; {REGEN}"
    extra = {n for n in stub - have if n != "__init__"}
    assert not extra, f"{name}: _core.pyi lists {sorted(extra)} that the class lacks; {REGEN}"


def test_stub_names_no_cpp_types():
    with open(STUB, encoding="utf-8") as f:
        text = f.read()
    assert "cyb::" not in text and "std::" not in text, "a C++ type leaked into a signature; " + REGEN
