"""Serving throughput: `cyb-llm serve` with 4 slots against 1 slot, and against llama.cpp's
`llama-server` on the same GGUF, same threads, `--parallel 4`, in one run (docs/serve.md, "Throughput").

Usage: PYTHONPATH=python python bench/bench_serve.py [--model smollm2] [--threads 2] [--parallel 4]
       [--clients 8] [--requests 32] [--max-tokens 48] [--ctx 1024] [--reps 2] [--llama-server PATH]
       [--skip llama]
       [--json FILE]

Each server runs alone, one after another (cyb_llm with 1 slot, cyb_llm with --parallel slots,
llama-server with 1 slot and with --parallel slots), as a child process with --threads threads.
After one warm-up request, --clients concurrent streaming clients send --requests chat requests
in all (distinct prompts, greedy, max_tokens --max-tokens) through /v1/chat/completions: both
servers apply the GGUF's chat template. Aggregate tokens/s = completion tokens of all requests /
wall seconds from the first request sent to the last answer; time to first token (TTFT) = from a
request sent to its first chunk of text. llama-server is built by bench/build_llama_server.sh
(llama.cpp from the llama-cpp-python sdist the tests use) unless --llama-server names one; the
GGUF is the source of cyb_llm's model (cyb_llm.hub.fetch_source). --reps rounds run every
configuration once each, in turn; each configuration's best round (by tokens/s) is reported.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from serve_proc import free_port  # noqa: E402  (the tests' helpers for server processes)

TOPICS = ("a lighthouse keeper", "the first snow of winter", "a lost umbrella", "a robot learning to paint",
          "a market in Marrakesh", "the last train home", "a garden on Mars", "an old violin", "a fox and a crow",
          "a city under the sea", "a forgotten library", "a storm at sea", "a baker's apprentice", "a comet",
          "a clockmaker", "a desert caravan")


def prompts(n: int) -> list[str]:
    return [f"Write a short story about {TOPICS[i % len(TOPICS)]} (version {i // len(TOPICS) + 1})." for i in range(n)]


@contextmanager
def launched(cmd: list[str], port: int, env: dict | None = None, timeout: float = 300.0) -> Iterator[str]:
    """A server command in a child process, yielded (its base URL) once GET /health answers 200."""
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.time() - t0 > timeout:
                log.seek(0)
                raise RuntimeError(f"{cmd[0]} did not start:\n" + log.read().decode(errors="replace")[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def _one(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> tuple[float | None, int]:
    """(TTFT seconds, completion tokens) of one streamed greedy chat request."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, chunks, usage = None, 0, None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices") or []:
                if (c.get("delta") or {}).get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    return ttft, int(usage["completion_tokens"]) if usage else chunks


