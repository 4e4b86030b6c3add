"""Diffusion sampling on numpy: noise schedulers (cyb_llm.diffusion.schedulers) and the
one-step terrain sampler (cyb_llm.diffusion.terrain); docs/diffusion.md.

Light on purpose: importing the package loads neither submodule; ``from
cyb_llm.diffusion import schedulers`` / ``terrain`` does.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["schedulers", "terrain"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
