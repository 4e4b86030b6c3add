"""The nox golden run: a fixed graph (tests/data/nox_golden_graph.toml) over
fixed weights (tests/graph_util.py), a 5-token prefill and one decode step.

    python tests/nox_golden.py write OUT.model   # writes the golden model
    python tests/nox_golden.py run OUT.model     # runs it on nox through cyb_llm, prints the result lines

tools/nox_golden.sh builds tools/nox_golden.cc with gcc and clang at -O0 and
-O3 and checks that each build prints exactly GOLDEN below.
"""
from __future__ import annotations

import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPH = os.path.join(HERE, "data", "nox_golden_graph.toml")
PREFILL = [3, 17, 5, 41, 8]
STEP = [22]

# What every build must print (digest of the prefill, of the step, SHA-256 of all
# logits bytes, bits of 3 logits of the step): tests/data/nox_golden.txt.
with open(os.path.join(HERE, "data", "nox_golden.txt")) as _f:
    GOLDEN = _f.read()


def write(out: str) -> str:
    sys.path.insert(0, HERE)
    from graph_util import write_tiny

    with open(GRAPH) as f:
        return write_tiny(out, graph=f.read(), model_type="nox_golden")


def run(path: str, threads: int | None = None) -> str:
    import numpy as np

    import cyb_llm

    m = cyb_llm.load(path, backend="nox", threads=threads)
    conv = m.new_conversation(16)
    a = conv.forward(PREFILL, all_logits=True).astype(np.float32)
    d1 = m.last_digest
    b = conv.forward(STEP).astype(np.float32)
    d2 = m.last_digest
    h = hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()
    return (f"prefill_digest {d1}\nstep_digest {d2}\nlogits_sha256 {h}\n"
            "logit_bits " + " ".join("%08x" % int(v) for v in b.view(np.uint32)[[0, 1, -1]]) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        print(write(sys.argv[2]))
    else:
        sys.stdout.write(run(sys.argv[2]))
