#!/usr/bin/env python3
"""Writes tests/data/llamacpp/reference.json.xz: what the default tiers ask of llama.cpp, computed
with the pinned llama-cpp-python (tests/oracles.py LLAMA_CPP_VERSION) by the functions of
tests/llamacpp_reference.py, so that a machine without that build runs the same checks against
the record (docs/testing.md, "llama.cpp: live or recorded"). Needs llama-cpp-python at the
pinned version and transformers (the fidelity rows' reference).

    python tools/make_llamacpp_fixtures.py            # write the record
    python tools/make_llamacpp_fixtures.py --check    # recompute and compare, write nothing
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import llamacpp_reference as ref  # noqa: E402
from tokenizer_corpus import corpus  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="recompute and compare with the record")
    a = ap.parse_args()
    data = ref.compute(corpus())
    if a.check:
        return 0 if ref.compare(ref.record(), data, print) else 1
    os.makedirs(os.path.dirname(ref.RECORD), exist_ok=True)
    with lzma.open(ref.RECORD, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {os.path.relpath(ref.RECORD, ROOT)} ({os.path.getsize(ref.RECORD)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
