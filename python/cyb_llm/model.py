"""Deprecated alias of the old cyb_llm.model, split by issue 43 (one home for every pipeline):
Model, Conversation and load are cyb_llm.base's (Model(path) returns the pipeline's class: a
TextModel for a decoder), token_id_array is cyb_llm.ids', TextModel cyb_llm.text.model's. The same
objects under the old name. Importing it warns; it goes in the next release."""
import warnings

from . import base as _base
from . import ids as _ids
from .text import model as _text_model

for _m in (_ids, _base, _text_model):
    globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
__all__ = ["Model", "TextModel", "Conversation", "load", "token_id_array", "DEFAULT_MAX_CONTEXT"]
warnings.warn("cyb_llm.model is deprecated: import cyb_llm.base (Model, Conversation, load), cyb_llm.ids "
              "(token_id_array) or cyb_llm.text.model (TextModel)", DeprecationWarning, stacklevel=2)
