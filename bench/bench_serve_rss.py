"""The server's RSS under load: `cyb-llm serve smollm2 --parallel 4` as a child process, 32
streaming clients, --requests requests (tests/test_serve_load.py's run_load, which also checks every
answer); the RSS after the last request must be within --within (a fraction) of the RSS after
request --rss-at (docs/serve.md, "Load and hostile connections"; the default is the row
`serve-load-rss` of docs/runtime.md's tolerances). A bench, not a test: the RSS
depends on how the requests met (threads, allocator arenas), so it is a claim measured on a quiet
machine. Exits 1 when the claim does not hold.

Usage: PYTHONPATH=python python bench/bench_serve_rss.py [--requests 200] [--rss-at 20] [--within FRACTION]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

from test_serve_load import run_load  # noqa: E402
from tolerances import tolerance  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rss-at", type=int, default=20)
    ap.add_argument("--within", type=float, default=None)
    a = ap.parse_args()
    if a.within is None:
        a.within = tolerance("serve-load-rss")
    rss = run_load(a.requests, rss_at=a.rss_at)
    grew = (rss["last"] - rss["first"]) / rss["first"]
    ok = abs(grew) <= a.within
    print(f"VmRSS after request {a.rss_at}: {rss['first']} kB; after {a.requests}: {rss['last']} kB "
          f"({100 * grew:+.2f}%, limit {100 * a.within:.0f}%): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
