"""`cyb-llm serve` under load and hostile connections, watched from outside (a child process,
tests/serve_proc.py): 32 concurrent streaming clients send 64 requests to 4 slots (200 in the slow
tier, tests/slow/test_serve_load_full.py); 1000 rapid and half-sent connections; parameters at the
edge of their ranges (docs/serve.md, "Load and hostile connections"). No verdict here depends on
timing: how many requests are refused and how the RSS moves depend on the machine's load, so both
are printed; bench/bench_serve_rss.py holds the RSS claim, and
tests/test_serve.py::test_queue_full_and_queue_timeout_refusals pins the refusals.
tests/test_serve.py covers the requests one at a time."""
from __future__ import annotations

import asyncio
import collections
import json
import re
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_proc import cli_server  # noqa: E402
from tolerances import tolerance  # noqa: E402

CHAT = "/v1/chat/completions"
CLIENTS, SLOTS = 32, 4
RSS_AT = 20  # RSS after this many requests is the baseline of the one after the last
MARKER = re.compile(r"MARKER-(\d+)")
SERVER_ARGS = ("smollm2", "--parallel", str(SLOTS), "--threads", "2", "--ctx", "256", "--log-level", "warning")


def _error_shape(body: dict) -> dict:
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], body
    return err


def _marker(n: int) -> int:
    return 100 + n  # three digits: the default model repeats these (single digits it does not)


async def _stream(client: httpx.AsyncClient, n: int) -> tuple[int, str, dict | None]:
    """One streaming request of request n: (status, the streamed text, the error body of a refusal)."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": f"Repeat exactly: MARKER-{_marker(n)}"}],
            "max_tokens": 10, "temperature": 0, "stream": True}
    async with client.stream("POST", CHAT, json=body) as r:
        if r.status_code != 200:
            return r.status_code, "", json.loads(await r.aread())
        parts, finish, done = [], None, False
        async for line in r.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            assert "error" not in chunk, f"request {n}: an error after the stream started: {chunk}"
            c = chunk["choices"][0]
            parts.append(c["delta"].get("content") or "")
            finish = c["finish_reason"] or finish
        assert done and finish in ("stop", "length"), (n, finish, done)
        return 200, "".join(parts), None


def run_load(requests: int, rss_at: int = RSS_AT) -> dict[str, int]:
    """32 streaming clients send `requests` requests to 4 slots. Each request is retried after a
    refusal (as the OpenAI clients do) until it completes; every answer is a complete stream or a clean
    429/503 (32 clients against 4 slots and a queue of 16 are refused at once when they all start).
    No answer holds another request's marker; at the end every slot is free and /metrics counted
    every answer. Returns the server's RSS in kB after request `rss_at` ("first") and after the last
    ("last"), for bench/bench_serve_rss.py."""
    with cli_server(*SERVER_ARGS) as srv:
        texts: dict[int, str] = {}
        refusals: list[tuple[int, int, dict]] = []
        rss: dict[str, int] = {}

        async def client_task(client: httpx.AsyncClient, queue: asyncio.Queue) -> None:
            while True:
                try:
                    n = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                while True:
                    status, text, err = await _stream(client, n)
                    if status == 200:
                        break
                    refusals.append((n, status, err))
                    await asyncio.sleep(0.5)  # back off, then retry
                texts[n] = text
                if len(texts) == rss_at:
                    rss["first"] = srv.status("VmRSS")

        async def main() -> None:
            queue: asyncio.Queue = asyncio.Queue()
            for n in range(requests):
                queue.put_nowait(n)
            limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
            async with httpx.AsyncClient(base_url=srv.url, timeout=120, limits=limits) as client:
                await asyncio.gather(*(client_task(client, queue) for _ in range(CLIENTS)))

        # one request first: a cold server builds its tokenizer in every thread of a concurrent first burst
        # (test_tokenizer_is_built_once_under_concurrent_first_use), which the RSS baseline should not hold
        warm = httpx.post(srv.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert warm.status_code == 200
        t0 = time.time()
        asyncio.run(main())
        seconds = time.time() - t0
        rss["last"] = srv.status("VmRSS")
        health = httpx.get(srv.url + "/health").json()["models"]["smollm2"]
        metrics = httpx.get(srv.url + "/metrics").text
        assert srv.proc.poll() is None

    reproduced = sum(f"MARKER-{_marker(n)}" in text for n, text in texts.items())
    print(f"\n{len(texts)} completed after {len(refusals)} refusals, {reproduced} markers reproduced, "
          f"{seconds:.1f} s; VmRSS after {rss_at}: {rss.get('first')} kB, after {requests}: {rss['last']} kB")
    assert sorted(texts) == list(range(requests))
    for n, status, err in refusals:  # every refusal is a clean 429/503 in the OpenAI shape
        assert status in (429, 503), (n, status, err)
        assert _error_shape(err)["code"] == {429: "queue_full", 503: "queue_timeout"}[status], err
    # no request gets another's text: a marker in an answer is its own
    for n, text in texts.items():
        assert {int(m) for m in MARKER.findall(text)} <= {_marker(n)}, (n, text)
    # the prompts work: most answers repeat their marker (greedy: 172 of the 200)
    assert reproduced >= tolerance("serve-load-reproduced") * requests, \
        f"only {reproduced} of {requests} answers hold their marker"
    assert health == {"slots": SLOTS, "active": 0, "queued": 0}
    counted = {int(k.split('status="')[1].split('"')[0]): int(float(v))
               for k, v in (line.rsplit(" ", 1) for line in metrics.splitlines()
                            if line.startswith('cyb_llm_requests_total{endpoint="' + CHAT))}
    want = collections.Counter(status for _, status, _ in refusals)
    want[200] = requests + 1  # and the warm-up
    assert counted == dict(want)  # the server counted every answer, refusals included
    return rss


def test_32_streaming_clients_4_slots():
    """The default tier's share (about 25 s); tests/slow/test_serve_load_full.py sends all 200."""
    run_load(64)


