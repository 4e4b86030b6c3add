"""Chat templates: the checkpoint's Jinja template rendered in a sandbox, as HF renders it.

The environment matches transformers' `apply_chat_template`: an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loop-controls extension, a `{% generation %}` block (rendered as
its body), `raise_exception`, `strftime_now`, a `tojson` filter that does not escape HTML, `dict`,
and a `namespace` that refuses underscore attributes. Variables: `messages`, `tools`, `documents`,
`add_generation_prompt`, the special-token strings (`bos_token`, `eos_token`, ...) and any extra
keyword given to `render`.
"""
from __future__ import annotations

import functools
import json
import threading
from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import Error, InvalidConfig

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; here it
    renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):  # noqa: N805 - same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attributes ({name!r})")


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


#: How deep template inputs (messages, tools, documents) may nest.
MAX_INPUT_DEPTH = 64


def _plain(value: Any, depth: int = 0) -> Any:
    """Rebuild template inputs out of plain JSON types, so nothing with methods reaches the sandbox."""
    if depth > MAX_INPUT_DEPTH:
        raise InvalidConfig(field="messages", reason=f"chat input nested deeper than {MAX_INPUT_DEPTH} levels")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    return str(value)


# --- rendering budgets ---------------------------------------------------------
#: Loop iterations plus calls (functions, macros, methods) one render may take.
MAX_STEPS = 1_000_000
#: Characters (or items) of the rendered text and of any string or list a template builds;
#: a render may also produce 4x the characters of its inputs when that is more.
MAX_OUTPUT_CHARS = 16 << 20


class _BudgetExceeded(jinja2.exceptions.TemplateError):
    def __init__(self, budget: str, message: str):
        super().__init__(message)
        self.budget = budget


class _Budget(threading.local):
    steps = 0
    max_steps = MAX_STEPS
    max_chars = MAX_OUTPUT_CHARS

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise _BudgetExceeded("steps", f"the template ran over its budget of {self.max_steps} steps "
                                           "(loop iterations and calls)")

    def size(self, value: Any, what: str) -> Any:
        if isinstance(value, (str, list, tuple, dict, bytes, range)) and len(value) > self.max_chars:
            raise _BudgetExceeded("output", f"{what} of {len(value)} characters/items is over the budget of "
                                            f"{self.max_chars}")
        return value

    def int_arg(self, value: Any, what: str) -> None:
        if type(value) is int and abs(value) > self.max_chars:
            raise _BudgetExceeded("output", f"{what}: integer argument {value} is over the budget of {self.max_chars}")


_budget = _Budget()


def _count_steps(iterable: Any) -> Iterator[Any]:
    """Wraps the iterable of every `{% for %}` of a chat template: one step per iteration."""
    for x in iterable:
        _budget.step()
        yield x


def _budget_range(*args: int) -> range:
    for a in args:
        _budget.int_arg(a, "range()")
    r = range(*args)
    _budget.size(r, "range()")
    return r


def _budget_filter(f: Any) -> Any:
    @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        for v in (*args, *kwargs.values()):
            _budget.int_arg(v, f"filter {f.__name__}")
        return _budget.size(f(*args, **kwargs), f"the result of filter {f.__name__}")

    return wrapped


