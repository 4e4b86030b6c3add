#!/usr/bin/env python3
"""The module DAG of python/cyb_llm, enforced on every import of the package's own modules:
module-level and function-local alike (`from . import x`, `from .x import y`, `import cyb_llm.x`).

    leaves  <-  pipelines  <-  fronts

leaves: every module that is neither a pipeline nor a front (errors, ids, toml_writer, writer,
tokenizer, convert/, hub, format, pipelines, base, ...): they import other leaves only.
pipelines: the packages of the classes the registry's rows name (python/cyb_llm/pipelines.py,
read here without importing it: text/, encode/, speech/); each imports leaves and its own
package, never another pipeline nor a front. fronts: the package root, cli, benchmark and serve/,
which take the pipelines through the registry (and may import their modules). Deprecated
aliases (a module that warns DeprecationWarning when imported: the old paths) import the new
modules; nothing imports them. Over all of it the import graph is a DAG.

    check_py_imports.py [ROOT]            the static checks (the graph is built with `ast`)
    check_py_imports.py [ROOT] --fresh    also imports every module alone, each in a fresh state:
                                          a child forked from an interpreter that has imported no
                                          cyb_llm module (a process of its own where fork is missing)

Exit status 1 with one line per problem: an edge against the layers (file:line), a cycle (its
modules in order, with the import of each step), a module that does not import alone, a package
module that warns DeprecationWarning (it imported an alias).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass

PACKAGE = "cyb_llm"
FRONTS = ("cyb_llm", "cyb_llm.cli", "cyb_llm.benchmark", "cyb_llm.serve")  # a package: its modules too
# Third-party modules the fresh check imports once before forking (each child still imports every
# cyb_llm module anew): what the package imports at module level, so that the children start fast.
PRELOAD = ("numpy", "tokenizers", "jinja2", "jinja2.sandbox")


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    local: bool  # inside a function (or a class body's method)

    def where(self, files: dict[str, str], root: str) -> str:
        kind = "function-local" if self.local else "module-level"
        return f"{os.path.relpath(files[self.src], root)}:{self.line} ({kind})"


def package_dir(root: str) -> str:
    return os.path.join(root, "python", PACKAGE)


def modules(root: str) -> dict[str, str]:
    """name -> path of every module of the package (a package's name is its __init__.py)."""
    base = os.path.join(root, "python")
    out = {}
    for d, dirs, files in os.walk(package_dir(root)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(d, f), base)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(d, f)
    return out


def _is_package(name: str, files: dict[str, str]) -> bool:
    return files[name].endswith("__init__.py")


def _resolve(name: str, files: dict[str, str]) -> str | None:
    """The module of the package that `name` names (the longest existing prefix), or None."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in files:
            return cand
        parts.pop()
    return None


def _extension(name: str, files: dict[str, str]) -> bool:
    """Whether `name` is a compiled module of the package (cyb_llm._core: a .so / .pyd, its .pyi)."""
    pkg, _, leaf = name.rpartition(".")
    if pkg not in files or not _is_package(pkg, files):
        return False
    folder = os.path.dirname(files[pkg])
    return any(f.startswith(leaf + ".") and f.endswith((".so", ".pyd", ".pyi")) for f in os.listdir(folder))


def _local_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the import statements inside a function."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    out.add(sub.lineno)
    return out


def edges_of(name: str, files: dict[str, str]) -> list[Edge]:
    """The imports of the package's own modules that `name` makes, anywhere in its source."""
    with open(files[name], encoding="utf-8") as f:
        tree = ast.parse(f.read(), files[name])
    local = _local_lines(tree)
    here = name if _is_package(name, files) else name.rpartition(".")[0]
    out: list[Edge] = []

    def add(target: str | None, node: ast.AST) -> None:
        if target is not None and target != name:
            out.append(Edge(name, target, node.lineno, node.lineno in local))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.name == PACKAGE or alias.name.startswith(PACKAGE + ".")) and not _extension(alias.name, files):
                    add(_resolve(alias.name, files), node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                if node.level > 1:
                    base = base[:-(node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
                if mod != PACKAGE and not mod.startswith(PACKAGE + "."):
                    continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                if sub not in files and _extension(sub, files):
                    continue  # the native core: it imports no module of the package
                # `from pkg import submodule` imports the submodule; `from mod import name` the module
                add(sub if sub in files else _resolve(mod, files), node)
    return out


def pipeline_packages(files: dict[str, str]) -> list[str]:
    """The packages (or modules) of the classes the registry names: the second field (model_class)
    of each Pipeline(...) row of pipelines.py, read with ast."""
    path = files.get(f"{PACKAGE}.pipelines")
    if path is None:
        return []
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Pipeline":
            spec = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "model_class"), None)
            if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
                module = spec.value.partition(":")[0]
                found = _resolve(module, files)
                if found is None:
                    continue
                pkg = found if _is_package(found, files) else found.rpartition(".")[0]
                out.append(found if pkg == PACKAGE else pkg)
    return sorted(set(out))


def is_shim(name: str, files: dict[str, str]) -> bool:
    """A deprecated alias: a module that calls warnings.warn(..., DeprecationWarning, ...) at module level."""
    with open(files[name], encoding="utf-8") as f:
        tree = ast.parse(f.read(), files[name])
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            fn = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if fn == "warn" and any(isinstance(a, ast.Name) and a.id == "DeprecationWarning"
                                    for a in list(call.args) + [k.value for k in call.keywords]):
                return True
    return False


def _under(name: str, top: str) -> bool:
    return name == top or name.startswith(top + ".")


def layer_of(name: str, pipes: list[str], shims: set[str]) -> str:
    if name in shims:
        return "alias"
    if name == PACKAGE or any(_under(name, f) for f in FRONTS[1:]):
        return "front"
    if any(_under(name, p) for p in pipes):
        return "pipeline"
    return "leaf"


def find_cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (its edges in order) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan, iteratively (a deep package would pass the recursion limit)
        work = [(v, iter(graph.get(v, [])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for e in it:
                w = e.dst
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph.get(w, []))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1 or any(e.dst == node for e in graph.get(node, [])):
                    comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = min(comp)
        # breadth-first from start back to start inside the component: the shortest cycle through it
        prev: dict[str, Edge] = {}
        frontier = [start]
        seen = {start}
        closing = None
        while frontier and closing is None:
            nxt = []
            for v in frontier:
                for e in sorted(graph.get(v, []), key=lambda e: (e.dst, e.line)):
                    if e.dst == start:
                        closing = e
                        break
                    if e.dst in members and e.dst not in seen:
                        seen.add(e.dst)
                        prev[e.dst] = e
                        nxt.append(e.dst)
                if closing is not None:
                    break
            frontier = nxt
        path = [closing]
        v = closing.src
        while v != start:
            path.append(prev[v])
            v = prev[v].src
        cycles.append(path[::-1])
    return cycles


def check(root: str) -> list[str]:
    """Every problem of the static checks, one line each (empty: the package follows the DAG)."""
    files = modules(root)
    pipes = pipeline_packages(files)
    shims = {n for n in files if is_shim(n, files)}
    graph: dict[str, list[Edge]] = {n: edges_of(n, files) for n in files}
    errors = []
    if not pipes:
        errors.append(f"{os.path.relpath(package_dir(root), root)}/pipelines.py: no Pipeline(...) row names a class")
    for name in sorted(graph):
        src_layer = layer_of(name, pipes, shims)
        for e in graph[name]:
            dst_layer = layer_of(e.dst, pipes, shims)
            why = None
            if dst_layer == "alias":
                why = "imports the deprecated alias"
            elif src_layer == "leaf" and dst_layer in ("pipeline", "front"):
                why = f"a leaf imports the {dst_layer}"
            elif src_layer == "pipeline" and dst_layer == "front":
                why = "a pipeline imports the front"
            elif src_layer == "pipeline" and dst_layer == "pipeline" and \
                    next(p for p in pipes if _under(name, p)) != next(p for p in pipes if _under(e.dst, p)):
                why = "a pipeline imports another pipeline"
            if why:
                errors.append(f"{e.where(files, root)}: {name} -> {e.dst}: {why}")
    for cyc in find_cycles(graph):
        chain = " -> ".join([cyc[0].src] + [e.dst for e in cyc])
        steps = "; ".join(f"{e.src} -> {e.dst} at {e.where(files, root)}" for e in cyc)
        errors.append(f"import cycle: {chain} ({steps})")
    return errors


# --- the fresh imports ------------------------------------------------------------------------

def _import_alone(name: str, shim: bool) -> str | None:
    """In a clean process: imports `name` (its package first, as Python does). None when fine, else
    what went wrong; "skip: ..." when a third-party extra is missing."""
    import importlib
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            importlib.import_module(name)
        except ImportError as e:
            cause: BaseException | None = e  # an extra's module missing, maybe re-raised with advice
            while cause is not None:
                missing = getattr(cause, "name", None) or ""
                if isinstance(cause, ModuleNotFoundError) and missing and missing != PACKAGE \
                        and not missing.startswith(PACKAGE + "."):
                    return f"skip: needs {missing}"
                cause = cause.__cause__ or cause.__context__
            return traceback.format_exc(limit=6)
        except BaseException:  # noqa: BLE001 - reported
            return traceback.format_exc(limit=6)
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning) and PACKAGE in str(w.message)]
    if shim and not ours:
        return "a deprecated alias that did not warn DeprecationWarning"
    if not shim and ours:
        return "warns DeprecationWarning (it imports a deprecated alias): " + "; ".join(str(w.message) for w in ours)
    return None


def fresh(root: str) -> tuple[list[str], list[str]]:
    """(problems, skipped) of importing every module alone, each from a state with no cyb_llm module."""
    files = modules(root)
    shims = {n for n in files if is_shim(n, files)}
    if any(m == PACKAGE or m.startswith(PACKAGE + ".") for m in sys.modules):
        raise RuntimeError("the fresh check must run in an interpreter that has imported no cyb_llm module")
    sys.path.insert(0, os.path.join(root, "python"))
    for dep in PRELOAD:
        try:
            __import__(dep)
        except ImportError:
            pass
    problems, skipped = [], []
    for name in sorted(files):
        if hasattr(os, "fork"):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report and leave without running the parent's cleanup
                os.close(r)
                try:
                    msg = _import_alone(name, name in shims) or ""
                except BaseException:  # noqa: BLE001
                    msg = traceback.format_exc(limit=3)
                os.write(w, msg.encode("utf-8", "replace"))
                os._exit(0)
            os.close(w)
            chunks = []
            while True:
                b = os.read(r, 65536)
                if not b:
                    break
                chunks.append(b)
            os.close(r)
            _, status = os.waitpid(pid, 0)
            msg = b"".join(chunks).decode("utf-8", "replace")
            if status != 0 and not msg:
                msg = f"the child died (status {status})"
        else:
            code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
                    "import check_py_imports as c; sys.stdout.write(c._import_alone(sys.argv[3], sys.argv[4] == '1') or '')")
            p = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__)),
                                os.path.join(root, "python"), name, "1" if name in shims else "0"],
                               capture_output=True, text=True)
            msg = p.stdout or (p.stderr if p.returncode else "")
        if msg.startswith("skip: "):
            skipped.append(f"{name}: {msg[6:]}")
        elif msg:
            problems.append(f"{name} does not import alone: {msg.strip()}")
    return problems, skipped


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0]) if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if "--fresh" in argv:
        problems, skipped = fresh(root)
        for p in problems:
            print(p)
        for s in skipped:
            print(f"skipped {s}")
        errors += problems
        if not problems:
            print(f"fresh imports: {len(modules(root)) - len(skipped)} modules imported alone, {len(skipped)} skipped")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
