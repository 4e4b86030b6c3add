#!/usr/bin/env python3
"""The module DAG of csrc/, enforced on every quoted #include.

    core  <-  format  <-  dispatch  <-  {backends/<name>..., graph}  <-  model  <-  families  <-  runtime  <-  {python, capi}
    sampling <- core only (dispatch takes its beam structs);   audio <- core only;   tests, fuzz (and tools/*.cc) may include anything.

core: dtypes, tensors, errors, block codecs (quant), rope math, threads.
Each backend is its own module: backends do not include each other, and the
backends and the graph are siblings (neither includes the other; the nox digest
chain over graph nodes lives in model/). model: the Model interfaces and the
plumbing every model shares (backend chain, weight binding, checks), the graph
model. families: the curated decoders, their registry and decoder plan, the
decoder-graph builder. runtime: Model::load. audio: the log-mel frontend of
speech models (threads and errors from core, nothing else).

Usage: check_includes.py [ROOT]   (ROOT: the repository, default: this file's parent's parent)
Exit status 1 and one line per back edge (file:line) when an include goes the
wrong way or names an unknown module.
"""
from __future__ import annotations

import os
import re
import sys

BASE = ["core", "format", "dispatch"]
# module -> the modules it may include (itself always allowed); "backends/*" = every backend
ALLOWED = {
    "core": [],
    "format": ["core"],
    "dispatch": ["core", "format", "sampling"],  # the Backend interface's beam_rows (sampling/beam.h)
    "backends/*": BASE,                      # each backend: the base only (not other backends, not graph)
    "graph": BASE,
    "sampling": ["core"],
    "audio": ["core"],
    "model": BASE + ["backends/*", "graph"],
    "families": BASE + ["backends/*", "graph", "model", "audio"],
    "runtime": BASE + ["backends/*", "graph", "model", "families", "audio"],
    "python": BASE + ["backends/*", "graph", "model", "families", "runtime", "sampling", "audio"],
    "capi": BASE + ["backends/*", "graph", "model", "families", "runtime", "sampling", "audio"],  # the C API, a binding
}
FREE = {"tests", "fuzz", "tools"}  # may include anything

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".inc")


def module_of(rel: str) -> str | None:
    """Module of a path relative to csrc/ ("backends/cpu/x.h" -> "backends/cpu")."""
    parts = rel.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "backends":
        return "backends/" + parts[1] if len(parts) >= 3 else None
    return parts[0]


def allowed(src: str, dst: str) -> bool:
    if src in FREE or src == dst:
        return True
    key = "backends/*" if src.startswith("backends/") else src
    if key not in ALLOWED:
        return False
    for a in ALLOWED[key]:
        if a == dst or (a == "backends/*" and dst.startswith("backends/")):
            return True
    return False


def known(mod: str | None) -> bool:
    return mod is not None and (mod in ALLOWED or mod in FREE or mod.startswith("backends/"))


def check(root: str) -> list[str]:
    csrc = os.path.join(root, "csrc")
    errors: list[str] = []
    files: list[tuple[str, str]] = []  # (path for messages, module)
    for dirpath, _, names in os.walk(csrc):
        for n in sorted(names):
            if n.endswith(SOURCE_EXT):
                p = os.path.join(dirpath, n)
                files.append((p, module_of(os.path.relpath(p, csrc).replace(os.sep, "/"))))
    tools = os.path.join(root, "tools")
    if os.path.isdir(tools):
        for n in sorted(os.listdir(tools)):
            if n.endswith(SOURCE_EXT):
                files.append((os.path.join(tools, n), "tools"))
    for path, src in sorted(files):
        shown = os.path.relpath(path, root).replace(os.sep, "/")
        if not known(src):
            errors.append(f"{shown}: not in a known module of csrc/ (tools/check_includes.py ALLOWED)")
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if "/" not in target:  # relative to the including file: same module
                    continue
                dst = module_of(target)
                if not os.path.exists(os.path.join(csrc, target)):
                    if dst is None or not known(dst):
                        continue  # not a csrc header (generated, third party)
                if not known(dst):
                    errors.append(f"{shown}:{lineno}: includes \"{target}\" of unknown module")
                elif not allowed(src, dst):
                    key = "backends/*" if src.startswith("backends/") else src
                    ok = ", ".join([src] + ALLOWED.get(key, []))
                    errors.append(f"{shown}:{lineno}: {src} includes \"{target}\" ({dst}); "
                                  f"{src} may include only {ok}")
    return errors


def main(argv: list[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} include edge(s) against the module DAG (see tools/check_includes.py)")
        return 1
    print("include DAG ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
