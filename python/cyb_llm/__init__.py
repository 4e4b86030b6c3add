"""cyb_llm: an inference runtime for single-file `.model` packages."""
from __future__ import annotations

import os as _os

if _os.environ.get("CYB_LLM_CORE_DIR"):  # a dev build tree's _core first (CMakeLists.txt, CYB_PY_MODULE_DIR)
    __path__.insert(0, _os.environ["CYB_LLM_CORE_DIR"])
from . import _core  # noqa: E402,F401  (the native core)
from . import errors, hub
from .errors import (BackendInit, Error, FormatError, InvalidConfig, MissingTensor, OutOfMemory,
                     ShapeMismatch, TokenizerError, UnsupportedOp, WeightFormatMismatch)
from .base import Conversation, Model, load
from .encode import Encoder
from .format import ModelFile, describe, write_model
from .text import Generator, TextModel
from .speech import WhisperModel

__version__ = "0.1.0"

__all__ = [
    "load", "hub",
    "Model", "TextModel", "Encoder", "WhisperModel",
    "Generator", "Conversation",
    "ModelFile", "describe", "write_model", "errors",
    "Error", "FormatError", "UnsupportedOp", "ShapeMismatch", "MissingTensor",
    "WeightFormatMismatch", "OutOfMemory", "BackendInit", "InvalidConfig", "TokenizerError",
]
