"""Silero VAD's call in a tight loop (warm caches), split by layer, against onnxruntime's session.run
on the same .onnx in the same run (docs/cpu-bench.md "Silero's call"):

    PYTHONPATH=python python bench/bench_silero_call.py [--threads 2] [--calls 1000] [--rounds 5]

Prints, per round, the ms a call of GraphModel.run (Python), of the native Model.run under it (the
pybind conversion and the C++ run) and of onnxruntime, then the medians and their ratio (> 1:
cyb_llm faster). bench_onnx.py times calls 0.1 s apart (cold caches) instead."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_onnx import _silero  # noqa: E402  (the same chunk and state as bench_onnx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import onnxruntime as ort

    import cyb_llm

    name, src, _, ort_feed, _, _ = _silero()
    m = cyb_llm.load(name, backend="cpu", threads=a.threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    native = m._native
    runs = {"GraphModel.run": lambda: m.run(ort_feed), "native run": lambda: native.run(ort_feed, None),
            "onnxruntime": lambda: sess.run(None, ort_feed)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for f in runs.values():
        for _ in range(50):
            f()
    for _ in range(a.rounds):  # the three alternate round by round (a change of load hits all alike)
        for k, f in runs.items():
            # a pause first: onnxruntime's pool threads spin a while after its calls, and took ~30 us
            # a call from whichever loop came right after them
            time.sleep(0.2)
            t0 = time.perf_counter()
            for _ in range(a.calls):
                f()
            times[k].append((time.perf_counter() - t0) / a.calls * 1e3)
    for k, ts in times.items():
        print(f"{k:16s} median {statistics.median(ts):.3f} ms  (rounds: {', '.join(f'{t:.3f}' for t in ts)})")
    med = {k: statistics.median(ts) for k, ts in times.items()}
    print(f"speedup (onnxruntime / GraphModel.run): {med['onnxruntime'] / med['GraphModel.run']:.2f}x; "
          f"GraphModel.run - native run: {1e3 * (med['GraphModel.run'] - med['native run']):.1f} us a call")


if __name__ == "__main__":
    main()
