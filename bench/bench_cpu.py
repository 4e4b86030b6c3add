"""CPU benchmark of cyb_llm (fast and precise) against llama.cpp on the same GGUF, same threads.

Usage: PYTHONPATH=python python bench/bench_cpu.py [--models smollm2,qwen05,qwen15,smollm2-f16,smollm2-q8_0]
       [--threads 2] [--reps 3] [--markdown docs/cpu-bench.md]
(the same as `cyb-llm bench ...`; the implementation is cyb_llm/benchmark.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from cyb_llm.benchmark import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
