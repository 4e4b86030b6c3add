"""Deprecated alias of cyb_llm.text.generate, where this module lives since issue 43 (one home for
every pipeline): the same objects under the old name. Importing it warns; it goes in the next release."""
import warnings

from .text import generate as _moved

globals().update({k: v for k, v in vars(_moved).items() if not k.startswith("__")})
if hasattr(_moved, "__all__"):
    __all__ = list(_moved.__all__)
warnings.warn("cyb_llm.generate is deprecated: import cyb_llm.text.generate", DeprecationWarning, stacklevel=2)
