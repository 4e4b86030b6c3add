"""Regenerates tests/data/expected_declines.json: the (case, op) pairs of the op matrix
(tests/test_ops.py) that each non-cpu backend declines (the dispatcher falls back to the cpu).

Runs the matrix's nox and wgpu+rs cases with CYB_RECORD_DECLINES set (run() then appends each decline
to a file instead of checking it against the committed list) and writes the list, sorted, per
backend. A backend whose row did not run here (no wgpu adapter) keeps its committed entries, and the
tool says so. Review the diff before committing it: a new decline is a lost kernel, a removed one a
new kernel (docs/testing.md, "Expected declines").

Usage: PYTHONPATH=python python tools/expected_declines.py [extra pytest arguments]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
OUT = os.path.join(ROOT, "tests", "data", "expected_declines.json")
BACKENDS = ("nox", "wgpu+rs")


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from placement import wgpu_skip_reason

    wgpu_skip = wgpu_skip_reason()
    ran = [b for b in BACKENDS if not (b == "wgpu+rs" and wgpu_skip)]
    with tempfile.TemporaryDirectory() as tmp:
        rec = os.path.join(tmp, "declines.jsonl")
        open(rec, "w").close()
        env = dict(os.environ, CYB_RECORD_DECLINES=rec)
        cmd = [sys.executable, "-m", "pytest", os.path.join(ROOT, "tests", "test_ops.py"), "-q", "-p", "no:cacheprovider",
               "-k", " or ".join("nox" if b == "nox" else "wgpu" for b in ran), *argv]
        r = subprocess.run(cmd, env=env, cwd=ROOT)
        if r.returncode not in (0, 5):
            print(f"expected_declines: the matrix failed (exit {r.returncode}); nothing written", file=sys.stderr)
            return 1
        with open(rec, encoding="utf-8") as f:
            got = [json.loads(line) for line in f if line.strip()]
    old = {}
    if os.path.exists(OUT):
        with open(OUT, encoding="utf-8") as f:
            old = json.load(f)["declines"]
    declines = {b: sorted({k for be, k in got if be == b}) for b in ran}
    for b in BACKENDS:
        if b not in ran:
            declines[b] = old.get(b, [])
            print(f"expected_declines: {b} did not run here ({wgpu_skip}); its {len(declines[b])} committed "
                  f"entries are kept", file=sys.stderr)
    data = {"about": "The op matrix's cases each backend declines (tests/test_ops.py; regenerate with "
                     "`PYTHONPATH=python python tools/expected_declines.py`, review the diff; docs/testing.md).",
            "declines": {b: declines[b] for b in BACKENDS}}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    for b in BACKENDS:
        before, after = set(old.get(b, [])), set(declines[b])
        print(f"{b}: {len(after)} declines ({len(after - before)} new, {len(before - after)} gone)")
        for k in sorted(after - before):
            print(f"  + {k}")
        for k in sorted(before - after):
            print(f"  - {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
