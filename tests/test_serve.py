"""`cyb-llm serve` (python/cyb_llm/serve, docs/serve.md): the official `openai` client and raw
HTTP against live servers on loopback ports (uvicorn in a background thread), with the default
model (smollm2, greedy) and minilm; the tool-call parsers on recorded model output."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

import cyb_llm  # noqa: E402
from cyb_llm.serve.app import create_app  # noqa: E402
from serve_proc import child_env, free_port, run_held  # noqa: E402
from tolerances import tolerance  # noqa: E402
from cyb_llm.text.toolcalls import ToolCallStream, parse_tool_calls  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


@contextmanager
def serving(models: dict, **kw):
    """A live server over `models` (create_app keywords in kw); yields its base URL."""
    with serving_app(create_app(models, **kw)) as url:
        yield url


@contextmanager
def serving_app(app):
    """A live server of an app from create_app; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    t0 = time.time()
    while not server.started:
        assert t.is_alive() and time.time() - t0 < 30, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(15)


@pytest.fixture(scope="module")
def models():
    return {"smollm2": cyb_llm.load("smollm2", threads=2), "minilm": cyb_llm.load("minilm", threads=2)}


@pytest.fixture(scope="module")
def base_app(models):
    return create_app(models, parallel=2, max_queue=8, ctx=512)


@pytest.fixture(scope="module")
def base(base_app):
    with serving_app(base_app) as url:
        yield url


@pytest.fixture(scope="module")
def client(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def _health(base: str) -> dict:
    return httpx.get(base + "/health").json()["models"]["smollm2"]


def _wait_idle(base: str, timeout: float = 10.0) -> dict:
    t0 = time.time()
    while True:
        h = _health(base)
        if h["active"] == 0 and h["queued"] == 0:
            return h
        assert time.time() - t0 < timeout, f"slots still busy: {h}"
        time.sleep(0.05)


# --- the openai client: chat, completions, models, embeddings, rerank -------------------


def test_chat_stream_equals_non_stream_and_usage(client, models):
    kw = dict(model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
              max_tokens=12, temperature=0)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert r.object == "chat.completion" and r.model == "smollm2"
    assert c.finish_reason in ("stop", "length") and c.message.role == "assistant" and c.message.content
    # the library, directly: same greedy text (the server adds scheduling, not generation)
    want = models["smollm2"].create_chat_completion(kw["messages"], max_tokens=12, temperature=0)
    assert c.message.content == want["choices"][0]["message"]["content"]
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert r.usage.completion_tokens == want["usage"]["completion_tokens"] <= 12

    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content
    assert len({ch.id for ch in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] \
        == [c.finish_reason]
    # without include_usage no chunk carries usage
    plain = list(client.chat.completions.create(**kw, stream=True))
    assert all(ch.usage is None and ch.choices for ch in plain)


def test_chat_logprobs_n_and_seed(client):
    r = client.chat.completions.create(model="smollm2", messages=HI, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=2)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens == 5
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in lp)
    kw = dict(model="smollm2", messages=HI, max_tokens=6, temperature=1.5, seed=7, n=2)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]  # the seed holds
    one = client.chat.completions.create(**dict(kw, n=1))
    assert one.choices[0].message.content == a.choices[0].message.content  # choice 0 keeps the seed
    assert a.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert one.usage.completion_tokens < a.usage.completion_tokens <= 12


def test_completions_stream_and_not(client):
    kw = dict(model="smollm2", prompt="The capital of France is", max_tokens=6, temperature=0)
    r = client.completions.create(**kw, logprobs=2)
    assert r.object == "text_completion" and r.choices[0].text.startswith(" Paris")
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens == 6
    assert "".join(r.choices[0].logprobs.tokens) == r.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(**kw, stream=True))
    assert streamed == r.choices[0].text
    # OpenAI's default of 16 tokens when max_tokens is not given
    d = client.completions.create(model="smollm2", prompt="Once upon a time", temperature=0)
    assert d.usage.completion_tokens <= 16


def test_models_health_metrics(client, base):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["smollm2", "minilm"]
    assert client.models.retrieve("minilm").id == "minilm"
    assert _health(base)["slots"] == 2
    text = httpx.get(base + "/metrics").text
    for name in ("cyb_llm_requests_total", "cyb_llm_prompt_tokens_total", "cyb_llm_completion_tokens_total",
                 "cyb_llm_queue_length", "cyb_llm_active_slots"):
        assert f"# TYPE {name} " in text
    before = _metric(text, 'cyb_llm_requests_total{endpoint="/v1/models",status="200"}')
    httpx.get(base + "/v1/models")
    after = _metric(httpx.get(base + "/metrics").text, 'cyb_llm_requests_total{endpoint="/v1/models",status="200"}')
    assert after == before + 1


