"""The text pipeline (cyb_llm.pipelines kind "text"): decoder models and what runs on them.

    model.py       TextModel: conversations, forwards, tokens (cyb_llm.load gives it for decoders)
    generate.py    Generator and the OpenAI-shaped completions (create_chat_completion, ...)
    sampling.py    SamplingParams: the model's [sampling] defaults and the native sampler
    chat.py        the chat template (the file's [chat] section, rendered in a Jinja sandbox as HF does)
    structured.py  structured output: JSON schema / Lark grammar -> the sampler's token mask
    toolcalls.py   tool calls: the prompt, the call grammar, parsing the answer
"""
from __future__ import annotations

from .generate import (Chunk, GenerationStats, Generator, Stream, create_chat_completion, create_completion,
                       merge_chat_chunks, merge_completion_chunks)
from .model import DEFAULT_MAX_CONTEXT, TextModel
from .sampling import SamplingParams

__all__ = ["TextModel", "DEFAULT_MAX_CONTEXT", "Generator", "Stream", "Chunk", "GenerationStats",
           "create_chat_completion", "create_completion", "merge_chat_chunks", "merge_completion_chunks",
           "SamplingParams"]
