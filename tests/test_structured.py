"""Structured output (python/cyb_llm/text/structured.py, docs/generation.md "Structured output"): the
native sampler's allowed-token mask and logit bias tested directly; JSON-schema, JSON-mode and
grammar output of the default model (smollm2) validated with jsonschema, greedy and sampled;
tool_choice "required" / named with qwen05; the Python API additions (tokenize/detokenize, n_ctx,
__call__, logit_bias); the server path through the official `openai` client.

The default tier runs a short set (SHORT schemas, one seed); tests/slow/test_structured_full.py
runs all of SCHEMAS with three seeds."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core, hub
from cyb_llm.errors import InvalidConfig, ShapeMismatch
from tolerances import tolerance

jsonschema = pytest.importorskip("jsonschema")

S = {"type": "string", "maxLength": 24}  # strings bounded, so that every answer completes within MAX_TOKENS

#: (what the user asks for, the schema): varied keywords (types, enum, const, ranges, lengths,
#: patterns, nesting, arrays of objects, anyOf, nullable, $defs/$ref, optional properties)
SCHEMAS: list[tuple[str, dict]] = [
    ("a person", {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                  "required": ["name", "age"], "additionalProperties": False}),
    ("the weather in Paris", {"type": "object", "properties": {
        "city": S, "temperature_c": {"type": "number", "minimum": -50, "maximum": 60},
        "sky": {"enum": ["clear", "cloudy", "rain", "snow"]}}, "required": ["city", "temperature_c", "sky"],
        "additionalProperties": False}),
    ("three colors", {"type": "array", "items": {"enum": ["red", "green", "blue", "yellow", "black"]},
                      "minItems": 3, "maxItems": 3}),
    ("whether the sky is blue", {"type": "object", "properties": {"answer": {"type": "boolean"}},
                                 "required": ["answer"], "additionalProperties": False}),
    ("a book", {"type": "object", "properties": {
        "title": S, "author": {"type": "object", "properties": {"first": S, "last": S}, "required": ["first", "last"],
                               "additionalProperties": False},
        "year": {"type": "integer", "minimum": 1400, "maximum": 2030}},
        "required": ["title", "author", "year"], "additionalProperties": False}),
    ("a shopping list", {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"item": S, "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["item", "qty"], "additionalProperties": False}}}, "required": ["items"],
        "additionalProperties": False}),
    ("a US phone number", {"type": "object", "properties": {"phone": {"type": "string",
                                                                      "pattern": "^[0-9]{3}-[0-9]{3}-[0-9]{4}$"}},
                           "required": ["phone"], "additionalProperties": False}),
    ("a point in 3D", {"type": "object", "properties": {c: {"type": "number", "minimum": -10, "maximum": 10}
                                                        for c in "xyz"},
                       "required": ["x", "y", "z"], "additionalProperties": False}),
    ("a status", {"type": "object", "properties": {"status": {"const": "ok"}, "code": {"type": "integer",
                                                                                      "enum": [200, 201, 204]}},
                  "required": ["status", "code"], "additionalProperties": False}),
    ("an animal, either a dog or a fish", {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "dog"}, "barks": {"type": "boolean"}},
         "required": ["kind", "barks"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "fish"}, "fins": {"type": "integer", "minimum": 0,
                                                                              "maximum": 8}},
         "required": ["kind", "fins"], "additionalProperties": False}]}),
    ("a user who may have no email", {"type": "object", "properties": {"user": S, "email": {"type": ["string", "null"],
                                                                                           "maxLength": 30}},
                                      "required": ["user", "email"], "additionalProperties": False}),
    ("a line segment", {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0,
                                                                                 "maximum": 99},
                                                                           "y": {"type": "integer", "minimum": 0,
                                                                                 "maximum": 99}},
                                         "required": ["x", "y"], "additionalProperties": False}},
                        "type": "object", "properties": {"start": {"$ref": "#/$defs/pt"}, "end": {"$ref": "#/$defs/pt"}},
                        "required": ["start", "end"], "additionalProperties": False}),
    ("a movie rating", {"type": "object", "properties": {"movie": S, "stars": {"type": "integer", "minimum": 1,
                                                                               "maximum": 5},
                                                         "review": {"type": "string", "maxLength": 40}},
                        "required": ["movie", "stars"], "additionalProperties": False}),
    ("a short word", {"type": "string", "minLength": 2, "maxLength": 10, "pattern": "^[a-z]+$"}),
    ("an integer between 1 and 100", {"type": "integer", "minimum": 1, "maximum": 100}),
    ("a list of two to four prime numbers", {"type": "array", "items": {"type": "integer", "minimum": 2,
                                                                        "maximum": 97},
                                             "minItems": 2, "maxItems": 4}),
    ("an HTTP request", {"type": "object", "properties": {"method": {"enum": ["GET", "POST", "PUT", "DELETE"]},
                                                          "path": {"type": "string", "pattern": "^/[a-z/]{0,20}$"},
                                                          "headers": {"type": "object",
                                                                      "additionalProperties": S, "maxProperties": 2}},
                         "required": ["method", "path", "headers"], "additionalProperties": False}),
    ("a task with a priority", {"type": "object", "properties": {"task": S, "priority": {"enum": ["low", "high"]},
                                                                 "done": {"type": "boolean"}},
                                "required": ["task", "priority", "done"], "additionalProperties": False}),
    ("a matrix of 2 by 2 small integers", {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": -9, "maximum": 9}}}),
    ("a product", {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                                                    "price": {"type": "number", "minimum": 0, "maximum": 1000},
                                                    "tags": {"type": "array", "items": S, "maxItems": 2},
                                                    "released": {"type": "string", "format": "date"}},
                   "required": ["sku", "price", "tags", "released"], "additionalProperties": False}),
]
SHORT = [0, 2, 6, 9, 11]   # person, colors (array), pattern, anyOf, $ref
MAX_TOKENS = 120


@pytest.fixture(scope="module")
def model():
    return cyb_llm.load(hub.DEFAULT_MODEL, threads=2)  # the default model (smollm2)


SAMPLED = 1.0  # temperature of the sampled runs (with the model's top-k / top-p); smollm2's default is greedy


def schema_answer(model, i: int, seed: int | None) -> tuple[dict, object]:
    """The chat completion for SCHEMAS[i] (greedy when seed is None, else sampled at temperature
    SAMPLED with that seed) and the decoded JSON value."""
    what, schema = SCHEMAS[i]
    msgs = [{"role": "user", "content": f"Give me {what} as JSON."}]
    rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
    r = model.create_chat_completion(msgs, response_format=rf, max_tokens=MAX_TOKENS, seed=seed,
                                     temperature=0 if seed is None else SAMPLED)
    return r, json.loads(r["choices"][0]["message"]["content"])


def check_schema_answer(model, i: int, seed: int | None) -> None:
    r, value = schema_answer(model, i, seed)
    assert r["choices"][0]["finish_reason"] == "stop", r["choices"][0]
    jsonschema.validate(value, SCHEMAS[i][1])


@pytest.mark.parametrize("i", SHORT, ids=[SCHEMAS[i][0] for i in SHORT])
@pytest.mark.parametrize("seed", [None, 1], ids=["greedy", "sampled"])
def test_json_schema_output_validates(model, i, seed):
    check_schema_answer(model, i, seed)


def test_schema_set_is_valid_json_schema():
    for _, schema in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(schema)


def test_sampled_runs_differ_from_greedy(model):
    """The sampled runs are sampled (smollm2's default is greedy: the seeds must not all repeat it)."""
    texts = {schema_answer(model, 0, seed)[0]["choices"][0]["message"]["content"] for seed in (None, 1, 2, 3)}
    assert len(texts) > 1


# --- the native hook: allowed-token mask and logit bias ----------------------------------------


def _bitset(n: int, allowed) -> np.ndarray:
    mask = np.zeros((n + 31) // 32, dtype=np.uint32)
    for t in allowed:
        mask[t // 32] |= np.uint32(1 << (t % 32))
    return mask


SAMPLERS = {"greedy": dict(temperature=0.0),
            "sampled": dict(temperature=1.0, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.3,
                            presence_penalty=0.5, frequency_penalty=0.5)}


@pytest.mark.parametrize("kind", SAMPLERS)
def test_mask_allowing_one_token_forces_it(kind):
    n = 1000
    logits = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    worst = int(np.argmin(logits))           # the least likely token: no stage would keep it unmasked
    s = _core.Sampler(seed=7, **SAMPLERS[kind])
    s.accept_many([worst] * 5)              # penalties on it too
    assert all(s.sample(logits, allowed=_bitset(n, [worst])) == worst for _ in range(20))
    assert s.sample(logits) != worst        # without the mask it is not drawn
    # a mask of a few tokens: every draw is one of them, and the processed logits are -inf elsewhere
    few = [3, 64, 999, int(np.argmax(logits))]
    mask = _bitset(n, few)
    assert {s.sample(logits, allowed=mask) for _ in range(200)} <= set(few)
    kept = np.isfinite(s.process(logits, allowed=mask))
    assert set(np.flatnonzero(kept)) <= set(few) and kept.any()
    p = s.probs(logits, allowed=mask)
    assert abs(p.sum() - 1) < tolerance("probs-sum") and set(np.flatnonzero(p)) <= set(few)


def test_mask_int32_words_and_bits_past_the_vocab():
    n = 40                                   # two words, 24 bits of the second past the vocab
    logits = np.zeros(n, dtype=np.float32)
    logits[0] = 5.0
    mask = _bitset(64, [39, 45, 63]).view(np.int32)   # llguidance's numpy helpers allocate int32
    assert _core.Sampler(temperature=0.0).sample(logits, allowed=mask) == 39
    with pytest.raises(InvalidConfig) as e:  # only bits past the vocab: nothing allowed
        _core.Sampler(temperature=0.0).sample(logits, allowed=_bitset(64, [45, 63]))
    assert e.value.field == "allowed"


def test_mask_errors_are_structured():
    n = 100
    logits = np.zeros(n, dtype=np.float32)
    s = _core.Sampler(temperature=1.0, seed=1)
    with pytest.raises(InvalidConfig, match="allows no token") as e:
        s.sample(logits, allowed=np.zeros(4, dtype=np.uint32))
    assert e.value.field == "allowed"
    for bad in (np.zeros(3, dtype=np.uint32), np.zeros(5, dtype=np.uint32), np.zeros((2, 4), dtype=np.uint32)):
        with pytest.raises(ShapeMismatch):
            s.sample(logits, allowed=bad)
    for bad in (np.ones(4, dtype=np.float32), np.ones(4, dtype=np.uint64), [1, 2, 3, 4]):
        with pytest.raises(InvalidConfig) as e:
            s.sample(logits, allowed=bad)
        assert e.value.field == "allowed"
    assert s.history == []                  # a refused draw records nothing


def test_logit_bias_native_and_params():
    n = 50
    logits = np.linspace(0, 1, n).astype(np.float32)
    assert _core.Sampler(temperature=0.0).sample(logits) == n - 1
    assert _core.Sampler(temperature=0.0, logit_bias={3: 2.0}).sample(logits) == 3
    assert _core.Sampler(temperature=0.0, logit_bias={n - 1: -100.0}).sample(logits) == n - 2
    s = _core.Sampler(temperature=1.0, seed=3, logit_bias={7: 100.0})
    assert all(s.sample(logits) == 7 for _ in range(20)) and s.logit_bias == {7: 100.0}
    # the mask wins over a bias (a masked token stays at -inf)
    assert _core.Sampler(temperature=0.0, logit_bias={3: 100.0}).sample(logits, allowed=_bitset(n, [5, 6])) == 6
    with pytest.raises(InvalidConfig, match="outside the vocab") as e:
        _core.Sampler(logit_bias={n: 1.0}).sample(logits)
    assert e.value.field == "logit_bias"
    from cyb_llm.text.sampling import SamplingParams

    assert SamplingParams(logit_bias={"12": 1.5, 4: -2}).logit_bias == {12: 1.5, 4: -2.0}  # JSON keys are strings
    for bad in ({"x": 1}, {-1: 1}, {1: float("inf")}, {1: "a"}, {True: 1}, [1, 2]):
        with pytest.raises(InvalidConfig) as e:
            SamplingParams(logit_bias=bad)
        assert e.value.field == "logit_bias"


def test_logit_bias_in_completions(model):
    prompt = "The capital of France is"
    plain = model.create_completion(prompt, max_tokens=4, temperature=0)
    first = model.tokenize(prompt + plain["choices"][0]["text"], add_bos=True)[len(model.tokenize(prompt))]
    banned = model.create_completion(prompt, max_tokens=4, temperature=0, logit_bias={first: -100})
    assert banned["choices"][0]["text"] != plain["choices"][0]["text"]
    tid = model.tokenize("zebra", add_bos=False)[0]
    forced = model.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=3, temperature=0,
                                          logit_bias={str(tid): 100})  # JSON's string keys, as the server gets them
    assert forced["choices"][0]["message"]["content"] == model.detokenize([tid]).decode() * 3
    with pytest.raises(InvalidConfig) as e:
        model.create_completion(prompt, logit_bias={model.vocab_size: 1.0})
    assert e.value.field == "logit_bias"


# --- json_object, grammar, errors ---------------------------------------------------------------


def test_json_object_mode(model):
    """Any JSON object. Open-ended, the small model tends to write on (greedy here runs to
    max_tokens: the text is then cut, still the start of an object); sampled, it closes the object."""
    msgs = [{"role": "user", "content": 'Return a JSON object with the key "answer": what color is the sky?'}]
    for seed in (5, 6):
        r = model.create_chat_completion(msgs, temperature=SAMPLED, seed=seed, max_tokens=60,
                                         response_format={"type": "json_object"})
        assert r["choices"][0]["finish_reason"] == "stop"
        assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    r = model.create_chat_completion(msgs, temperature=0, max_tokens=12, response_format={"type": "json_object"})
    assert r["choices"][0]["message"]["content"].startswith("{")


def test_lark_grammar_in_completion_and_chat(model):
    grammar = 'start: ("yes" | "no") "! " NUM\nNUM: /[0-9]{2}/'
    for seed, t in ((None, 0), (1, SAMPLED), (2, SAMPLED)):
        r = model.create_completion("Is Paris in France?", grammar=grammar, temperature=t, seed=seed, max_tokens=20)
        c = r["choices"][0]
        assert c["finish_reason"] == "stop" and c["text"][:5] in ("yes! ", "no! 0"[:4] + c["text"][4:5]), c
        assert c["text"].split("! ")[0] in ("yes", "no") and len(c["text"].split("! ")[1]) == 2
    chunks = list(model.create_chat_completion([{"role": "user", "content": "Pick a fruit."}], stream=True,
                                               grammar='start: "apple" | "pear" | "plum"', temperature=0))
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks)
    assert text in ("apple", "pear", "plum") and chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("kw, field", [
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}),
     "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                                  "schema": {"type": "array", "uniqueItems": True}}}),
     "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                         "pattern": "(["}}}),
     "response_format"),
    (dict(response_format={"type": "json_schema"}), "response_format"),
    (dict(response_format={"type": "xml"}), "response_format"),
    (dict(response_format="json"), "response_format"),
    (dict(grammar="start: (("), "grammar"),
    (dict(grammar=""), "grammar"),
    (dict(grammar='start: "a"', response_format={"type": "json_object"}), "grammar"),
])
def test_invalid_schema_or_grammar_is_invalid_config(model, kw, field):
    with pytest.raises(InvalidConfig) as e:
        model.create_chat_completion([{"role": "user", "content": "hi"}], **kw)
    assert e.value.field == field


