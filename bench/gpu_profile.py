"""GPU time per shader for a piece of work on wgpu+rs (timestamp queries around every dispatch,
`_core.wgpu_set_gpu_profiling`), next to the wall time of the same work: the table that
`bench/gpu_bench.py --profile` and `bench/gpu_bench_embed.py --profile` print.

Profiling gives every dispatch its own compute pass and makes every submit wait for its
timestamps, so the wall time here is that of the profiled run (slower than the timed runs);
the GPU column is the time the shaders ran. Their difference is host work: encoding,
submission, read-back waits."""
from __future__ import annotations

import time

from cyb_llm import _core


def profile(work, label: str) -> str:
    """Runs work() once with GPU profiling on; returns a markdown table (also printed)."""
    if not _core.wgpu_set_gpu_profiling(True):
        msg = f"{label}: this adapter offers no timestamp queries; no GPU profile"
        print(msg, flush=True)
        return msg
    _core.wgpu_take_gpu_profile()  # drop anything earlier
    try:
        t0 = time.perf_counter()
        work()
        wall_ms = (time.perf_counter() - t0) * 1e3
    finally:
        _core.wgpu_set_gpu_profiling(False)
    prof = _core.wgpu_take_gpu_profile()
    rows = prof["rows"]
    gpu_ms = sum(r["gpu_ms"] for r in rows)
    n = sum(r["dispatches"] for r in rows)
    lines = [f"{label}: {n} dispatches, GPU {gpu_ms:.1f} ms of {wall_ms:.1f} ms wall "
             f"({100 * gpu_ms / wall_ms:.0f}%; the rest is host work and waiting)"
             + (f", {prof['untimed']} dispatches untimed" if prof["untimed"] else ""),
             "", "| shader (defines:encodings) | dispatches | GPU ms | us / dispatch | share of GPU time |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shader']} | {r['dispatches']} | {r['gpu_ms']:.2f} | "
                     f"{1e3 * r['gpu_ms'] / max(1, r['dispatches']):.1f} | {100 * r['gpu_ms'] / max(gpu_ms, 1e-9):.1f}% |")
    table = "\n".join(lines)
    print(table, flush=True)
    return table
