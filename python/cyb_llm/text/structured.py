"""Structured output: constrain generation to a JSON schema or a grammar, through llguidance.

    c = constraint_of(model, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {...}}})
    stream = model.generator().generate(messages, constraint=c)

What a request can ask for (`constraint_of`):

- `response_format={"type": "json_object"}`: any JSON object (OpenAI's JSON mode);
  `{"type": "json_object", "schema": {...}}` (llama-cpp-python's form) is a schema;
- `response_format={"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`:
  a JSON value valid under `schema` (llguidance's JSON-schema compiler; `strict`
  false tolerates keywords it does not implement, such as an unknown `format`);
- `grammar="..."`: a grammar in llguidance's Lark syntax (which can embed JSON
  schemas with `%json {...}` and special tokens as `<[id]>`).

A `Constraint` is compiled once per request; each generation takes a `Matcher`
from it. Per step the generation loop (cyb_llm.text.generate) asks the matcher for
the allowed-token bitset (`Matcher.fill`), hands it to the native sampler
(`Sampler.sample(logits, allowed=...)`, which applies it before every other
stage) and feeds the drawn token back (`Matcher.consume`); the generation ends
when the grammar is complete (`Matcher.stopped`) or an EOS token (allowed only
once the grammar accepts) is drawn.

The llguidance tokenizer is built from the `.model`'s own tokenizer JSON
(`Tokenizer.raw.to_str()`), its output vocab size and EOS ids, once per
tokenizer (about 0.2 s for a 49k vocab, 0.9 s for 152k); `llguidance.hf` is
never used (it imports transformers).
"""
from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Mapping

import numpy as np

from ..errors import InvalidConfig, TokenizerError

_lock = threading.Lock()
_tokenizers: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()

#: What the request may say in response_format.type.
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


def _llg() -> Any:
    import llguidance  # a runtime dependency (pyproject.toml), imported on first use

    return llguidance


def llg_tokenizer(model: Any) -> Any:
    """The `llguidance.LLTokenizer` of a model's tokenizer, output vocab and EOS ids (built once)."""
    tok = model.tokenizer
    key = (int(model.vocab_size), tuple(sorted(int(i) for i in model.eos_token_ids)))
    with _lock:
        per = _tokenizers.setdefault(tok, {})
        if key not in per:
            llg = _llg()
            try:
                per[key] = llg.LLTokenizer(tok.raw.to_str(), n_vocab=key[0], eos_token=list(key[1]) or None)
            except Exception as e:  # llguidance raises ValueError / RuntimeError with its reason
                raise TokenizerError(f"llguidance cannot use this model's tokenizer: {e}") from e
        return per[key]


#: How many tokens before max_tokens (or the end of the context) a closing constraint starts to
#: close what it has open (Constraint(closing=True), Matcher.fill).
CLOSE_RESERVE = 16

_CLOSING_TEXT = frozenset('"]}')
_closers: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def closer_mask(model: Any) -> np.ndarray:
    """The bitset (the sampler's layout) of the tokens that only close: text made of `"`, `]`, `}`
    and whitespace (at least one of the three), the EOS tokens and special tokens that spell a
    closing tag (`</...>`, such as Qwen2.5's `</tool_call>`). Built once per tokenizer."""
    tok = model.tokenizer
    n = int(model.vocab_size)
    eos = tuple(sorted(int(i) for i in model.eos_token_ids))
    with _lock:
        per = _closers.setdefault(tok, {})
        if (n, eos) in per:
            return per[(n, eos)]
    llt = llg_tokenizer(model)
    texts = tok.raw.decode_batch([[i] for i in range(min(n, tok.raw.get_vocab_size(with_added_tokens=True)))],
                                 skip_special_tokens=False)
    ok = np.zeros(n, dtype=bool)
    for i, t in enumerate(texts):
        if llt.is_special_token(i):
            ok[i] = t.startswith("</")
        else:
            core = t.strip()
            ok[i] = bool(core) and set(core) <= _CLOSING_TEXT
    ok[[i for i in eos if i < n]] = True
    bits = np.packbits(np.pad(ok, (0, (-n) % 32)), bitorder="little").view("<u4").astype(np.uint32)
    with _lock:
        per[(n, eos)] = bits
    return bits


class Constraint:
    """A compiled grammar (llguidance's grammar text) for one model; `field` is the request
    parameter it came from ("response_format", "grammar", "tool_choice"), named in errors.

    `closing`: in the last CLOSE_RESERVE tokens before the limit (Matcher.fill's `left`) the
    allowed tokens are narrowed to those that close (closer_mask) whenever the grammar allows any,
    so that an answer that must be one complete JSON value (a forced tool call) ends complete
    instead of being cut by max_tokens; where nothing closing is allowed (a required property still
    missing, a literal half written) the grammar's own mask stays."""

    def __init__(self, model: Any, grammar: str, field: str, closing: bool = False):
        self.model = model
        self.grammar = grammar
        self.field = field
        self.tokenizer = llg_tokenizer(model)
        self.vocab_size = int(model.vocab_size)
        self.closers = closer_mask(model) if closing else None
        self._first: Matcher | None = Matcher(self)  # errors in the grammar surface here, before any generation

    def matcher(self) -> "Matcher":
        """A fresh matcher at the grammar's start (the one built to check the grammar, the first time)."""
        m, self._first = self._first, None
        return m if m is not None else Matcher(self)

    def __repr__(self) -> str:
        return f"Constraint(field={self.field!r}, {len(self.grammar)} chars)"


