"""Deprecated alias of the old cyb_llm.whisper_decode, split by issue 43 (one home for every
pipeline) into cyb_llm.speech.common (constants, WhisperRuntime, WhisperTokens), .search (logits
rules, greedy, beam search, WindowDecoder), .alignment (word timestamps) and .pipeline
(WhisperPipeline, long form). The same objects under the old name. Importing it warns; it goes in
the next release."""
import warnings

from .speech import alignment as _alignment
from .speech import common as _common
from .speech import pipeline as _pipeline
from .speech import search as _search

__all__ = []
for _m in (_common, _search, _alignment, _pipeline):
    globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
    __all__ += [n for n in _m.__all__ if n not in __all__]
warnings.warn("cyb_llm.whisper_decode is deprecated: import cyb_llm.speech.search, .alignment, .pipeline or "
              ".common", DeprecationWarning, stacklevel=2)
