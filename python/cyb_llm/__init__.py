"""cyb_llm: an inference runtime for single-file `.model` packages."""
from __future__ import annotations

from . import _core  # noqa: F401  (the native core)

__version__ = "0.1.0"
