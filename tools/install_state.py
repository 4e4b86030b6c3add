#!/usr/bin/env python3
"""Test-set-up helper for tools/test.sh (one place for what it asks of pyproject.toml and pip).

    python tools/install_state.py requirements EXTRA[,EXTRA]   # the extras' requirements, one a line
    python tools/install_state.py current                       # exit 0 if the installed cyb_llm is this checkout, unchanged

`requirements` expands the project's own extras (`cyb_llm[serve]` inside `test`), so the test
dependencies install without building the project a second time. `current` holds when the
installed distribution was installed from this directory (pip's direct_url.json) and no source
file (csrc/, python/, shaders/, CMakeLists.txt, pyproject.toml) changed after that install.
"""
from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
SOURCES = ("csrc", "python", "shaders", "CMakeLists.txt", "pyproject.toml")


def requirements(extras: list[str]) -> list[str]:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        proj = tomllib.load(f)["project"]
    name, table = proj["name"], proj.get("optional-dependencies", {})
    out: list[str] = []
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        if extra not in table:
            raise SystemExit(f"pyproject.toml: no extra {extra!r} (have: {', '.join(table)})")
        seen.add(extra)
        for req in table[extra]:
            m = re.match(rf"^\s*{re.escape(name)}\s*\[([^\]]+)\]\s*$", req)
            if m:
                todo.extend(e.strip() for e in m.group(1).split(","))
            elif req not in out:
                out.append(req)
    return out


def newest_source() -> tuple[float, str]:
    best = (0.0, "")
    for top in SOURCES:
        path = os.path.join(ROOT, top)
        walk = [(os.path.dirname(path), [], [os.path.basename(path)])] if os.path.isfile(path) else os.walk(path)
        for d, dirs, files in walk:
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for fn in files:
                if fn.endswith((".so", ".pyd", ".pyc")):
                    continue
                p = os.path.join(d, fn)
                best = max(best, (os.stat(p).st_mtime, p))
    return best


def current() -> tuple[bool, str]:
    from importlib import metadata

    try:
        dist = metadata.distribution("cyb_llm")
    except metadata.PackageNotFoundError:
        return False, "cyb_llm is not installed"
    raw = dist.read_text("direct_url.json")
    url = json.loads(raw).get("url", "") if raw else ""
    if url.rstrip("/") != "file://" + ROOT:
        return False, f"the installed cyb_llm comes from {url or 'an index'}, not {ROOT}"
    record = next((dist.locate_file(f) for f in dist.files or [] if f.name == "RECORD"), None)
    installed = os.stat(record).st_mtime if record and os.path.exists(record) else 0.0
    t, p = newest_source()
    if t > installed:
        return False, f"{os.path.relpath(p, ROOT)} changed after the installed build"
    try:
        import cyb_llm._core  # noqa: F401
    except ImportError as e:
        return False, f"the installed cyb_llm._core does not import: {e}"
    return True, "the installed cyb_llm is this checkout, unchanged since its install"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "requirements":
        print("\n".join(requirements(sys.argv[2].split(","))))
        return 0
    if len(sys.argv) == 2 and sys.argv[1] == "current":
        ok, why = current()
        print(why)
        return 0 if ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
