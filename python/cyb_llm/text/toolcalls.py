"""Tool calls: a model's text output parsed back into OpenAI `tool_calls`.

The request's `tools` are rendered into the prompt by the model's own chat
template (chat.py); what the model writes back depends on its family:

- Qwen2.5 (and Hermes-style templates): one or more
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks,
  possibly after some text (kept as the message content);
- Llama 3.x: the whole answer is ``{"name": ..., "parameters": {...}}``
  (optionally after ``<|python_tag|>``), several calls separated by ``;``;
- anything else (generic fallback): the whole answer, or a ```json fenced
  block that is the whole answer, is one JSON object ``{"name", "arguments"}``
  (or ``{"function": {...}}``, ``{"tool_calls": [...]}``) or a list of them.

A call counts only when its name is one of the request's tools; otherwise the
text stays content.

`tool_choice` "required" or a named function (`{"type": "function",
"function": {"name": ...}}`) constrains the answer to one call in the family's
form (`tool_call_grammar`: a Lark grammar for llguidance whose call object is a
JSON schema built from the tools' `parameters` under OpenAI's strict semantics,
`strict_parameters`), so the answer always parses; "auto" constrains it to text
or calls. Templates that ignore `tools` get them in the system message
(`with_tool_prompt`) and answer in the generic form. `ToolCallStream` does the same for a stream of text
pieces: it releases text as content while the answer cannot be a tool call and
holds it back from the point where one may begin.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InvalidConfig
from .structured import lark_literal

_QWEN_OPEN, _QWEN_CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.S)
#: Ways an answer that is a tool call may begin (after leading white space).
_STARTS = (_QWEN_OPEN, _PYTHON_TAG, "{", "[", "```")


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> set[str]:
    """Names of the functions of an OpenAI `tools` list; InvalidConfig(field="tools") when malformed."""
    if tools is None:
        return set()
    if not isinstance(tools, (list, tuple)):
        raise InvalidConfig(field="tools", reason=f"must be a list of tools, got {type(tools).__name__}")
    names = set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, Mapping) else None
        if not isinstance(t, Mapping) or t.get("type", "function") != "function" or not isinstance(fn, Mapping) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidConfig(field="tools", reason=f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                                                      "{\"name\": ..., \"parameters\": {...}}}")
        names.add(fn["name"])
    return names


def _call(name: str, arguments: Any) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {},
                                                                   ensure_ascii=False)
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": {"name": name, "arguments": args}}


def _from_obj(obj: Any, names: set[str]) -> list[dict] | None:
    """Calls of one decoded JSON value, or None when it is not (entirely) tool calls of known tools."""
    if isinstance(obj, list):
        if not obj:
            return None
        calls = []
        for o in obj:
            c = _from_obj(o, names)
            if c is None:
                return None
            calls += c
        return calls
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("tool_calls"), list) and len(obj) == 1:
        return _from_obj(obj["tool_calls"], names)
    if isinstance(obj.get("tool_call"), dict) and len(obj) == 1:
        return _from_obj(obj["tool_call"], names)
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        return _from_obj(obj["function"], names)
    name = obj.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return [_call(name, args)]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


_RESPONSE = '{"response": "'


def _partial_string(body: str) -> str | None:
    """The text of a JSON string's body that may be cut anywhere (an escape cut in half is dropped)."""
    for k in range(min(len(body), 6) + 1):
        v = _loads('"' + body[:len(body) - k] + '"')
        if isinstance(v, str):
            return v
    return None