def test_non_strict_schema_tolerates_unimplemented_keywords(model):
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3,
              "uniqueItems": True}
    r = model.create_chat_completion([{"role": "user", "content": "Three digits as JSON."}], temperature=0,
                                     max_tokens=40, response_format={"type": "json_schema", "json_schema": {
                                         "name": "d", "schema": schema, "strict": False}})
    value = json.loads(r["choices"][0]["message"]["content"])
    assert isinstance(value, list) and all(isinstance(v, int) and 0 <= v <= 9 for v in value)


def test_mask_cost_is_recorded(model):
    r = model.create_chat_completion([{"role": "user", "content": "hi"}], temperature=0, max_tokens=20,
                                     response_format={"type": "json_object"})
    t = r["timings"]
    assert t["mask_ms"] > 0 and t["completion_tokens"] > 0
    plain = model.create_chat_completion([{"role": "user", "content": "hi"}], temperature=0, max_tokens=4)
    assert plain["timings"]["mask_ms"] == 0


# --- Python API parity (llama-cpp-python's Llama) -------------------------------------------------


def test_tokenize_detokenize_round_trip(model):
    for text in ("Hello, world!", "héllo wörld — ünïcode 你好 🙂", "  spaces\tand\nlines  ", ""):
        for add_bos in (True, False):
            ids = model.tokenize(text, add_bos=add_bos)
            assert ids == model.tokenize(text.encode("utf-8"), add_bos=add_bos)
            assert model.detokenize(ids) == text.encode("utf-8")
    assert model.tokenize("hi", add_bos=True) == model.tokenizer.encode("hi", add_special_tokens=True)
    # special tokens written in the text: plain text unless special=True
    end = next(iter(sorted(model.eos_token_ids)))
    piece = model.tokenizer.id_to_token(end)
    assert model.tokenize(piece, add_bos=False, special=True) == [end]
    plain = model.tokenize(piece, add_bos=False)
    assert end not in plain and model.detokenize(plain) == piece.encode()
    assert model.detokenize([end]) == b"" and model.detokenize([end], special=True) == piece.encode()
    # a character split across tokens: the bytes so far
    ids = model.tokenize("🙂", add_bos=False)
    if len(ids) > 1:
        assert model.detokenize(ids[:1]) == "🙂".encode()[:len(model.detokenize(ids[:1]))]
        assert b"".join(model.detokenize([i]) for i in ids) == "🙂".encode()
    with pytest.raises(cyb_llm.TokenizerError):
        model.tokenize(b"\xff\xfe")


