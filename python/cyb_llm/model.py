"""Python face of the native model: load, conversations, forward.

The hot loop (every op of a forward) runs natively; Python calls
`Conversation.forward` once per step.
"""
from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from . import _core
from . import generate as _generate

DEFAULT_MAX_CONTEXT = 4096


def token_id_array(ids: Any, vocab_size: int | None = None) -> np.ndarray:
    """`ids` as a contiguous 1-D int32 array, never coerced: a flat sequence of Python or
    numpy integers, or a 1-D integer numpy array. Floats, bools, strings, bytes and nested
    sequences raise TypeError; a 2-D array ShapeMismatch; an id outside [0, vocab_size)
    (or outside int32 when vocab_size is None) InvalidConfig naming the id and its index."""
    from .errors import InvalidConfig, ShapeMismatch

    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got an array of dtype {ids.dtype}")
        if ids.ndim != 1:
            raise ShapeMismatch("forward (ids)", [-1], list(ids.shape))
        arr = ids
    elif isinstance(ids, (str, bytes, bytearray, memoryview)) or not isinstance(ids, Sequence):
        raise TypeError(f"token ids must be a sequence of ints or a 1-D integer array, got {type(ids).__name__}")
    else:
        for k, i in enumerate(ids):
            if type(i) is not int and (isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer))):
                raise TypeError(f"token ids must be ints, got {type(i).__name__} {i!r} at index {k}")
        try:
            arr = np.array(ids, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is None or arr.ndim != 1:  # ints beyond int64 (or a sequence numpy reads otherwise)
            arr = np.array([int(i) for i in ids], dtype=object)
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        limit = vocab_size if vocab_size is not None else 2**31
        if lo < 0 or hi >= limit:
            at = int(np.argmax((arr < 0) | (arr >= limit)))
            what = f"the vocab of {vocab_size}" if vocab_size is not None else "the int32 range"
            raise InvalidConfig(field="input_ids",
                                reason=f"token id {int(arr[at])} at index {at} is outside [0, {limit}) ({what})")
    return np.ascontiguousarray(arr, dtype=np.int32)


class Conversation:
    """One conversation: its own KV cache over the shared weights of a Model."""

    def __init__(self, model: "Model", native: Any):
        self.model = model
        self._native = native

    @property
    def position(self) -> int:
        """Number of tokens already in the KV cache."""
        return self._native.position

    @property
    def max_context(self) -> int:
        return self._native.max_context

    def forward(self, ids: Sequence[int] | np.ndarray, all_logits: bool = False) -> np.ndarray:
        """Runs `ids` at the current position; returns the logits of the last
        position ([vocab]) or of every position ([len(ids), vocab]), as a fresh array."""
        arr = token_id_array(ids, self.model.vocab_size)
        return self.model._native.forward(self._native, arr, all_logits)

    def reset_kv_cache(self) -> None:
        self._native.reset_kv_cache()

    def truncate(self, position: int) -> None:
        """Keeps the first `position` cached tokens and drops the rest (a shared prompt
        prefix stays cached; the next forward continues at `position`)."""
        self._native.truncate(position)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of this conversation's KV cache."""
        return self._native.kv_cache_bytes

    @property
    def frame_pool_bytes(self) -> int:
        return self._native.frame_pool_bytes()


class Model:
    """A loaded `.model` (see `cyb_llm.load`)."""

    def __init__(self, path: "str | os.PathLike | ModelFile", backend: str | None = None, precise: bool = False,
                 threads: int | None = None, exec_path: str | None = None, fuse: bool = True,
                 max_memory: int | None = None, n_ctx: int | None = None):
        from .errors import InvalidConfig
        from .format import ModelFile

        t0 = time.perf_counter()
        # The file is mapped and validated once (ModelFile); the native load
        # builds the runtime model over that same mapping.
        self.file = path if isinstance(path, ModelFile) else ModelFile(path)
        self.path = self.file.path
        # threads: 0/None = physical cores, clamped to _core.max_threads(), negative InvalidConfig;
        # max_memory: budget in bytes (None: available physical memory), docs/errors.md "Guarantees".
        self._native = _core.load(self.file._native, backend or "", bool(precise),
                                  0 if threads is None else threads, exec_path or "", bool(fuse), max_memory)
        self.config: dict = self.file.config
        # n_ctx: the context (KV cache positions) of conversations made without one (None: min(model
        # context, 4096); 0: the model's whole context), as llama-cpp-python's Llama(n_ctx=...)
        if n_ctx is not None and (isinstance(n_ctx, bool) or not isinstance(n_ctx, int)
                                  or not 0 <= n_ctx <= self._native.max_position):
            raise InvalidConfig(field="n_ctx", reason=f"must be an integer in [0, {self._native.max_position}] "
                                                      f"(the model's context; 0 = all of it), got {n_ctx!r}")
        self._n_ctx = min(self._native.max_position, DEFAULT_MAX_CONTEXT) if n_ctx is None \
            else (n_ctx or self._native.max_position)
        self._raw_no_special = None
        self.precise = bool(precise)
        self.backend = backend or self._native.backends()[0]
        self.is_encoder = bool(getattr(self._native, "is_encoder", False))  # docs/encoders.md
        self._encoder = None
        self.chat = None
        if "chat" in self.file.sections and not self.is_encoder:
            from .chat import chat_from_modelfile

            self.chat = chat_from_modelfile(self.file)
        tok_cfg = self.config.get("tokenizer", {})
        self._eos: set[int] | None = None
        self.bos_token_id = tok_cfg.get("bos_token_id")
        self.name = self.file.sections.get("frontmatter", {}).get("cyb", {}).get("name") \
            or os.path.splitext(os.path.basename(self.path))[0]
        self.timings: dict[str, float] = {
            "load_ms": (time.perf_counter() - t0) * 1000.0,
            "native_load_ms": self._native.load_ms,
        }

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
    def tokenizer(self):
        """The file's tokenizer (HF `tokenizers`), built on first use."""
        return self.file.tokenizer

    @property
    def family(self) -> str:
        return self._native.family

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    @property
    def forward_chunk_tokens(self) -> int:
        """Tokens per chunk of a long forward on this model's backend (256 on cpu / nox, 512 on
        wgpu+rs); Ctrl-C and the progress callback act between chunks."""
        return self._native.forward_chunk_tokens

    @property
    def threads(self) -> int:
        """Threads of the native pool (0/None resolved to the physical cores, the clamp applied)."""
        return self._native.threads

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
        from .errors import InvalidConfig

        convs = list(conversations)
        for c in convs:
            if not isinstance(c, Conversation) or c.model is not self:
                raise InvalidConfig(field="conversations",
                                    reason="each must be a Conversation of this model (model.new_conversation())")
        arr = token_id_array(ids, self.vocab_size)
        return self._native.forward_batch([c._native for c in convs], arr)

    # --- tokens (llama-cpp-python's Llama.tokenize / detokenize) ----------
    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (str, or UTF-8 bytes). `add_bos`: the tokenizer's special tokens
        (BOS where the model's tokenizer adds one), as a raw completion prompt is encoded.
        `special`: special tokens written in the text (such as "<|im_end|>") become their ids;
        False (the default) encodes them as plain text."""
        from .errors import TokenizerError

        if isinstance(text, (bytes, bytearray, memoryview)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                raise TokenizerError(f"tokenize: the bytes are not valid UTF-8 ({e})") from None
        if not isinstance(text, str):
            raise TokenizerError(f"tokenize expects str or bytes, got {type(text).__name__}")
        tok = self.tokenizer
        if special:
            return tok.encode(text, add_special_tokens=bool(add_bos))
        if self._raw_no_special is None:
            raw = type(tok.raw).from_str(tok.raw.to_str())
            raw.encode_special_tokens = True  # special tokens in the text are plain text
            self._raw_no_special = raw
        try:
            return list(self._raw_no_special.encode(text, add_special_tokens=bool(add_bos)).ids)
        except TypeError:
            return tok.encode(text, add_special_tokens=bool(add_bos))  # raises the tokenizer's own error

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """The UTF-8 bytes of token ids (special tokens left out unless `special`). A sequence
        that ends inside a multi-byte character gives the bytes so far (byte-level tokenizers)."""
        tok = self.tokenizer
        ids = list(tokens)
        text = tok.decode(ids, skip_special_tokens=not special)
        if "\ufffd" not in text:
            return text.encode("utf-8")
        special_ids = set() if special else {i for i in ids if tok.decode([i], skip_special_tokens=True) == ""}
        return b"".join(_generate.token_bytes(tok, i) for i in ids if i not in special_ids)

    # --- observability ---------------------------------------------------
    @property
    def device_sampling(self) -> bool:
        """True when generation draws tokens on the device (wgpu+rs; docs/generation.md,
        "Sampling on the GPU")."""
        return bool(self._native.device_sampling)

    @property
    def dispatch_records(self) -> list[dict]:
        """Per-op dispatch decisions: label, op, backend, fallback, count, total_ms."""
        return self._native.dispatch_records()

    def set_profiling(self, on: bool = True) -> None:
        """Per-op timings in dispatch_records (costs a clock read per op)."""
        self._native.set_profiling(bool(on))

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

    # --- encoders (docs/encoders.md; cyb_llm/encoder.py) ---------------------
    def _enc(self):
        if not self.is_encoder:
            from .encoder import not_an_encoder

            raise not_an_encoder(self.config.get("model_type"))
        if self._encoder is None:
            from .encoder import Encoder

            self._encoder = Encoder(self)
        return self._encoder

    def embed(self, texts, normalize: bool | None = None, pooling: str | None = None, batch_size: int = 32,
              truncate: bool = True) -> np.ndarray:
        """Sentence embeddings: float32 [n, hidden] for a list of texts, [hidden] for one str. Pooling
        ('cls' | 'mean' | 'max') and normalization default to the file's [pooling] (else mean, off)."""
        return self._enc().embed(texts, normalize=normalize, pooling=pooling, batch_size=batch_size, truncate=truncate)

    def classify(self, texts, top_k: int | None = 1, batch_size: int = 32, truncate: bool = True):
        """Sequence classification: per text (or (text, text) pair) the `top_k` best {"label", "score"}
        (None: all), scores as transformers' text-classification pipeline."""
        return self._enc().classify(texts, top_k=top_k, batch_size=batch_size, truncate=truncate)

    def classify_tokens(self, texts, batch_size: int = 32, truncate: bool = True):
        """Token classification: per text, per non-special token {"index", "token", "label", "score", "start", "end"}."""
        return self._enc().classify_tokens(texts, batch_size=batch_size, truncate=truncate)

    def rerank(self, query: str, documents, batch_size: int = 32, truncate: bool = True) -> np.ndarray:
        """Cross-encoder scores of (query, document) pairs, as sentence-transformers CrossEncoder.predict."""
        return self._enc().rerank(query, documents, batch_size=batch_size, truncate=truncate)

    def create_embedding(self, input, model: str | None = None) -> dict:
        """OpenAI embeddings response ({"object": "list", "data": [...], "model", "usage"})."""
        return self._enc().create_embedding(input, model=model)

    def encode(self, token_ids, batch_size: int = 32):
        """Final hidden states of token ids: one sequence -> float32 [T, hidden]; a list -> a list of them."""
        return self._enc().encode(token_ids, batch_size=batch_size)

    # --- generation ------------------------------------------------------
    def generator(self):
        from .generate import Generator

        return Generator(self)

    # cyb_llm.generate's functions, as methods (their signatures and docstrings): the model is `self`
    create_chat_completion = _generate.create_chat_completion
    create_completion = _generate.create_completion
    #: As llama-cpp-python's Llama: `model(prompt, ...)` is `model.create_completion(prompt, ...)`.
    __call__ = _generate.create_completion

    def __repr__(self) -> str:
        return f"Model({self.name!r}, family={self.family!r}, backend={self.backend!r}, precise={self.precise})"


def load(path: str | os.PathLike, backend: str | None = None, precise: bool = False,
         threads: int | None = None, exec_path: str | None = None, fuse: bool = True,
         max_memory: int | None = None, n_ctx: int | None = None) -> "Model | WhisperModel":
    """Loads a model: a `.model` path, a known model name (`"smollm2"`, fetched and
    imported into the cache once, as `cyb-llm run` does), a `.gguf` file or an HF folder
    (imported into the cache once), `hf://ORG/REPO[/FILE.gguf]`, or a name `cyb-llm list`
    shows: the references of every CLI command (cyb_llm.hub.resolve). Validates the file, chooses the curated family or the graph
    path and maps the weights. `exec_path` ('curated' | 'graph') forces an execution
    path; `fuse=False` turns the graph fusion pass off. `threads`: None/0 = physical
    cores, larger than `_core.max_threads()` clamped. `max_memory`: bytes that the
    weights, RoPE tables and conversations may take (None: the available physical
    memory); over it, OutOfMemory. `n_ctx`: the context of the model's conversations (those of
    create_chat_completion, the generator, `cyb-llm serve`'s slots): None = min(model context,
    4096), 0 = the model's whole context (`Model.n_ctx()`)."""
    from .errors import InvalidConfig
    from .format import ModelFile

    mf = path if isinstance(path, ModelFile) else ModelFile(path)  # any reference: cyb_llm.hub.resolve
    if mf.config.get("model_type") == "whisper":  # speech recognition: cyb_llm.whisper (docs/whisper.md)
        from .whisper import WhisperModel

        if exec_path not in (None, "curated"):
            raise InvalidConfig(field="exec_path", reason="whisper models run only the curated path")
        return WhisperModel(mf, backend=backend, precise=precise, threads=threads, max_memory=max_memory)
    return Model(mf, backend=backend, precise=precise, threads=threads, exec_path=exec_path, fuse=fuse,
                 max_memory=max_memory, n_ctx=n_ctx)
