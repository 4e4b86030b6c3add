"""Per-token cost of structured output (docs/serve.md, docs/generation.md "Structured output").

Usage: PYTHONPATH=python python bench/bench_structured.py [--models smollm2,qwen05] [--threads 2] [--reps 3]

For each model, two measurements:

1. In generation: JSON-schema-constrained chat completions (greedy) of a few schemas; per
   generated token, the grammar's share (llguidance's mask computation and token consumption,
   GenerationStats.mask_ms), the native sampler's time with the mask applied (sample_ms) and the
   forward (forward_ms / decode_steps), against the same prompts unconstrained.
2. The mask application alone in the native sampler: `Sampler.sample(logits, allowed=mask)` minus
   `Sampler.sample(logits)` on the model's own logits, for the sparse mask of a JSON string
   position and for a mask allowing every token, greedy and at the model-default sampling stages
   (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm import _core  # noqa: E402
from cyb_llm.text.structured import constraint_of  # noqa: E402

SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                                "age": {"type": "integer", "minimum": 0, "maximum": 120}},
               "required": ["name", "age"], "additionalProperties": False},
    "weather": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                 "temperature_c": {"type": "number"},
                                                 "sky": {"enum": ["clear", "cloudy", "rain", "snow"]}},
                "required": ["city", "temperature_c", "sky"], "additionalProperties": False},
    "shopping list": {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"item": {"type": "string", "maxLength": 24},
                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["item", "qty"], "additionalProperties": False}}}, "required": ["items"]},
}


def per_token(model, schema_name: str, constrained: bool, reps: int) -> dict:
    schema = SCHEMAS[schema_name]
    msgs = [{"role": "user", "content": f"Give me a {schema_name} as JSON."}]
    rf = {"type": "json_schema", "json_schema": {"name": "b", "schema": schema, "strict": True}} if constrained else None
    best: dict | None = None
    for _ in range(reps):
        t = model.create_chat_completion(msgs, temperature=0, max_tokens=80, response_format=rf)["timings"]
        n = max(1, t["completion_tokens"])
        row = {"tokens": t["completion_tokens"], "mask_ms": t["mask_ms"] / n, "sample_ms": t["sample_ms"] / n,
               "forward_ms": t["forward_ms"] / max(1, t["decode_steps"])}
        if best is None or row["mask_ms"] + row["sample_ms"] < best["mask_ms"] + best["sample_ms"]:
            best = row
    return best  # type: ignore[return-value]


def time_sample(sampler_kw: dict, logits: np.ndarray, allowed, blocks: int = 7, reps: int = 100) -> float:
    """ms per Sampler.sample call: the best of `blocks` blocks of `reps` calls (the machine's noise
    only adds time)."""
    s = _core.Sampler(seed=1, **sampler_kw)
    for _ in range(10):
        s.sample(logits, accept=False, allowed=allowed)
    best = float("inf")
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(reps):
            s.sample(logits, accept=False, allowed=allowed)
        best = min(best, (time.perf_counter() - t0) / reps * 1e3)
    return best


def application(model) -> list[tuple[str, str, float, float, int]]:
    """(mask kind, sampler, ms without mask, ms with mask, allowed tokens) on the model's logits."""
    ids = model.tokenize("<|im_start|>user\nGive me a person as JSON.<|im_end|>\n<|im_start|>assistant\n",
                         add_bos=False, special=True)
    logits = model.new_conversation(256).forward(ids)
    c = constraint_of(model, {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS["person"]}})
    m = c.matcher()
    for t in model.tokenize('{"name": "Jo', add_bos=False):  # inside a JSON string: a sparse-ish mask
        m.fill()
        m.consume(t)
    string_mask = m.fill().copy()
    for t in model.tokenize('", "age":', add_bos=False):  # before a number: a sparse mask
        m.fill()
        m.consume(t)
    number_mask = m.fill().copy()
    full = np.full_like(string_mask, 0xFFFFFFFF)
    out = []
    for mask_name, mask in (("JSON string position", string_mask), ("JSON number position", number_mask),
                            ("every token allowed", full)):
        allowed_n = int(np.unpackbits(mask.view(np.uint8)).sum())
        for sname, kw in (("greedy", dict(temperature=0.0)),
                          ("sampled", dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05))):
            out.append((mask_name, sname, time_sample(kw, logits, None), time_sample(kw, logits, mask),
                        min(allowed_n, model.vocab_size)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,qwen05")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    for name in a.models.split(","):
        model = cyb_llm.load(name, threads=a.threads)
        t0 = time.perf_counter()
        constraint_of(model, {"type": "json_object"})
        print(f"\n## {name} (vocab {model.vocab_size}, {a.threads} threads)")
        print(f"llguidance tokenizer built from the .model's tokenizer JSON: {(time.perf_counter() - t0) * 1e3:.0f} ms "
              "(once per model)")
        print("\nper generated token, greedy, JSON schema vs unconstrained (best of reps):")
        print(f"| schema | tokens | grammar mask + consume (ms) | sample with mask (ms) | sample unconstrained (ms) "
              f"| forward (ms) | structured overhead / forward |")
        print("|---|---|---|---|---|---|---|")
        for s in SCHEMAS:
            c = per_token(model, s, True, a.reps)
            u = per_token(model, s, False, a.reps)
            over = (c["mask_ms"] + c["sample_ms"] - u["sample_ms"]) / c["forward_ms"]
            print(f"| {s} | {c['tokens']} | {c['mask_ms']:.3f} | {c['sample_ms']:.3f} | {u['sample_ms']:.3f} "
                  f"| {c['forward_ms']:.1f} | {over:.1%} |")
        print("\nmask application in the native sampler (Sampler.sample on the model's logits, ms per call):")
        print("| mask | sampler | allowed tokens | without mask | with mask | application |")
        print("|---|---|---|---|---|---|")
        for mask_name, sname, t_plain, t_mask, n in application(model):
            print(f"| {mask_name} | {sname} | {n} | {t_plain:.3f} | {t_mask:.3f} | {t_mask - t_plain:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