def test_n_ctx_call_and_signatures():
    m = cyb_llm.load(hub.DEFAULT_MODEL, threads=2, n_ctx=256)
    assert m.n_ctx() == 256 and m.new_conversation().max_context == 256
    assert m.generator().generate("hi", max_tokens=1) is not None
    assert cyb_llm.load(hub.DEFAULT_MODEL, n_ctx=0).n_ctx() == m.max_position
    for bad in (-1, m.max_position + 1, 1.5, "8"):
        with pytest.raises(InvalidConfig) as e:
            cyb_llm.load(hub.DEFAULT_MODEL, n_ctx=bad)
        assert e.value.field == "n_ctx"
    with pytest.raises(InvalidConfig):  # a prompt beyond n_ctx
        m.create_completion("word " * 300, max_tokens=1)
    assert m("The capital of France is", max_tokens=3, temperature=0) ["choices"][0]["text"] == \
        m.create_completion("The capital of France is", max_tokens=3, temperature=0)["choices"][0]["text"]
    for fn in (cyb_llm.TextModel.create_chat_completion, cyb_llm.TextModel.create_completion):
        params = inspect.signature(fn).parameters
        assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values())
        assert {"response_format", "grammar", "logit_bias", "temperature", "seed"} <= set(params)
        assert "response_format" in fn.__doc__
    assert "tool_choice" in inspect.signature(cyb_llm.TextModel.create_chat_completion).parameters


