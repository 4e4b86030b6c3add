"""Sampling policy: which token to draw from a row of logits.

Python chooses the policy (`SamplingParams`); the native `Sampler` runs it
per token in the order of docs/generation.md: logit bias -> [allowed-token mask of
structured output] -> penalties -> temperature -> top-k -> top-p -> min-p -> draw. `temperature == 0` is greedy (argmax after the
penalties). A seed makes the draws reproducible; without one a fresh random
seed is taken (and recorded on the sampler, `sampler.seed`).

Defaults: `SamplingParams.from_model(model)` takes the model's `[sampling]`
config section and fills the rest from `DEFAULTS` (llama.cpp's defaults),
which is what `cyb-llm run`, `Generator.generate` and
`create_chat_completion` use unless told otherwise. `SamplingParams.greedy()`
is the deterministic policy the tests use.
"""
from __future__ import annotations

import dataclasses
import math
import secrets
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .. import _core
from ..errors import InvalidConfig

#: Used for every key the model's [sampling] section does not set (llama.cpp's defaults).
DEFAULTS: dict[str, Any] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "penalty_last_n": 64,
}

# The native sampler's types (cyb::SamplingConfig): f32 numbers, int32 counts.
_F32_MAX = 3.4028234663852886e38
_I32_MAX = 2**31 - 1

# Spellings accepted in a model's [sampling] section besides the field names
# (HF generation_config / llama.cpp names).
_ALIASES = {"repeat_penalty": "repetition_penalty", "repeat_last_n": "penalty_last_n"}


@dataclass
class SamplingParams:
    """One sampling policy. Every field is plain data; `sampler()` builds the native object."""

    temperature: float = 0.0
    top_k: int = 0               # 0 = off
    top_p: float = 1.0           # 1 = off
    min_p: float = 0.0           # 0 = off
    repetition_penalty: float = 1.0   # HF / llama.cpp: divide positive logits, multiply negative ones
    presence_penalty: float = 0.0     # OpenAI: logit -= presence if the token occurred
    frequency_penalty: float = 0.0    # OpenAI: logit -= frequency * count
    penalty_last_n: int = 64     # penalty window over the history (prompt + output); -1 = all, 0 = none
    seed: int | None = None      # None = a fresh random seed per sampler
    stop: list[str] = field(default_factory=list)  # stop strings (never emitted)
    logit_bias: dict[int, float] | None = None  # token id -> additive bias, before every other stage

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def greedy(cls, **overrides: Any) -> "SamplingParams":
        return cls(**overrides)

    @classmethod
    def from_model(cls, model: Any, **overrides: Any) -> "SamplingParams":
        """The model's [sampling] defaults (then DEFAULTS), with non-None overrides on top."""
        values = dict(DEFAULTS)
        config = getattr(model, "config", None) or {}
        section = config.get("sampling", {}) if isinstance(config, Mapping) else {}
        if section is not None and not isinstance(section, Mapping):
            raise InvalidConfig(field="sampling", reason=f"the [sampling] config must be a table, got {section!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        for key, value in (section or {}).items():
            key = _ALIASES.get(key, key)
            if key in names and key not in ("seed", "stop", "logit_bias"):
                values[key] = value
        return cls(**values).replace(**overrides)

    def replace(self, **overrides: Any) -> "SamplingParams":
        """A copy with the given fields changed; None values leave a field as it is."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise InvalidConfig(field=unknown[0], reason=f"not a sampling parameter (known: {', '.join(sorted(names))})")
        changes = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > _F32_MAX:
                # the native sampler holds these as f32: beyond its range they would be infinite
                raise InvalidConfig(field=name, reason=f"must be a finite number within the f32 range, got {v!r}")
            if v < lo or v > hi or (lo_open and v == lo):
                interval = f"{'(' if lo_open else '['}{lo}, {hi}]"
                raise InvalidConfig(field=name, reason=f"must be in {interval}, got {v!r}")

        number("temperature", 0.0)
        number("top_p", 0.0, 1.0)
        number("min_p", 0.0, 1.0)
        number("repetition_penalty", 0.0, lo_open=True)
        number("presence_penalty", -math.inf)
        number("frequency_penalty", -math.inf)
        for name, lo in (("top_k", 0), ("penalty_last_n", -1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= _I32_MAX:
                raise InvalidConfig(field=name, reason=f"must be an integer in [{lo}, {_I32_MAX}], got {v!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**64):
            raise InvalidConfig(field="seed", reason=f"must be an integer in [0, 2**64), got {self.seed!r}")
        if self.logit_bias is not None:
            self.logit_bias = _logit_bias(self.logit_bias)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in _as_list(self.stop) if s != ""]
        for s in self.stop:
            if not isinstance(s, str):
                raise InvalidConfig(field="stop", reason=f"stop strings must be str, got {s!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def sampler(self) -> "_core.Sampler":
        """A native sampler for one generation (its own history and RNG)."""
        seed = self.seed if self.seed is not None else secrets.randbits(63)
        return _core.Sampler(
            temperature=float(self.temperature), top_k=int(self.top_k), top_p=float(self.top_p),
            min_p=float(self.min_p), repetition_penalty=float(self.repetition_penalty),
            presence_penalty=float(self.presence_penalty), frequency_penalty=float(self.frequency_penalty),
            penalty_last_n=int(self.penalty_last_n), seed=int(seed) & 0xFFFFFFFFFFFFFFFF,
            logit_bias=self.logit_bias or None,
        )


def _logit_bias(v: Any) -> dict[int, float]:
    """{token id: bias}: ids as ints or decimal strings (JSON object keys, OpenAI's wire form),
    biases finite numbers within the f32 range (OpenAI uses [-100, 100]; -100 all but bans a token)."""
    if not isinstance(v, Mapping):
        raise InvalidConfig(field="logit_bias", reason=f"must be a {{token id: bias}} mapping, got {type(v).__name__}")
    out: dict[int, float] = {}
    for k, b in v.items():
        tid = k
        if isinstance(k, str) and k.isascii() and k.isdigit():
            tid = int(k)
        if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid <= _I32_MAX:
            raise InvalidConfig(field="logit_bias", reason=f"keys must be token ids in [0, {_I32_MAX}], got {k!r}")
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or abs(b) > _F32_MAX:
            raise InvalidConfig(field="logit_bias", reason=f"the bias of token {tid} must be a finite number, got {b!r}")
        out[tid] = out.get(tid, 0.0) + float(b)
    return out


def _as_list(v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, Iterable):
        return list(v)
    raise InvalidConfig(field="stop", reason=f"must be a string or a list of strings, got {v!r}")


__all__ = ["SamplingParams", "DEFAULTS"]
