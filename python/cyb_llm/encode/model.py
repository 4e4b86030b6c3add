"""The encoder pipeline's model: `Encoder` (BERT family; cyb_llm.pipelines, kind "encoder"):
embeddings, classification, reranking (docs/encoders.md).

    m = cyb_llm.load("minilm")           # an Encoder
    m.embed(["a sentence", "another"])   # float32 [2, 384]

Python tokenizes, truncates and batches; every forward, the pooling and the normalization run
natively (`_core.Model.encode/embed/classify/classify_tokens`).

Batching: all texts are tokenized, sorted by length (stable), cut into buckets of `batch_size`,
each bucket padded to its longest member and run in one native call; the results go back in input
order. Truncation follows sentence-transformers: to `[pooling].max_seq_length` when the file has one,
else to the position table (`max_position_embeddings`, minus RoBERTa's `pad_token_id + 1` offset,
and at most the tokenizer's `model_max_length`), special tokens kept (the HF `tokenizers` truncation,
`longest_first` for pairs).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from tokenizers import Tokenizer as _HFTokenizer

from ..base import Model
from ..errors import InvalidConfig
from ..ids import token_id_array
from ..tokenizer import _check_text

POOLING_MODES = ("cls", "mean", "max")
#: families whose positions start after the padding id (RoBERTa's create_position_ids_from_input_ids)
_POSITION_OFFSET_FAMILIES = ("roberta", "xlm-roberta")
#: families without token types
_NO_TOKEN_TYPES = ("distilbert", "modernbert")


def max_length(config: dict) -> int:
    """Tokens per text (special tokens included) after truncation (module docstring)."""
    pooling = config.get("pooling") or {}
    if isinstance(pooling.get("max_seq_length"), int) and pooling["max_seq_length"] > 0:
        return int(pooling["max_seq_length"])
    a = config.get("architecture") or {}
    n = int(a.get("max_position_embeddings") or 512)
    if config.get("model_type") in _POSITION_OFFSET_FAMILIES:
        n -= int(a.get("pad_token_id", 1)) + 1
    mml = (config.get("tokenizer") or {}).get("model_max_length")
    if isinstance(mml, int) and mml > 0:
        n = min(n, mml)
    return n


def _check_texts(texts: Any, what: str = "texts") -> tuple[list, bool, bool]:
    """(items, single, pairs): a str or a (str, str) pair is one item; a list/tuple of them many.
    Non-str items TypeError; pairs mixed with single texts InvalidConfig."""
    def is_pair(x):
        return isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(s, str) for s in x)

    if isinstance(texts, str):
        return [texts], True, False
    if isinstance(texts, tuple) and is_pair(texts):
        return [texts], True, True
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"{what} must be a str or a list of str, got {type(texts).__name__}")
    items = list(texts)
    kinds = set()
    for i, t in enumerate(items):
        if isinstance(t, str):
            kinds.add("text")
        elif is_pair(t):
            kinds.add("pair")
        else:
            raise TypeError(f"{what}[{i}] must be a str (or a pair of str), got {type(t).__name__}")
    if len(kinds) > 1:
        raise InvalidConfig(field=what, reason="a mix of single texts and (text, text) pairs; give one kind per call")
    return items, False, kinds == {"pair"}


class Batch:
    """Tokenized items: per item its ids and token types (after truncation)."""

    def __init__(self, ids: list[list[int]], types: list[list[int]], encodings: list | None = None):
        self.ids = ids
        self.types = types
        self.encodings = encodings  # the tokenizers.Encoding of each item (offsets, special tokens)

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


class Encoder(Model):
    """A loaded encoder `.model`: embed, classify, classify_tokens, rerank, create_embedding, encode."""

    kind = "encoder"

    def _setup(self, n_ctx: int | None = None) -> None:
        arch = self.config.get("architecture") or {}
        self.pooling: dict = dict(self.config.get("pooling") or {})
        self.max_length = max_length(self.config)
        tok_cfg = self.config.get("tokenizer") or {}
        pad = tok_cfg.get("pad_token_id", arch.get("pad_token_id", 0))
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        # token types only where the model has more than one (RoBERTa's single type: None, as all zeros)
        self.token_types = self.model_type not in _NO_TOKEN_TYPES and int(arch.get("type_vocab_size", 2) or 0) > 1
        labels = arch.get("id2label") or {}
        self.id2label = {int(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        self.problem_type = arch.get("problem_type")
        self.architectures = [str(x) for x in arch.get("architectures") or []]
        self._truncating = None

    @property
    def hidden_size(self) -> int:
        return int(self._native.hidden_size)

    @property
    def num_labels(self) -> int:
        """Labels of the classification head (0: none, an embedding model)."""
        return int(self._native.num_labels)

    # --- tokenization ---------------------------------------------------------
    def _tokenizer(self, truncate: bool):
        raw = self.tokenizer.raw
        if not truncate:
            return raw
        if self._truncating is None:
            t = _HFTokenizer.from_str(raw.to_str())
            t.no_padding()
            t.enable_truncation(self.max_length, strategy="longest_first")
            self._truncating = t
        return self._truncating

    def tokenize_batch(self, items: list, truncate: bool = True, what: str = "texts") -> Batch:
        """Token ids and types of texts (or (text, text) pairs), truncated as the module docstring
        says (`truncate=False`: InvalidConfig for an item over the limit)."""
        tok = self._tokenizer(bool(truncate))
        try:
            encs = tok.encode_batch(items, add_special_tokens=True)
        except TypeError:
            for it in items:
                for s in (it if isinstance(it, (tuple, list)) else [it]):
                    _check_text(s)
            raise
        ids = [list(e.ids) for e in encs]
        types = [list(e.type_ids) for e in encs]
        if not truncate:
            for i, x in enumerate(ids):
                if len(x) > self.max_length:
                    raise InvalidConfig(field=f"{what}[{i}]", reason=f"item {i} is {len(x)} tokens long, more than the "
                                        f"model's {self.max_length} (truncate=True cuts it to that length)")
        return Batch(ids, types, encs)

    # --- batching -------------------------------------------------------------
    def buckets(self, batch: Batch, batch_size: int):
        """(indices, ids [B,T], mask [B,T], types [B,T] | None) per bucket: sorted by length (longest
        first, stable), `batch_size` per bucket, padded to the bucket's longest."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
        if batch_size < 1:
            raise InvalidConfig(field="batch_size", reason=f"must be >= 1, got {batch_size}")
        lengths = batch.lengths
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            t = max(lengths[i] for i in idx)
            ids = np.full((len(idx), t), self.pad_id, dtype=np.int32)
            mask = np.zeros((len(idx), t), dtype=np.int32)
            types = np.zeros((len(idx), t), dtype=np.int32) if self.token_types else None
            for r, i in enumerate(idx):
                n = lengths[i]
                ids[r, :n] = batch.ids[i]
                mask[r, :n] = 1
                if types is not None:
                    types[r, :n] = batch.types[i]
            yield idx, ids, mask, types

    def _run(self, batch: Batch, batch_size: int, call) -> list:
        """call(ids, mask, types) -> [B, ...] per bucket; rows back in input order (a list)."""
        out: list = [None] * len(batch.ids)
        for idx, ids, mask, types in self.buckets(batch, batch_size):
            res = call(ids, mask, types)
            for r, i in enumerate(idx):
                out[i] = res[r]
        return out

    # --- public operations ----------------------------------------------------
    def embed(self, texts, normalize: bool | None = None, pooling: str | None = None, batch_size: int = 32,
              truncate: bool = True) -> np.ndarray:
        """Sentence embeddings: float32 [n, hidden] for a list of texts, [hidden] for one str. Pooling
        ('cls' | 'mean' | 'max') and normalization default to the file's [pooling] (else mean, off)."""
        items, single, pairs = _check_texts(texts)
        if pairs:
            raise InvalidConfig(field="texts", reason="embed takes single texts, not pairs (pairs are for rerank/classify)")
        mode = self.pooling.get("mode", "mean") if pooling is None else pooling
        if not isinstance(mode, str):
            raise TypeError(f"pooling must be a str, got {type(mode).__name__}")
        if mode not in POOLING_MODES:
            raise InvalidConfig(field="pooling", reason=f"{mode!r} is not one of {', '.join(POOLING_MODES)}")
        norm = bool(self.pooling.get("normalize", False)) if normalize is None else normalize
        if not isinstance(norm, (bool, np.bool_)):
            raise TypeError(f"normalize must be a bool or None, got {type(norm).__name__}")
        if not items:
            return np.zeros((0, int(self._native.hidden_size)), dtype=np.float32)
        out = self._embed(self.tokenize_batch(items, truncate), mode, bool(norm), batch_size)
        return out[0] if single else out

    def _embed(self, batch: Batch, mode: str, norm: bool, batch_size: int) -> np.ndarray:
        native = self._native
        rows = self._run(batch, batch_size, lambda i, m, t: native.embed(i, m, t, mode, norm))
        return np.stack(rows).astype(np.float32, copy=False)

    def encode(self, token_ids, batch_size: int = 32):
        """Final hidden states of token ids: one sequence -> float32 [T, hidden]; a list of sequences
        -> a list of [T_i, hidden]."""
        vocab = int((self.config.get("architecture") or {}).get("vocab_size") or 0) or None
        single = isinstance(token_ids, np.ndarray) and token_ids.ndim == 1 or (
            isinstance(token_ids, Sequence) and not isinstance(token_ids, (str, bytes))
            and (len(token_ids) == 0 or not isinstance(token_ids[0], (Sequence, np.ndarray))))
        seqs = [token_ids] if single else list(token_ids)
        arrs = [token_id_array(s, vocab) for s in seqs]
        for i, a in enumerate(arrs):
            if a.size == 0:
                raise InvalidConfig(field=f"token_ids[{i}]", reason="an empty sequence")
            if a.size > self._positions():
                raise InvalidConfig(field=f"token_ids[{i}]", reason=f"{a.size} tokens, more than the model's "
                                    f"{self._positions()} positions")
        batch = Batch([a.tolist() for a in arrs], [[0] * a.size for a in arrs])
        native = self._native
        rows = self._run(batch, batch_size, lambda i, m, t: native.encode(i, m, t))
        rows = [np.ascontiguousarray(r[:n]) for r, n in zip(rows, batch.lengths)]
        return rows[0] if single else rows

    def _positions(self) -> int:
        a = self.config.get("architecture") or {}
        n = int(a.get("max_position_embeddings") or 512)
        if self.model_type in _POSITION_OFFSET_FAMILIES:
            n -= int(a.get("pad_token_id", 1)) + 1
        return n

    def _labels(self, n: int) -> list[str]:
        return [self.id2label.get(i, f"LABEL_{i}") for i in range(n)]

    def _token_head(self) -> bool:
        return any(a.endswith("ForTokenClassification") for a in self.architectures)

    def _check_head(self, token: bool) -> None:
        if int(self._native.num_labels) <= 0:
            raise InvalidConfig(field="architecture.architectures",
                                reason=f"this {self.model_type} model has no classification head")
        if token != self._token_head():
            raise InvalidConfig(field="architecture.architectures", reason=(
                "a token-classification model: use classify_tokens" if not token
                else "a sequence-classification model: use classify"))

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """transformers' text-classification pipeline: sigmoid for multi-label or one-label models,
        softmax otherwise."""
        logits = logits.astype(np.float64)
        if self.problem_type == "multi_label_classification" or logits.shape[-1] == 1:
            return 1.0 / (1.0 + np.exp(-logits))
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def classify(self, texts, top_k: int | None = 1, batch_size: int = 32, truncate: bool = True):
        """Sequence classification: per text (or (text, text) pair) the `top_k` best {"label", "score"}
        (None: all), scores as transformers' text-classification pipeline."""
        items, single, _pairs = _check_texts(texts)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise TypeError(f"top_k must be an int or None, got {type(top_k).__name__}")
        if top_k is not None and top_k < 1:
            raise InvalidConfig(field="top_k", reason=f"must be >= 1 or None, got {top_k}")
        self._check_head(token=False)
        if not items:
            return []
        native = self._native
        logits = self._run(self.tokenize_batch(items, truncate), batch_size, lambda i, m, t: native.classify(i, m, t))
        out = []
        for row in logits:
            p = self.scores(np.asarray(row))
            labels = self._labels(p.shape[-1])
            order = sorted(range(len(p)), key=lambda j: -p[j])[:top_k]
            out.append([{"label": labels[j], "score": float(p[j])} for j in order])
        return out[0] if single else out

    def classify_tokens(self, texts, batch_size: int = 32, truncate: bool = True):
        """Per text, per token (special tokens left out): {"index", "token", "label", "score", "start", "end"}
        (softmax over the labels, the best label)."""
        items, single, pairs = _check_texts(texts)
        if pairs:
            raise InvalidConfig(field="texts", reason="classify_tokens takes single texts")
        self._check_head(token=True)
        if not items:
            return []
        batch = self.tokenize_batch(items, truncate)
        native = self._native
        logits = self._run(batch, batch_size, lambda i, m, t: native.classify_tokens(i, m, t))
        out = []
        for enc, row, n in zip(batch.encodings, logits, batch.lengths):
            p = self.scores(np.asarray(row[:n]))
            labels = self._labels(p.shape[-1])
            ents = []
            for k in range(n):
                if enc.special_tokens_mask[k]:
                    continue
                j = int(np.argmax(p[k]))
                s, e = enc.offsets[k]
                ents.append({"index": k, "token": enc.tokens[k], "label": labels[j], "score": float(p[k, j]),
                             "start": int(s), "end": int(e)})
            out.append(ents)
        return out[0] if single else out

    def rerank(self, query: str, documents, batch_size: int = 32, truncate: bool = True) -> np.ndarray:
        """sentence-transformers CrossEncoder.predict of (query, document) pairs: the `[rerank]`
        activation of the file, else sigmoid for one-label models and the raw logits otherwise."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        _single = isinstance(documents, str)
        if not _single and not isinstance(documents, (list, tuple)):
            raise TypeError(f"documents must be a str or a list of str, got {type(documents).__name__}")
        docs = [documents] if _single else list(documents)
        for i, d in enumerate(docs):
            if not isinstance(d, str):
                raise TypeError(f"documents[{i}] must be a str, got {type(d).__name__}")
        self._check_head(token=False)
        n_labels = int(self._native.num_labels)
        if not docs:
            return np.zeros((0,) if n_labels == 1 else (0, n_labels), dtype=np.float32)
        native = self._native
        logits = np.stack(self._run(self.tokenize_batch([(query, d) for d in docs], truncate, "documents"), batch_size,
                                    lambda i, m, t: native.classify(i, m, t))).astype(np.float32, copy=False)
        act = (self.config.get("rerank") or {}).get("activation") or ("sigmoid" if n_labels == 1 else "identity")
        if act == "sigmoid":
            logits = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
        if n_labels == 1:
            logits = logits[:, 0]
        return logits[0] if _single else logits

    def create_embedding(self, input, model: str | None = None) -> dict:
        """OpenAI's embeddings response for `input` (a str or a list of str): {"object": "list",
        "data": [...], "model", "usage"}."""
        items, _single, pairs = _check_texts(input, "input")
        if pairs:
            raise TypeError("input must be a str or a list of str")
        if not items:
            raise InvalidConfig(field="input", reason="an empty list (OpenAI's API refuses it too)")
        batch = self.tokenize_batch(items, True, "input")
        vecs = self._embed(batch, self.pooling.get("mode", "mean"), bool(self.pooling.get("normalize", False)), 32)
        n = int(sum(batch.lengths))
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vecs)],
            "model": model if model is not None else self.name,
            "usage": {"prompt_tokens": n, "total_tokens": n},
        }