def parse_tool_calls(text: str, tools: Sequence[Mapping[str, Any]] | set[str] | None) -> tuple[str, list[dict]]:
    """(content, tool_calls) of a finished answer. No call found: (text, [])."""
    names = tools if isinstance(tools, set) else tool_names(tools)
    if not names:
        return text, []
    # Qwen2.5 / Hermes: <tool_call>{json}</tool_call> blocks (the last one may lack its closing tag)
    if _QWEN_OPEN in text:
        calls: list[dict] = []
        content: list[str] = []
        rest = text
        while _QWEN_OPEN in rest:
            before, _, after = rest.partition(_QWEN_OPEN)
            content.append(before)
            body, closed, rest = after.partition(_QWEN_CLOSE)
            found = _from_obj(_loads(body.strip()), names)
            if found is None and not closed and calls:
                break   # a last call cut by max_tokens: the complete ones before it count
            if found is None:
                return text, []
            calls += found
            if not closed:
                rest = ""
        content.append(rest)
        return "".join(content).strip(), calls
    s = text.strip()
    if s.startswith(_PYTHON_TAG):
        s = s[len(_PYTHON_TAG):].strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
    # one JSON value (generic; Llama 3.x's {"name", "parameters"})
    obj = _loads(s)
    found = _from_obj(obj, names)
    if found is not None:
        return "", found
    if isinstance(obj, dict) and len(obj) == 1 and isinstance(obj.get("response"), str):
        return obj["response"], []   # the generic form's text answer
    if obj is None and s.startswith(_RESPONSE):
        cut = _partial_string(s[len(_RESPONSE):])   # the same, cut by max_tokens
        if cut is not None:
            return cut, []
    # Llama 3.x: several calls separated by ";"
    if ";" in s:
        calls = []
        for part in s.split(";"):
            part = part.strip()
            if not part:
                continue
            c = _from_obj(_loads(part), names)
            if c is None:
                return text, []
            calls += c
        if calls:
            return "", calls
    return text, []


