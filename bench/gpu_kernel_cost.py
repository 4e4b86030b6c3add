"""What each kernel costs inside a decode step on wgpu+rs, measured in the stream.

The per-dispatch GPU times of `gpu_bench.py --profile` give every dispatch its own compute pass,
which inflates short kernels. Here each kernel is instead recorded n times where the step records
it once (`CYB_WGPU_REPEAT=<pipeline name text>:<n>`, wgpu_settings.h), and the step's time grows
by (n - 1) x (dispatches of it per step) x its cost in the stream: the last column.
`--variant NAME=VAR=VALUE` adds whole-setting variants (e.g. `attn-split=CYB_WGPU_ATTN=split`),
timed the same way against the default.

Each setting runs in a fresh process (the settings are read once there) on the same model file
(same shapes as bench/gpu_models.json, bench/gpu_bench.py's random weights), timing the generation
loop's path: greedy, the token drawn on the GPU, step k+1 submitted before step k's token is read
(docs/generation.md); the median of three runs of --gen steps after warm-up.

    python bench/gpu_kernel_cost.py --models qwen15 --kernels attention,norm+SKIP,SWIGLU,QKV
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(path: str, gen: int) -> None:
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    import cyb_llm
    from cyb_llm import _core

    m = cyb_llm.load(path, backend="wgpu+rs")
    s = _core.Sampler(temperature=0.0)
    c = m.new_conversation(4 * gen + 64)

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            _core.forward_sample_submit(m._native, c._native, None, s)
            _core.forward_sample_take(m._native, c._native, s)
        return (time.perf_counter() - t0) / n

    _core.forward_sample(m._native, c._native, [1], s)
    _core.forward_sample_submit(m._native, c._native, None, s)
    run(8)  # warm-up: pipelines, clocks
    counts = {}
    if _core.wgpu_set_gpu_profiling(True):  # dispatches per step, by pipeline
        _core.wgpu_take_gpu_profile()
        run(4)
        _core.wgpu_set_gpu_profiling(False)
        counts = {r["shader"]: r["dispatches"] / 4 for r in _core.wgpu_take_gpu_profile()["rows"]}
    # each run starts where the last ended; positions stay below 4 gen + 64
    steps = [run(gen) for _ in range(3)]
    _core.forward_sample_take(m._native, c._native, s)
    print("RESULT " + json.dumps({"step_ms": 1e3 * float(np.median(steps)), "counts": counts}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="qwen15")
    ap.add_argument("--kernels", default="attention,norm+SKIP,matvec+SWIGLU,matvec+QKV",
                    help="pipeline name texts, each repeated in its own run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variant", action="append", default=[], help="NAME=VAR=VALUE (repeatable)")
    ap.add_argument("--env", action="append", default=[],
                    help="VAR=VALUE set for every setting, the default included (repeatable): kernel costs of a variant")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--work", default="/tmp/gpu_bench")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.gen)
        return
    sys.path.insert(0, HERE)
    from gpu_bench import make_model

    with open(os.path.join(HERE, "gpu_models.json")) as f:
        specs = json.load(f)
    os.makedirs(args.work, exist_ok=True)
    for name in args.models.split(","):
        path = make_model(name, specs[name], args.work)
        settings = [("default", {})]
        settings += [(f"{k} x{args.repeat}", {"CYB_WGPU_REPEAT": f"{k}:{args.repeat}"}) for k in args.kernels.split(",") if k]
        for v in args.variant:
            label, var, value = v.split("=", 2)
            settings.append((label, {var: value}))
        res = {}
        for label, env in settings:
            common = dict(e.split("=", 1) for e in args.env)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path, "--gen", str(args.gen)],
                                 env={**os.environ, **common, **env}, capture_output=True, text=True)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not line:
                print(f"{name} {label}: failed\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}", flush=True)
                continue
            res[label] = json.loads(line[0][7:])
            print(f"{name} {label}: {res[label]['step_ms']:.3f} ms a step", flush=True)
        if "default" not in res:
            continue
        base = res["default"]
        print(f"\n{name}{' (' + ', '.join(args.env) + ')' if args.env else ''}: decode step (overlapped greedy, {args.gen} steps, median of 3); "
              f"{sum(base['counts'].values()):.0f} dispatches a step\n")
        print("| setting | ms / step | tok/s | vs default ms | matched dispatches / step | us per dispatch in the stream |")
        print("|---|---|---|---|---|---|")
        for label, r in res.items():
            d = r["step_ms"] - base["step_ms"]
            per = ""
            env = dict(settings)[label]
            if "CYB_WGPU_REPEAT" in env:
                text = env["CYB_WGPU_REPEAT"].rsplit(":", 1)[0]
                n = sum(v for k, v in base["counts"].items() if text in k)
                per = f"{n:.0f} | {1e3 * d / ((args.repeat - 1) * n):.1f}" if n else "0 | -"
            else:
                per = "- | -"
            print(f"| {label} | {r['step_ms']:.3f} | {1e3 / r['step_ms']:.0f} | {d:+.3f} | {per} |")
        print(flush=True)
        os.remove(path)


if __name__ == "__main__":
    main()
