"""Writes the golden reference fixtures of tests/test_golden.py and tests/test_golden_positions.py
from transformers f32.

    python tools/make_golden_fixtures.py [--keep-greedy] [MODEL ...]   (default: smollm2 qwen05 gemma3)

For each model (the GGUF fetched by cyb_llm.hub, loaded by transformers' own GGUF loader, which
dequantizes to f32) and each prompt of tests/oracles.py:
  - the prompt ids from a REFERENCE tokenizer, not ours (tests/oracles.py: reference_encoder:
    Qwen2's original tokenizer.json for qwen05, transformers' GGUF tokenizer with SmolLM2's original
    pre-tokenizer for smollm2, transformers' GGUF tokenizer for gemma3); the tests check that our
    tokenizer gives the same ids;
  - transformers' greedy 32-token continuation;
  - the last position's 64 largest (id, value), max |logit| and top-2 margin ({name}.json);
  - at EVERY position: the 64 largest (id, value), max |logit| and the log-sum-exp over the full
    vocabulary ({name}.positions.npz; values are transformers' f32 logits, exact in f32).
Also one long prompt past the sliding window / a long context: its last position in the JSON and,
at every position, the 16 largest (id, value), max |logit| and log-sum-exp in the .npz.
The eos ids (the greedy stopping rule) are the model's own.

--keep-greedy: keep a prompt's stored greedy continuation when the existing fixture was made from
the same GGUF (source_sha256) and the reference ids equal its stored ids (the continuation is a
function of those two alone); everything else is recomputed. Without it, transformers' generate
runs for every prompt: about a minute per prompt on a loaded 2-core machine, which is why the
option exists. The per-position forwards alone take ~1 min (smollm2) to a few minutes (gemma3).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from oracles import (PROMPTS, hf_from_gguf, hf_greedy, hf_logits, logit_summary,  # noqa: E402
                     long_prompt, reference_encoder)

import cyb_llm  # noqa: E402
from cyb_llm import hub  # noqa: E402

TOP = 64
LONG_TOP = 16
N_TOKENS = 32
LONG_TOKENS = {"smollm2": 2100, "qwen05": 700, "gemma3": 650}


def last_summary(logits: np.ndarray) -> dict:
    s = logit_summary(logits[-1:], TOP)
    v = s["top_values"][0]
    return {"top_ids": s["top_ids"][0].tolist(), "top_values": [float(x) for x in v],
            "max_abs": float(s["max_abs"][0]), "margin": float(v[0] - v[1])}


def positions(prefix: str, logits: np.ndarray, top: int) -> dict:
    s = logit_summary(logits, top)
    return {f"{prefix}_top_ids": s["top_ids"], f"{prefix}_top_values": s["top_values"].astype(np.float32),
            f"{prefix}_max_abs": s["max_abs"].astype(np.float32), f"{prefix}_lse": s["lse"]}


def main(names, keep_greedy=False):
    for name in names:
        t0 = time.time()
        out = os.path.join(ROOT, "tests", "data", "golden", f"{name}.json")
        old = {}
        if keep_greedy and os.path.exists(out):
            with open(out) as f:
                prev = json.load(f)
            if prev["source_sha256"] == hub.MODELS[name].sha256 and prev["n_tokens"] == N_TOKENS:
                old = {c["prompt"]: c for c in prev["cases"]}
        src = hub.fetch_source(name)
        eos = sorted(cyb_llm.load(hub.fetch(name), precise=True).eos_token_ids)
        encode, tokenizer = reference_encoder(name, src)
        hf = hf_from_gguf(src)
        cases, arrays = [], {}
        for i, prompt in enumerate(PROMPTS):
            ids = list(encode(prompt))
            logits = hf_logits(hf, ids)
            kept = old.get(prompt)
            if kept is not None and kept["ids"] == ids:
                greedy = kept["greedy"]
            else:
                greedy = hf_greedy(hf, ids, N_TOKENS, set(eos))
            cases.append({"prompt": prompt, "ids": ids, "greedy": greedy, "last": last_summary(logits)})
            arrays.update(positions(f"case{i}", logits, TOP))
            print(name, repr(prompt), "kept" if greedy is (kept or {}).get("greedy") else "generated",
                  greedy[:8], flush=True)
        ids = long_prompt(encode, LONG_TOKENS[name])
        logits = hf_logits(hf, ids)
        long = {"ids": ids, "last": last_summary(logits)}
        arrays.update(positions("long", logits, LONG_TOP))
        with open(out, "w") as f:
            json.dump({"model": name, "source_sha256": hub.MODELS[name].sha256, "tokenizer": tokenizer,
                       "eos": eos, "n_tokens": N_TOKENS, "cases": cases, "long": long}, f)
        np.savez_compressed(os.path.join(ROOT, "tests", "data", "golden", f"{name}.positions.npz"), **arrays)
        print("wrote", out, f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    keep = "--keep-greedy" in args
    main([a for a in args if a != "--keep-greedy"] or ["smollm2", "qwen05", "gemma3"], keep_greedy=keep)
