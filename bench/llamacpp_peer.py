"""llama.cpp (CUDA build) as the peer of bench/gpu_bench.py: builds llama-bench from the slim
source tree (bench/llamacpp_cuda/), runs it on the same-shaped GGUFs (bench/gguf_shapes.py) and
reads its JSON. Also samples the GPU's used memory with nvidia-smi while a run goes on.
Needs neither cyb_llm nor gguf (runs on the device as it is)."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_SH = os.path.join(HERE, "llamacpp_cuda", "build.sh")


def build(src: str, build_dir: str, log=print) -> str:
    """Path of llama-bench, built (bench/llamacpp_cuda/build.sh) unless already there."""
    t = time.perf_counter()
    r = subprocess.run(["bash", BUILD_SH, src, build_dir], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench build failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
    log(f"llama.cpp: llama-bench ready in {time.perf_counter() - t:.0f}s {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


def parse_llama_bench(text: str) -> dict[str, dict]:
    """llama-bench `-o json` output -> {"pp128": {...}, "tg128": {...}, ...}: per test the median,
    mean and spread of its repeats' tokens/s (the median: the first repeat of a prompt test runs
    slower), the repeats, and the model's size and backend as llama-bench reports them."""
    out = {}
    for t in json.loads(text):
        n_p, n_g = int(t["n_prompt"]), int(t["n_gen"])
        if n_p and n_g:
            key = f"pp{n_p}+tg{n_g}"
        else:
            key = f"pp{n_p}" if n_p else f"tg{n_g}"
        if int(t.get("n_depth", 0)):
            key += f"@d{t['n_depth']}"
        ts = [float(x) for x in t["samples_ts"]]
        out[key] = {"median_ts": statistics.median(ts), "avg_ts": float(t["avg_ts"]),
                    "stddev_ts": float(t["stddev_ts"]), "samples_ts": ts, "repeats": len(ts),
                    "model_size": int(t["model_size"]), "backends": t["backends"],
                    "flash_attn": t.get("flash_attn"), "type_k": t.get("type_k"),
                    "gpu_info": t.get("gpu_info", "")}
    return out


def gpu_memory_used_mib() -> float | None:
    """Memory in use on GPU 0 now (nvidia-smi), or None without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True)
    try:
        return float(r.stdout.split()[0])
    except (IndexError, ValueError):
        return None


class GpuMemSampler:
    """While active, samples GPU 0's used memory every `period_ms` (nvidia-smi's loop mode);
    `peak_mib` is the largest sample minus the memory in use when it started (None without
    nvidia-smi). Other processes on the GPU would count too: the lent GPU runs only ours."""

    def __init__(self, period_ms: int = 50):
        self.period_ms = period_ms
        self.base = self.peak = None
        self._proc = self._thread = None

    def __enter__(self):
        self.base = gpu_memory_used_mib()
        if self.base is None:
            return self
        self.peak = self.base
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0",
             "-lms", str(self.period_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            try:
                self.peak = max(self.peak, float(line.split()[0]))
            except (IndexError, ValueError):
                pass

    def __exit__(self, *exc):
        if self._proc is not None:
            time.sleep(2 * self.period_ms / 1000)
            self._proc.terminate()
            self._proc.wait()
            self._thread.join(timeout=2)
        return False

    @property
    def peak_mib(self) -> float | None:
        return None if self.base is None else self.peak - self.base


def run_llama_bench(bench: str, gguf: str, prompts: list[int], gen: int, repeats: int,
                    flash_attn: int = 1) -> tuple[dict[str, dict], float | None, str]:
    """One llama-bench run (all layers on the GPU) -> (parsed results, peak GPU MiB over the run
    from nvidia-smi, the command line)."""
    cmd = [bench, "-m", gguf, "-ngl", "99", "-p", ",".join(map(str, prompts)), "-n", str(gen),
           "-fa", str(flash_attn), "-r", str(repeats), "-o", "json"]
    out, peak = _run_sampled(cmd)
    return parse_llama_bench(out), peak, " ".join(cmd)


def _run_sampled(cmd: list[str]) -> tuple[str, float | None]:
    """Runs a llama.cpp tool -> (its stdout, peak GPU MiB over the run from nvidia-smi); a failure is
    a RuntimeError with the command line and the end of its stderr."""
    with GpuMemSampler() as mem:
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout, mem.peak_mib


def parse_batched_bench(text: str) -> list[dict]:
    """llama-batched-bench `--output-format jsonl` output -> one dict a (pp, tg, pl) test, with its
    prompt and generation speeds (`speed_pp`, `speed_tg`: tokens/s over all pl sequences)."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
    if not rows:
        raise ValueError("llama-batched-bench printed no JSONL row")
    return rows


def run_batched_bench(bench: str, gguf: str, prompt: int, gen: int, parallel: int,
                      flash_attn: str = "on") -> tuple[dict, float | None, str]:
    """One llama-batched-bench run (all layers on the GPU): `parallel` sequences, each with its own
    prompt of `prompt` tokens (not shared), then `gen` steps that decode all of them in one batch
    -> (its row, peak GPU MiB over the run from nvidia-smi, the command line)."""
    ctx = parallel * (prompt + gen) + 64
    cmd = [os.path.join(os.path.dirname(bench), "llama-batched-bench"), "-m", gguf, "-ngl", "99",
           "-c", str(ctx), "-b", "2048", "-ub", "512", "-fa", flash_attn, "-npp", str(prompt),
           "-ntg", str(gen), "-npl", str(parallel), "--output-format", "jsonl"]
    out, peak = _run_sampled(cmd)
    rows = [x for x in parse_batched_bench(out) if int(x["pl"]) == parallel]
    return rows[-1], peak, " ".join(cmd)
