"""Diffusion: the pipeline's class (cyb_llm.diffusion.model.DiffusionModel), noise schedulers on
numpy (cyb_llm.diffusion.schedulers), the one-step terrain sampler (cyb_llm.diffusion.terrain)
and the PNG writer (cyb_llm.diffusion.png); docs/diffusion.md.

Light on purpose: importing the package loads no submodule; ``from cyb_llm.diffusion import
schedulers`` (``model``, ``terrain``, ``png``) does.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["model", "schedulers", "terrain", "png"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
