"""Matvec / matmul throughput of the CPU kernels per level and encoding.

GB/s = weight bytes read per call / seconds per call (best of `iters`).
Usage: PYTHONPATH=python python bench/matvec.py [--threads N] [--mb 64] [--t 1]
"""
from __future__ import annotations

import argparse

from cyb_llm import _core

# encoding -> (values per block, bytes per block) of the float and quantized encodings (the native table)
BYTES = {enc: (block, nbytes) for enc, _name, block, nbytes, _q in _core.encodings() if enc not in ("i32", "i64", "u8")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--mb", type=float, default=64.0, help="weight size per matrix (MB)")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--t", type=int, default=1, help="tokens (1 = matvec)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--encodings", default="f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q4_k,q5_k,q6_k,q3_k,iq4_nl")
    ap.add_argument("--levels", default=",".join(_core.cpu_levels()))
    args = ap.parse_args()
    threads = args.threads or _core.physical_cores()
    print(f"threads={threads} K={args.k} T={args.t} weights~{args.mb:.0f} MB")
    print(f"{'enc':8s} {'level':7s} {'mode':8s} {'ms':>8s} {'GB/s':>7s}")
    for enc in args.encodings.split(","):
        bs, bb = BYTES[enc]
        row = args.k // bs * bb
        n = max(64, int(args.mb * 1e6 / row))
        for lvl in args.levels.split(","):
            for precise in (False, True):
                if lvl == "scalar" and not precise:
                    continue  # the reference has one mode
                sec = _core.bench_matmul(enc, n, args.k, args.t, args.iters if lvl != "scalar" else 1,
                                         lvl, threads, precise)
                gbs = n * row / sec / 1e9
                mode = "precise" if precise else "fast"
                print(f"{enc:8s} {lvl:7s} {mode:8s} {sec * 1e3:8.2f} {gbs:7.2f}", flush=True)


if __name__ == "__main__":
    main()
