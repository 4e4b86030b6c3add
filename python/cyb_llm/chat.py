"""Chat templates: the checkpoint's Jinja template rendered in a sandbox, as HF renders it.

The environment matches transformers' `apply_chat_template`: an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loop-controls extension, a `{% generation %}` block (rendered as
its body), `raise_exception`, `strftime_now`, a `tojson` filter that does not escape HTML, `dict`,
and a `namespace` that refuses underscore attributes. Variables: `messages`, `tools`, `documents`,
`add_generation_prompt`, the special-token strings (`bos_token`, `eos_token`, ...) and any extra
keyword given to `render`.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import InvalidConfig

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


def _plain(value: Any) -> Any:
    """Rebuild template inputs out of plain JSON types, so nothing with methods reaches the sandbox."""
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
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
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
        try:
            self._template = _environment().from_string(template)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise InvalidConfig(field="chat.template", reason=f"template syntax error line {e.lineno}: {e.message}",
                                message=f"chat template does not compile (line {e.lineno}): {e.message}") from e
        self.special_tokens = {"bos_token": bos_token or "", "eos_token": eos_token or ""}
        self.special_tokens.update({k: v for k, v in (special_tokens or {}).items() if v is not None})
        self.eos_sequences = list(eos_sequences)
        self.system_default = system_default

    def render(self, messages: Iterable[Mapping[str, Any]], add_generation_prompt: bool = True,
               tools: list | None = None, documents: list | None = None, **extra: Any) -> str:
        """The prompt text for `messages` (a list of {"role", "content"} dicts), exactly as
        transformers' apply_chat_template(..., tokenize=False) renders it."""
        chat = []
        for m in messages:
            if not isinstance(m, Mapping):
                raise InvalidConfig(field="messages", reason=f"chat messages must be dicts, got {type(m).__name__}")
            m = _plain(m)
            reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
            if reasoning is not None:
                m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
            chat.append(m)
        if self.system_default and not (chat and chat[0].get("role") == "system"):
            chat.insert(0, {"role": "system", "content": self.system_default})
        variables = dict(self.special_tokens)
        variables.update(_plain(extra))
        try:
            return self._template.render(
                messages=chat, tools=_plain(tools), documents=_plain(documents),
                add_generation_prompt=bool(add_generation_prompt), **variables,
            )
        except jinja2.exceptions.TemplateError as e:
            raise InvalidConfig(field="chat.template", reason=str(e), message=f"chat template failed: {e}") from e

    def __repr__(self) -> str:
        return f"ChatTemplate({len(self.source)} chars)"


def chat_from_modelfile(mf) -> ChatTemplate | None:
    """The chat template of an open `.model` file, or None when it has none."""
    if "chat" not in mf.sections:
        return None
    chat = mf.sections["chat"]
    if not isinstance(chat, dict) or not chat.get("template"):
        return None
    specials = {}
    for key in ("unk_token", "pad_token", "sep_token", "cls_token", "mask_token"):
        if isinstance(chat.get(key), str):
            specials[key] = chat[key]
    return ChatTemplate(
        chat["template"], chat.get("bos_token", ""), chat.get("eos_token", ""),
        special_tokens=specials, eos_sequences=chat.get("eos_sequences", []),
        system_default=chat.get("system_default"),
    )
