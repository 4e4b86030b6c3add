"""The model's own recommended sampling settings, recorded by the importers in the
`.model` `[sampling]` section (docs/generation.md, "Sampling defaults").

Sources, first match wins per file:
1. HF folders: `generation_config.json` (`do_sample`, `temperature`, `top_k`, `top_p`,
   `min_p`, `repetition_penalty`); `do_sample: false` records greedy decoding.
2. GGUF files: the `general.sampling.*` metadata keys where the file has them.
3. Otherwise `MODEL_CARD_DEFAULTS`, keyed by the GGUF's `general.basename` (lower case),
   `basename-size_label` first: the settings each model's card / upstream generation config
   recommends, or a documented cyb_llm choice where those do not fit a small quantized build.

A file with none of these gets no `[sampling]` section, and generation falls back to
`cyb_llm.text.sampling.DEFAULTS`.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

#: Settings recommended upstream, per GGUF `general.basename` (lower case). Each entry
#: names where it comes from; the importer records that as `[sampling] source`.
MODEL_CARD_DEFAULTS: dict[str, dict[str, Any]] = {
    # SmolLM2 model card ("temperature=0.2, top_p=0.9"; top_k 50 is transformers' sampling default).
    "smollm2": {"temperature": 0.2, "top_p": 0.9, "top_k": 50, "min_p": 0.0,
                "source": "SmolLM2 model card"},
    # The 135M model (the default model, shipped as Q4_1) is nearly tied on the first token of
    # plain questions: for "What is the capital of France?" it gives "The" 0.153 and "L" 0.140
    # (-> "L'Etoile, la Cite, ..."), so at the card's temperature 0.2 about half of the answers
    # wander off (26 of 50 seeds, measured). Greedy decoding answers correctly; top_p is the
    # card's for whoever raises the temperature.
    "smollm2-135m": {"temperature": 0.0, "top_p": 0.9, "top_k": 50, "min_p": 0.0,
                     "source": "cyb_llm default for SmolLM2-135M (greedy; docs/generation.md)"},
    # Qwen2.5 / Qwen2.5-Coder instruct generation_config.json.
    "qwen2.5-coder": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.05,
                      "source": "Qwen2.5-Coder generation_config.json"},
    "qwen2.5": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.05,
                "source": "Qwen2.5 generation_config.json"},
    # Gemma 3 generation_config.json (top_k 64, top_p 0.95 at temperature 1).
    "gemma-3": {"temperature": 1.0, "top_k": 64, "top_p": 0.95, "min_p": 0.0,
                "source": "Gemma 3 generation_config.json"},
}

# generation_config.json / GGUF key -> [sampling] key
_HF_KEYS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
            "repetition_penalty": "repetition_penalty"}
_GGUF_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_k": "top_k",
              "general.sampling.top_p": "top_p", "general.sampling.min_p": "min_p",
              "general.sampling.penalty_repeat": "repetition_penalty",
              "general.sampling.penalty_last_n": "penalty_last_n"}
_INTS = ("top_k", "penalty_last_n")


def _clean(values: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers only, ints where the sampler wants ints, floats rounded to what was written."""
    out: dict[str, Any] = {}
    for key, v in values.items():
        if key == "source":
            out[key] = str(v)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            continue
        elif key in _INTS:
            out[key] = int(v)
        else:
            out[key] = float(f"{float(v):.6g}")  # GGUF stores float32: 0.9 -> 0.8999999762
    return out


def from_generation_config(gen: Mapping[str, Any]) -> dict[str, Any] | None:
    """[sampling] from an HF generation_config.json, or None when it sets nothing."""
    values = {dst: gen[src] for src, dst in _HF_KEYS.items() if src in gen and gen[src] is not None}
    if gen.get("do_sample") is False:
        values = {"temperature": 0.0}  # the checkpoint asks for greedy decoding
    elif values and "do_sample" in gen:
        values.setdefault("top_k", 50)  # transformers' own default when sampling
    if not values:
        return None
    values["source"] = "generation_config.json"
    return _clean(values)


def from_gguf(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """[sampling] from a GGUF's metadata, else from MODEL_CARD_DEFAULTS by general.basename."""
    values = {dst: meta[src] for src, dst in _GGUF_KEYS.items() if src in meta}
    if values:
        values["source"] = "GGUF general.sampling metadata"
        return _clean(values)
    base = str(meta.get("general.basename") or "").strip().lower()
    size = str(meta.get("general.size_label") or "").strip().lower()
    for key in (f"{base}-{size}", base):
        if base and key in MODEL_CARD_DEFAULTS:
            return _clean(MODEL_CARD_DEFAULTS[key])
    return None


__all__ = ["MODEL_CARD_DEFAULTS", "from_generation_config", "from_gguf"]