def test_tokenizer_is_built_once_under_concurrent_first_use():
    import cyb_llm

    m = cyb_llm.load("smollm2", threads=1)
    barrier = threading.Barrier(8)
    got = []

    def first_use() -> None:
        barrier.wait()
        got.append(m.tokenizer)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len({id(t) for t in got}) == 1


# --- hostile connections and edge values -------------------------------------------------------


def _rapid_connection(port: int, kind: int) -> None:
    """One hostile connection: connect and close; half a request head; a head with half its body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if kind == 1:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        elif kind == 2:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 200\r\n\r\n{\"messages\": [{\"role\": \"us")
    finally:
        s.close()


def test_1000_rapid_and_half_sent_connections_then_still_serving():
    with cli_server("smollm2", "--parallel", "2", "--threads", "2", "--ctx", "256", "--log-level", "warning") as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        ok = httpx.post(srv.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert ok.status_code == 200
        files_before = srv.open_files()
        errors: list[BaseException] = []

        def worker(k: int) -> None:
            try:
                for i in range(k, 1000, 8):
                    _rapid_connection(port, i % 3)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        # it still serves, every slot free and nothing queued
        r = httpx.post(srv.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                       timeout=30)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
        t0 = time.time()
        while True:  # the half-sent requests' connections are closed by now: their files go
            h = httpx.get(srv.url + "/health").json()["models"]["smollm2"]
            files = srv.open_files()
            if (h["active"], h["queued"]) == (0, 0) and files <= files_before + 2:
                break
            assert time.time() - t0 < 10, (h, files, files_before)
            time.sleep(0.1)
        assert srv.proc.poll() is None


_MSG = [{"role": "user", "content": "hi"}]
# JSON literals the tests/test_serve.py cases do not send: 1e6 is a float in JSON, the /v1/completions
# twins of the chat cases, and the same checks on streaming requests (refused before the stream starts).
_EDGE = [
    ("max_tokens 1e6", CHAT, '{"messages": %s, "max_tokens": 1e6}' % json.dumps(_MSG), "InvalidConfig", "max_tokens"),
    ("max_tokens 1e6 streaming", CHAT, '{"messages": %s, "max_tokens": 1e6, "stream": true}' % json.dumps(_MSG),
     "InvalidConfig", "max_tokens"),
    ("completions max_tokens 1e6", "/v1/completions", '{"prompt": "hi", "max_tokens": 1e6}', "InvalidConfig",
     "max_tokens"),
    ("completions max_tokens 1000000", "/v1/completions", '{"prompt": "hi", "max_tokens": 1000000}',
     "context_length_exceeded", "max_tokens"),
    ("negative max_tokens", CHAT, '{"messages": %s, "max_tokens": -5}' % json.dumps(_MSG), "InvalidConfig",
     "max_tokens"),
    ("completions negative n", "/v1/completions", '{"prompt": "hi", "n": -1}', "invalid_value", "n"),
    ("negative n streaming", CHAT, '{"messages": %s, "n": -3, "stream": true}' % json.dumps(_MSG), "invalid_value",
     "n"),
    ("n -1e9", CHAT, '{"messages": %s, "n": -1e9}' % json.dumps(_MSG), "invalid_type", "n"),
    ("n zero", CHAT, '{"messages": %s, "n": 0}' % json.dumps(_MSG), "invalid_value", "n"),
]


def test_edge_values_get_400_and_the_server_keeps_serving():
    with cli_server("smollm2", "--threads", "2", "--ctx", "256", "--log-level", "warning") as srv:
        for name, path, body, code, param in _EDGE:
            r = httpx.post(srv.url + path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, (name, r.text)
            err = _error_shape(r.json())
            assert (err["code"], err["param"]) == (code, param), (name, err)
        r = httpx.post(srv.url + CHAT, json={"messages": _MSG, "max_tokens": 2})
        assert r.status_code == 200
        assert httpx.get(srv.url + "/health").json()["models"]["smollm2"]["active"] == 0
