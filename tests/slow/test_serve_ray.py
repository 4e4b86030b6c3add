"""Scale-out on Ray Serve (python/cyb_llm/serve/ray.py, docs/serve.md "Scale out on Ray"):
`cyb-llm serve --ray --replicas 2` on a local Ray instance spreads requests over two replica
processes, and its greedy answers equal the single-process server's. The slow tier installs the
ray extra (tools/test.sh)."""
from __future__ import annotations

import concurrent.futures
import json
import subprocess

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
pytest.importorskip("ray.serve", reason="the ray extra: pip install 'cyb_llm[ray]'")

from serve_proc import cli_server  # noqa: E402

CHAT = "/v1/chat/completions"
COMMON = ("smollm2", "--threads", "1", "--ctx", "512", "--parallel", "2", "--log-level", "warning")
PROMPTS = ["What is the capital of France?", "Name three colors.", "Repeat exactly: MARKER-117",
           "Write a haiku about the sea.", "What is 2 + 2?", "Say hello in Spanish.", "Count to five.",
           "What is the largest planet?"]


def _ask(url: str, prompt: str, stream: bool) -> tuple[str, dict]:
    """(the greedy answer's text, the response headers) of a chat request, streamed or not."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16,
            "temperature": 0, "stream": stream}
    with httpx.Client(timeout=120) as c:
        if not stream:
            r = c.post(url + CHAT, json=body)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"], dict(r.headers)
        parts = []
        with c.stream("POST", url + CHAT, json=body) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    parts.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
            return "".join(parts), dict(r.headers)


def _completion(url: str) -> str:
    r = httpx.post(url + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 8,
                                                  "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def _all(url: str) -> tuple[dict, list[dict]]:
    """Every prompt, streamed and not, 4 at a time; (answers, response headers)."""
    jobs = [(p, s) for p in PROMPTS for s in (False, True)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda j: _ask(url, *j), jobs))
    answers = {j: text for j, (text, _) in zip(jobs, got)}
    answers["completion"] = _completion(url)
    return answers, [h for _, h in got]


def test_two_ray_replicas_spread_requests_and_answer_as_the_single_server():
    with cli_server(*COMMON) as single:
        want, _ = _all(single.url)
    assert all(want.values()) and len(set(want.values())) > len(PROMPTS) // 2  # answers, and distinct ones
    with cli_server(*COMMON, "--ray", "--replicas", "2", start_timeout=300) as srv:
        got, headers = _all(srv.url)
        replicas = {h["x-cyb-replica"] for h in headers}
        pids = {int(h["x-cyb-pid"]) for h in headers}
        err = httpx.post(srv.url + CHAT, json={"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]})
        health = httpx.get(srv.url + "/health").json()
        proc = srv.proc
    assert got == want  # greedy answers, streamed and not, equal the single-process server's
    assert len(replicas) == 2 and len(pids) == 2 and proc.pid not in pids, (replicas, pids)
    assert err.status_code == 404 and err.json()["error"]["code"] == "model_not_found"  # the same app's errors
    assert health["models"]["smollm2"]["slots"] == 2
    assert proc.returncode == 0, srv.log_text()[-4000:]  # SIGTERM: the application deleted, Ray stopped
    left = subprocess.run(["pgrep", "-f", "ServeReplica:cyb_llm"], capture_output=True, text=True).stdout.split()
    assert not left, f"replica processes left behind: {left}"


def test_app_builder_args_are_the_cli_options():
    from cyb_llm.errors import InvalidConfig
    from cyb_llm.serve.ray import app_builder, serve_options

    # `serve run cyb_llm.serve.ray:app_builder models=smollm2,minilm parallel=4 precise=true` passes strings
    o = serve_options("smollm2,minilm", parallel="4", precise="true", cors_origin=["http://a", "http://b"])
    assert (o.models, o.parallel, o.precise, o.cors_origin, o.max_queue) == (
        ["smollm2", "minilm"], 4, True, ["http://a", "http://b"], 16)
    with pytest.raises(InvalidConfig):
        serve_options(["smollm2"], port=9000)  # the proxy's, not a replica's
    with pytest.raises(InvalidConfig):
        serve_options(["smollm2"], parallel="four")
    app = app_builder({"models": ["smollm2"], "num_replicas": "3", "threads": 2, "parallel": 4})
    dep = app._bound_deployment
    assert dep.num_replicas == 3 and dep.ray_actor_options["num_cpus"] == 2
    assert dep.max_ongoing_requests == 4 + 16 + 8
