"""cyb_llm: an inference runtime for single-file `.model` packages."""
from __future__ import annotations

from . import _core  # noqa: F401  (the native core)
from . import errors
from .errors import (BackendInit, Error, FormatError, InvalidConfig, MissingTensor, OutOfMemory,
                     ShapeMismatch, TokenizerError, UnsupportedOp, WeightFormatMismatch)
from .format import ModelFile, describe, write_model
from .model import Conversation, Model, load

__version__ = "0.1.0"

__all__ = [
    "load",
    "Model",
    "Conversation",
    "ModelFile", "describe", "write_model", "errors",
    "Error", "FormatError", "UnsupportedOp", "ShapeMismatch", "MissingTensor",
    "WeightFormatMismatch", "OutOfMemory", "BackendInit", "InvalidConfig", "TokenizerError",
]
