"""The decoder pipeline's model: `TextModel` (cyb_llm.pipelines, kind "text").

    m = cyb_llm.load("smollm2")          # a TextModel
    conv = m.new_conversation()
    logits = conv.forward(m.tokenize("Hello"))
    m.create_chat_completion([{"role": "user", "content": "Hi"}])

The hot loop (every op of a forward) runs natively; Python calls `Conversation.forward`
once per step.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..base import Conversation, Model
from ..errors import InvalidConfig
from ..ids import token_id_array
from . import generate as _generate
from .chat import chat_from_modelfile

DEFAULT_MAX_CONTEXT = 4096


class TextModel(Model):
    """A loaded decoder `.model` (curated family or graph path): conversations, forwards, tokens,
    generation (see `cyb_llm.load`)."""

    kind = "text"
    #: The file's chat template (cyb_llm.text.chat.ChatTemplate), None when it has none.
    chat: Any = None
    bos_token_id: int | None = None

    def _setup(self, n_ctx: int | None = None) -> None:
        # n_ctx: the context (KV cache positions) of conversations made without one (None: min(model
        # context, 4096); 0: the model's whole context), as llama-cpp-python's Llama(n_ctx=...)
        max_position = self._native.max_position
        if n_ctx is not None and (isinstance(n_ctx, bool) or not isinstance(n_ctx, int)
                                  or not 0 <= n_ctx <= max_position):
            raise InvalidConfig(field="n_ctx", reason=f"must be an integer in [0, {max_position}] "
                                                      f"(the model's context; 0 = all of it), got {n_ctx!r}")
        self._n_ctx = min(max_position, DEFAULT_MAX_CONTEXT) if n_ctx is None else (n_ctx or max_position)
        self.chat = chat_from_modelfile(self.file) if "chat" in self.file.sections else None
        self._eos: set[int] | None = None
        self.bos_token_id = self.config.get("tokenizer", {}).get("bos_token_id")

    @property
    def eos_token_ids(self) -> set[int]:
        """End-of-generation ids: the config's [tokenizer] eos_token_ids plus the tokenizer's own.
        Computed on first use so that loading never waits for the tokenizer."""
        if self._eos is None:
            tok_cfg = self.config.get("tokenizer", {})
            eos = set(int(i) for i in tok_cfg.get("eos_token_ids", []) or [])
            if "tokenizer" in self.file.sections or "vocab" in self.file.sections:
                eos.update(int(i) for i in (getattr(self.tokenizer, "eos_token_ids", None) or []))
            self._eos = eos
        return self._eos

    @property
    def forward_chunk_tokens(self) -> int:
        """Tokens per chunk of a long forward on this model's backend (256 on cpu / nox, 512 on
        wgpu+rs); Ctrl-C and the progress callback act between chunks."""
        return self._native.forward_chunk_tokens

    @property
    def max_position(self) -> int:
        return self._native.max_position

    def n_ctx(self) -> int:
        """The context (KV cache positions) of conversations made without one: `load(..., n_ctx=)`,
        else min(model context, 4096)."""
        return self._n_ctx

    def new_conversation(self, max_context: int | None = None) -> Conversation:
        """A conversation with its own KV cache of `max_context` positions
        (default: `n_ctx()`). A non-integer is a TypeError; outside
        [1, max_position] InvalidConfig; more than the memory budget OutOfMemory."""
        if max_context is None:
            max_context = self._n_ctx
        return Conversation(self, self._native.new_conversation(max_context))

    def forward_batch(self, conversations: Sequence[Conversation], ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """One decode step of several conversations at once: `ids[i]` is the next token of
        `conversations[i]`, each at its own position. Returns [n, vocab] logits (row i for
        conversation i). The curated decoders run the matrix products once for all rows
        (the weights are read once per step) and attention per conversation over its own
        cache; each row equals that conversation's own one-token forward within the
        bulk-vs-token tolerances (docs/runtime.md). A conversation listed twice or in use
        elsewhere is InvalidConfig; a full context ShapeMismatch, with no conversation moved."""
        convs = list(conversations)
        for c in convs:
            if not isinstance(c, Conversation) or c.model is not self:
                raise InvalidConfig(field="conversations",
                                    reason="each must be a Conversation of this model (model.new_conversation())")
        arr = token_id_array(ids, self.vocab_size)
        return self._native.forward_batch([c._native for c in convs], arr)

    # --- observability ---------------------------------------------------
    @property
    def device_sampling(self) -> bool:
        """True when generation draws tokens on the device (wgpu+rs; docs/generation.md,
        "Sampling on the GPU")."""
        return bool(self._native.device_sampling)

    # --- graph path -------------------------------------------------------
    @property
    def execution_path(self) -> str:
        """'curated' or 'graph' (docs/graph.md)."""
        return self._native.execution_path()

    @property
    def fusion_report(self) -> str:
        """Graph path: what the fusion pass rewrote (counts per pattern, what was not fused and why)."""
        return self._native.fusion_report()

    @property
    def fusions(self) -> list[tuple[str, str]]:
        """Graph path: (pattern, fused node name) for every rewrite of the fusion pass."""
        return [tuple(e) for e in self._native.fusion_entries()]

    @property
    def last_digest(self) -> str:
        """nox: the SHA-256 digest chain (hex) of the last forward of any conversation ('' elsewhere)."""
        return self._native.last_digest()

    # --- generation ------------------------------------------------------
    def generator(self) -> _generate.Generator:
        return _generate.Generator(self)

    # cyb_llm.text.generate's functions, as methods (their signatures and docstrings): the model is `self`
    create_chat_completion = _generate.create_chat_completion
    create_completion = _generate.create_completion
    #: As llama-cpp-python's Llama: `model(prompt, ...)` is `model.create_completion(prompt, ...)`.
    __call__ = _generate.create_completion


__all__ = ["TextModel", "DEFAULT_MAX_CONTEXT"]