# --- the server, through the official openai client ----------------------------------------------

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(model):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from test_serve import serving  # the live-server helper of tests/test_serve.py

    with serving({"smollm2": model}, parallel=2, ctx=512) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_server_json_schema_chat_and_completions(client, model):
    i = SHORT[0]
    what, schema = SCHEMAS[i]
    msgs = [{"role": "user", "content": f"Give me {what} as JSON."}]
    rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
    for seed in (None, 1):
        t = 0 if seed is None else SAMPLED
        r = client.chat.completions.create(model="smollm2", messages=msgs, response_format=rf, seed=seed,
                                           temperature=t, max_tokens=MAX_TOKENS)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        # the same answer as the library's (the server adds scheduling, not generation)
        assert r.choices[0].message.content == schema_answer(model, i, seed)[0]["choices"][0]["message"]["content"]
    greedy = schema_answer(model, i, None)[0]["choices"][0]["message"]["content"]
    chunks = list(client.chat.completions.create(model="smollm2", messages=msgs, response_format=rf, temperature=0,
                                                 max_tokens=MAX_TOKENS, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == greedy
    # /v1/completions: response_format and a grammar (extra_body: the openai client has no such parameter)
    c = client.completions.create(model="smollm2", prompt="Is the sky blue? Answer:", max_tokens=8, temperature=0,
                                  extra_body={"grammar": 'start: " yes" | " no"'})
    assert c.choices[0].text in (" yes", " no") and c.choices[0].finish_reason == "stop"
    c = client.completions.create(model="smollm2", prompt="A JSON list of two small numbers:", max_tokens=30,
                                  temperature=0, extra_body={"response_format": {"type": "json_schema", "json_schema": {
                                      "name": "l", "schema": SCHEMAS[15][1]}}})
    jsonschema.validate(json.loads(c.choices[0].text), SCHEMAS[15][1])


def test_server_logit_bias(client, model):
    tid = model.tokenize("zebra", add_bos=False)[0]
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                       temperature=0, logit_bias={str(tid): 100})
    assert r.choices[0].message.content == model.detokenize([tid]).decode() * 3


@pytest.mark.parametrize("rf, param", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}, "response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "string",
                                                                                   "pattern": "(["}}}, "response_format"),
    ({"type": "yaml"}, "response_format"),
])
def test_server_invalid_schema_is_400(client, rf, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                       response_format=rf, max_tokens=4)
    err = e.value.body
    assert e.value.status_code == 400 and err["param"] == param and err["code"] == "InvalidConfig" and err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="a", extra_body={"grammar": "start: (("}, max_tokens=2)
    assert e.value.body["param"] == "grammar"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                       logit_bias={"-3": 1}, max_tokens=2)
    assert e.value.body["param"] == "logit_bias"
    # the server keeps serving
    assert client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=2, temperature=0).choices[0].message.content


