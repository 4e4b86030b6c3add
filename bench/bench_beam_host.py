"""Host time of Whisper's beam search per step (cyb_llm.speech.search.beam_search: the logits
rules, the beams' log-softmax, the candidates, the session bookkeeping), without a model: the
sessions' batched forward returns seeded random [beams, vocab] rows, timed apart and subtracted.
Random rows are the GPU benchmark's case (bench/gpu_bench_whisper.py runs random weights): flat
distributions, every value near the maximum.

    PYTHONPATH=python python bench/bench_beam_host.py [--beams 5] [--steps 128] [--vocab 51865]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from cyb_llm.speech.search import LogitRules, beam_search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beams", type=int, default=5)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=51865)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)

    class Model:
        def forward_batch(self, sessions, tokens):
            return rng.standard_normal((len(sessions), a.vocab)).astype(np.float32) * 3

    class Session:
        model = Model()

        def clone(self):
            return Session()

        def copy_from(self, other):
            pass

    first = rng.standard_normal(a.vocab).astype(np.float32)
    search, fwd = [], []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        beam_search(Session(), first, LogitRules(timestamps=False), eot=-1, max_steps=a.steps, beam_size=a.beams)
        search.append((time.perf_counter() - t0) / a.steps)
        t0 = time.perf_counter()
        for _ in range(a.steps - 1):
            Model().forward_batch([None] * a.beams, None)
        fwd.append((time.perf_counter() - t0) / a.steps)
    host = min(search) - min(fwd)
    print(f"beam search, {a.beams} beams x {a.vocab} vocab: {1e3 * min(search):.2f} ms a step with the random "
          f"rows, of which making the rows {1e3 * min(fwd):.2f} ms: host work {1e3 * host:.2f} ms a step")


if __name__ == "__main__":
    main()