class ToolCallStream:
    """Splits a stream of text pieces into content released as it comes and a held-back tail
    that may hold tool calls; `finish()` parses that tail."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | set[str]):
        self.names = tools if isinstance(tools, set) else tool_names(tools)
        self._held = ""
        self._mode = "undecided"   # -> "content" (stream, watch for <tool_call>) | "call" (hold everything)

    def push(self, text: str) -> str:
        """Content that can be released now."""
        self._held += text
        if self._mode == "undecided":
            s = self._held.lstrip()
            if not s or any(m.startswith(s) for m in _STARTS):
                return ""   # could still become a tool call
            self._mode = "call" if any(s.startswith(m) for m in _STARTS) else "content"
        if self._mode == "call":
            return ""
        i = self._held.find(_QWEN_OPEN)
        if i >= 0:
            out, self._held, self._mode = self._held[:i], self._held[i:], "call"
            return out
        keep = next((k for k in range(min(len(_QWEN_OPEN) - 1, len(self._held)), 0, -1)
                     if self._held.endswith(_QWEN_OPEN[:k])), 0)
        out, self._held = self._held[:len(self._held) - keep], self._held[len(self._held) - keep:]
        return out

    def finish(self) -> tuple[str, list[dict]]:
        """(the rest of the content, tool calls) once the answer is complete."""
        held, self._held = self._held, ""
        if self._mode == "content" and _QWEN_OPEN not in held:
            return held, []
        return parse_tool_calls(held, self.names)


def template_messages(messages: Sequence[Any]) -> list:
    """Messages as chat templates expect them: an assistant's `tool_calls[].function.arguments` given as
    a JSON string (OpenAI's wire form) becomes the object it encodes (HF's form, which templates
    such as Qwen2.5's render with `tojson`). Anything else is passed through unchanged."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, Mapping) else None
        if isinstance(calls, list) and any(isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
                                           and isinstance(c["function"].get("arguments"), str) for c in calls):
            fixed = []
            for c in calls:
                fn = c.get("function") if isinstance(c, Mapping) else None
                if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                    args = _loads(fn["arguments"])
                    if isinstance(args, dict):
                        c = dict(c, function=dict(fn, arguments=args))
                fixed.append(c)
            m = dict(m, tool_calls=fixed)
        out.append(m)
    return out


def check_tool_choice(tool_choice: Any, tools: Iterable | None) -> str:
    """"auto", "none", "required" or "function" (a named function, `forced_tools` gives it);
    InvalidConfig(field="tool_choice") for anything else, or a choice that needs tools without any."""
    if tool_choice is None:
        return "auto" if tools else "none"
    if tool_choice in ("auto", "none"):
        return tool_choice
    if tool_choice == "required" or isinstance(tool_choice, Mapping):
        names = tool_names(tools)  # type: ignore[arg-type]
        if not names:
            raise InvalidConfig(field="tool_choice", reason="'required' or a named function needs 'tools'")
        if tool_choice == "required":
            return "required"
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise InvalidConfig(field="tool_choice", reason="a named choice is {\"type\": \"function\", "
                                                            "\"function\": {\"name\": ...}}")
        if name not in names:
            raise InvalidConfig(field="tool_choice", reason=f"names the function {name!r}, which is not one of "
                                                            f"the tools ({', '.join(sorted(names))})")
        return "function"
    raise InvalidConfig(field="tool_choice",
                        reason=f"must be 'auto', 'none', 'required' or {{\"type\": \"function\", \"function\": "
                               f"{{\"name\": ...}}}}, got {tool_choice!r}"[:300])


def forced_tools(tool_choice: Any, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
    """The functions (the tools' `function` objects) one of which the answer must call: all of them
    for "required", the named one for a named choice; None when the choice forces no call."""
    kind = check_tool_choice(tool_choice, tools)
    if kind not in ("required", "function"):
        return None
    fns = [t["function"] for t in tools or []]
    if kind == "function":
        fns = [f for f in fns if f["name"] == tool_choice["function"]["name"]][:1]
    return fns


#: Sub-schema keywords holding one schema / a list of schemas / a map of name -> schema.
_ONE = ("items", "additionalItems", "contains", "not", "if", "then", "else", "additionalProperties",
        "unevaluatedProperties", "unevaluatedItems", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
#: How a forced call's JSON is written: one line, ", " and ": " between items (what json.dumps and the
#: templates' tojson write), no other white space (white space the model could repeat without end);
#: keywords llguidance does not implement (an unknown "format") are tolerated, as OpenAI does.
_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


def strict_parameters(schema: Any, _in_all_of: bool = False) -> Any:
    """A function's `parameters` schema under OpenAI's strict semantics: every object schema that does
    not say otherwise gets `"additionalProperties": false` (only the declared properties; the
    required ones are required anyway), at any depth (properties, items, anyOf/oneOf, $defs, ...).
    JSON Schema itself lets an object without `additionalProperties` hold any other key, which a
    small model fills with keys of its own until max_tokens. Branches of `allOf` are left open
    (closing each would forbid the other branches' properties). Values (const, enum, default,
    examples) are not touched."""
    if isinstance(schema, list):
        return [strict_parameters(x) for x in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict = {}
    for k, v in schema.items():
        if k in _ONE:
            out[k] = strict_parameters(v)
        elif k in _MANY and isinstance(v, list):
            out[k] = [strict_parameters(x, k == "allOf") for x in v]
        elif k in _MAP and isinstance(v, Mapping):
            out[k] = {n: strict_parameters(x) for n, x in v.items()}
        else:
            out[k] = v
    t = out.get("type")
    is_object = t == "object" or (isinstance(t, list) and "object" in t) or \
        (t is None and any(k in out for k in ("properties", "required")))
    if is_object and not _in_all_of and "additionalProperties" not in out and "unevaluatedProperties" not in out \
            and "allOf" not in out:
        out["additionalProperties"] = False
    return out


def _call_schema(fn: Mapping[str, Any], args_key: str) -> dict:
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, Mapping):
        raise InvalidConfig(field="tools", reason=f"the parameters of {fn['name']!r} must be a JSON schema object")
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, args_key: strict_parameters(params)},
            "required": ["name", args_key], "additionalProperties": False}


def tool_call_form(template_source: str | None) -> str:
    """How a model of this chat template writes a call: "hermes" (Qwen2.5: <tool_call> blocks),
    "llama3" ({"name", "parameters"}), "json" (a template that renders `tools` in a form not known
    here: {"name", "arguments"} or a list of them) or "generic" (a template that ignores `tools`,
    such as SmolLM2's: the tools go into the system message (tool_prompt) and the answer is one
    JSON object, {"tool_call": {"name", "arguments"}}, {"tool_calls": [...]} or {"response": text},
    as llama-server does for such templates)."""
    src = template_source or ""
    if _QWEN_OPEN in src:
        return "hermes"
    if "<|start_header_id|>" in src and '"parameters"' in src:
        return "llama3"
    return "json" if template_takes_tools(src) else "generic"


def template_takes_tools(template_source: str | None) -> bool:
    """Whether a chat template renders the `tools` variable (Qwen2.5's does; SmolLM2's does not)."""
    return re.search(r"\btools\b", template_source or "") is not None


def tool_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system text that tells a model whose template ignores `tools` what it may call and how
    (the generic form that tool_call_grammar constrains and parse_tool_calls reads)."""
    lines = []
    for t in tools:
        fn = t["function"]
        lines.append(json.dumps({k: fn[k] for k in ("name", "description", "parameters") if k in fn},
                                ensure_ascii=False))
    return ("You can call these tools (JSON schemas of their arguments):\n" + "\n".join(lines) +
            '\nRespond in JSON format, either with "tool_call" (a request to call a tool) or with "response" '
            "(your reply to the user's request):\n"
            '{"tool_call": {"name": <the tool\'s name>, "arguments": <its arguments>}} or {"response": <your reply>}')


def with_tool_prompt(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list:
    """`messages` with tool_prompt(tools) in the system message (added first when there is none),
    for templates that do not render `tools` themselves."""
    text = tool_prompt(tools)
    msgs = list(messages)
    if msgs and isinstance(msgs[0], Mapping) and msgs[0].get("role") == "system" \
            and isinstance(msgs[0].get("content"), str):
        return [dict(msgs[0], content=msgs[0]["content"] + "\n\n" + text)] + msgs[1:]
    return [{"role": "system", "content": text}] + msgs


def tool_call_grammar(model: Any, functions: Sequence[Mapping[str, Any]], forced: bool = True,
                      parallel: bool = True) -> str:
    """A Lark grammar (llguidance's dialect) for the answer to a request with tools, in the form the
    model's chat template uses (tool_call_form); each call object is a JSON schema: the function's
    name as a constant and its `parameters` schema (strict_parameters) as the arguments.

    forced ("required" or a named function): the answer is calls and nothing else; otherwise
    ("auto") it is text or calls: Qwen2.5's form allows text before the <tool_call> blocks (its
    special token starts them), the generic form {"response": text} instead of the calls, the
    Llama 3 and json forms an answer that is either calls or text that does not begin as JSON.
    `parallel`: one or more calls, else exactly one."""
    chat = getattr(model, "chat", None)
    form = tool_call_form(getattr(chat, "source", None))
    key = "parameters" if form == "llama3" else "arguments"
    schemas = [_call_schema(f, key) for f in functions]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    schema = {"x-guidance": _JSON_STYLE, **schema}
    rules = [f"call: %json {json.dumps(schema, ensure_ascii=False)}"]
    if form == "hermes":
        opener = lark_literal(model, _QWEN_OPEN)
        rules.append(f"block: \"\\n\" call \"\\n\" {lark_literal(model, _QWEN_CLOSE)}")
        rules.append("calls: " + (f"{opener} block (\"\\n\" {opener} block)*" if parallel else f"{opener} block"))
        if forced:
            start = "start: calls"
        elif opener.startswith("<["):   # a special token: text cannot spell it
            # (text is free: masking its JSON starts drove qwen05 to worse text, not to <tool_call>)
            start = "start: TEXT | TEXT calls"
            rules.append("TEXT: /(.|\\n)*/")
        else:   # a plain string: the text before it is lazy (ends at the first opener)
            start = "start: TEXT | text_then_open block" + (f" (\"\\n\" {opener} block)*" if parallel else "")
            rules += ["text_then_open[lazy]: TEXT " + opener, "TEXT: /(.|\\n)*/"]
    elif form == "generic":
        one = '"{\\"tool_call\\": " call "}"'
        many = '"{\\"tool_calls\\": [" call (", " call)* "]}"'
        rules.append(f"calls: {one} | {many}" if parallel else f"calls: {one}")
        start = "start: calls" if forced else "start: calls | \"{\\\"response\\\": \" text \"}\""
        if not forced:
            rules.append('text: %json {"type": "string"}')
    else:
        if form == "llama3":
            rules.append("calls: call (\"; \" call)*" if parallel else "calls: call")
        else:
            rules.append("calls: call | \"[\" call (\", \" call)* \"]\"" if parallel else "calls: call")
        start = "start: calls" if forced else "start: calls | TEXT"
        if not forced:
            rules.append("TEXT: /[^\\s{\\[][\\s\\S]*/")  # any text not starting like a call
    return start + "\n" + "\n".join(rules) + "\n"


__all__ = ["parse_tool_calls", "ToolCallStream", "tool_names", "check_tool_choice", "forced_tools",
           "tool_call_form", "tool_call_grammar", "template_messages", "strict_parameters", "template_takes_tools",
           "tool_prompt", "with_tool_prompt"]
