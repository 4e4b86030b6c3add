"""Text cut by max_tokens never ends in a broken character (issue 42, item 5).

The default model answers an emoji prompt with emoji of two tokens each (byte-level BPE pieces
of one 4-byte character), so a max_tokens cut lands inside a character at every other value.
The incomplete character is held back while streaming and dropped at the end: no U+FFFD, and
each cut answer is a prefix of the longer one. Checked through create_chat_completion (streamed
and not, every max_tokens 1..40), Generator.generate, the CLI and the server."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

import cyb_llm
from cyb_llm import cli

PROMPT = [{"role": "user", "content": "Reply with only emoji, no words: a party, fire, a smile, a heart, a rocket."}]
CUTS = range(1, 41)


@pytest.fixture(scope="module")
def model(real_model):
    return cyb_llm.load(real_model("smollm2"))


@pytest.fixture(scope="module")
def full(model):
    """The answer at the longest cut: emoji, whole characters only (what every cut is a prefix of)."""
    text = model.create_chat_completion(PROMPT, max_tokens=max(CUTS) + 8, temperature=0)["choices"][0]["message"]["content"]
    text = text[:-1] if text.endswith("\ufffd") else text  # a cut in the reference itself
    assert sum(ord(c) >= 0x1F000 for c in text) >= 4 and "\ufffd" not in text, text
    return text


def _check(text: str, full: str, n: int, how: str) -> None:
    assert "\ufffd" not in text, f"{how}, max_tokens={n}: {text!r}"
    assert full.startswith(text), f"{how}, max_tokens={n}: {text!r} is not a prefix of {full!r}"


def test_chat_completion_cut_never_breaks_a_character(model, full):
    for n in CUTS:
        r = model.create_chat_completion(PROMPT, max_tokens=n, temperature=0)
        _check(r["choices"][0]["message"]["content"], full, n, "create_chat_completion")


def test_streamed_chat_completion_cut_never_breaks_a_character(model, full):
    for n in CUTS:
        pieces = [c["choices"][0]["delta"].get("content") or ""
                  for c in model.create_chat_completion(PROMPT, max_tokens=n, temperature=0, stream=True)]
        assert all("\ufffd" not in p for p in pieces), (n, pieces)
        _check("".join(pieces), full, n, "create_chat_completion(stream=True)")


def test_generate_cut_never_breaks_a_character(model, full):
    from cyb_llm.text.sampling import SamplingParams

    gen = model.generator()
    for n in range(1, 11):
        stream = gen.generate(PROMPT, max_tokens=n, sampling=SamplingParams(temperature=0))
        pieces = [c.text for c in stream]
        assert stream.finish_reason == "length"
        assert "".join(pieces) == stream.text
        _check(stream.text, full, n, "Generator.generate")


def test_cli_cut_never_breaks_a_character(model, full, monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_model", lambda *a, **k: model)
    prompt = PROMPT[0]["content"]
    for n in range(1, 9):
        assert cli.main(["run", prompt, "--max-tokens", str(n), "--temp", "0", "-q"]) == 0
        _check(capsys.readouterr().out[:-1], full, n, "cyb-llm run")
        assert cli.main(["run", prompt, "--max-tokens", str(n), "--temp", "0", "--json"]) == 0
        _check(json.loads(capsys.readouterr().out)["text"], full, n, "cyb-llm run --json")


def test_server_cut_never_breaks_a_character(model, full):
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from serve_proc import free_port

    from cyb_llm.serve.app import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app({"smollm2": model}), host="127.0.0.1", port=port,
                                           log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        assert t.is_alive()
        time.sleep(0.02)
    try:
        for n in range(1, 9):
            for stream in (False, True):
                body = json.dumps({"model": "smollm2", "messages": PROMPT, "max_tokens": n, "temperature": 0,
                                   "stream": stream}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req) as resp:
                    raw = resp.read().decode("utf-8")
                if stream:
                    events = [json.loads(line[6:]) for line in raw.splitlines()
                              if line.startswith("data: ") and line != "data: [DONE]"]
                    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
                else:
                    text = json.loads(raw)["choices"][0]["message"]["content"]
                _check(text, full, n, f"server (stream={stream})")
    finally:
        server.should_exit = True
        t.join(15)
