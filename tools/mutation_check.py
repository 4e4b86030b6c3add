#!/usr/bin/env python3
"""Mutation check: do the default tier's tests catch plausible bugs?

Applies each bug of MUTATIONS below, one at a time, to a git worktree of HEAD
(build/mutation/src; the checkout you work in is never touched), rebuilds the
native core incrementally there (ccache, Ninja), runs the default tier's
pytest with `-x` and records the test that failed first. A mutation that no
test catches, or that no longer applies (its `old` text is not found exactly
once: the code moved, update the mutation), fails the run.

    python tools/mutation_check.py            # every mutation
    python tools/mutation_check.py rope-shift mask-off   # some of them
    python tools/mutation_check.py --list

The default tier's test files are the same as `bash tools/test.sh` runs
(tests/, not tests/slow); they are ordered cheapest first (the long golden,
CLI and packaging files last), so a bug stops the run early. It prints a
Markdown table (mutation, file, caught by, seconds) and writes it as a
report file into the work folder (build/mutation); docs/testing.md keeps the last one.
First the unmutated worktree must pass the same pytest run (the baseline): a
failure there stops the check, since a "catch" would then mean nothing
(`--no-baseline` skips it when HEAD is known green). Part of the slow
tier (`bash tools/test.sh --slow`); about 35-60 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
WORK = os.path.join(ROOT, "build", "mutation")
SRC = os.path.join(WORK, "src")


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str   # the bug, in words
    path: str   # file (repository-relative)
    old: str    # text that must occur exactly once
    new: str    # what it becomes

    @property
    def native(self) -> bool:
        return self.path.startswith("csrc/")


MUTATIONS = [
    Mutation("rope-shift", "RoPE angle of position p computed for p + 1",
             "csrc/core/rope.h",
             "const float ang = static_cast<float>(p) * inv[i];",
             "const float ang = static_cast<float>(p + 1) * inv[i];"),
    Mutation("kv-not-reset", "reset_kv_cache keeps the old position (KV cache not reset)",
             "csrc/model/model.h",
             "void reset_kv_cache() { position_ = 0; }",
             "void reset_kv_cache() {}"),
    Mutation("top-p-dropped", "top_p dropped between SamplingParams and the native sampler",
             "python/cyb_llm/sampling.py",
             "top_p=float(self.top_p),",
             "top_p=1.0,"),
    Mutation("avx2-block-dot", "one SIMD level wrong: the AVX2 int16 block dot multiplies the second half "
             "of the weights by the first half of the activations",
             "csrc/backends/cpu/kernels_x86.inc",
             "return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));",
             "return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x0));"),
    Mutation("wgpu-cpu-fallback", "wgpu+rs claims no op: the whole model silently runs on the cpu",
             "csrc/backends/wgpu/wgpu_backend.cc",
             "    return true;\n  };\n  switch (op.kind) {\n    case OpKind::Embedding:",
             "    return true;\n  };\n  if (n_in > 0) return false;\n  switch (op.kind) {\n    case OpKind::Embedding:"),
    Mutation("gelu-constant", "wrong GELU: tanh approximation's cubic coefficient 0.0447 instead of 0.044715 "
             "(x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86.inc",
             "_mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x)",
             "_mm256_fmadd_ps(_mm256_set1_ps(0.0447f), x3, x)"),
    Mutation("mask-off", "causal mask off: a prefill tile attends to later tokens of the same tile "
             "(AVX-512 attention)",
             "csrc/backends/cpu/attention_avx512.cc",
             "if (j >= lo[i] && j <= p[i]) {",
             "if (j >= lo[i] && j <= jhi) {"),
    Mutation("rms-eps-dropped", "RMSNorm without eps (x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86.inc",
             "std::sqrt(sum_squares(x, D) / static_cast<float>(D) + eps);",
             "std::sqrt(sum_squares(x, D) / static_cast<float>(D));"),
    Mutation("kquant-min-bits", "Q4_K/Q5_K: the high bits of sub-block mins 4-7 taken from the wrong byte",
             "csrc/core/quant.cc",
             "*m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);",
             "*m = (sc[j + 4] >> 4) | ((sc[j - 4] >> 6) << 4);"),
    Mutation("temperature-multiplies", "temperature multiplies the logits instead of dividing them",
             "csrc/sampling/sampler.cc",
             "w[i] /= c.temperature;",
             "w[i] *= c.temperature;"),
    Mutation("eos-ignored", "generation does not stop at an end-of-generation token",
             "python/cyb_llm/generate.py",
             "                if token in eos:\n                    finish = \"stop\"",
             "                if token in eos and False:\n                    finish = \"stop\""),
    Mutation("f16-kv-truncated", "the f16 KV cache write rounds toward zero instead of to nearest (x86 fast kernels)",
             "csrc/backends/cpu/kernels_x86.inc",
             "_mm256_cvtps_ph(load8(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)",
             "_mm256_cvtps_ph(load8(src + i), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)"),
]

# Cheapest first: the files that load real models many times, build packages or
# run subprocesses come last.
LAST = ["test_families_tiny.py", "test_generate_real.py", "test_cli.py", "test_golden_positions.py",
        "test_golden.py", "test_readme.py", "test_cpp_package.py"]


def sh(cmd, cwd=None, env=None, check=True, capture=False):
    r = subprocess.run(cmd, cwd=cwd, env=env, check=False, text=True,
                       stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    if check and r.returncode != 0:
        out = (r.stdout or "")[-4000:]
        raise SystemExit(f"mutation_check: `{' '.join(cmd)}` failed ({r.returncode})\n{out}")
    return r


def test_files() -> list[str]:
    names = sorted(f for f in os.listdir(os.path.join(SRC, "tests")) if f.startswith("test_") and f.endswith(".py"))
    first = [n for n in names if n not in LAST]
    return [os.path.join("tests", n) for n in first + [n for n in LAST if n in names]]


def worktree(rev: str) -> None:
    if os.path.isdir(SRC):
        sh(["git", "worktree", "remove", "--force", SRC], cwd=ROOT, check=False)
    os.makedirs(WORK, exist_ok=True)
    sh(["git", "worktree", "prune"], cwd=ROOT)
    sh(["git", "worktree", "add", "--detach", "--force", SRC, rev], cwd=ROOT, capture=True)


def env() -> dict:
    e = dict(os.environ)
    # The worktree's build keeps the dev build's layout (src/build/dev), so relative
    # paths and thus ccache entries are shared with build/dev of the main checkout.
    e.update(CCACHE_BASEDIR=SRC, CCACHE_NOHASHDIR="1", PYTHONPATH=os.path.join(SRC, "python"),
             HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    e.pop("CYB_LLM_CORE_DIR", None)
    e.pop("CYB_CPU_LEVEL", None)
    return e


def build() -> float:
    t0 = time.time()
    sh(["bash", "tools/devbuild.sh"], cwd=SRC, env=env(), capture=True)
    return time.time() - t0


def apply(m: Mutation) -> None:
    p = os.path.join(SRC, m.path)
    with open(p, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.old) if m.old else 0
    if n != 1:
        raise LookupError(f"{m.path}: the text to mutate occurs {n} times (expected once): {m.old!r}")
    with open(p, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))


def revert(m: Mutation) -> None:
    sh(["git", "checkout", "--", m.path], cwd=SRC)


def first_failure(xml_path: str) -> str:
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return ""
    for tc in root.iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            cls = tc.get("classname", "").replace(".", "/")
            return f"{cls}.py::{tc.get('name')}" if cls else tc.get("name", "")
    return ""


def pytest_cmd(name: str) -> list[str]:
    xml = os.path.join(WORK, f"{name}.xml")
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
            *test_files()]


def baseline() -> None:
    t0 = time.time()
    r = sh(pytest_cmd("baseline"), cwd=SRC, env=env(), check=False, capture=True)
    with open(os.path.join(WORK, "baseline.log"), "w") as f:
        f.write(r.stdout or "")
    if r.returncode != 0:
        failed = first_failure(os.path.join(WORK, "baseline.xml")) or f"exit {r.returncode}"
        raise SystemExit(f"mutation_check: the unmutated tests fail ({failed}; log: build/mutation/baseline.log): "
                         "fix that first")
    print(f"baseline: the unmutated default tier passes ({time.time() - t0:.0f} s)", flush=True)


def run_mutation(m: Mutation) -> dict:
    t0 = time.time()
    row = {"name": m.name, "what": m.what, "path": m.path, "caught_by": "", "seconds": 0}
    try:
        apply(m)
    except LookupError as e:
        row["caught_by"] = f"NOT APPLIED: {e}"
        return row
    try:
        # Always (incremental): the previous native mutation was reverted in the sources,
        # and its build must not leak into a Python-only mutation.
        try:
            build()
        except SystemExit as e:  # a mutation must compile; if not, it is a stale mutation
            row["caught_by"] = f"NOT BUILT: {str(e).splitlines()[0]}"
            return row
        xml = os.path.join(WORK, f"{m.name}.xml")
        r = sh(pytest_cmd(m.name), cwd=SRC, env=env(), check=False, capture=True)
        with open(os.path.join(WORK, f"{m.name}.log"), "w") as f:
            f.write(r.stdout or "")
        if r.returncode == 0:
            row["caught_by"] = "NOT CAUGHT"
        else:
            row["caught_by"] = first_failure(xml) or f"pytest exit {r.returncode} (see build/mutation/{m.name}.log)"
    finally:
        revert(m)
        row["seconds"] = round(time.time() - t0)
    return row


def table(rows: list[dict]) -> str:
    out = ["| mutation | bug | file | caught by (first failing test) | seconds |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['name']}` | {r['what']} | {r['path']} | {r['caught_by']} | {r['seconds']} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run (HEAD known green)")
    a = ap.parse_args()
    muts = MUTATIONS
    if a.list:
        for m in muts:
            print(f"{m.name:24s} {m.path}: {m.what}")
        return 0
    unknown = set(a.names) - {m.name for m in muts}
    if unknown:
        ap.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in muts if not a.names or m.name in a.names]
    t0 = time.time()
    worktree(a.rev)
    print(f"worktree {SRC} at {a.rev}; unmutated build: {build():.0f} s", flush=True)
    if not a.no_baseline:
        baseline()
    rows = []
    for m in chosen:
        print(f"-- {m.name}: {m.what}", flush=True)
        rows.append(run_mutation(m))
        print(f"   caught by: {rows[-1]['caught_by']} ({rows[-1]['seconds']} s)", flush=True)
    build()  # leave the worktree's build unmutated
    report = table(rows)
    total = round(time.time() - t0)
    with open(os.path.join(WORK, "report.md"), "w") as f:
        f.write(report + f"\n\ntotal: {total} s\n")
    print("\n" + report + f"\n\ntotal: {total} s")
    missed = [r["name"] for r in rows if r["caught_by"].startswith("NOT")]
    if missed:
        print(f"mutation_check: not caught or not applied: {', '.join(missed)}", file=sys.stderr)
        return 1
    print(f"mutation_check: {len(rows)}/{len(rows)} caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
