"""Every reference to a document resolves to a file of this repository.

Scanned: csrc, python, tests, shaders, tools, bench, docs, README.md and
CMakeLists.txt. A reference is
  - a path ending in `.md` (`docs/runtime.md`, `../docs/format.md`): it must
    name an existing file, relative to the repository root or to the folder
    of the file that mentions it;
  - a bare name ending in `.md` (`graph.md`): some file of the repository must
    have that name;
  - a markdown link (bracketed text, then the target in parentheses) to a
    local target (not a URL, not an anchor of the same page): the target,
    without its `#anchor`, must exist relative to the linking file (or to the
    root).
A bare name that is a whole string literal of code (`"bench.md"`) is a file
the code writes, not a citation, and is not checked.
So a comment or a doc cannot cite a document that lives outside the repo.
"""
from __future__ import annotations

import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCAN = ("csrc", "python", "tests", "shaders", "tools", "bench", "docs", "README.md", "CMakeLists.txt")
TEXT_EXT = (".py", ".pyi", ".cc", ".h", ".inc", ".wgsl", ".md", ".sh", ".cmake", ".toml", ".txt", ".cfg")
SKIP_DIRS = {".git", "build", "__pycache__", ".pytest_cache", "node_modules", ".venv", "dist"}
MAX_BYTES = 2 << 20

# A path-like token ending in .md that is not the tail of a longer token (URLs,
# `{name}.md` templates and `*.md` globs do not match).
MD_REF = re.compile(r"(?<![\w/.\-{}*$%])((?:\.{1,2}/|[\w\-]+/)*[\w\-][\w.\-]*\.md)\b(?![\w/])")
# Not after an identifier or a closing bracket: `x[i](y)` is a call, not a link.
MD_LINK = re.compile(r"(?<![\w\])])\[[^\]\n]*\]\(([^()\s{}]+)(?:\s+\"[^\"]*\")?\)")


def _walk(top: str):
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info"))
        for f in sorted(files):
            yield os.path.join(d, f)


def repo_files() -> set[str]:
    return {os.path.relpath(p, ROOT) for p in _walk(ROOT)}


def scanned_files() -> list[str]:
    out = []
    for entry in SCAN:
        p = os.path.join(ROOT, entry)
        if os.path.isfile(p):
            out.append(p)
        elif os.path.isdir(p):
            out.extend(f for f in _walk(p) if f.endswith(TEXT_EXT) and os.path.getsize(f) <= MAX_BYTES)
    return out


def _exists(target: str, from_dir: str, files: set[str]) -> bool:
    for base in (from_dir, ROOT):
        rel = os.path.relpath(os.path.normpath(os.path.join(base, target)), ROOT)
        if rel in files or os.path.isdir(os.path.join(ROOT, rel)):
            return True
    return False


def broken_references(paths: list[str] | None = None, files: set[str] | None = None) -> list[str]:
    """'file:line: reference' for every reference that does not resolve."""
    files = repo_files() if files is None else files
    md_names = {os.path.basename(f) for f in files if f.endswith(".md")}
    bad = []
    for path in scanned_files() if paths is None else paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            continue
        here = os.path.dirname(path)
        rel = os.path.relpath(path, ROOT)
        for no, line in enumerate(lines, 1):
            for m in MD_LINK.finditer(line):
                target = m.group(1).split("#", 1)[0]
                if not target or "://" in m.group(1) or target.startswith(("mailto:", "<")):
                    continue
                # in code, `[captures](params)` is a C++ lambda: a link there names a path (has / or .)
                if not path.endswith(".md") and not any(c in target for c in "/."):
                    continue
                if not _exists(target, here, files):
                    bad.append(f"{rel}:{no}: link ({m.group(1)})")
            for m in MD_REF.finditer(line):
                ref = m.group(1)
                quoted = (m.start() > 0 and m.end() < len(line) and line[m.start() - 1] in "\"'"
                          and line[m.end()] == line[m.start() - 1])
                if quoted and "/" not in ref and not path.endswith(".md"):
                    continue
                if "/" in ref:
                    if not _exists(ref, here, files):
                        bad.append(f"{rel}:{no}: {ref}")
                elif ref not in md_names:
                    bad.append(f"{rel}:{no}: {ref}")
    return sorted(set(bad))


def test_every_doc_reference_resolves():
    bad = broken_references()
    assert not bad, "references to documents that are not in the repository:\n" + "\n".join(bad)


def test_the_scan_sees_references(tmp_path):
    """The check bites: planted bad references of each kind are reported, good ones are not."""
    files = repo_files()
    planted = tmp_path / "planted.cc"
    missing = "NOT_IN_REPO" + "." + "md"  # built here so that this file itself cites nothing missing
    planted.write_text(
        f"// see docs/runtime.md and format.md (fine)\n"
        f"// see docs/{missing.lower()} (bad path)\n"
        f"// see {missing} (bad bare name)\n"
        f"// see [the spec](../spec/{missing}) (bad link)\n"
        f"// writes \"{missing.lower()}\" (a file name the code writes: not checked)\n"
        f"// see [runtime](docs/runtime.md#tolerances) (fine)\n"
        f"// see https://example.org/{missing} (a URL: not checked); x[i](y) is a call\n",
        encoding="utf-8")
    bad = broken_references([str(planted)], files)
    # the path (line 2), the bare name (3), the link and the path inside it (4)
    assert [b.split(":")[1] for b in bad] == ["2", "3", "4", "4"], bad
