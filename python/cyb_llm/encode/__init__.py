"""The encoder pipeline (cyb_llm.pipelines kind "encoder"): BERT-family encoders.

    model.py    Encoder: embed, classify, classify_tokens, rerank, create_embedding, encode
                (cyb_llm.load gives it for the model types of the native encoder family)
"""
from __future__ import annotations

from .model import POOLING_MODES, Encoder, max_length

__all__ = ["Encoder", "POOLING_MODES", "max_length"]
