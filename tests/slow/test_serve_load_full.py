"""The load test of tests/test_serve_load.py at its full size (about 60 s on 2 cores): 32 concurrent
streaming clients, 4 slots, 200 requests (the RSS claim is bench/bench_serve_rss.py's)."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from test_serve_load import run_load  # noqa: E402


def test_32_streaming_clients_200_requests_4_slots():
    run_load(200, rss_at=20)
