"""tools/mutation_check.py counts only real catches (docs/testing.md, "Mutation check"): a test
id that failed with the bug counts only when it passes again on the unmutated tree, a snapshot
test's catch never counts alone, errors and killed runs are no catch, and the clean
environment carries no pointer to another tree's build. The builds and pytest runs are
replaced by recorded outcomes here; the real runs are in the slow tier."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("mutation_check", os.path.join(HERE, "..", "tools", "mutation_check.py"))
mc = importlib.util.module_from_spec(_spec)
sys.modules["mutation_check"] = mc  # dataclasses look their module up there
_spec.loader.exec_module(mc)

SNAP = mc.SNAPSHOT[0]
MUT = mc.Mutation("m", "a bug", "python/cyb_llm/x.py", "a", "b", ("tests/test_x.py",))


def _outcome(failed=(), errors=(), killed=()):
    return {"failed": list(failed), "errors": list(errors), "passed": 1, "skipped": 0, "killed": list(killed),
            "msgs": {}}


def _run(monkeypatch, mutant, clean):
    """run_mutation with the given outcomes of the mutant's run and of the unmutated re-run; the
    ids the re-run was asked for are recorded."""
    asked = []
    for name in ("apply", "revert"):
        monkeypatch.setattr(mc, name, lambda m: None)
    monkeypatch.setattr(mc, "build", lambda: 0.0)

    def run_tests(tag, selections, env, timeout):
        if tag.endswith(".mutant"):
            return mutant
        asked.extend(selections[0])
        return clean

    monkeypatch.setattr(mc, "run_tests", run_tests)
    return mc.run_mutation(MUT, full=False, timeout=60), asked


def test_a_failure_counts_only_when_it_passes_unmutated(monkeypatch):
    row, asked = _run(monkeypatch, _outcome(["t::a", "t::b", SNAP]), _outcome(["t::b"]))
    assert asked == sorted(["t::a", "t::b", SNAP])  # exactly the failed ids are re-run
    assert row["status"] == "caught"
    assert row["behaviour"] == ["t::a"] and row["snapshot"] == [SNAP] and row["not_confirmed"] == ["t::b"]


@pytest.mark.parametrize("mutant, clean", [
    (_outcome(), _outcome()),                                        # nothing failed
    (_outcome(errors=["t::a"]), _outcome()),                         # a setup/collection error only
    (_outcome(["t::a"]), _outcome(["t::a"])),                        # fails unmutated too
    (_outcome([SNAP]), _outcome()),                                  # a snapshot test only
    (_outcome(["t::a"]), _outcome(killed=["t::a (exit 124)"])),      # the re-run did not finish
    (_outcome(killed=["tests/test_x.py (exit 124)"]), _outcome()),   # killed by the time limit
], ids=["none", "error", "fails-unmutated", "snapshot-only", "rerun-killed", "killed"])
def test_no_real_failure_is_not_caught(monkeypatch, mutant, clean):
    row, _ = _run(monkeypatch, mutant, clean)
    assert row["status"] == "NOT CAUGHT" and row["behaviour"] == []


def test_clean_environment_drops_build_pointers(monkeypatch):
    for k, v in {"CYB_NATIVE_BUILD_DIR": "/elsewhere/build", "CYB_LLM_CORE_DIR": "/elsewhere/py",
                 "CYB_NO_ALLOC_MODELS": "/elsewhere/m.model", "CYB_CPU_LEVEL": "avx2", "CYB_WGPU_LIB": "/x.so",
                 "PYTHONPATH": "/elsewhere/python", "LD_LIBRARY_PATH": "/elsewhere/lib",
                 "CYB_LLM_CACHE": "/models"}.items():
        monkeypatch.setenv(k, v)
    env = mc.clean_env()
    assert not [k for k in env if k.startswith("CYB_") and k not in mc.KEEP_VARS + ("CYB_REQUIRE_PEERS",)]
    assert env["CYB_LLM_CACHE"] == "/models" and env["CYB_REQUIRE_PEERS"] == "1"
    assert "LD_LIBRARY_PATH" not in env
    assert env["PYTHONPATH"].split(os.pathsep) == [os.path.join(mc.SRC, "python"), mc.PLUGIN_DIR]
