"""Writes the golden reference fixtures of tests/test_golden.py from transformers f32.

    python tools/make_golden_fixtures.py [MODEL ...]     (default: smollm2 qwen05 gemma3)

For each model (the GGUF fetched by cyb_llm.hub, loaded by transformers'
own GGUF loader, which dequantizes to f32) and each prompt of tests/oracles.py:
the prompt ids (our tokenizer; the test checks they still encode the same),
transformers' greedy 32-token continuation, and the last position's logits
summarized as the 64 largest (id, value), the largest |logit| and the top-2
margin. Also one long prompt past the sliding window / a long context.
CI compares against these fixtures for qwen05 and gemma3 and runs the live
comparison for smollm2.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from oracles import PROMPTS, hf_from_gguf, hf_greedy, hf_logits, long_prompt  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm import hub  # noqa: E402

TOP = 64
N_TOKENS = 32
LONG_TOKENS = {"smollm2": 2100, "qwen05": 700, "gemma3": 650}


def summary(logits: np.ndarray) -> dict:
    idx = np.argsort(-logits)[:TOP]
    return {"top_ids": idx.tolist(), "top_values": [float(logits[i]) for i in idx],
            "max_abs": float(np.max(np.abs(logits))),
            "margin": float(logits[idx[0]] - logits[idx[1]])}


def main(names):
    for name in names:
        model = cyb_llm.load(hub.fetch(name), precise=True)
        hf = hf_from_gguf(hub.fetch_source(name))
        eos = sorted(model.eos_token_ids)
        cases = []
        for prompt in PROMPTS:
            ids = model.tokenizer.encode(prompt, add_special_tokens=True)
            cases.append({"prompt": prompt, "ids": ids,
                          "greedy": hf_greedy(hf, ids, N_TOKENS, set(eos)),
                          "last": summary(hf_logits(hf, ids)[-1])})
            print(name, repr(prompt), cases[-1]["greedy"][:8], flush=True)
        ids = long_prompt(model.tokenizer, LONG_TOKENS[name])
        long = {"ids": ids, "last": summary(hf_logits(hf, ids)[-1])}
        out = os.path.join(ROOT, "tests", "data", "golden", f"{name}.json")
        with open(out, "w") as f:
            json.dump({"model": name, "source_sha256": hub.MODELS[name].sha256,
                       "eos": eos, "n_tokens": N_TOKENS, "cases": cases, "long": long}, f)
        print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2", "qwen05", "gemma3"])
