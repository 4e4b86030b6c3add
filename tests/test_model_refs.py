"""One set of model references for every entry point (issue 42, item 2): a known name, a `.model`
path, a `.gguf` file, an HF folder (and hf://, tests/test_hub_pull.py) are read by
cyb_llm.hub.resolve alone, so every `cyb-llm` subcommand that takes a model and the Python entry
points (cyb_llm.load, ModelFile, describe) take the same ones."""
from __future__ import annotations

import io
import os

import pytest

import cyb_llm
from cyb_llm import cli, hub


@pytest.fixture(scope="module")
def cached(real_model):
    """The default model and the encoder in the cache (as `cyb-llm list` would show them)."""
    return {"smollm2": real_model("smollm2"), "minilm": real_model("minilm")}


def test_list_names_what_the_commands_take(cached, capsys):
    assert cli.main(["list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert "smollm2" in names and "minilm" in names


def test_inspect_takes_a_known_name(cached, capsys):
    assert cli.main(["inspect", "smollm2"]) == 0
    out = capsys.readouterr().out
    assert "model_type:  llama" in out and cached["smollm2"] in out


def test_run_takes_a_known_name(cached, capsys):
    assert cli.main(["run", "smollm2", "Hi", "--max-tokens", "2", "--temp", "0", "-q"]) == 0
    assert capsys.readouterr().out.strip()


def test_chat_takes_a_known_name(cached, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi\n"))
    assert cli.main(["chat", "smollm2", "--max-tokens", "2", "--temp", "0", "-q"]) == 0
    assert capsys.readouterr().out.strip()


def test_embed_takes_a_known_name(cached, capsys):
    assert cli.main(["embed", "minilm", "A man is eating food."]) == 0
    assert "384 dims" in capsys.readouterr().out


def test_transcribe_takes_a_known_name(cached, capsys, tmp_path):
    # the name resolves and the model loads; smollm2 is no whisper model, which is the error (the
    # pipeline registry: cyb_llm.pipelines)
    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"")
    assert cli.main(["transcribe", "smollm2", str(clip)]) == 1
    assert "'smollm2' is a text model (llama): `cyb-llm transcribe` takes speech recognition models" \
        in capsys.readouterr().err


def test_serve_takes_a_known_name(cached):
    pytest.importorskip("fastapi")
    a = cli.build_parser().parse_args(["serve", "smollm2"])
    app, ids = cli.serve_app(a)
    assert ids == ["smollm2"] and app is not None


def test_fetch_and_pull_take_a_known_name(cached, capsys):
    assert cli.main(["fetch", "smollm2"]) == 0
    assert cli.main(["pull", "smollm2"]) == 0
    assert cli.main(["fetch", "smollm2", "--source"]) == 0
    out = capsys.readouterr().out.split()
    assert out[:2] == [cached["smollm2"]] * 2 and out[2] == hub.fetch_source("smollm2", progress=False)


def test_import_takes_a_known_name(cached, capsys, tmp_path):
    out = tmp_path / "m.model"
    assert cli.main(["import", "smollm2", "-o", str(out)]) == 0
    assert cyb_llm.ModelFile(out).config["model_type"] == "llama"


@pytest.mark.parametrize("kind", ["name", "model", "gguf", "hf-folder"])
def test_python_entry_points_take_every_reference(cached, kind):
    ref = {"name": "minilm", "model": cached["minilm"],
           "gguf": hub.fetch_source("smollm2", progress=False),
           "hf-folder": hub.fetch_source("minilm", progress=False)}[kind]
    mf = cyb_llm.ModelFile(ref)
    assert mf.config["model_type"] in ("bert", "llama") and os.path.isfile(mf.path)
    assert "model_type:" in cyb_llm.describe(ref)
    m = cyb_llm.load(ref)
    assert m.config["model_type"] == mf.config["model_type"]


def test_an_unknown_reference_is_one_clean_error(cached, capsys, tmp_path):
    assert cli.main(["inspect", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no-such-model" in err and len(err.splitlines()) == 1
    missing = tmp_path / "nope.model"
    with pytest.raises(cyb_llm.FormatError, match="nope.model"):
        cyb_llm.ModelFile(missing)
