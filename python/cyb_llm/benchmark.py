"""CPU benchmark: cyb_llm (fast and precise) against llama.cpp on the same GGUF bytes.

One run measures, for every model, interleaved (ours fast, ours precise, llama.cpp, repeat)
and each measurement in its own child process (so load time and peak RSS are clean):
prompt processing tok/s (128 and 512 tokens), generation tok/s (128 tokens after a
16-token prompt), load time and peak RSS; it prints medians, the ratio to llama.cpp and
the share of the memory-bandwidth limit for generation (limit = weight bytes read per
token / bandwidth; bandwidth = the larger of a native matvec measurement and numpy's
2-thread read of a 1 GiB array). Token ids are random (seeded) and identical for both.

llama.cpp comes from llama-cpp-python; when it is missing the script says how to install it
(`CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python`) and benches cyb_llm alone.
`--level avx512,avx2` benches each x86 CPU level against llama.cpp built for that level, in one
run: cyb_llm's children get CYB_CPU_LEVEL=<level>, llama.cpp's get LLAMA_CPP_LIB_PATH pointing at
the libraries bench/build_llama_levels.sh built for that level (the same llama-cpp-python version).
Entry points: `python bench/bench_cpu.py` and `cyb-llm bench`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

RUNTIMES = ("cyb-fast", "cyb-precise", "llama.cpp")
DEFAULT_MODELS = "smollm2,qwen05,qwen15,smollm2-f16,smollm2-q8_0"
INSTALL_HINT = 'CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python   (builds from source, ~6 min)'


# ---------------------------------------------------------------- model files

def _cache_dir() -> Path:
    d = Path(os.environ.get("CYB_LLM_CACHE", Path.home() / ".cache" / "cyb_llm")) / "bench"
    d.mkdir(parents=True, exist_ok=True)
    return d


def requantize_gguf(src: str, dst: Path, encoding: str) -> Path:
    """Rewrites a GGUF with every 2-D weight in `encoding` (F16 or Q8_0) using the gguf package:
    the metadata is copied, the tensors are dequantized and quantized again."""
    import gguf
    from gguf.quants import dequantize, quantize

    if dst.exists():
        return dst
    target = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[encoding]
    r = gguf.GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    tmp = dst.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if key == "general.file_type":
            val = {"f16": 1, "q8_0": 7}[encoding]
        w.add_key_value(key, val, vtype, sub)
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order
        x = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        if len(shape) >= 2 and shape[-1] % 32 == 0:
            if target == gguf.GGMLQuantizationType.F16:
                w.add_tensor(t.name, x.astype(np.float16))
            else:
                w.add_tensor(t.name, quantize(x, target), raw_dtype=target)
        else:
            w.add_tensor(t.name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.rename(dst)
    return dst


# llama.cpp's own quantization mixes (llama.h LLAMA_FTYPE_MOSTLY_Q2_K / _Q3_K_M): the Q2_K and Q3_K
# benchmark files are what its quantizer makes of a model (the gguf package cannot write them).
LLAMA_FTYPES = {"q2_k": 10, "q3_k_m": 12}


def llama_requantize(src: str, dst: Path, encoding: str) -> Path:
    """Rewrites a GGUF in one of llama.cpp's K-quant mixes (LLAMA_FTYPES) with llama.cpp's
    quantizer (llama-cpp-python, a benchmark dependency), re-quantizing already quantized tensors."""
    import ctypes

    import llama_cpp

    if dst.exists():
        return dst
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPES[encoding]
    params.allow_requantize = True
    params.nthread = 2
    tmp = dst.with_suffix(".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to {encoding} (return code {rc})")
    tmp.rename(dst)
    return dst


def model_files(name: str) -> tuple[str, str]:
    """(gguf path, .model path) of a bench model: a hub name, or `<hub name>-f16` / `-q8_0` (the
    gguf package) / `-q2_k` / `-q3_k_m` (llama.cpp's quantizer)."""
    from . import hub

    base, _, enc = name.partition("-")
    gguf_path = hub.fetch_source(base, progress=False)
    if not enc:
        return gguf_path, hub.fetch(base)
    dst = _cache_dir() / f"{base}-{enc}.gguf"
    g = llama_requantize(gguf_path, dst, enc) if enc in LLAMA_FTYPES else requantize_gguf(gguf_path, dst, enc)
    m = _cache_dir() / f"{base}-{enc}.model"
    if not m.exists():
        from .convert import import_model

        import_model(str(g), str(m), progress=False)
    return str(g), str(m)


def weight_bytes_per_token(gguf_path: str) -> int:
    """Bytes of weights one decode step reads: every tensor except the token embedding
    table (one row is gathered), which counts when it doubles as the output head."""
    import gguf

    r = gguf.GGUFReader(gguf_path)
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue
        total += int(t.n_bytes)
    return total


# ---------------------------------------------------------------- per-level llama.cpp builds

LEVEL_BUILD_HINT = "bash bench/build_llama_levels.sh {level}   (builds llama.cpp for that level, ~10 min on 2 cores)"


def llama_level_dir(level: str) -> Path:
    """Directory with libllama.so + libggml*.so built for `level` by bench/build_llama_levels.sh
    from the installed llama-cpp-python's version (the Python bindings and the library must match)."""
    from importlib.metadata import version

    root = Path(os.environ.get("CYB_LLM_CACHE", Path.home() / ".cache" / "cyb_llm"))
    return root / "llama-levels" / version("llama-cpp-python") / level


def _child_env(runtime: str, level: str | None) -> dict[str, str]:
    """Environment of one measurement child: the CPU level for cyb_llm, the level's llama.cpp
    libraries for llama.cpp (no level: the environment as it is)."""
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if level:
        if runtime == "llama.cpp":
            env["LLAMA_CPP_LIB_PATH"] = str(llama_level_dir(level))
        else:
            env["CYB_CPU_LEVEL"] = level
    return env


# ---------------------------------------------------------------- bandwidth

def numpy_bandwidth(threads: int = 2, gib: float = 1.0, reps: int = 5) -> float:
    """GB/s of `threads` threads each summing its share of a 1 GiB array (numpy releases the GIL)."""
    a = np.ones(int(gib * (1 << 30)) // 8, dtype=np.float64)
    parts = np.array_split(a, threads)
    best = 0.0
    for _ in range(reps):
        ts = [threading.Thread(target=np.add.reduce, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def native_bandwidth(threads: int) -> float:
    """GB/s of our own Q8_0 matvec over ~256 MB of weights (best of a few calls)."""
    from . import _core

    n, k = 7680, 32768  # 7680 rows x 32768 -> 267 MB of Q8_0
    sec = _core.bench_matmul("q8_0", n, k, 1, 5, "auto", threads, False)
    return n * (k // 32 * 34) / sec / 1e9


# ---------------------------------------------------------------- one measurement (child)

def _status_mb(key: str) -> float | None:
    """A memory line of /proc/self/status (Linux) in MB, or None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _peak_rss_mb() -> float:
    """Peak resident set of this process. Linux: VmHWM (ru_maxrss would also count the
    parent's resident pages at the fork, e.g. the bandwidth test's 1 GiB array)."""
    v = _status_mb("VmHWM")
    if v is not None:
        return v
    try:
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r / 1024.0 if sys.platform != "darwin" else r / 1048576.0
    except ImportError:  # Windows
        return float("nan")


def _rss_mb() -> float:
    """Current resident set of this process (Linux VmRSS; nan elsewhere)."""
    v = _status_mb("VmRSS")
    return float("nan") if v is None else v


def _token_ids(vocab: int, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(100, min(vocab, 30000), n)]


def measure(runtime: str, gguf_path: str, model_path: str, threads: int, prompts: list[int], gen: int) -> dict:
    """Runs in a child process: load, prompt processing per length, generation."""
    out: dict[str, Any] = {"runtime": runtime}
    max_ctx = max(prompts + [16 + gen]) + 8
    if runtime == "llama.cpp":
        import llama_cpp

        t0 = time.perf_counter()
        llm = llama_cpp.Llama(model_path=gguf_path, n_ctx=max_ctx, n_batch=512, n_threads=threads,
                              n_threads_batch=threads, verbose=False)
        out["load_s"] = time.perf_counter() - t0
        out["system_info"] = llama_cpp.llama_print_system_info().decode()
        vocab = llm.n_vocab()

        def prompt(ids):
            llm.reset()
            llm.eval(ids)
            return np.asarray(llm.scores[llm.n_tokens - 1])

        def step(t):
            llm.eval([t])
            return np.asarray(llm.scores[llm.n_tokens - 1])
    else:
        import cyb_llm

        out["rss_base_mb"] = _rss_mb()  # after `import cyb_llm`: the baseline
        t0 = time.perf_counter()
        m = cyb_llm.load(model_path, precise=runtime == "cyb-precise", threads=threads)
        out["load_s"] = time.perf_counter() - t0
        out["cpu_level"] = cyb_llm._core.cpu_level()
        vocab = m.vocab_size
        state: dict[str, Any] = {}

        def prompt(ids):
            state["c"] = m.new_conversation(max_ctx)
            return state["c"].forward(ids)

        def step(t):
            return state["c"].forward([t])
    vocab = min(vocab, 30000)
    prompt(_token_ids(vocab, 8, 0))  # warm-up (pages, pools)
    for n in prompts:
        ids = _token_ids(vocab, n, n)
        t0 = time.perf_counter()
        prompt(ids)
        out[f"pp{n}"] = n / (time.perf_counter() - t0)
    logits = prompt(_token_ids(vocab, 16, 1))
    t0 = time.perf_counter()
    for _ in range(gen):
        logits = step(int(np.argmax(logits)))
    out[f"tg{gen}"] = gen / (time.perf_counter() - t0)
    out["peak_rss_mb"] = _peak_rss_mb()
    if "rss_base_mb" in out:
        out["rss_growth_mb"] = out["peak_rss_mb"] - out["rss_base_mb"]
        c = m.new_conversation(max_ctx)
        out["kv_cache_mb"] = c.kv_cache_bytes / 1048576.0
        out["file_mb"] = os.path.getsize(model_path) / 1048576.0
    return out


def _child(args: argparse.Namespace) -> int:
    r = measure(args.child, args.gguf, args.model_path, args.threads, [int(x) for x in args.prompts.split(",")],
                args.gen)
    print("RESULT " + json.dumps(r))
    return 0


def _level_check(r: dict, runtime: str, level: str | None) -> str | None:
    """Why a child's result does not run at `level` (None when it does or no level was asked)."""
    if not level:
        return None
    if runtime == "llama.cpp":
        info = r.get("system_info", "")
        if level == "avx2" and ("AVX512 = 1" in info or "AVX2 = 1" not in info):
            return f"llama.cpp is not an avx2 build: {info}"
        if level == "avx512" and "AVX512 = 1" not in info:
            return f"llama.cpp is not an avx512 build: {info}"
        if "AMX_INT8 = 1" in info:
            return f"llama.cpp uses AMX: {info}"
    elif r.get("cpu_level") != level:
        return f"cyb_llm ran at level {r.get('cpu_level')}, not {level}"
    return None


def _run_child(runtime: str, gguf_path: str, model_path: str, a: argparse.Namespace,
               level: str | None = None) -> dict | None:
    cmd = [sys.executable, "-m", "cyb_llm.benchmark", "--child", runtime, "--gguf", gguf_path,
           "--model-path", model_path, "--threads", str(a.threads), "--prompts", a.prompts, "--gen", str(a.gen)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(runtime, level))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            why = _level_check(r, runtime, level)
            if why:
                raise SystemExit(why)
            return r
    print(f"  {runtime}: failed (exit {p.returncode}): {p.stderr.strip()[-600:]}", file=sys.stderr)
    return None


# ---------------------------------------------------------------- report

def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str:
    try:
        root = Path(__file__).resolve().parents[2]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def have_llama_cpp() -> bool:
    try:
        import llama_cpp  # noqa: F401
        return True
    except ImportError:
        return False


def _fmt_level(level: str | None) -> str:
    return f"CYB_CPU_LEVEL={level}, llama.cpp built for {level}" if level else "default CPU level"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cyb-llm bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated (default {DEFAULT_MODELS})")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (median reported)")
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--level", help="comma-separated x86 CPU levels (avx512,avx2): each runs cyb_llm with "
                    "CYB_CPU_LEVEL=<level> against llama.cpp built for it by bench/build_llama_levels.sh")
    ap.add_argument("--markdown", help="append the results table to this markdown file")
    ap.add_argument("--json", help="write all measurements to this JSON file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--gguf", help=argparse.SUPPRESS)
    ap.add_argument("--model-path", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(a)

    runtimes = [r for r in a.runtimes.split(",") if r]
    if "llama.cpp" in runtimes and not have_llama_cpp():
        print(f"llama-cpp-python is not installed; benching cyb_llm alone. Install the peer with:\n  {INSTALL_HINT}")
        runtimes.remove("llama.cpp")
    levels: list[str | None] = [x for x in (a.level or "").split(",") if x] or [None]
    llama_flags: dict[str | None, str] = {}
    for level in levels:
        if level and "llama.cpp" in runtimes:
            d = llama_level_dir(level)
            if not (d / "libllama.so").exists():
                print(f"no llama.cpp build for {level} in {d}; build it with:\n  {LEVEL_BUILD_HINT.format(level=level)}")
                return 2
            flags = d / "FLAGS"
            llama_flags[level] = flags.read_text().strip() if flags.exists() else "?"
    prompts = [int(x) for x in a.prompts.split(",")]
    bw_np = numpy_bandwidth(a.threads)
    bw_native = native_bandwidth(a.threads)
    bw = max(bw_np, bw_native)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"CPU: {_cpu_name()}, threads={a.threads}, load average {load:.2f}; bandwidth: numpy {bw_np:.1f} GB/s, "
          f"cyb_llm q8_0 matvec {bw_native:.1f} GB/s -> limit uses {bw:.1f} GB/s")
    keys = [f"pp{n}" for n in prompts] + [f"tg{a.gen}"]
    rows: dict[str | None, list] = {lv: [] for lv in levels}
    allres: dict[str, Any] = {"bandwidth_gbs": bw, "threads": a.threads, "levels": levels, "models": {}}
    for name in a.models.split(","):
        gguf_path, model_path = model_files(name)
        wb = weight_bytes_per_token(gguf_path)
        res: dict[str | None, dict[str, list[dict]]] = {lv: {r: [] for r in runtimes} for lv in levels}
        for _ in range(a.reps):
            for level in levels:
                for rt in runtimes:
                    r = _run_child(rt, gguf_path, model_path, a, level)
                    if r:
                        res[level][rt].append(r)
        limit = bw * 1e9 / wb
        allres["models"][name] = {"gguf": gguf_path, "weight_bytes_per_token": wb, "per_level": {}}
        for level in levels:
            med = {rt: {k: statistics.median(x[k] for x in v) for k in v[0] if isinstance(v[0][k], (int, float))}
                   for rt, v in res[level].items() if v}
            allres["models"][name]["per_level"][str(level)] = {"runs": res[level], "median": med}
            print(f"\n{name} ({_fmt_level(level)}): {Path(gguf_path).name}, {wb / 1e6:.0f} MB weights read per "
                  f"token, generation limit {limit:.0f} tok/s")
            print(f"  {'runtime':12s} " + " ".join(f"{k:>8s}" for k in keys)
                  + f" {'load s':>7s} {'RSS MB':>7s} {'%bw':>5s}")
            peer = med.get("llama.cpp")
            for rt, m in med.items():
                share = m[f"tg{a.gen}"] / limit
                print(f"  {rt:12s} " + " ".join(f"{m[k]:8.1f}" for k in keys)
                      + f" {m['load_s']:7.3f} {m['peak_rss_mb']:7.0f} {100 * share:4.0f}%")
                if "rss_growth_mb" in m:
                    bar = 1.15 * (m["file_mb"] + m["kv_cache_mb"])
                    print(f"  {'':12s} RSS growth after import {m['rss_growth_mb']:.0f} MB; bar: (file "
                          f"{m['file_mb']:.0f} + KV cache {m['kv_cache_mb']:.0f} MB) + 15% = {bar:.0f} MB "
                          f"-> {'within' if m['rss_growth_mb'] <= bar else 'OVER'}")
                ratio = {k: m[k] / peer[k] for k in keys} if peer and rt != "llama.cpp" else {}
                if ratio:
                    print(f"  {'  / llama.cpp':12s} " + " ".join(f"{ratio[k]:7.2f}x" for k in keys)
                          + f" {peer['load_s'] / max(m['load_s'], 1e-9):6.2f}x")
                rows[level].append((name, rt, m, share, ratio))
    if a.json:
        Path(a.json).write_text(json.dumps(allres, indent=1))
    if a.markdown:
        lines = []
        for level in levels:
            head = f"\n## {time.strftime('%Y-%m-%d')}, {_cpu_name()}, commit {_commit()}, "
            if level:
                head += f"level {level}, "
            lines += [head + f"{a.threads} threads, median of {a.reps} interleaved runs, load average {load:.1f} at start",
                      f"Bandwidth {bw:.1f} GB/s (numpy 2-thread read {bw_np:.1f}, own q8_0 matvec {bw_native:.1f})."]
            if level:
                lines.append(f"cyb_llm with CYB_CPU_LEVEL={level}; llama.cpp built by bench/build_llama_levels.sh "
                             f"with {llama_flags.get(level, '?')}.")
            lines += ["", "| model | runtime | " + " | ".join(f"{k} tok/s" for k in keys)
                      + " | load s | peak RSS MB | gen % of bw limit | ratio vs llama.cpp (" + ", ".join(keys) + ") |",
                      "|" + "---|" * (len(keys) + 6)]
            for name, rt, m, share, ratio in rows[level]:
                rat = ", ".join(f"{ratio[k]:.2f}x" for k in keys) if ratio else ""
                lines.append(f"| {name} | {rt} | " + " | ".join(f"{m[k]:.1f}" for k in keys)
                             + f" | {m['load_s']:.3f} | {m['peak_rss_mb']:.0f} | {100 * share:.0f}% | {rat} |")
        with open(a.markdown, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
