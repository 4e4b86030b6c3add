"""Tool calls with ordinary OpenAI definitions (issue 42, item 4), through the server and the `openai`
client, streamed and not, greedy and at the model's own sampling defaults, with smollm2 (a template
that ignores `tools`: the generic form) and qwen05 (its template's <tool_call> form):

- "required" and a named function: the answer is a call whose arguments validate against the
  function's schema under OpenAI's strict semantics (no undeclared property), and it stops there,
  also for a definition without `additionalProperties` (which JSON Schema leaves open);
- "auto": the model chooses between text and a call;
- several calls in one answer when `parallel_tool_calls` allows it, one when it does not.

The 20-definition sweep is bench/bench_tools.py (docs/serve.md "Tool calls")."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

import cyb_llm  # noqa: E402
from cyb_llm.errors import InvalidConfig  # noqa: E402
from cyb_llm.text.toolcalls import parse_tool_calls, strict_parameters  # noqa: E402

#: A newcomer's weather tool, as OpenAI's guide writes it: descriptions, an optional enum property,
#: no additionalProperties.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}}
CALC = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
TOOLS = [WEATHER, CALC]
SCHEMAS = {t["function"]["name"]: strict_parameters(t["function"]["parameters"]) for t in TOOLS}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
BOSTON = "What's the weather like in Boston today?"


@pytest.fixture(scope="module")
def client():
    from test_serve import serving

    models = {"smollm2": cyb_llm.load("smollm2", threads=2), "qwen05": cyb_llm.load("qwen05", threads=2)}
    with serving(models, ctx=1024) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def ask(client, model: str, question: str, stream: bool, temperature: float | None, **kw):
    """(finish_reason, content, [(name, arguments)]) of one chat completion."""
    if temperature is not None:
        kw["temperature"] = temperature
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                       stream=stream, seed=7, **kw)
    if not stream:
        ch = r.choices[0]
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []]
        return ch.finish_reason, ch.message.content or "", calls
    content, calls, finish = [], [], None
    for x in r:
        d = x.choices[0].delta
        content.append(d.content or "")
        calls += [(c.function.name, json.loads(c.function.arguments)) for c in d.tool_calls or []]
        finish = x.choices[0].finish_reason or finish
    return finish, "".join(content), calls


def valid(name: str, args: dict) -> bool:
    try:
        jsonschema.validate(args, SCHEMAS[name])
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize("model", ["smollm2", "qwen05"])
@pytest.mark.parametrize("choice,stream,temperature", [("required", False, 0), ("required", True, None),
                                                       ("named", False, None), ("named", True, 0)])
def test_forced_call_of_an_ordinary_definition(client, model, choice, stream, temperature):
    """Without additionalProperties the call still has only the declared keys, and it stops there:
    no invented keys until max_tokens (what smollm2 did)."""
    finish, content, calls = ask(client, model, BOSTON, stream, temperature, tools=TOOLS,
                                 tool_choice="required" if choice == "required" else NAMED, max_tokens=60)
    assert finish == "tool_calls" and not content.strip()
    ((name, args),) = calls
    assert name == "get_weather" and valid(name, args), args
    assert "Boston" in args["location"]


TODO = {"type": "function", "function": {
    "name": "create_todo", "description": "Add items to the to-do list",
    "parameters": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "string"}, "description": "The tasks"},
        "priority": {"type": "string", "enum": ["low", "medium", "high"]}}, "required": ["items"]}}}


@pytest.mark.parametrize("choice,stream,max_tokens", [("required", False, 30), ("named", True, 30),
                                                      ("required", True, 36), ("named", False, 200)])
def test_forced_call_closes_before_max_tokens(client, choice, stream, max_tokens):
    """A forced call is one complete call within max_tokens (smollm2 needs about 26 tokens for the
    smallest call here; it writes 32 when free, and repeated array items without end in the sweep of
    bench/bench_tools.py): in its last tokens the grammar's mask is narrowed to the tokens that close
    (cyb_llm.text.structured.CLOSE_RESERVE). Without that the 30-token answers are cut ("length")."""
    named = {"type": "function", "function": {"name": "create_todo"}}
    finish, content, calls = ask(client, "smollm2", "Add buy milk and call mom to my to-do list.", stream, 0,
                                 tools=[TODO, CALC], tool_choice="required" if choice == "required" else named,
                                 max_tokens=max_tokens)
    assert finish == "tool_calls" and not content.strip(), (finish, content)
    ((name, args),) = calls
    jsonschema.validate(args, strict_parameters(TODO["function"]["parameters"]))
    assert name == "create_todo" and isinstance(args["items"], list)
    if max_tokens == 200:
        assert "milk" in args["items"][0]


@pytest.mark.parametrize("model", ["smollm2", "qwen05"])
@pytest.mark.parametrize("stream,temperature", [(False, 0), (True, None)])
def test_auto_calls_a_tool_when_the_question_needs_one(client, model, stream, temperature):
    finish, content, calls = ask(client, model, BOSTON, stream, temperature, tools=TOOLS, max_tokens=60)
    assert finish == "tool_calls" and not content.strip()
    ((name, args),) = calls
    assert name == "get_weather" and valid(name, args) and "Boston" in args["location"]


@pytest.mark.parametrize("model,question", [("qwen05", "Hi! Who are you?"),
                                            ("smollm2", "Write a haiku about spring.")])
@pytest.mark.parametrize("stream", [False, True])
def test_auto_answers_in_text_when_it_chooses_to(client, model, question, stream):
    """With tools and "auto" the model may still answer in text (smollm2's generic form writes
    {"response": text}, which comes back as plain content, also when cut by max_tokens)."""
    finish, content, calls = ask(client, model, question, stream, 0, tools=TOOLS, max_tokens=24)
    assert not calls and finish in ("stop", "length")
    assert content.strip() and not content.lstrip().startswith("{"), content


@pytest.mark.parametrize("stream", [False, True])
def test_several_calls_in_one_answer(client, stream):
    """parallel_tool_calls true: qwen05 calls get_weather once per city in one answer; without it
    "required" gives exactly one call."""
    q = "Get the weather for each of these cities: Paris, Oslo."
    finish, _, calls = ask(client, "qwen05", q, stream, 0, tools=TOOLS, tool_choice="required",
                           parallel_tool_calls=True, max_tokens=90)
    assert len(calls) > 1 and all(valid(n, a) for n, a in calls), calls
    assert [a.get("location") for _, a in calls[:2]] == ["Paris", "Oslo"]
    finish, _, calls = ask(client, "qwen05", q, stream, 0, tools=TOOLS, tool_choice="required", max_tokens=90)
    assert finish == "tool_calls" and len(calls) == 1 and valid(*calls[0])
    finish, _, calls = ask(client, "qwen05", q, stream, 0, tools=TOOLS, parallel_tool_calls=False, max_tokens=90)
    assert finish == "tool_calls" and len(calls) == 1 and valid(*calls[0])
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "qwen05", q, stream, 0, tools=TOOLS, extra_body={"parallel_tool_calls": "yes"}, max_tokens=4)
    assert e.value.body["param"] == "parallel_tool_calls"


def test_strict_parameters():
    """OpenAI's strict semantics on any schema: objects without additionalProperties are closed at
    every depth; what the schema says itself, allOf's branches and values stay as they are."""
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "array", "items": {"properties": {"c": {}}}}}},
        "d": {"type": "object", "additionalProperties": {"type": "object", "properties": {"e": {}}}},
        "f": {"anyOf": [{"type": "object"}, {"type": "string"}]},
        "g": {"allOf": [{"properties": {"h": {}}}, {"properties": {"i": {}}}]},
        "j": {"const": {"type": "object"}}},
        "$defs": {"k": {"type": "object", "properties": {}}}}
    s = strict_parameters(schema)
    assert s["additionalProperties"] is False
    p = s["properties"]
    assert p["a"]["additionalProperties"] is False
    assert p["a"]["properties"]["b"]["items"]["additionalProperties"] is False
    assert p["d"]["additionalProperties"]["additionalProperties"] is False
    assert p["f"]["anyOf"][0]["additionalProperties"] is False and "additionalProperties" not in p["f"]["anyOf"][1]
    assert all("additionalProperties" not in b for b in p["g"]["allOf"]) and "additionalProperties" not in p["g"]
    assert p["j"] == {"const": {"type": "object"}} and s["$defs"]["k"]["additionalProperties"] is False
    assert "additionalProperties" not in schema   # the caller's schema is not changed
    ok = {"a": {"b": [{"c": 1}]}, "d": {"x": {"e": 2}}, "f": {}, "g": {"h": 1, "i": 2}}
    jsonschema.validate(ok, s)
    for bad in ({"z": 1}, {"a": {"q": 1}}, {"a": {"b": [{"c": 1, "q": 2}]}}, {"d": {"x": {"q": 1}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, s)


def test_grammar_refuses_undeclared_keys_and_parses_its_forms():
    """The forced call's grammar refuses a key the schema does not declare (the tokens of the answer
    smollm2 used to give); the generic form's answers parse back (a call, a text reply, a reply or
    a list of calls cut by max_tokens)."""
    from cyb_llm.text.generate import chat_constraint

    m = cyb_llm.load("smollm2", threads=1)
    c = chat_constraint(m, tools=TOOLS, tool_choice=NAMED)
    matcher = c.matcher()
    bad = '{"tool_call": {"name": "get_weather", "arguments": {"location": "Boston", "description": "sunny"}}}'
    with pytest.raises(InvalidConfig):
        for t in m.tokenize(bad, add_bos=False):
            matcher.fill()
            matcher.consume(t)
    good = '{"tool_call": {"name": "get_weather", "arguments": {"location": "Boston", "unit": "celsius"}}}'
    matcher = chat_constraint(m, tools=TOOLS, tool_choice=NAMED).matcher()
    for t in m.tokenize(good, add_bos=False):
        matcher.fill()
        matcher.consume(t)
    assert matcher.stopped
    # a schema llguidance cannot compile: "auto" is parsed only, as before; a forced call names the field
    odd = [{"type": "function", "function": {"name": "f", "parameters": {"type": "objectx"}}}]
    assert chat_constraint(m, tools=odd, tool_choice="auto") is None
    with pytest.raises(InvalidConfig) as e:
        chat_constraint(m, tools=odd, tool_choice="required")
    assert e.value.field == "tool_choice"
    names = {"get_weather", "calculator"}
    assert parse_tool_calls(good, names)[1][0]["function"]["name"] == "get_weather"
    assert parse_tool_calls('{"response": "Hi \\"there\\""}', names) == ('Hi "there"', [])
    assert parse_tool_calls('{"response": "Hi \\"th', names) == ('Hi "th', [])
    two = parse_tool_calls('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>\n'
                           '<tool_call>\n{"name": "calc', names)
    assert two[0] == "" and [c["function"]["name"] for c in two[1]] == ["calculator"]
