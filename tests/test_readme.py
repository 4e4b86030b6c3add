"""Every python and bash block of README.md, and of the docs/*.md sections titled
"Quick start", runs as written.

Each block runs as a reader would run it, in an empty temporary folder (nothing prepared:
a block that needs a file gets it itself, as the README's `cyb-llm fetch smollm2 --source`);
`cyb-llm` there is this interpreter's `python -m cyb_llm.cli`. Skipped, by exact text: the
README's two set-up commands (.ci/run runs them itself). A block preceded by `<!-- not run: reason -->` is not run;
the count of those is printed."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP_COMMANDS = {
    'pip install . && cyb-llm run "What is the capital of France?"',
    "bash tools/test.sh",
}
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")
_HEADING = re.compile(r"^#+\s+(.*)$", re.M)


def _blocks(path: Path, only_quick_start: bool) -> list[tuple[str, str, str, str | None]]:
    """(id, language, code, not-run reason) of the python/bash blocks of one markdown file."""
    text = path.read_text(encoding="utf-8")
    headings = [(m.start(), m.group(1).strip().lower()) for m in _HEADING.finditer(text)]
    out = []
    for m in _FENCE.finditer(text):
        lang, code = m.group(1).lower(), m.group(2)
        if lang not in ("python", "bash", "sh", "shell"):
            continue
        section = next((h for pos, h in reversed(headings) if pos < m.start()), "")
        if only_quick_start and section != "quick start":
            continue
        if code.strip() in SETUP_COMMANDS:
            continue
        before = text[:m.start()].rstrip().splitlines()
        reason = None
        if before:
            nr = _NOT_RUN.search(before[-1])
            reason = nr.group(1) if nr else None
        line = text[:m.start()].count("\n") + 1
        out.append((f"{path.relative_to(ROOT)}:{line}", "python" if lang == "python" else "bash", code, reason))
    return out


def _all_blocks():
    blocks = _blocks(ROOT / "README.md", only_quick_start=False)
    for doc in sorted((ROOT / "docs").glob("*.md")):
        blocks += _blocks(doc, only_quick_start=True)
    return blocks


BLOCKS = _all_blocks()


# A result the docs state in a comment after a print is checked, not only printed:
#   print(EXPR)  # "text"                   EXPR equals the string
#   print(EXPR)  # valid under the schema   jsonschema accepts EXPR under the block's `schema`
_RESULT = re.compile(r"^print\((?P<expr>.*)\)\s+#\s*(?P<claim>.*)$")


def documented_results(code: str) -> list[str]:
    """The checks (Python lines, appended to the block) of the results a python block documents."""
    checks = []
    for line in code.splitlines():
        m = _RESULT.match(line.strip())
        if not m:
            continue
        expr, claim = m["expr"], m["claim"]
        if re.fullmatch(r'"[^"\\]*"', claim):
            checks.append(f"assert ({expr}) == {claim}, repr({expr})")
        elif claim.startswith("valid under the schema"):
            checks.append(f"import jsonschema; jsonschema.validate({expr}, schema)")
    return checks


def test_readme_documented_results_are_checked():
    """The README's documented results (" Paris", "valid under the schema") each have a check."""
    checks = [c for b in BLOCKS if b[0].startswith("README.md") and b[1] == "python" and b[3] is None
              for c in documented_results(b[2])]
    assert any(c.endswith('== " Paris", repr(m.tokenizer.decode([int(logits.argmax())]))') for c in checks), checks
    assert any("jsonschema.validate(" in c for c in checks), checks


def test_readme_has_runnable_blocks_and_reports_skips():
    runnable = [b for b in BLOCKS if b[3] is None]
    skipped = [b for b in BLOCKS if b[3] is not None]
    print(f"\n{len(runnable)} snippet blocks run, {len(skipped)} marked not run: "
          + "; ".join(f"{b[0]} ({b[3]})" for b in skipped))
    assert any(b[0].startswith("README.md") and b[1] == "python" for b in runnable)
    assert any(b[0].startswith("README.md") and b[1] == "bash" for b in runnable)


@pytest.fixture(scope="module")
def workdir_factory(tmp_path_factory):
    def make() -> tuple[Path, dict]:
        d = tmp_path_factory.mktemp("snippet")  # empty: the block runs where a reader starts
        bindir = tmp_path_factory.mktemp("bin")  # the `cyb-llm` shim, outside the block's folder
        shim = bindir / "cyb-llm"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cyb_llm.cli "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
        env = dict(os.environ)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        if env.get("PYTHONPATH"):  # a development checkout: keep it valid from another folder
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
        return d, env

    return make


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[3] is None], ids=lambda b: b[0])
def test_snippet_runs_as_written(block, workdir_factory):
    where, lang, code, _ = block
    d, env = workdir_factory()
    if lang == "python":  # the results the block documents are checked after it
        code = "\n".join([code, *documented_results(code)])
    cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    r = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
