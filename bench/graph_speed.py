"""Graph path vs curated path: smollm2 generation speed on the CPU.

    PYTHONPATH=python python bench/graph_speed.py [MODEL] [--steps 64] [--threads N] [--precise]

Loads the model twice (curated, graph with fusion; optionally unfused), runs a
16-token prefill then `steps` single-token decode steps (greedy, same tokens on
both paths), best of `repeat` runs, and prints ms/token and the ratio
graph / curated (issue 6 target: <= 1.25).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import cyb_llm
from cyb_llm import hub


def decode_ms(model, prompt, steps):
    conv = model.new_conversation(len(prompt) + steps + 1)
    logits = conv.forward(prompt)
    tok = int(np.argmax(logits))
    toks = []
    t0 = time.perf_counter()
    for _ in range(steps):
        logits = conv.forward([tok])
        tok = int(np.argmax(logits))
        toks.append(tok)
    return (time.perf_counter() - t0) * 1000.0 / steps, toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--precise", action="store_true")
    ap.add_argument("--unfused", action="store_true", help="also time the graph without the fusion pass")
    a = ap.parse_args()
    path = hub.resolve(a.model)
    prompt = list(range(100, 116))
    variants = [("curated", dict(exec_path="curated")), ("graph", dict(exec_path="graph"))]
    if a.unfused:
        variants.append(("graph-unfused", dict(exec_path="graph", fuse=False)))
    models = {n: cyb_llm.load(path, precise=a.precise, threads=a.threads, **kw) for n, kw in variants}
    best, toks = {}, {}
    for _ in range(a.repeat):  # interleaved, so machine load hits both alike
        for n, m in models.items():
            ms, t = decode_ms(m, prompt, a.steps)
            best[n] = min(best.get(n, 1e9), ms)
            toks[n] = t
    for n in models:
        print(f"{n:14s} {best[n]:8.2f} ms/token  {1000.0 / best[n]:7.1f} tok/s  same tokens as curated: "
              f"{toks[n] == toks['curated']}")
    print(f"ratio graph/curated: {best['graph'] / best['curated']:.3f}")


if __name__ == "__main__":
    main()