def _metric(text: str, key: str) -> float:
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return 0.0


def test_embeddings_minilm(client, models):
    r = client.embeddings.create(model="minilm", input=["a cat sleeps", "tax law"])  # base64 by default
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    m = models["minilm"]
    want = np.array([d["embedding"] for d in m.create_embedding(["a cat sleeps", "tax law"])["data"]], np.float32)
    assert got.shape == (2, 384) and np.array_equal(got, want)
    f = client.embeddings.create(model="minilm", input="a cat sleeps", encoding_format="float")
    assert np.array_equal(np.array(f.data[0].embedding, np.float32), want[0])
    assert r.usage.prompt_tokens > 0


def test_rerank_minilm(base, models):
    docs = ["the stock market fell", "a cat is sleeping on the sofa", "tax law for companies"]
    r = httpx.post(base + "/v1/rerank", json={"model": "minilm", "query": "where is the cat?", "documents": docs})
    assert r.status_code == 200
    res = r.json()["results"]
    assert [x["index"] for x in res][0] == 1 and len(res) == 3
    v = models["minilm"].embed(["where is the cat?", *docs], normalize=True)
    for x in res:
        want = float(v[1 + x["index"]] @ v[0])
        assert x["relevance_score"] == pytest.approx(want, abs=tolerance("rerank-vs-embed"))
        assert x["document"]["text"] == docs[x["index"]]
    assert [x["relevance_score"] for x in res] == sorted((x["relevance_score"] for x in res), reverse=True)
    top = httpx.post(base + "/v1/rerank", json={"model": "minilm", "query": "cat", "documents": docs, "top_n": 1})
    assert len(top.json()["results"]) == 1


# --- errors: status, shape, and the server keeps serving ----------------------------------

_CHAT = "/v1/chat/completions"
_HOSTILE = [
    ("malformed json", _CHAT, b'{"messages": [', 400, "invalid_json", None),
    ("not an object", _CHAT, b"[1, 2]", 400, "invalid_json", None),
    ("messages wrong type", _CHAT, {"messages": "hi"}, 400, "invalid_type", "messages"),
    ("message without role", _CHAT, {"messages": [{"content": "hi"}]}, 400, "invalid_type", "messages"),
    ("temperature wrong type", _CHAT, {"messages": HI, "temperature": "hot"}, 400, "InvalidConfig", "temperature"),
    ("max_tokens wrong type", _CHAT, {"messages": HI, "max_tokens": "8"}, 400, "InvalidConfig", "max_tokens"),
    ("stream wrong type", _CHAT, {"messages": HI, "stream": "yes"}, 400, "invalid_type", "stream"),
    ("stop wrong type", _CHAT, {"messages": HI, "stop": 5}, 400, "InvalidConfig", "stop"),
    ("top_p out of range", _CHAT, {"messages": HI, "top_p": 2}, 400, "InvalidConfig", "top_p"),
    ("negative n", _CHAT, {"messages": HI, "n": -1}, 400, "invalid_value", "n"),
    ("max_tokens beyond the context", _CHAT, {"messages": HI, "max_tokens": 1000000}, 400,
     "context_length_exceeded", "max_tokens"),
    ("max_completion_tokens wrong type", _CHAT, {"messages": HI, "max_completion_tokens": -2}, 400,
     "InvalidConfig", "max_completion_tokens"),
    ("max_completion_tokens beyond the context", _CHAT, {"messages": HI, "max_completion_tokens": 1000000}, 400,
     "context_length_exceeded", "max_completion_tokens"),
    ("prompt beyond the context", _CHAT, {"messages": [{"role": "user", "content": "word " * 2000}]}, 400,
     "context_length_exceeded", "messages"),
    ("unknown model", _CHAT, {"model": "gpt-5", "messages": HI}, 404, "model_not_found", "model"),
    ("encoder for chat", _CHAT, {"model": "minilm", "messages": HI}, 400, "wrong_model_kind", "model"),
    ("invalid json schema", _CHAT, {"messages": HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "objectx"}}}}, 400, "InvalidConfig", "response_format"),
    ("tool_choice names no tool", _CHAT, {"messages": HI, "tool_choice": {"type": "function", "function": {
        "name": "g"}}, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, 400,
     "InvalidConfig", "tool_choice"),
    ("malformed tools", _CHAT, {"messages": HI, "tools": [{"type": "function"}]}, 400, "InvalidConfig", "tools"),
    ("completion prompt wrong type", "/v1/completions", {"prompt": {"a": 1}}, 400, "invalid_type", "prompt"),
    ("completion logprobs wrong type", "/v1/completions", {"prompt": "a", "logprobs": True}, 400,
     "InvalidConfig", "logprobs"),
    ("embeddings of a text model", "/v1/embeddings", {"model": "smollm2", "input": "a"}, 400,
     "wrong_model_kind", "model"),
    ("embeddings input wrong type", "/v1/embeddings", {"model": "minilm", "input": [1, 2]}, 400,
     "invalid_type", "input"),
    ("rerank documents wrong type", "/v1/rerank", {"model": "minilm", "query": "q", "documents": "d"}, 400,
     "invalid_type", "documents"),
]


