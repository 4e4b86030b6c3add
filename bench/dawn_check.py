"""webgpu:dawn next to wgpu+rs on the GPU machine (docs/webgpu-dawn.md has the device command).

The same backend (kernels, host code) on two WebGPU implementations: wgpu+rs (wgpu-native) and
webgpu:dawn (Dawn, its procedures handed over by the wgpudawn package). One implementation a
process, so every step runs each backend in a process of its own; a step that fails prints its
error and the script goes on. Steps:

  info   each backend's adapter (implementation, f16, subgroups, subgroup matrices)
  ops    the op matrix's wgpu rows (tests/test_ops.py -k wgpu; on Dawn through
         bench/dawn_pytest_plugin.py): pass / fail / skip counts and the first failures
  model  a smollm2-shaped model (bench/gpu_models.json; random weights, as gpu_bench.py writes:
         --model PATH for another file) against the cpu backend: precise logits of an 8-token
         prompt and one decode step (max |a-b| / max |cpu|, bound `cross-path` of docs/runtime.md),
         fast-mode logits of a --fidelity-token prompt against cpu precise, and --greedy greedy
         tokens, precise and fast, against the cpu's
  speed  decode tok/s (--gen greedy steps) and prompt tok/s (--prompts, one bulk forward each,
         gpu_bench.py's method), fast mode
  gemm   (Dawn with subgroup matrices only) the subgroup-matrix prompt GEMMs: the prompt logits
         with them (CYB_WGPU_SM=1: off by default) against cpu precise and against Dawn without
         them (CYB_WGPU_SM=0), and pp with and without them (--sm-prompts)

    python bench/dawn_check.py [--steps info,ops,model,speed,gemm] [--out DIR]

Output is kept short (the device run shows the last 12,000 characters): one line per result, a
failure's last lines only; --out DIR also gets dawn_check.json and each worker's full log.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("wgpu+rs", "webgpu:dawn")
RESULT_TAG = "DAWN_CHECK_RESULT "


def short(text: str, lines: int = 12, width: int = 220) -> str:
    rows = [r[:width] for r in text.strip().splitlines() if r.strip()]
    return "\n".join("    " + r for r in rows[-lines:])


# ------------------------------------------------------------------------------------- workers
# Each runs in its own process (one WebGPU implementation a process) and prints one result line.


def _attach(backend):
    if backend == "webgpu:dawn":
        from cyb_llm import webgpu_dawn

        return webgpu_dawn.attach()
    return {}


def _model_path(args):
    if args.model:
        return args.model
    sys.path.insert(0, HERE)
    import gpu_bench

    with open(os.path.join(HERE, "gpu_models.json"), encoding="utf-8") as f:
        spec = json.load(f)[args.shape]
    os.makedirs(args.work, exist_ok=True)
    return gpu_bench.make_model(args.shape, spec, args.work)


def _vocab(path):
    import cyb_llm

    return int(cyb_llm.ModelFile(path).config["architecture"]["vocab_size"])


def _rel(a, b):
    import numpy as np

    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


def _greedy(m, ids, n):
    import numpy as np

    c = m.new_conversation(len(ids) + n + 8)
    tok = int(np.argmax(c.forward(ids)))
    out = [tok]
    for _ in range(n - 1):
        tok = int(np.argmax(c.forward([tok])))
        out.append(tok)
    return out


def w_info(args):
    from cyb_llm import _core

    extra = _attach(args.backend)
    i = _core.wgpu_info(True)
    keep = ("impl", "adapter", "backend_type", "adapter_type", "shader_f16", "subgroups", "subgroup_min",
            "subgroup_max", "subgroup_matrix", "subgroup_matrix_configs", "max_workgroup_storage", "library")
    r = {k: i.get(k) for k in keep}
    r.update({k: v for k, v in extra.items() if k in ("version", "dawn")})
    return r


def w_model(args):
    import numpy as np

    import cyb_llm

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from tolerances import tolerance

    _attach(args.backend)
    path = _model_path(args)
    vocab = _vocab(path)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, vocab, size=8).tolist()
    r = {"model": os.path.basename(path), "bound": tolerance("cross-path")}
    cpu = cyb_llm.load(path, backend="cpu", precise=True)
    ref = cpu.new_conversation(64).forward(ids, all_logits=True)
    gm = cyb_llm.load(path, backend=args.backend, precise=True)
    gc = gm.new_conversation(64)
    got = gc.forward(ids, all_logits=True)
    nxt = int(got[-1].argmax())
    step = gc.forward([nxt])
    cc = cpu.new_conversation(64)
    cc.forward(ids)
    r["precise_err"] = max(_rel(got, ref), _rel(step, cc.forward([nxt])))
    r["ran_on"] = sorted({x["backend"] + (" (fallback)" if x["fallback"] else "") for x in gm.dispatch_records})
    fid = rng.integers(0, vocab, size=args.fidelity).tolist()
    fast = cyb_llm.load(path, backend=args.backend, precise=False)
    ref_long = cpu.new_conversation(args.fidelity + 8).forward(fid, all_logits=True)
    r["fast_err"] = _rel(fast.new_conversation(args.fidelity + 8).forward(fid, all_logits=True), ref_long)
    want = _greedy(cpu, ids, args.greedy)
    r["greedy_precise"] = sum(a == b for a, b in zip(_greedy(gm, ids, args.greedy), want))
    r["greedy_fast"] = sum(a == b for a, b in zip(_greedy(fast, ids, args.greedy), want))
    r["greedy_n"] = args.greedy
    return r


def w_speed(args):
    import numpy as np

    sys.path.insert(0, HERE)
    import gpu_bench

    _attach(args.backend)
    path = _model_path(args)
    vocab = _vocab(path)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, vocab, size=int(n)).tolist() for n in args.prompts.split(",") if n]
    pp, tg, _m = gpu_bench.bench_ours(path, prompts, args.gen, args.backend, precise=False, warmup=args.warmup)
    return {"pp": {str(len(p)): round(v, 1) for p, v in zip(prompts, pp)}, "tg": round(tg, 1)}


def w_gemm(args):
    """Dawn only: the prompt logits with the subgroup-matrix GEMMs (CYB_WGPU_SM=1 where the device
    has them) against cpu precise and against Dawn without them; pp with and without (a worker each
    way: CYB_WGPU_SM is read once)."""
    import numpy as np

    import cyb_llm
    from cyb_llm import _core

    _attach(args.backend)
    info = _core.wgpu_info(True)
    if not info.get("subgroup_matrix") or "f16->f32 16x16x16" not in (info.get("subgroup_matrix_configs") or []) \
            or (info.get("subgroup_min"), info.get("subgroup_max")) != (32, 32):  # matmul_sm.wgsl's needs
        raise RuntimeError(f"the device has no subgroup matrices ({info.get('impl')}, "
                           f"{info.get('subgroup_matrix_configs')}): nothing to check")
    path = _model_path(args)
    vocab = _vocab(path)
    ids = np.random.default_rng(4).integers(0, vocab, size=args.sm_tokens).tolist()
    r = {"sm": os.environ.get("CYB_WGPU_SM", "default")}
    m = cyb_llm.load(path, backend=args.backend, precise=False)
    c = m.new_conversation(args.sm_tokens + 8)
    logits = c.forward(ids, all_logits=True)
    r["logits_file"] = os.path.join(args.work, f"sm_logits_{r['sm']}.npy")
    np.save(r["logits_file"], logits)
    r["step_finite"] = bool(np.isfinite(np.asarray(c.forward([1]))).all())
    sys.path.insert(0, HERE)
    import gpu_bench

    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, vocab, size=int(n)).tolist() for n in args.sm_prompts.split(",") if n]
    pp, _tg, _m = gpu_bench.bench_ours(path, prompts, 2, args.backend, precise=False, warmup=args.warmup)
    r["pp"] = {str(len(p)): round(v, 1) for p, v in zip(prompts, pp)}
    return r


WORKERS = {"info": w_info, "model": w_model, "speed": w_speed, "gemm": w_gemm}


def worker_main(args):
    t0 = time.perf_counter()
    try:
        res = {"ok": True, **WORKERS[args.worker](args)}
    except Exception as e:  # reported to the orchestrator, which goes on
        import traceback

        traceback.print_exc()
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    print(RESULT_TAG + json.dumps(res), flush=True)
    return 0


# -------------------------------------------------------------------------------- orchestrator


def run_worker(args, step, backend, env_extra=None, timeout=900):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", step, "--backend", backend]
    for k in ("shape", "work", "prompts", "sm_prompts", "gen", "greedy", "fidelity", "warmup", "sm_tokens"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    if args.model:
        cmd += ["--model", args.model]
    env = dict(os.environ, **(env_extra or {}))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            f"timed out after {timeout} s", -9
    log_name = f"{step}-{backend.replace(':', '_').replace('+', '_')}" + (
        "-" + "-".join(f"{k}{v}" for k, v in (env_extra or {}).items()) if env_extra else "")
    if args.out:
        with open(os.path.join(args.out, log_name + ".log"), "w", encoding="utf-8") as f:
            f.write(out + "\n--- stderr\n" + err)
    res = None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
    if res is None:
        res = {"ok": False, "error": f"worker exited {rc} without a result", "tail": short(out + "\n" + err)}
    elif not res["ok"]:
        res["tail"] = short(err or out, lines=8)
    res.setdefault("seconds", round(time.perf_counter() - t0, 1))
    return res


def print_fail(what, res):
    print(f"  {what}: FAILED {res.get('error', '')[:600]}")
    if res.get("tail"):
        print(res["tail"])


def step_info(args, report):
    for b in BACKENDS:
        r = run_worker(args, "info", b, timeout=300)
        report["info"][b] = r
        if not r["ok"]:
            print_fail(f"info {b}", r)
            continue
        sm = f", subgroup matrix {r['subgroup_matrix']} {r.get('subgroup_matrix_configs') or ''}" if b != "wgpu+rs" else ""
        ver = f", wgpudawn {r.get('version')} (Dawn {r.get('dawn')})" if r.get("version") else ""
        print(f"  {b:12s} {r['impl']}: {r['adapter']} ({r['backend_type']}), f16 {r['shader_f16']}, subgroups "
              f"{r['subgroups']} ({r['subgroup_min']}-{r['subgroup_max']}), workgroup memory "
              f"{r['max_workgroup_storage']}{sm}{ver}")


def step_ops(args, report):
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "--tb=line",
            os.path.join(ROOT, "tests", "test_ops.py"), "-k", "wgpu"]
    for b in BACKENDS:
        cmd = list(base) + (["-p", "dawn_pytest_plugin"] if b == "webgpu:dawn" else [])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.join(ROOT, "tests")] +
                                                              [os.environ.get("PYTHONPATH", "")]))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=args.ops_timeout)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = str(e.stdout or "")[-4000:], -9
        if args.out:
            with open(os.path.join(args.out, f"ops-{b.replace(':', '_').replace('+', '_')}.log"), "w") as f:
                f.write(out)
        lines = out.strip().splitlines()
        summary = next((ln for ln in reversed(lines) if " passed" in ln or " failed" in ln or " error" in ln
                        or "no tests ran" in ln), lines[-1] if lines else "(no output)")
        fails = [ln for ln in lines if ln.startswith("FAILED ") or ln.startswith("ERROR ")]
        report["ops"][b] = {"rc": rc, "summary": summary, "failures": fails[:40], "seconds":
                            round(time.perf_counter() - t0, 1)}
        print(f"  {b:12s} {summary.strip()} ({time.perf_counter() - t0:.0f} s)")
        for ln in fails[:args.show_failures]:
            print("    " + ln[:240])
        if len(fails) > args.show_failures:
            print(f"    ... {len(fails) - args.show_failures} more (--out DIR keeps the log)")
        if rc not in (0, 1) and not fails:
            print(short(out, lines=10))


def step_model(args, report):
    for b in BACKENDS:
        r = run_worker(args, "model", b)
        report["model"][b] = r
        if not r["ok"]:
            print_fail(f"model {b}", r)
            continue
        verdict = "OK" if r["precise_err"] <= r["bound"] else "OVER THE BOUND"
        print(f"  {b:12s} {r['model']}: precise vs cpu {r['precise_err']:.2e} (bound {r['bound']:g}: {verdict}); "
              f"fast vs cpu precise ({args.fidelity} tokens) {r['fast_err']:.2e}; greedy = cpu: precise "
              f"{r['greedy_precise']}/{r['greedy_n']}, fast {r['greedy_fast']}/{r['greedy_n']}; ran on {r['ran_on']}")


def step_speed(args, report):
    for b in BACKENDS:
        r = run_worker(args, "speed", b, timeout=1200)
        report["speed"][b] = r
        if not r["ok"]:
            print_fail(f"speed {b}", r)
            continue
        pps = ", ".join(f"pp{k} {v:.0f}" for k, v in r["pp"].items())
        print(f"  {b:12s} decode {r['tg']:.1f} tok/s, {pps} tok/s (fast mode, {r['seconds']:.0f} s)")


def step_gemm(args, report):
    import numpy as np

    b = "webgpu:dawn"
    runs = {}
    for label, env in (("with", {"CYB_WGPU_SM": "1"}), ("without", {"CYB_WGPU_SM": "0"})):
        r = run_worker(args, "gemm", b, env_extra=env, timeout=1200)
        runs[label] = r
        if not r["ok"]:
            print_fail(f"gemm {label} subgroup matrices", r)
    report["gemm"] = dict(runs)
    if not all(r["ok"] for r in runs.values()):
        return
    # the reference: cpu precise on the same prompt, in this process (no GPU)
    try:
        import cyb_llm

        path = _model_path(args)
        vocab = _vocab(path)
        ids = np.random.default_rng(4).integers(0, vocab, size=args.sm_tokens).tolist()
        ref = cyb_llm.load(path, backend="cpu", precise=True).new_conversation(args.sm_tokens + 8).forward(
            ids, all_logits=True)
        w, wo = np.load(runs["with"]["logits_file"]), np.load(runs["without"]["logits_file"])
        e_with, e_without, e_between = _rel(w, ref), _rel(wo, ref), _rel(w, wo)
        report["gemm"]["errors"] = {"with_vs_cpu": e_with, "without_vs_cpu": e_without, "with_vs_without": e_between}
        print(f"  {args.sm_tokens}-token prompt, fast mode, every position's logits: with subgroup matrices vs cpu "
              f"precise {e_with:.2e}, without {e_without:.2e}, with vs without {e_between:.2e}; greedy argmax "
              f"agreement with/cpu {float((w.argmax(-1) == ref.argmax(-1)).mean()):.3f}")
    except Exception as e:
        print(f"  gemm reference: FAILED {type(e).__name__}: {e}")
    pw, po = runs["with"]["pp"], runs["without"]["pp"]
    print("  " + ", ".join(f"pp{k} {pw[k]:.0f} vs {po[k]:.0f} tok/s ({pw[k] / po[k]:.2f}x)" for k in pw)
          + " (with vs without subgroup matrices)")


STEPS = {"info": step_info, "ops": step_ops, "model": step_model, "speed": step_speed, "gemm": step_gemm}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="info,ops,model,speed,gemm")
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--work", default="/tmp/dawn_check", help="where the shaped model is written")
    ap.add_argument("--shape", default="smollm2", help="a model of bench/gpu_models.json")
    ap.add_argument("--model", default="", help="a .model file instead of the shaped one")
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--sm-prompts", default="128,512")
    ap.add_argument("--sm-tokens", type=int, default=128, help="prompt of the subgroup-matrix logits check")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--fidelity", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--ops-timeout", type=int, default=1500)
    ap.add_argument("--show-failures", type=int, default=12)
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="wgpu+rs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    report = {k: {} for k in STEPS}
    t_all = time.perf_counter()
    for s in [s for s in args.steps.split(",") if s]:
        print(f"== {s}", flush=True)
        t0 = time.perf_counter()
        try:
            STEPS[s](args, report)
        except Exception as e:  # a step's own failure: reported, the next step runs
            print(f"  step {s}: FAILED {type(e).__name__}: {e}")
        print(f"   ({s}: {time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"dawn_check done in {time.perf_counter() - t_all:.0f} s")
    if args.out:
        with open(os.path.join(args.out, "dawn_check.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
