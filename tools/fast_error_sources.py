"""Where a model's fast-path error comes from: transformers f32 on the same decoded weights (the
GGUF source, dequantized), with the fast path's roundings applied one at a time, each judged
against the unrounded run (docs/runtime.md's metric, all positions of the golden prompts).

    PYTHONPATH=python python tools/fast_error_sources.py qwen05 [--prompt SUBSTRING] [--layers]

Roundings: `kv` keys and values stored as f16 (the fast KV cache; rounded at the projections'
outputs, before RoPE); `k`, `v` one of them; `kbias` keys' `W x` in f16 with the bias kept
exact (`kbias_v` also V in f16); `act` every decoder matmul's input quantized to int16 per 32
values (`d = amax/32767`, round half even), as the fast matmuls do. `--layers` adds `kv` one
layer at a time. Findings for qwen05: docs/runtime.md, "Tolerances".
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from oracles import hf_from_gguf, rel_err  # noqa: E402

from cyb_llm import hub  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def f16(x):
    return x.half().float()


def q16(x, blk=32):
    sh = x.shape
    xb = x.reshape(*sh[:-1], sh[-1] // blk, blk)
    d = xb.abs().amax(-1, keepdim=True) / 32767
    inv = torch.where(d != 0, 1 / d, torch.zeros_like(d))
    return (torch.round(xb * inv) * d).reshape(sh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt", default="", help="only the golden prompts containing this")
    ap.add_argument("--layers", action="store_true", help="also f16 K/V one layer at a time")
    a = ap.parse_args()
    with open(os.path.join(ROOT, "tests", "data", "golden", f"{a.model}.json")) as f:
        cases = [c for c in json.load(f)["cases"] if a.prompt in c["prompt"]]
    hf = hf_from_gguf(hub.fetch_source(a.model))
    hooks = []

    def logits(ids, mode=None, only_layer=None):
        for i, layer in enumerate(hf.model.layers):
            if only_layer is not None and i != only_layer:
                continue
            at = layer.self_attn
            if mode in ("kv", "k"):
                hooks.append(at.k_proj.register_forward_hook(lambda m, x, o: f16(o)))
            if mode in ("kv", "v", "kbias_v"):
                hooks.append(at.v_proj.register_forward_hook(lambda m, x, o: f16(o)))
            if mode in ("kbias", "kbias_v"):
                hooks.append(at.k_proj.register_forward_hook(
                    lambda m, x, o: f16(o - m.bias) + m.bias if m.bias is not None else f16(o)))
            if mode == "act":
                for n in LINEARS:
                    mod = getattr(at, n, None) or getattr(layer.mlp, n)
                    hooks.append(mod.register_forward_pre_hook(lambda m, x: (q16(x[0]),)))
        try:
            with torch.no_grad():
                return hf(torch.tensor([ids])).logits[0].float().numpy()
        finally:
            for h in hooks:
                h.remove()
            hooks.clear()

    modes = ("kv", "k", "v", "kbias", "kbias_v", "act")
    worst = dict.fromkeys(modes, 0.0)
    per_layer = [0.0] * len(hf.model.layers)
    for c in cases:
        base = logits(c["ids"])
        row = {m: rel_err(logits(c["ids"], m), base) for m in modes}
        print(f"{c['prompt'][:40]!r:44} " + " ".join(f"{m}={v:.2g}" for m, v in row.items()), flush=True)
        worst = {m: max(worst[m], row[m]) for m in modes}
        if a.layers:
            for i in range(len(per_layer)):
                per_layer[i] = max(per_layer[i], rel_err(logits(c["ids"], "kv", i), base))
    print("max over the prompts: " + " ".join(f"{m}={v:.3g}" for m, v in worst.items()))
    if a.layers:
        top = sorted(range(len(per_layer)), key=lambda i: -per_layer[i])[:6]
        print("f16 K/V in one layer only, worst layers: " + ", ".join(f"{i}: {per_layer[i]:.2g}" for i in top))


if __name__ == "__main__":
    main()