class _BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with budgets: every loop iteration and call is a step, every string or list
    a call, filter or operator builds is checked against the size budget before or right after
    it is built, and `range` takes bounded arguments. `{% include %}`, `{% import %}` and
    `{% extends %}` are refused (a chat template is self-contained)."""

    intercepted_binops = frozenset(["*", "+", "**"])

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        for node in tree.find_all((jinja2.nodes.Include, jinja2.nodes.Import, jinja2.nodes.FromImport,
                                   jinja2.nodes.Extends)):
            tag = {"Include": "include", "Import": "import", "FromImport": "from ... import",
                   "Extends": "extends"}[type(node).__name__]
            raise jinja2.exceptions.TemplateSyntaxError(
                f"{{% {tag} %}} is not supported: chat templates are self-contained", node.lineno, name, filename)
        for node in tree.find_all(jinja2.nodes.For):
            node.iter = jinja2.nodes.Call(jinja2.nodes.ImportedName(f"{__name__}._count_steps"), [node.iter], [],
                                          None, None, lineno=node.lineno)
        return tree

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's signature
        _budget.step()
        if __obj is not _count_steps:
            for v in (*args, *kwargs.values()):
                _budget.int_arg(v, "call")
        return _budget.size(super().call(__context, __obj, *args, **kwargs), "the result of a call")

    def call_binop(self, context, operator, left, right):
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and \
                abs(right) > 64 and abs(left) > 1:
            raise _BudgetExceeded("output", f"{left} ** {right} is over the budget (exponents up to 64)")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    _budget.size(range(len(seq) * max(n, 0)), "a repeated string or list")
        if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            _budget.size(range(len(left) + len(right)), "a concatenated string or list")
        return super().call_binop(context, operator, left, right)


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BudgetedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters = {k: _budget_filter(f) for k, f in env.filters.items()}
    env.globals["range"] = _budget_range
    env.filters["tojson"] = _budget_filter(_tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _Namespace
    return env


class ChatTemplate:
    """A compiled chat template with the special-token strings it may refer to."""

    def __init__(self, template: str, bos_token: str = "", eos_token: str = "", *,
                 special_tokens: Mapping[str, str] | None = None, eos_sequences: Iterable[str] = (),
                 system_default: str | None = None):
        if not isinstance(template, str) or not template:
            raise InvalidConfig(field="chat.template", reason="empty chat template")
        self.source = template
        self._compiled: jinja2.Template | None = None  # compiled on first use (render)
        self.special_tokens = {"bos_token": bos_token or "", "eos_token": eos_token or ""}
        self.special_tokens.update({k: v for k, v in (special_tokens or {}).items() if v is not None})
        self.eos_sequences = list(eos_sequences)
        self.system_default = system_default

    @property
    def _template(self) -> jinja2.Template:
        """The compiled template (compiled once, on first use: loading a model never runs template code)."""
        if self._compiled is None:
            try:
                self._compiled = _environment().from_string(self.source)
            except jinja2.exceptions.TemplateSyntaxError as e:
                raise InvalidConfig(field="chat.template", reason=f"template syntax error line {e.lineno}: {e.message}",
                                    message=f"chat template does not compile (line {e.lineno}): {e.message}") from e
            except (RecursionError, MemoryError) as e:
                raise InvalidConfig(field="chat.template", reason=f"the template does not compile: {e!r}") from e
        return self._compiled

    def render(self, messages: Iterable[Mapping[str, Any]], add_generation_prompt: bool = True,
               tools: list | None = None, documents: list | None = None, **extra: Any) -> str:
        """The prompt text for `messages` (a list of {"role", "content"} dicts), exactly as
        transformers' apply_chat_template(..., tokenize=False) renders it. `content` is a string or
        a list of OpenAI text parts ({"type": "text", "text": ...}, joined without separator).
        Rendering runs under a step budget and an output-size budget (MAX_STEPS, MAX_OUTPUT_CHARS);
        going over either raises InvalidConfig(field="chat.template") naming the budget."""
        chat = []
        for k, m in enumerate(messages):
            if not isinstance(m, Mapping):
                raise InvalidConfig(field="messages", reason=f"chat messages must be dicts, got {type(m).__name__}")
            m = _check_message(_plain(m), k)
            reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
            if reasoning is not None:
                m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
            chat.append(m)
        if self.system_default and not (chat and chat[0].get("role") == "system"):
            chat.insert(0, {"role": "system", "content": self.system_default})
        variables = dict(self.special_tokens)
        variables.update(_plain(extra))
        template = self._template
        input_chars = sum(len(str(v)) for m in chat for v in m.values())
        _budget.steps = 0
        _budget.max_chars = max(MAX_OUTPUT_CHARS, 4 * input_chars)
        try:
            out: list[str] = []
            size = 0
            for chunk in template.generate(
                messages=chat, tools=_plain(tools), documents=_plain(documents),
                add_generation_prompt=bool(add_generation_prompt), **variables,
            ):
                size += len(chunk)
                if size > _budget.max_chars:
                    raise _BudgetExceeded("output", f"the rendered text is over the budget of {_budget.max_chars} "
                                                    "characters")
                out.append(chunk)
            return "".join(out)
        except _BudgetExceeded as e:
            raise InvalidConfig(field="chat.template", reason=f"{e} ({e.budget} budget)",
                                message=f"chat template stopped: {e} ({e.budget} budget)") from None
        except Error:
            raise
        except Exception as e:  # TemplateError, and what template code raises (TypeError, RecursionError, ...)
            what = str(e) if isinstance(e, jinja2.exceptions.TemplateError) else f"{type(e).__name__}: {e}"
            raise InvalidConfig(field="chat.template", reason=what, message=f"chat template failed: {what}") from e

    def __repr__(self) -> str:
        return f"ChatTemplate({len(self.source)} chars)"


def _check_message(m: dict, index: int) -> dict:
    """A message with a string role and content: a string, a list of OpenAI text parts (joined),
    or None when the message carries tool_calls."""
    role = m.get("role")
    if not isinstance(role, str):
        raise InvalidConfig(field=f"messages[{index}].role", reason=f"must be a string, got {role!r}")
    content = m.get("content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidConfig(field=f"messages[{index}].content[{j}]",
                                    reason=f"only text parts {{'type': 'text', 'text': str}} are supported, got {part!r}")
            texts.append(part["text"])
        m = {**m, "content": "".join(texts)}
    elif content is None and ("content" not in m or m.get("tool_calls")):
        pass  # assistant tool calls without text (the template decides)
    elif not isinstance(content, str):
        raise InvalidConfig(field=f"messages[{index}].content",
                            reason=f"must be a string or a list of text parts, got {content!r}")
    return m


def chat_from_modelfile(mf) -> ChatTemplate | None:
    """The chat template of an open `.model` file, or None when it has none."""
    if "chat" not in mf.sections:
        return None
    chat = mf.sections["chat"]
    if not isinstance(chat, dict) or not chat.get("template"):
        return None
    for key in ("template", "bos_token", "eos_token", "system_default"):
        if key in chat and not isinstance(chat[key], str):
            raise InvalidConfig(field=f"chat.{key}", reason=f"must be a string, got {chat[key]!r}")
    eos = chat.get("eos_sequences", [])
    if not isinstance(eos, list) or not all(isinstance(e, str) for e in eos):
        raise InvalidConfig(field="chat.eos_sequences", reason=f"must be a list of strings, got {eos!r}")
    specials = {}
    for key in ("unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        if isinstance(chat.get(key), str):
            specials[key] = chat[key]
    return ChatTemplate(
        chat["template"], chat.get("bos_token", ""), chat.get("eos_token", ""),
        special_tokens=specials, eos_sequences=chat.get("eos_sequences", []),
        system_default=chat.get("system_default"),
    )