# --- tool_choice "required" / named with qwen05 -----------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                          "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                      "b": {"type": "number"}},
                                                     "required": ["a", "b"]}}},
]


def test_tool_choice_required_and_named_with_qwen05():
    """The answer is constrained to one call (Qwen2.5's <tool_call> form, the arguments by the tool's
    parameters schema) and parsed back into tool_calls, through the server and the openai client."""
    pytest.importorskip("fastapi")
    from test_serve import serving

    from cyb_llm.text.toolcalls import tool_call_form

    m = cyb_llm.load("qwen05", threads=2)
    assert tool_call_form(m.chat.source) == "hermes"
    with serving({"qwen05": m}, ctx=1024) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = c.chat.completions.create(model="qwen05", messages=msgs, tools=TOOLS, tool_choice="required",
                                      max_tokens=60, temperature=0)
        (call,) = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, TOOLS[0]["function"]["parameters"])
        assert args["city"] == "Paris"
        # named: the call is to that function even when the question is about another one
        deltas = [x.choices[0].delta for x in c.chat.completions.create(
            model="qwen05", messages=msgs, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
            max_tokens=60, temperature=0, stream=True)]
        (call,) = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert call.function.name == "add"
        jsonschema.validate(json.loads(call.function.arguments), TOOLS[1]["function"]["parameters"])


