"""Sentence-embedding throughput: cyb_llm against sentence-transformers (torch) and onnxruntime on the
same sentences, same thread count, in one run (docs/encoders.md "Speed").

Usage: PYTHONPATH=python python bench/bench_embed.py [--model minilm] [--threads 2] [--n 512]
       [--batch-size 32] [--reps 3] [--backend cpu] [--device cpu|cuda] [--fp16] [--skip onnx,precise] [--json FILE]

Every engine embeds the same `--n` sentences (seeded, 3..120 words) with the model's pooling and
normalization, tokenization included; after one warm-up call each, `--reps` rounds run every engine
once in turn (a change of the machine's load hits all alike) and each engine's best time counts.
cyb_llm runs fast (default) and precise; sentence-transformers on torch (`--device cuda --fp16`: its
half-precision CUDA path, the GPU recipe); onnxruntime on the model exported here with
torch.onnx.export (CPU execution provider, same intra-op threads), pooling in numpy. Also printed:
each engine's max |difference| from sentence-transformers f32 (CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

WORDS = ("the of and to in is was for on that with as by at from this be are have it not or an they which one "
         "you had all were her she there been if more when will would who so no time people year way day man "
         "thing woman life child world school state family student group country problem hand part place case "
         "week company system program question work government number night point home water room mother area "
         "money story fact month lot right study book eye job word business issue side kind head house service "
         "friend father power hour game line end member law car city community name president team minute idea "
         "kid body information back parent face others level office door health person art war history party "
         "Katze Hund Straße über café naïve 東京 猫 кошка собака 😀 🚀 €").split()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(min(120, max(3, rng.lognormal(2.8, 0.6))))
        out.append(" ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=k)).capitalize() + ".")
    return out


def timed_round_robin(engines: list, reps: int) -> list[tuple[float, np.ndarray]]:
    """(best seconds, result) per engine: one warm-up call each (its result kept), then `reps`
    rounds in which every engine runs once, so that a change of the machine's load hits all alike."""
    outs = [np.asarray(fn(), np.float32) for _, fn in engines]
    best = [float("inf")] * len(engines)
    for _ in range(reps):
        for i, (_, fn) in enumerate(engines):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return list(zip(best, outs))


def make_cyb(path, texts, threads, bs, precise, backend):
    import cyb_llm

    m = cyb_llm.load(path, precise=precise, threads=threads, backend=backend)
    return lambda: m.embed(texts, batch_size=bs)


def make_st(folder, texts, threads, bs, device, fp16):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(folder, device=device)
    if fp16:
        model = model.half()
    return lambda: model.encode(texts, batch_size=bs, convert_to_numpy=True)


def make_onnx(folder, texts, threads, bs, pooling):
    import onnxruntime as ort
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    hf = AutoModel.from_pretrained(folder).eval()
    onnx_path = os.path.join(tempfile.mkdtemp(prefix="bench_embed."), "model.onnx")
    ex = tok(["a b c", "d"], padding=True, return_tensors="pt")
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in ex]
    axes = {k: {0: "batch", 1: "seq"} for k in names}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    class Wrapped(torch.nn.Module):  # keyword arguments (the positional order of forward() varies)
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, *args):
            return self.hf(**dict(zip(names, args))).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(Wrapped().eval(), tuple(ex[k] for k in names), onnx_path, input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    max_len = pooling.get("max_seq_length", 512)
    order = np.argsort([-len(t) for t in texts], kind="stable")

    def embed():
        out = np.zeros((len(texts), hf.config.hidden_size), np.float32)
        for s in range(0, len(texts), bs):
            idx = order[s:s + bs]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len, return_tensors="np")
            h = sess.run(None, {k: enc[k].astype(np.int64) for k in names})[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            mode = pooling.get("mode", "mean")
            if mode == "mean":
                v = (h * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            elif mode == "cls":
                v = h[:, 0]
            else:
                v = np.where(mask > 0, h, -1e9).max(1)
            if pooling.get("normalize"):
                v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            out[idx] = v
        return out

    return embed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", help="a known name with an HF source folder (hub.fetch_source)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", help="cyb_llm backend (default: the platform's; wgpu+rs on a GPU machine)")
    ap.add_argument("--device", default="cpu", help="sentence-transformers device (cpu, cuda)")
    ap.add_argument("--fp16", action="store_true", help="sentence-transformers in half precision (CUDA)")
    ap.add_argument("--skip", default="", help="comma list of engines to leave out: onnx, precise, st")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args(argv)
    from cyb_llm import hub
    from cyb_llm.format import ModelFile

    skip = set(filter(None, a.skip.split(",")))
    path, folder = hub.fetch(a.model, progress=False), hub.fetch_source(a.model, progress=False)
    pooling = ModelFile(path).config.get("pooling", {})
    texts = sentences(a.n)
    backend = a.backend or "default backend"
    engines = [(f"cyb_llm fast ({backend})", make_cyb(path, texts, a.threads, a.batch_size, False, a.backend))]
    if "precise" not in skip:
        engines.append((f"cyb_llm precise ({backend})", make_cyb(path, texts, a.threads, a.batch_size, True, a.backend)))
    if "st" not in skip:
        engines.append((f"sentence-transformers (torch {a.device}{' fp16' if a.fp16 else ''})",
                        make_st(folder, texts, a.threads, a.batch_size, a.device, a.fp16)))
    if "onnx" not in skip:
        engines.append(("onnxruntime (CPU EP)", make_onnx(folder, texts, a.threads, a.batch_size, pooling)))
    rows = [(name, t, out) for (name, _), (t, out) in zip(engines, timed_round_robin(engines, a.reps))]
    st_cpu = next((out for name, _, out in rows if name == "sentence-transformers (torch cpu)"), None)
    ref = (st_cpu if st_cpu is not None
           else make_st(folder, texts, a.threads, a.batch_size, "cpu", False)()).astype(np.float64)
    base = rows[0][1]
    print(f"{a.n} sentences, model {a.model}, threads {a.threads}, batch {a.batch_size}, best of {a.reps}")
    print(f"{'engine':48s} {'sent/s':>9s} {'time/cyb fast':>14s} {'max|d| vs st f32':>16s}")
    res = []
    for name, t, out in rows:
        d = float(np.abs(out.astype(np.float64) - ref).max())
        print(f"{name:48s} {a.n / t:9.1f} {t / base:14.2f} {d:16.2e}")
        res.append({"engine": name, "seconds": t, "sentences_per_s": a.n / t, "time_vs_cyb_fast": t / base,
                    "max_abs_vs_st": d})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"n": a.n, "threads": a.threads, "batch_size": a.batch_size, "model": a.model, "rows": res}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
