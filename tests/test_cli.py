"""`cyb-llm` on the scripted fake model (the real-model run is in test_generate_real.py)."""
from __future__ import annotations

import io
import json

import pytest
from fake_model import FakeModel

from cyb_llm import cli


@pytest.fixture
def fake(monkeypatch):
    made = {}

    def load_model(arg, backend=None, precise=False, threads=None):
        m = FakeModel("Paris is the capital of France.", max_context=128)
        made.update(model=m, arg=arg, backend=backend, precise=precise, threads=threads)
        return m

    monkeypatch.setattr(cli, "load_model", load_model)
    return made


def test_run_streams_text_and_timings(fake, capsys):
    assert cli.main(["run", "What is the capital of France?", "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "Paris is the capital of France.\n"
    assert "tok/s" in err and "load" in err
    assert fake["arg"] is None  # no MODEL: the hub's default


def test_run_with_model_and_flags(fake, capsys):
    rc = cli.main(["run", "some.model", "q", "--backend", "cpu", "--threads", "2", "--precise",
                   "--temp", "0", "--max-tokens", "5", "-q"])
    assert rc == 0
    assert capsys.readouterr() == ("Paris\n", "")
    assert (fake["arg"], fake["backend"], fake["threads"], fake["precise"]) == ("some.model", "cpu", 2, True)


def test_run_chat_template_vs_no_chat(fake, capsys):
    cli.main(["run", "hello", "--temp", "0", "-q", "--max-tokens", "3"])
    m = fake["model"]
    first = [c for c in m.calls if c[0] == "forward"][0][1]
    assert first == m.tokenizer.encode(m.chat.render([{"role": "user", "content": "hello"}]), add_special_tokens=False)
    cli.main(["run", "hello", "--temp", "0", "-q", "--max-tokens", "3", "--no-chat"])
    m = fake["model"]
    first = [c for c in m.calls if c[0] == "forward"][0][1]
    assert first == m.tokenizer.encode("hello")


def test_run_json(fake, capsys):
    assert cli.main(["run", "q", "--temp", "0", "--json", "--stop", "capital", "--profile"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["text"] == "Paris is the " and doc["finish_reason"] == "stop"
    t = doc["timings"]
    assert t["load_ms"] == 1.5 and t["prefill_ms"] > 0 and t["tokens_per_s"] > 0 and "step_ms" in t
    assert doc["dispatch_records"][0]["backend"] == "cpu"


def test_run_seed_reproducible(fake, capsys):
    outs = []
    for seed in ("5", "5", "6"):
        cli.main(["run", "q", "--temp", "3", "--seed", seed, "-q", "--max-tokens", "30"])
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] != outs[2]


def test_user_errors_are_one_line_and_exit_1(fake, capsys):
    assert cli.main(["run", "q", "--max-tokens", "-3"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: InvalidConfig:") and "max_tokens" in err and "Traceback" not in err
    assert err.count("\n") == 1
    assert cli.main(["run", "q", "--top-p", "7"]) == 1
    assert "InvalidConfig" in capsys.readouterr().err
    assert cli.main(["run", "x" * 500]) == 1  # longer than the context
    assert "context" in capsys.readouterr().err


def test_missing_file_is_a_clean_error(monkeypatch, capsys):
    def load_model(arg, **kw):
        open("/nonexistent/x.model", "rb")

    monkeypatch.setattr(cli, "load_model", load_model)
    assert cli.main(["run", "/nonexistent/x.model", "q"]) == 1
    assert capsys.readouterr().err.startswith("error: FileNotFoundError:")


def test_chat_keeps_the_cache_between_turns(fake, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Capital of France?\n\nAnd again?\n/reset\nHi\n"))
    assert cli.main(["chat", "--temp", "0", "--max-tokens", "5"]) == 0
    out, err = capsys.readouterr()
    assert out == "Paris\nParis\nParis\n"
    m = fake["model"]
    fwd = [c[1] for c in m.calls if c[0] in ("forward",)]
    prefills = [f for f in fwd if len(f) > 1]
    # turn 2 forwards only its own new tokens, not the whole history again
    turn2 = m.tokenizer.encode(m.chat.render([
        {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And again?"}]), add_special_tokens=False)
    assert len(prefills[1]) < len(turn2) and turn2[-len(prefills[1]):] == prefills[1]
    # /reset starts over: the third prefill is a fresh conversation with one user message
    assert prefills[2] == m.tokenizer.encode(m.chat.render([{"role": "user", "content": "Hi"}]),
                                             add_special_tokens=False)
    assert "cleared" in err


def test_chat_exit_command_and_overflow_recovers(fake, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("x" * 300 + "\nhello\n/exit\nnot read\n"))
    assert cli.main(["chat", "--temp", "0", "--max-tokens", "3", "-q"]) == 0
    out, err = capsys.readouterr()
    assert "error: InvalidConfig" in err and out == "Par\n"


def test_inspect_import_fetch_delegate(monkeypatch, capsys):
    import sys
    import types

    calls = []
    fmt = types.ModuleType("cyb_llm.format")
    fmt.describe = lambda p: calls.append(("describe", p)) or f"described {p}"
    conv = types.ModuleType("cyb_llm.convert")
    conv.import_model = lambda src, out, quantize=None, progress=False, graph=False: calls.append(
        ("import", src, out, quantize, progress, graph))
    hub = types.ModuleType("cyb_llm.hub")
    hub.fetch = lambda name: calls.append(("fetch", name)) or f"/cache/{name}.model"
    hub.resolve_source = lambda ref: ref  # a path as is (known names: tests/test_model_refs.py)
    monkeypatch.setitem(sys.modules, "cyb_llm.format", fmt)
    monkeypatch.setitem(sys.modules, "cyb_llm.convert", conv)
    monkeypatch.setitem(sys.modules, "cyb_llm.hub", hub)
    import cyb_llm

    for name, mod in (("format", fmt), ("convert", conv), ("hub", hub)):
        monkeypatch.setattr(cyb_llm, name, mod, raising=False)
    assert cli.main(["inspect", "a.model"]) == 0
    assert cli.main(["import", "a.gguf", "-o", "b.model", "--quantize", "q8_0", "--graph"]) == 0
    assert cli.main(["fetch", "smollm2"]) == 0
    out = capsys.readouterr().out
    assert "described a.model" in out and "/cache/smollm2.model" in out
    assert calls == [("describe", "a.model"), ("import", "a.gguf", "b.model", "q8_0", True, True),
                     ("fetch", "smollm2")]


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["run"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "a", "b", "c"])
    assert e.value.code == 2