def test_tool_call_forms_and_grammars(model):
    """The form of the forced call follows the template: Llama 3.x's {"name", "parameters"}, the
    bare {"name", "arguments"} of a template that renders tools in another form, and the generic
    {"tool_call": {"name", "arguments"}} of one that ignores them (checked on recorded answers: no
    Llama 3 weights here), and a
    forced call of the default model (generic form) parses back into tool_calls."""
    from types import SimpleNamespace

    from cyb_llm.text.structured import Constraint
    from cyb_llm.text.toolcalls import forced_tools, parse_tool_calls, tool_call_form, tool_call_grammar

    llama3 = ('<|start_header_id|>user<|end_header_id|>Respond in the format {"name": function name, '
              '"parameters": dictionary of argument name and its value}.')
    assert tool_call_form(llama3) == "llama3" and tool_call_form("{{ messages }}") == "generic"
    assert tool_call_form(model.chat.source) == "generic"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert [f["name"] for f in forced_tools("required", TOOLS)] == ["get_weather", "add"]
    assert [f["name"] for f in forced_tools(named, TOOLS)] == ["get_weather"]
    assert forced_tools("auto", TOOLS) is None and forced_tools(None, None) is None
    for tc in ("required", {"type": "function", "function": {"name": "nope"}}, {"type": "function"}, "sometimes"):
        with pytest.raises(InvalidConfig) as e:
            forced_tools(tc, TOOLS if tc != "required" else None)
        assert e.value.field == "tool_choice"
    assert tool_call_form("{{ tools | tojson }}") == "json"
    for src, answer, key in ((llama3, '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}',
                              "parameters"),
                             ("{{ tools | tojson }}", '{"name": "add", "arguments": {"a": 1, "b": 2.5}}', "arguments"),
                             ("", '{"tool_call": {"name": "add", "arguments": {"a": 1, "b": 2.5}}}', "arguments")):
        stub = SimpleNamespace(chat=SimpleNamespace(source=src))
        grammar = tool_call_grammar(stub, forced_tools("required", TOOLS))
        m = Constraint(model, grammar, "tool_choice").matcher()
        for t in model.tokenize(answer, add_bos=False):
            m.fill()
            m.consume(t)
        assert m.accepting
        wrong = Constraint(model, grammar, "tool_choice").matcher()  # the other key is refused
        other = answer.replace(key, "arguments" if key == "parameters" else "parameters")
        with pytest.raises(InvalidConfig):
            for t in model.tokenize(other, add_bos=False):
                wrong.fill()
                wrong.consume(t)
        assert parse_tool_calls(answer, {"get_weather", "add"})[1]
    r = model.create_chat_completion([{"role": "user", "content": "What is 2 plus 3?"}], tools=TOOLS,
                                     tool_choice={"type": "function", "function": {"name": "add"}}, temperature=0,
                                     max_tokens=40)
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert r["choices"][0]["finish_reason"] == "tool_calls" and call["function"]["name"] == "add"
    jsonschema.validate(json.loads(call["function"]["arguments"]), TOOLS[1]["function"]["parameters"])
    with pytest.raises(InvalidConfig) as e:  # a forced call and a response_format cannot both hold
        model.create_chat_completion([{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice="required",
                                     response_format={"type": "json_object"})
    assert e.value.field == "response_format"
