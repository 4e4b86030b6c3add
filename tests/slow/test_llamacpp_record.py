"""The committed record of llama.cpp (tests/data/llamacpp/reference.json.xz, which the default
tiers use where the pinned llama-cpp-python is not installed) equals llama.cpp recomputed live:
the corpus's token ids and the greedy continuations exactly, the logit errors within
`llamacpp-record-err` (tests/llamacpp_reference.py). Needs llama-cpp-python at the pinned
version (the slow tier of tools/test.sh builds it)."""
from __future__ import annotations

import pytest

import llamacpp_reference
import oracles
from tokenizer_corpus import corpus

pytestmark = pytest.mark.slow


def test_record_equals_live_llamacpp():
    oracles.llama_cpp()  # the live peer, at the pinned version (a failure under CYB_REQUIRE_PEERS=1)
    said: list[str] = []
    live = llamacpp_reference.compute(corpus())
    ok = llamacpp_reference.compare(llamacpp_reference.record(), live, said.append)
    print("\n".join(said))
    assert ok, "\n".join(said)
