"""The base of every pipeline's model class, conversations, and `load`.

`cyb_llm.load(path)` and `cyb_llm.Model(path)` open the file, ask the registry
(cyb_llm.pipelines) which pipeline runs its model type and return an object of that pipeline's
class: `TextModel` (decoders), `Encoder` (BERT family) or `WhisperModel` (speech). All of them
are `Model`s: `info`, `path`, `backend`, `memory`, `dispatch_records`, `tokenize`, `close()` and
the context manager are here. A method of another pipeline's class is an AttributeError that
names that class and this model's kind.

The hot loop (every op of a forward) runs natively; Python calls `Conversation.forward` once per
step.
"""
from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from . import _core, pipelines
from .errors import InvalidConfig, TokenizerError
from .format import ModelFile
from .ids import token_bytes, token_id_array


class Conversation:
    """One conversation: its own KV cache over the shared weights of a model."""

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


class _Closed:
    """What a closed model holds instead of its native model and file: every use is an error."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise InvalidConfig(field="model", reason=f"the model {self._name!r} is closed")


class Model:
    """A loaded `.model`: the base class of every pipeline's model (see the module docstring).

    `Model(path, ...)` on this class loads the file and returns an object of the class the
    registry names for its model type (as `cyb_llm.load`); on a pipeline's class
    (`TextModel(path)`) it loads a model of that pipeline and refuses the others."""

    #: The registry's kind of the class's models ("text", "encoder", "speech"); set by each subclass.
    kind: str = ""

    def __new__(cls, path: Any = None, *args: Any, **kwargs: Any) -> "Model":
        if cls is not Model:
            return super().__new__(cls)
        mf = path if isinstance(path, ModelFile) else ModelFile(path)
        kind = pipelines.kind_of_file(mf)
        self = super().__new__(pipelines.get(kind).load_class())
        self._opened = (mf, kind)  # __init__ takes them instead of opening `path` and routing again
        return self

    def __init__(self, path: "str | os.PathLike | ModelFile", backend: str | None = None, precise: bool = False,
                 threads: int | None = None, exec_path: str | None = None, fuse: bool = True,
                 max_memory: int | None = None, n_ctx: int | None = None):
        t0 = time.perf_counter()
        mf, kind = self.__dict__.pop("_opened", (None, None))
        if mf is None:  # a pipeline's class called directly: the file must be of its kind
            mf = path if isinstance(path, ModelFile) else ModelFile(path)
            kind = pipelines.kind_of_file(mf)
        model_type = mf.config.get("model_type")
        if not pipelines.loads(self.kind, kind):
            raise InvalidConfig(field="model_type", reason=(
                f"{model_type!r} is {pipelines.get(kind).what}, not {pipelines.get(self.kind).what}: "
                f"{type(self).__name__} does not load it (cyb_llm.load or cyb_llm.Model load any model)"))
        exec_path, fuse = self._native_options(exec_path, fuse)
        # threads: 0/None = physical cores, clamped to _core.max_threads(), negative InvalidConfig;
        # max_memory: budget in bytes (None: available physical memory), docs/errors.md "Guarantees".
        native = _core.load(mf._native, backend or "", bool(precise), 0 if threads is None else threads,
                            exec_path or "", bool(fuse), max_memory, self._native_stage(mf))
        if bool(getattr(native, "is_encoder", False)) != (kind == "encoder") \
                or bool(getattr(native, "is_whisper", False)) != (kind == "speech"):
            raise InvalidConfig(field="model_type", reason=f"the registry's kind {kind!r} of {model_type!r} is not "
                                                           "the native family's (cyb_llm.pipelines.kind_of)")
        self._attach(mf, native, backend=backend, precise=precise)
        self.timings["load_ms"] = (time.perf_counter() - t0) * 1000.0
        self.timings["native_load_ms"] = native.load_ms
        self._setup(n_ctx=n_ctx)

    @classmethod
    def _over(cls, file: ModelFile, native: Any, config: dict | None = None, name: str | None = None,
              backend: str = "cpu", **setup: Any) -> "Model":
        """An object of this class over a native model already at hand (tests give stand-ins)."""
        self = object.__new__(cls)
        self._attach(file, native, config=config, name=name, backend=backend)
        self._setup(**setup)
        return self

    def _attach(self, mf: ModelFile, native: Any, config: dict | None = None, name: str | None = None,
                backend: str | None = None, precise: bool = False) -> None:
        self.file = mf
        self.path = mf.path
        self.config: dict = mf.config if config is None else config
        self._native = native
        self.precise = bool(precise)
        self.backend: str = backend or native.backends()[0]
        self.name: str = name or mf.sections.get("frontmatter", {}).get("cyb", {}).get("name") \
            or os.path.splitext(os.path.basename(self.path))[0]
        self.timings: dict[str, float] = {}
        self._raw_no_special = None

    # --- what the pipeline classes add -------------------------------------------------------
    def _native_options(self, exec_path: str | None, fuse: bool) -> tuple[str | None, bool]:
        """The (exec_path, fuse) of the native load; a pipeline refuses those it cannot run."""
        return exec_path, fuse

    def _native_stage(self, mf: ModelFile) -> str:
        """The stage of a "graph-stages" file the native model runs ("" for a file of one graph);
        a pipeline of several stages loads the others itself (cyb_llm.named_arrays.load_stage)."""
        return ""

    def _setup(self, **options: Any) -> None:
        """The pipeline's own state, after the native load (`options`: n_ctx)."""

    def _on_close(self) -> None:
        """Drops what the pipeline keeps of the native model."""

    # --- common to every model ------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # only for names the class does not have: the method of another pipeline says so
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise pipelines.wrong_pipeline(self, name)

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def is_encoder(self) -> bool:
        return self.kind == "encoder"

    @property
    def is_whisper(self) -> bool:
        return self.kind == "speech"

    @property
    def family(self) -> str:
        return self._native.family

    @property
    def threads(self) -> int:
        """Threads of the native pool (0/None resolved to the physical cores, the clamp applied)."""
        return self._native.threads

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    @property
    def tokenizer(self):
        """The file's tokenizer (HF `tokenizers`), built on first use."""
        return self.file.tokenizer

    @property
    def info(self) -> dict[str, Any]:
        """What was loaded: name, path, kind (the pipeline), model_type, family, backend, precise,
        threads and the load time (ms)."""
        return {"name": self.name, "path": self.path, "kind": self.kind, "model_type": self.model_type,
                "family": self.family, "backend": self.backend, "precise": self.precise, "threads": self.threads,
                "load_ms": self.timings.get("load_ms")}

    @property
    def memory(self) -> dict[str, int]:
        """Bytes the native side reports: `weights` (the file's weights region) and `charged` (what
        the load and the live conversations hold against the memory budget, docs/errors.md)."""
        return {"weights": int(self.file._native.weights_size), "charged": int(self._native.charged_bytes)}

    @property
    def dispatch_records(self) -> list[dict]:
        """Per-op dispatch decisions: label, op, backend, fallback, count, total_ms."""
        return self._native.dispatch_records()

    def clear_dispatch_records(self) -> None:
        self._native.clear_dispatch_records()

    def set_profiling(self, on: bool = True) -> None:
        """Per-op timings in dispatch_records (costs a clock read per op)."""
        self._native.set_profiling(bool(on))

    # --- tokens (llama-cpp-python's Llama.tokenize / detokenize) ---------------------------------
    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text` (str, or UTF-8 bytes). `add_bos`: the tokenizer's special tokens
        (BOS where the model's tokenizer adds one), as a raw completion prompt is encoded.
        `special`: special tokens written in the text (such as "<|im_end|>") become their ids;
        False (the default) encodes them as plain text."""
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
        return b"".join(token_bytes(tok, i) for i in ids if i not in special_ids)

    # --- lifetime ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return isinstance(self.__dict__.get("_native"), _Closed)

    def close(self) -> None:
        """Lets go of the native model and the file's mapping (their memory is freed once no
        conversation of the model is left); any later use is InvalidConfig(field="model")."""
        if self.closed:
            return
        self._on_close()
        self._native = _Closed(self.name)
        self.file = _Closed(self.name)  # type: ignore[assignment]
        self._raw_no_special = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"{type(self).__name__}({self.name!r}, closed)"
        return f"{type(self).__name__}({self.name!r}, family={self.family!r}, backend={self.backend!r}, " \
               f"precise={self.precise})"


def load(path: "str | os.PathLike | ModelFile", backend: str | None = None, precise: bool = False,
         threads: int | None = None, exec_path: str | None = None, fuse: bool = True,
         max_memory: int | None = None, n_ctx: int | None = None) -> Model:
    """Loads a model: a `.model` path, a known model name (`"smollm2"`, fetched and
    imported into the cache once, as `cyb-llm run` does), a `.gguf` file or an HF folder
    (imported into the cache once), `hf://ORG/REPO[/FILE.gguf]`, or a name `cyb-llm list`
    shows: the references of every CLI command (cyb_llm.hub.resolve). Validates the file and
    returns an object of its pipeline's class (cyb_llm.pipelines): `TextModel` for decoders,
    `Encoder` for encoders, `WhisperModel` for speech; all are `cyb_llm.Model`s. Decoders choose
    the curated family or the graph path and map the weights: `exec_path` ('curated' | 'graph')
    forces an execution path; `fuse=False` turns the graph fusion pass off. `threads`: None/0 =
    physical cores, larger than `_core.max_threads()` clamped. `max_memory`: bytes that the
    weights, RoPE tables and conversations may take (None: the available physical memory); over
    it, OutOfMemory. `n_ctx`: the context of a decoder's conversations (those of
    create_chat_completion, the generator, `cyb-llm serve`'s slots): None = min(model context,
    4096), 0 = the model's whole context (`TextModel.n_ctx()`)."""
    return Model(path, backend=backend, precise=precise, threads=threads, exec_path=exec_path, fuse=fuse,
                 max_memory=max_memory, n_ctx=n_ctx)


__all__ = ["Model", "Conversation", "load"]
