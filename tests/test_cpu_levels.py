"""The table of CPU levels the build ships, and which of them the test tiers ran.

`python tests/test_cpu_levels.py RESULTS` (the last tier of tools/test.sh) prints one row per
level compiled into the build (`_core.cpu_levels_compiled()`, plus `neon` from the arm64
cross-build) saying `run` or `not run: <reason>`, from the evidence the tiers left in RESULTS:

  default.xml        junit XML of the default pytest run: the op matrix (tests/test_ops.py,
                     cases with the parameter `cpu:<level>`) and the full golden sets
                     (tests/test_golden.py) at the default level, named in default_level;
  golden-<level>.xml junit XML of the short golden checks at each other level;
  arm64.log          output of tools/arm64_check.sh (test_levels, test_core, test_no_alloc
                     under qemu-aarch64).

An x86 level counts as run when at least one op-matrix case and one golden case at that level
passed; `neon` when all three native programs printed OK under qemu, test_levels made at least
one check and test_no_alloc reported steady-state numbers at the neon level. It exits 1 when a
level this CPU supports (`_core.cpu_levels()`), or `neon` where qemu-aarch64 and the cross
compiler are installed, was not run. The pytest tests below check that logic on made-up results.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET

EMULATED = {"neon": ("qemu-aarch64", "aarch64-linux-gnu-g++")}  # level -> tools its tier needs


def passed_cases(xml_path: str) -> list[tuple[str, str]]:
    """(classname, name) of every testcase that passed (no failure, error or skip child)."""
    if not os.path.exists(xml_path):
        return []
    out = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        if any(child.tag in ("failure", "error", "skipped") for child in case):
            continue
        out.append((case.get("classname", ""), case.get("name", "")))
    return out


def _count(cases, module: str, level: str | None = None) -> int:
    pat = re.compile(r"[\[-]cpu:" + re.escape(level) + r"[\]-]") if level else None
    return sum(1 for cls, name in cases
               if cls.split(".")[-1] == module and (pat is None or pat.search(name)))


def neon_evidence(log: str) -> str | None:
    """None when the qemu log shows the NEON run complete, else what is missing."""
    runs = dict(re.findall(r"^== (\w+) \(qemu-aarch64\)\n(.*?)(?=^== |\Z)", log, re.S | re.M))
    for prog in ("test_levels", "test_core", "test_no_alloc"):
        if prog not in runs:
            return f"{prog} did not run under qemu"
        if runs[prog].rstrip().splitlines()[-1:] != ["OK"]:
            return f"{prog} did not end with OK under qemu"
    m = re.search(r"^(\d+) checks$", runs["test_levels"], re.M)
    if not m or int(m.group(1)) == 0:
        return "test_levels made no checks (the neon level was not offered)"
    if not re.search(r"^neon\s", runs["test_no_alloc"], re.M):
        return "test_no_alloc did not run the neon level"
    return None


def level_table(results: str, compiled: list[str], available: list[str],
                have_tool=shutil.which) -> tuple[list[tuple[str, str]], list[str]]:
    """([(level, status)], [failures]) for the levels of this build and the emulated ones."""
    default_level = ""
    p = os.path.join(results, "default_level")
    if os.path.exists(p):
        default_level = open(p).read().strip()
    default = passed_cases(os.path.join(results, "default.xml"))
    rows, failures = [], []
    levels = list(compiled) + [lvl for lvl in EMULATED if lvl not in compiled]
    for lvl in levels:
        if lvl in available:
            ops = _count(default, "test_ops", lvl)
            golden_xml = default if lvl == default_level else \
                passed_cases(os.path.join(results, f"golden-{lvl}.xml"))
            golden = _count(golden_xml, "test_golden")
            if ops and golden:
                rows.append((lvl, f"run ({ops} op-matrix cases, {golden} golden cases passed)"))
            else:
                missing = [w for w, n in (("op matrix", ops), ("golden checks", golden)) if not n]
                rows.append((lvl, "NOT RUN although this CPU supports it: no passed " + ", ".join(missing)))
                failures.append(lvl)
        elif lvl in EMULATED:
            log_path = os.path.join(results, "arm64.log")
            missing_tools = [t for t in EMULATED[lvl] if not have_tool(t)]
            if os.path.exists(log_path):
                why = neon_evidence(open(log_path, encoding="utf-8", errors="replace").read())
                if why is None:
                    rows.append((lvl, "run (arm64 build under qemu-aarch64: test_levels, test_core, test_no_alloc)"))
                    continue
                rows.append((lvl, f"NOT RUN: {why}"))
                failures.append(lvl)
            elif missing_tools:
                rows.append((lvl, f"not run: this CPU lacks {lvl}; {', '.join(missing_tools)} not installed"))
            else:
                rows.append((lvl, "NOT RUN although qemu-aarch64 and the cross compiler are installed"))
                failures.append(lvl)
        else:
            rows.append((lvl, f"not run: this CPU lacks {lvl}; no emulator available"))
    return rows, failures


def main(argv: list[str]) -> int:
    from cyb_llm import _core

    rows, failures = level_table(argv[1], _core.cpu_levels_compiled(), _core.cpu_levels())
    print(f"CPU levels of this build (this CPU runs: {', '.join(_core.cpu_levels())}):")
    width = max(len(lvl) for lvl, _ in rows)
    for lvl, status in rows:
        print(f"  {lvl:<{width}}  {status}")
    if failures:
        print(f"FAIL: levels not run: {', '.join(failures)}")
        return 1
    return 0


# ---------------------------------------------------------------- tests of the table itself

def _junit(path, cases):
    """cases: [(module, name, outcome)] with outcome 'pass' | 'failure' | 'skipped'."""
    body = ""
    for module, name, outcome in cases:
        child = "" if outcome == "pass" else f"<{outcome} message='x'/>"
        body += f"<testcase classname='tests.{module}' name='{name}'>{child}</testcase>"
    with open(path, "w") as f:
        f.write(f"<testsuites><testsuite name='pytest'>{body}</testsuite></testsuites>")


X86 = ["scalar", "avx2", "avx512", "amx"]
NEON_LOG = ("== test_levels (qemu-aarch64)\n398 checks\nOK\n== test_core (qemu-aarch64)\nOK\n"
            "== test_no_alloc (qemu-aarch64)\nscalar  fast     steady-state allocations: 0\n"
            "neon    fast     steady-state allocations: 0\nOK\n")


def _results(tmp_path, levels, default="avx512", golden=None, ops_outcome="pass", neon_log=NEON_LOG):
    _junit(tmp_path / "default.xml",
           [("test_ops", f"test_matmul[cpu:{lvl}-q4_k]", ops_outcome) for lvl in levels]
           + [("test_ops", "test_matmul[wgpu+rs-q4_k]", "pass"), ("test_golden", "test_greedy[smollm2]", "pass")])
    (tmp_path / "default_level").write_text(default + "\n")
    for lvl in golden if golden is not None else [x for x in levels if x != default]:
        _junit(tmp_path / f"golden-{lvl}.xml", [("test_golden", "test_short[gemma3]", "pass")])
    if neon_log is not None:
        (tmp_path / "arm64.log").write_text(neon_log)
    return str(tmp_path)


def test_every_supported_level_run(tmp_path):
    res = _results(tmp_path, ["scalar", "avx2", "avx512"])
    rows, failures = level_table(res, X86, ["scalar", "avx2", "avx512"], have_tool=lambda t: True)
    assert failures == []
    status = dict(rows)
    assert status["avx2"].startswith("run (1 op-matrix cases, 1 golden cases")
    assert status["amx"] == "not run: this CPU lacks amx; no emulator available"
    assert status["neon"].startswith("run (arm64 build under qemu")


def test_missing_golden_tier_fails(tmp_path):
    res = _results(tmp_path, ["scalar", "avx2", "avx512"], golden=["scalar"])
    rows, failures = level_table(res, X86, ["scalar", "avx2", "avx512"], have_tool=lambda t: True)
    assert failures == ["avx2"]
    assert dict(rows)["avx2"] == "NOT RUN although this CPU supports it: no passed golden checks"


def test_failed_or_skipped_cases_do_not_count(tmp_path):
    for outcome in ("failure", "skipped"):
        res = _results(tmp_path, ["scalar", "avx2"], default="avx2", ops_outcome=outcome)
        rows, failures = level_table(res, X86, ["scalar", "avx2"], have_tool=lambda t: True)
        assert failures == ["scalar", "avx2"], outcome
        assert "no passed op matrix" in dict(rows)["scalar"]


def test_level_must_match_exactly(tmp_path):
    # cases of avx512 are no evidence for avx2, and a level name inside a longer one is not a match
    res = _results(tmp_path, ["scalar", "avx512"], default="avx512", golden=["scalar", "avx2"])
    rows, failures = level_table(res, X86, ["scalar", "avx2", "avx512"], have_tool=lambda t: True)
    assert failures == ["avx2"]
    cases = [("tests.test_ops", "test_matmul[cpu:avx512x-f32]"), ("tests.test_ops", "test_rope[cpu:avx512]"),
             ("tests.test_ops", "test_add[T5-cpu:avx512-q4_k]"), ("tests.test_ops_other", "t[cpu:avx512]")]
    assert _count(cases, "test_ops", "avx512") == 2


def test_neon(tmp_path):
    no_neon = NEON_LOG.replace("neon    fast", "scalar  precise")
    bad_ok = NEON_LOG.replace("OK\n== test_core", "FAIL\n== test_core")
    no_checks = NEON_LOG.replace("398 checks", "0 checks")
    for log, why in ((no_neon, "test_no_alloc did not run the neon level"),
                     (bad_ok, "test_levels did not end with OK under qemu"),
                     (no_checks, "test_levels made no checks")):
        res = _results(tmp_path, ["scalar"], default="scalar", neon_log=log)
        rows, failures = level_table(res, ["scalar"], ["scalar"], have_tool=lambda t: True)
        assert failures == ["neon"] and why in dict(rows)["neon"], log
    os.remove(tmp_path / "arm64.log")
    rows, failures = level_table(str(tmp_path), ["scalar"], ["scalar"], have_tool=lambda t: False)
    assert failures == [] and dict(rows)["neon"] == (
        "not run: this CPU lacks neon; qemu-aarch64, aarch64-linux-gnu-g++ not installed")
    rows, failures = level_table(str(tmp_path), ["scalar"], ["scalar"], have_tool=lambda t: True)
    assert failures == ["neon"]


def test_compiled_levels_of_this_build():
    import platform

    from cyb_llm import _core

    compiled, available = _core.cpu_levels_compiled(), _core.cpu_levels()
    assert compiled[0] == "scalar" and set(available) <= set(compiled)
    if platform.machine() in ("x86_64", "AMD64"):
        assert compiled == X86
    elif platform.machine() in ("aarch64", "arm64"):
        assert compiled == ["scalar", "neon"]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
