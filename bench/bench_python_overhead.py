"""The Python share of a generation (docs/generation.md, "Timings"): smollm2 (precise), greedy,
48 tokens from "Once upon a time"; `stats.python_overhead` (Python time per token / forward time per
step) must stay below the row `python-overhead` of docs/runtime.md's tolerances. A bench, not a test:
the share is a ratio of two timings, which a loaded machine moves. Best of --reps runs; exits 1 when
the best is over the bound.

Usage: PYTHONPATH=python python bench/bench_python_overhead.py [--reps 3] [--max-tokens 48]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import cyb_llm  # noqa: E402
from cyb_llm import hub  # noqa: E402
from cyb_llm.text.sampling import SamplingParams  # noqa: E402
from tolerances import tolerance  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    a = ap.parse_args()
    model = cyb_llm.load(hub.fetch("smollm2"), precise=True)
    best = None
    for _ in range(a.reps):
        s = model.generator().generate("Once upon a time", max_tokens=a.max_tokens, sampling=SamplingParams.greedy())
        s.read()
        st = s.stats
        print(f"python {1000 * st.python_ms / st.completion_tokens:.1f} us/token, "
              f"sample {1000 * st.sample_ms / st.completion_tokens:.1f} us/token, "
              f"forward {st.forward_ms / st.decode_steps:.2f} ms/step -> {100 * st.python_overhead:.2f}%")
        best = st.python_overhead if best is None else min(best, st.python_overhead)
    bound = tolerance("python-overhead")
    ok = best < bound
    print(f"best python overhead {100 * best:.2f}% (bound {100 * bound:.0f}%): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