class Matcher:
    """The state of one constrained generation: the allowed-token bitset per step."""

    def __init__(self, constraint: Constraint):
        llg = _llg()
        self.field = constraint.field
        self._closers = constraint.closers
        self._m = llg.LLMatcher(constraint.tokenizer, constraint.grammar, log_level=0)
        if self._m.is_error():
            what = "invalid grammar" if self.field == "grammar" else "invalid JSON schema"
            raise InvalidConfig(field=self.field, reason=f"{what}: {_first_line(self._m.get_error())}")
        # the native sampler's bitset: ceil(vocab / 32) uint32 words, bit t % 32 of word t // 32 = token t
        self.mask = np.zeros((constraint.vocab_size + 31) // 32, dtype=np.uint32)

    def fill(self, left: int | None = None) -> np.ndarray:
        """The allowed tokens of the next step, written into (and returned as) `self.mask`;
        `left`: how many tokens the generation may still draw, this one included (None: no
        limit), which narrows the mask of a closing constraint (Constraint)."""
        self._m.unsafe_compute_mask_ptr(self.mask.ctypes.data, self.mask.nbytes)
        if self._m.is_error():
            raise InvalidConfig(field=self.field, reason="the grammar matcher failed: "
                                                         + _first_line(self._m.get_error()))
        if self._closers is not None and left is not None and left <= CLOSE_RESERVE:
            closing = self.mask & self._closers
            if closing.any():
                self.mask[:] = closing
        return self.mask

    def consume(self, token: int) -> None:
        """Advances the grammar by a drawn token (one the mask allowed)."""
        if not self._m.consume_token(int(token)):
            raise InvalidConfig(field=self.field, reason=f"the grammar refused token {token}: "
                                                         + _first_line(self._m.get_error()))

    @property
    def stopped(self) -> bool:
        """True when the grammar is complete: nothing but EOS may follow."""
        return self._m.is_stopped()

    @property
    def accepting(self) -> bool:
        return self._m.is_accepting()


def _first_line(msg: str) -> str:
    return (msg or "unknown error").strip().splitlines()[0][:500]


def _schema_grammar(schema: Any, field: str, lenient: bool) -> str:
    if not isinstance(schema, (Mapping, bool)):
        raise InvalidConfig(field=field, reason=f"the JSON schema must be an object, got {type(schema).__name__}")
    try:
        return _llg().LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                         overrides={"lenient": True} if lenient else None)
    except (ValueError, TypeError) as e:
        raise InvalidConfig(field=field, reason=f"invalid JSON schema: {e}") from None


def grammar_text(response_format: Mapping[str, Any] | None = None, grammar: str | None = None) -> tuple[str, str] | None:
    """(llguidance grammar text, the field it came from) of a request's response_format / grammar,
    or None when neither constrains the output. Malformed values are InvalidConfig naming the field;
    whether the schema or grammar compiles is checked by `Constraint` (it needs the tokenizer)."""
    rf = response_format
    if rf is not None and not isinstance(rf, Mapping):
        raise InvalidConfig(field="response_format", reason=f"must be an object with a 'type', got {rf!r}"[:300])
    kind = rf.get("type", "text") if rf is not None else "text"
    if kind not in RESPONSE_FORMAT_TYPES:
        raise InvalidConfig(field="response_format",
                            reason=f"type must be one of {', '.join(RESPONSE_FORMAT_TYPES)}, got {kind!r}"[:300])
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise InvalidConfig(field="grammar", reason="must be a non-empty string (llguidance's Lark syntax)")
        if kind != "text":
            raise InvalidConfig(field="grammar", reason="give either response_format or grammar, not both")
        return _llg().LLMatcher.grammar_from_lark(grammar), "grammar"
    if kind == "text":
        return None
    if kind == "json_object":
        schema = rf.get("schema")
        return _schema_grammar({"type": "object"} if schema is None else schema, "response_format", False), \
            "response_format"
    js = rf.get("json_schema")
    if not isinstance(js, Mapping):
        raise InvalidConfig(field="response_format",
                            reason="type 'json_schema' needs json_schema: {\"name\", \"schema\", \"strict\"?}")
    name = js.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidConfig(field="response_format", reason=f"json_schema.name must be a string, got {name!r}"[:300])
    strict = js.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidConfig(field="response_format", reason=f"json_schema.strict must be a boolean, got {strict!r}")
    schema = js.get("schema", {})
    return _schema_grammar(schema, "response_format", lenient=not strict), "response_format"


def constraint_of(model: Any, response_format: Mapping[str, Any] | None = None,
                  grammar: str | None = None) -> Constraint | None:
    """The Constraint of a request's response_format / grammar for `model` (None: unconstrained).
    An invalid schema or grammar is InvalidConfig(field="response_format" | "grammar")."""
    g = grammar_text(response_format, grammar)
    return None if g is None else Constraint(model, g[0], g[1])


def lark_literal(model: Any, text: str) -> str:
    """`text` as a Lark term: the special token `<[id]>` when `text` is one special token of the
    model's tokenizer (such as Qwen2.5's `<tool_call>`), else a quoted string."""
    tid = model.tokenizer.token_to_id(text)
    if tid is not None and llg_tokenizer(model).is_special_token(tid):
        return f"<[{tid}]>"
    return json.dumps(text)


__all__ = ["Constraint", "Matcher", "CLOSE_RESERVE", "closer_mask", "constraint_of", "grammar_text", "llg_tokenizer", "lark_literal",
           "RESPONSE_FORMAT_TYPES"]