async def _load(url: str, model: str, texts: list[str], clients: int, max_tokens: int) -> dict:
    queue: asyncio.Queue = asyncio.Queue()
    for t in texts:
        queue.put_nowait(t)
    ttfts: list[float] = []
    tokens = [0]

    async def client_task(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            ttft, n = await _one(client, model, queue.get_nowait(), max_tokens)
            tokens[0] += n
            if ttft is not None:
                ttfts.append(ttft)

    # a connection per request: llama-server closes idle keep-alive connections after a few seconds, and
    # a request sent on one just then fails ("Server disconnected without sending a response")
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await _one(client, model, "Hello!", 8)  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(client_task(client) for _ in range(clients)))
        seconds = time.perf_counter() - t0
    q = statistics.quantiles(ttfts, n=100, method="inclusive")
    return {"requests": len(texts), "completion_tokens": tokens[0], "seconds": seconds,
            "tokens_per_s": tokens[0] / seconds, "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p99_ms": 1000 * q[98]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="hub model name (default: the hub's default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8, help="concurrent streaming clients")
    ap.add_argument("--requests", type=int, default=32, help="requests per server configuration")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot")
    ap.add_argument("--reps", type=int, default=2, help="rounds; each configuration's best round counts")
    ap.add_argument("--llama-server", help="llama-server binary (default: bench/build_llama_server.sh)")
    ap.add_argument("--llama-args", default="", help="more llama-server arguments, e.g. '--poll 0'")
    ap.add_argument("--skip", default="", help="comma-separated: llama")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    from cyb_llm import hub

    model = a.model or hub.DEFAULT_MODEL
    gguf = hub.fetch_source(model, progress=False)
    skip = set(filter(None, a.skip.split(",")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                                     os.environ.get("PYTHONPATH", "")])))
    texts = prompts(a.requests)
    configs: list[tuple[str, list[str] | None, int]] = []
    for slots in (1, a.parallel):
        configs.append((f"cyb_llm serve, {slots} slot(s)", [sys.executable, "-m", "cyb_llm.cli", "serve", model,
                        "--parallel", str(slots), "--threads", str(a.threads), "--ctx", str(a.ctx),
                        "--max-queue", str(a.clients), "--log-level", "warning"], slots))
    if "llama" not in skip:
        server = a.llama_server or subprocess.run(["bash", str(ROOT / "bench/build_llama_server.sh")], check=True,
                                                  capture_output=True, text=True).stdout.strip().splitlines()[-1]
        # -c is the total context, split over the slots. --threads-http: an HTTP thread per client (its
        # default, from the core count, is fewer than 8 here: keep-alive connections then wait for a
        # thread, or are dropped)
        for slots in (1, a.parallel):
            configs.append((f"llama-server, {slots} slot(s)", [server, "-m", gguf, "--parallel", str(slots),
                            "-t", str(a.threads), "-tb", str(a.threads), "-c", str(a.ctx * slots),
                            "--threads-http", str(a.clients + 2), "--host", "127.0.0.1", *a.llama_args.split()],
                            slots))
    print(f"model {model} ({os.path.basename(gguf)}), {a.threads} threads, {a.clients} clients, {a.requests} "
          f"requests of max {a.max_tokens} tokens per configuration", flush=True)
    results: dict[str, dict] = {}
    for rep in range(a.reps):  # every configuration once per round: a change of the machine's load hits all alike
        for name, cmd, _ in configs:
            port = free_port()
            with launched(cmd + ["--port", str(port)], port, env=env) as url:
                r = asyncio.run(_load(url, model, texts, a.clients, a.max_tokens))
            print(f"round {rep + 1}: {name:28s} {r['tokens_per_s']:7.1f} tok/s  ({r['completion_tokens']} tokens in "
                  f"{r['seconds']:.1f} s)  TTFT p50 {r['ttft_p50_ms']:6.0f} ms  p99 {r['ttft_p99_ms']:6.0f} ms",
                  flush=True)
            if name not in results or r["tokens_per_s"] > results[name]["tokens_per_s"]:
                results[name] = r
    print(f"best of {a.reps} round(s):")
    for name, r in results.items():
        print(f"  {name:28s} {r['tokens_per_s']:7.1f} tok/s  TTFT p50 {r['ttft_p50_ms']:6.0f} ms  "
              f"p99 {r['ttft_p99_ms']:6.0f} ms")
    cyb1, cybn = results[configs[0][0]], results[configs[1][0]]
    ratios = {"cyb_llm_parallel_over_1": cybn["tokens_per_s"] / cyb1["tokens_per_s"]}
    print(f"cyb_llm {a.parallel} slots / 1 slot: {ratios['cyb_llm_parallel_over_1']:.2f}x")
    if "llama" not in skip:
        l1, ln = results[configs[2][0]], results[configs[3][0]]
        ratios["llama_parallel_over_1"] = ln["tokens_per_s"] / l1["tokens_per_s"]
        ratios["cyb_llm_over_llama_server"] = cybn["tokens_per_s"] / ln["tokens_per_s"]
        print(f"llama-server {a.parallel} slots / 1 slot: {ratios['llama_parallel_over_1']:.2f}x")
        print(f"cyb_llm / llama-server, {a.parallel} slots each: {ratios['cyb_llm_over_llama_server']:.2f}x "
              f"(goal >= 1.0x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "gguf": gguf, "results": results, "ratios": ratios}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