@pytest.mark.parametrize("case", _HOSTILE, ids=[c[0] for c in _HOSTILE])
def test_bad_requests_get_openai_error_shapes(base, case):
    _, path, body, status, code, param = case
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(base + path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["param"] == param and err["message"]
    assert r.headers["x-request-id"].startswith("req-")


def test_body_too_large_and_unknown_routes(base):
    big = b'{"messages": "' + b"x" * (8 * 2**20) + b'"}'
    r = httpx.post(base + _CHAT, content=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: counted while reading
        for _ in range(9):
            yield b"x" * 2**20

    r = httpx.post(base + _CHAT, content=chunked())
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = httpx.get(base + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(base + _CHAT)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    # and it still serves
    assert httpx.post(base + _CHAT, json={"messages": HI, "max_tokens": 2}).status_code == 200


def test_api_key(models):
    with serving({"smollm2": models["smollm2"]}, api_key="s3cret") as url:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.post(url + _CHAT, json={"messages": HI, "max_tokens": 2}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url + "/v1/models").status_code == 401
        assert httpx.get(url + "/health").status_code == 200
        bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="smollm2", messages=HI, max_tokens=2).usage.completion_tokens >= 1


# --- concurrency --------------------------------------------------------------------------

MARKERS = ["KIWI-17", "FIG-93", "ALPHA", "banana"]


def _marker_messages(marker: str) -> list[dict]:
    return [{"role": "user", "content": "Repeat: hello"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": f"Repeat: {marker}"}]


def test_four_streams_on_two_slots_keep_their_own_text(client, base, base_app):
    """Four streams on two slots; the batcher is held (Batcher.hold) until both slots' requests have
    entered, so the two slots decode in the same steps whatever the timing."""
    want = {m: client.chat.completions.create(model="smollm2", messages=_marker_messages(m), max_tokens=10,
                                              temperature=0).choices[0].message.content for m in MARKERS}
    for m, text in want.items():  # the prompts work: each answer holds its marker (greedy, sequential)
        assert m.lower() in text.lower(), (m, text)
    got: dict[str, str] = {}
    batcher = base_app.state.engines["smollm2"].batcher
    steps0, rows0 = batcher.steps, batcher.rows

    def one(marker: str) -> None:
        parts = []
        for ch in client.chat.completions.create(model="smollm2", messages=_marker_messages(marker),
                                                 max_tokens=10, temperature=0, stream=True):
            parts.append(ch.choices[0].delta.content or "")
        got[marker] = "".join(parts)

    threads = [threading.Thread(target=one, args=(m,)) for m in MARKERS]
    run_held(batcher, threads, 2, 120)
    assert got == want  # interleaved on two slots, each stream is what it is alone
    for m, text in got.items():
        assert not any(o.lower() in text.lower() for o in MARKERS if o != m), (m, text)
    steps, rows = batcher.steps - steps0, batcher.rows - rows0
    assert rows > steps > 0, f"the two slots did not decode at once ({rows} rows in {steps} steps)"
    _wait_idle(base)


def _wait_until(cond, what: str, guard: float = 60.0) -> None:
    """Polls cond() until it holds; `guard` seconds only stop a hang (not a verdict on speed)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < guard, what
        time.sleep(0.02)


def test_disconnect_mid_stream_frees_the_slot(models):
    """The batcher is held (Batcher.hold) before the request: the stream sends its first token (the
    prefill) and waits at its first decode step, 449 tokens to go; the client leaves; the server
    cancels the run; released, the run ends after at most that one step and frees the slot."""
    app = create_app({"smollm2": models["smollm2"]}, parallel=1, max_queue=0, ctx=512)
    eng = app.state.engines["smollm2"]
    with serving_app(app) as url:
        body = {"messages": [{"role": "user", "content": "Write a long story about a dragon."}], "max_tokens": 450,
                "temperature": 0, "stream": True}
        eng.batcher.hold()
        try:
            with httpx.Client(timeout=30) as c:
                with c.stream("POST", url + _CHAT, json=body) as r:
                    assert r.status_code == 200
                    lines = (x for x in r.iter_lines() if x)
                    first = [json.loads(next(lines).removeprefix("data: ")) for _ in range(2)]  # role, 1st token
                    assert first[1]["choices"][0]["delta"]["content"], first
                    assert _health(url)["active"] == 1
                    # the only slot is taken and the queue holds 0: a second request is refused at once
                    busy = httpx.post(url + _CHAT, json={"messages": HI, "max_tokens": 2})
                    assert busy.status_code == 429 and busy.json()["error"]["code"] == "queue_full"
                # leaving the block closes the connection mid-stream
            _wait_until(lambda: all(j.cancelled for j in list(eng._jobs)), "the run was not cancelled")
        finally:
            eng.batcher.release()
        h = _wait_idle(url, timeout=60.0)
        assert h == {"slots": 1, "active": 0, "queued": 0}
        assert eng.batcher.rows <= 1, f"the cancelled run went on ({eng.batcher.rows} decode steps)"
        r = httpx.post(url + _CHAT, json={"messages": HI, "max_tokens": 2})
        assert r.status_code == 200
        m = httpx.get(url + "/metrics").text
        assert _metric(m, 'cyb_llm_requests_total{endpoint="/v1/chat/completions",status="429"}') == 1


def test_queue_full_and_queue_timeout_refusals(models):
    """One slot and a queue of one; the batcher is paused (Batcher.pause: no forward), so the first
    request keeps the slot however slow the machine. Without a request timeout the second request
    waits in the queue for good and a third finds it full (429 queue_full); released, both complete.
    With a timeout of 0.5 s the second waits until its deadline (503 queue_timeout) and the first,
    released, ends at its own passed deadline (503 timeout). Every slot is free at the end."""
    for timeout, max_tokens in ((None, 4), (0.5, 400)):
        app = create_app({"smollm2": models["smollm2"]}, parallel=1, max_queue=1, ctx=512, request_timeout=timeout)
        eng = app.state.engines["smollm2"]
        body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": max_tokens,
                "temperature": 0}
        got: dict = {}
        with serving_app(app) as url:
            def send(name: str) -> threading.Thread:
                t = threading.Thread(target=lambda: got.update({name: httpx.post(url + _CHAT, json=body, timeout=60)}))
                t.start()
                return t

            eng.batcher.pause()
            try:
                first = send("first")
                _wait_until(lambda: _health(url)["active"] == 1, "the first request took no slot")
                second = send("second")
                if timeout is None:
                    _wait_until(lambda: _health(url)["queued"] == 1, "the second request did not queue")
                    third = httpx.post(url + _CHAT, json=body, timeout=60)
                    assert third.status_code == 429 and third.json()["error"]["code"] == "queue_full", third.text
                    assert "second" not in got  # still in the queue
                else:
                    second.join(60)
                    assert got["second"].status_code == 503, got["second"].text
                    assert got["second"].json()["error"]["code"] == "queue_timeout"
                assert "first" not in got  # still paused before its prefill
            finally:
                eng.batcher.release()
            first.join(60)
            second.join(60)
            if timeout is None:
                assert got["first"].status_code == got["second"].status_code == 200
            else:
                assert got["first"].status_code == 503 and got["first"].json()["error"]["code"] == "timeout"
            assert _wait_idle(url, timeout=60.0) == {"slots": 1, "active": 0, "queued": 0}
            if timeout is None:  # (under a 0.5 s timeout a loaded machine may not answer in time)
                assert httpx.post(url + _CHAT, json={"messages": HI, "max_tokens": 2}).status_code == 200


def test_follow_up_turn_reuses_the_slot_cache(models):
    with serving({"smollm2": models["smollm2"]}, parallel=1, ctx=512) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "Name a color."}]
        first = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0)
        assert first.timings["cached_tokens"] == 0
        msgs += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Another one."}]
        second = c.chat.completions.create(model="smollm2", messages=msgs, max_tokens=4, temperature=0)
        assert second.timings["cached_tokens"] >= first.usage.prompt_tokens


# --- tool calls: parsers on recorded output -------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]

_RECORDED = [
    # Qwen2.5 (recorded from qwen05 with its template's tool prompt)
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "",
     [("get_weather", {"city": "Paris"})]),
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', "Let me check.",
     [("get_weather", {"city": "Oslo"}), ("get_time", {})]),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}', "", [("get_weather", {"city": "Rome"})]),
    # Llama 3.x
    ('{"name": "get_weather", "parameters": {"city": "Lima"}}', "", [("get_weather", {"city": "Lima"})]),
    ('<|python_tag|>{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Bern"}}',
     "", [("get_time", {}), ("get_weather", {"city": "Bern"})]),
    # generic JSON
    ('```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Quito\\"}"}\n```', "",
     [("get_weather", {"city": "Quito"})]),
    ('[{"function": {"name": "get_time", "arguments": {}}}]', "", [("get_time", {})]),
    # not tool calls: stays content
    ('{"name": "launch_rockets", "arguments": {}}', '{"name": "launch_rockets", "arguments": {}}', []),
    ("The weather in Paris is sunny.", "The weather in Paris is sunny.", []),
    ('<tool_call>\nnot json\n</tool_call>', '<tool_call>\nnot json\n</tool_call>', []),
]


@pytest.mark.parametrize("text,content,calls", _RECORDED)
def test_tool_call_parsers(text, content, calls):
    got_content, got = parse_tool_calls(text, TOOLS)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got] == calls
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in got)
    # the streaming splitter, fed a few characters at a time, ends the same way
    s = ToolCallStream(TOOLS)
    streamed = "".join(s.push(text[i:i + 3]) for i in range(0, len(text), 3))
    rest, got2 = s.finish()
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got2] == calls
    assert (streamed + rest).strip() == content.strip() if calls else streamed + rest == text


def test_tool_stream_releases_plain_text_early():
    s = ToolCallStream(TOOLS)
    assert s.push("Sunny ") == "Sunny "  # cannot be a tool call: released at once
    assert s.push("today <tool") == "today "  # may begin <tool_call>: held
    assert s.push("box>") == "<toolbox>"


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tool_call_round_trip_with_qwen05():
    """qwen05 (Qwen2.5, <tool_call> form) through the server and the openai client: the call comes back
    as tool_calls (also streamed as delta.tool_calls); the tool's result goes back in, the answer uses it."""
    m = cyb_llm.load("qwen05", threads=2)
    with serving({"qwen05": m}, ctx=1024) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = c.chat.completions.create(model="qwen05", messages=msgs, tools=WEATHER, max_tokens=40, temperature=0)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content is None
        (call,) = ch.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

        deltas = [x.choices[0].delta for x in c.chat.completions.create(
            model="qwen05", messages=msgs, tools=WEATHER, max_tokens=40, temperature=0, stream=True)]
        streamed = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert [(t.index, t.function.name, json.loads(t.function.arguments)) for t in streamed] == \
            [(0, "get_weather", {"city": "Paris"})]
        assert not "".join(d.content or "" for d in deltas).strip()

        msgs += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 31, "sky": "clear"}'}]
        final = c.chat.completions.create(model="qwen05", messages=msgs, tools=WEATHER, max_tokens=40,
                                          temperature=0)
        assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls
        assert "31" in final.choices[0].message.content

        none = c.chat.completions.create(model="qwen05", messages=msgs[:1], tools=WEATHER, tool_choice="none",
                                         max_tokens=8, temperature=0)
        assert not none.choices[0].message.tool_calls and none.choices[0].message.content


# --- the command -----------------------------------------------------------------------------


def test_cli_serve_answers_and_exits_0_on_sigterm():
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "cyb_llm.cli", "serve", "smollm2", "--port", str(port),
                          "--threads", "2", "--ctx", "256", "--shutdown-timeout", "2"],
                         env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        t0 = time.time()
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert p.poll() is None and time.time() - t0 < 60, p.stderr.read() if p.poll() is not None else ""
            time.sleep(0.1)
        r = httpx.post(url + _CHAT, json={"model": "smollm2", "messages": HI, "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "smollm2"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "POST /v1/chat/completions 200" in err  # the access-log line, with its request id
    assert "req-" in err


def test_cli_serve_without_the_extra_says_how_to_install():
    code = ("import sys; sys.modules['fastapi'] = None; sys.modules['uvicorn'] = None\n"
            "from cyb_llm.cli import main; sys.exit(main(['serve', 'smollm2']))")
    r = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "pip install 'cyb_llm[serve]'" in r.stderr


def test_cors_is_off_by_default_and_on_for_the_given_origin(base, models):
    pre = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    r = httpx.options(base + _CHAT, headers=pre)
    assert "access-control-allow-origin" not in r.headers
    with serving({"smollm2": models["smollm2"]}, cors_origin="http://app.example", api_key="k") as url:
        r = httpx.options(url + _CHAT, headers=pre)  # preflight: answered before the key check
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://app.example"
        r = httpx.options(url + _CHAT, headers=dict(pre, Origin="http://evil.example"))
        assert r.headers.get("access-control-allow-origin") != "http://evil.example"


def test_request_timeout(models):
    """The batcher is paused (Batcher.pause: no forward) until the request's deadline has passed:
    released, the run ends at its first token (400 to go) with 503 "timeout" and frees the slot."""
    app = create_app({"smollm2": models["smollm2"]}, ctx=512, request_timeout=0.5)
    eng = app.state.engines["smollm2"]
    with serving_app(app) as url:
        body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400, "temperature": 0}
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(r=httpx.post(url + _CHAT, json=body, timeout=60)))

        def deadline_passed() -> bool:
            jobs = list(eng._jobs)
            return "r" in got or (bool(jobs) and time.monotonic() > jobs[0].deadline)

        eng.batcher.pause()
        try:
            t.start()
            _wait_until(deadline_passed, "the request did not start")
        finally:
            eng.batcher.release()
        t.join(60)
        r = got["r"]
        assert r.status_code == 503 and r.json()["error"]["code"] == "timeout"
        assert eng.batcher.rows == 0, f"the run went on past its deadline ({eng.batcher.rows} decode steps)"
        assert _wait_idle(url, timeout=60.0)["active"] == 0


def test_parallel_4_on_wgpu_batches_and_matches_each_alone(tmp_path_factory):
    """--parallel 4 on wgpu+rs (lavapipe in CI; a tiny random qwen2, token-id prompts): four
    concurrent greedy completions equal each one run alone, their decode steps were batched,
    and every op ran on the device. The batcher is held (Batcher.hold) until the four requests
    have entered, so they share their steps whatever the timing."""
    from placement import wgpu_skip_reason

    if wgpu_skip_reason():
        pytest.skip(wgpu_skip_reason())
    import test_families_tiny as F

    _, path = F._build("qwen2", tmp_path_factory)
    m = cyb_llm.load(path, backend="wgpu+rs", precise=True)
    prompts = [[1, 2, 3, 4], [9, 8, 7], [40, 41, 42, 43, 44, 45], [100]]
    body = lambda p: {"model": "tiny", "prompt": p, "max_tokens": 6, "temperature": 0}  # noqa: E731
    # each completion alone (one at a time, each on an empty slot: none shares a prefix with the
    # others) and its decode steps; then the four at once on a new server, whose slots are empty too
    first = create_app({"tiny": m}, parallel=4, ctx=64)
    alone, decode = [], []
    with serving_app(first) as url:
        for p in prompts:
            steps0 = first.state.engines["tiny"].batcher.steps
            alone.append(httpx.post(f"{url}/v1/completions", json=body(p), timeout=120).json())
            decode.append(first.state.engines["tiny"].batcher.steps - steps0)
    app = create_app({"tiny": m}, parallel=4, ctx=64)
    batcher = app.state.engines["tiny"].batcher
    with serving_app(app) as url:
        def one(i: int, out: list) -> None:
            out[i] = httpx.post(f"{url}/v1/completions", json=body(prompts[i]), timeout=120).json()

        got: list = [None] * len(prompts)
        threads = [threading.Thread(target=one, args=(i, got)) for i in range(len(prompts))]
        run_held(batcher, threads, len(prompts), 180)
        steps, rows = batcher.steps, batcher.rows
    # every step held every request still decoding: as many steps as the longest run alone, and the
    # rows of all of them
    assert (steps, rows) == (max(decode), sum(decode)), \
        f"the concurrent requests' decode steps were not batched ({rows} rows in {steps} steps; alone {decode})"
    for a, g in zip(alone, got):
        assert g["choices"][0]["text"] == a["choices"][0]["text"]
        assert g["usage"]["completion_tokens"] == a["usage"]["completion_tokens"] > 0
    assert {r["backend"] for r in m.dispatch_records} == {"wgpu+rs"}
