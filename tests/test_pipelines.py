"""The Python side of the pipeline registry (python/cyb_llm/pipelines.py) and the typed models:
cyb_llm.load and cyb_llm.Model(path) give the class of the model's pipeline (TextModel, Encoder,
WhisperModel), all of them cyb_llm.Model; a method of another pipeline is an AttributeError that
says whose it is; the CLI commands and the routing follow the registry's rows."""
from __future__ import annotations

import pytest

import cyb_llm
from cyb_llm import _core, pipelines
from cyb_llm.errors import InvalidConfig

CLASSES = {"smollm2": cyb_llm.TextModel, "minilm": cyb_llm.Encoder, "whisper-tiny": cyb_llm.WhisperModel}
KINDS = {"smollm2": "text", "minilm": "encoder", "whisper-tiny": "speech"}


@pytest.fixture(scope="module")
def models(real_model):
    return {name: cyb_llm.load(real_model(name)) for name in CLASSES}


def test_load_gives_the_pipeline_class(models, real_model):
    for name, m in models.items():
        assert type(m) is CLASSES[name] and isinstance(m, cyb_llm.Model) and m.kind == KINDS[name]
        assert pipelines.of(m).load_class() is CLASSES[name]
        routed = cyb_llm.Model(real_model(name), backend="cpu")  # the base class routes too
        assert type(routed) is CLASSES[name]
        assert type(CLASSES[name](real_model(name))) is CLASSES[name]
        info = m.info
        assert info["kind"] == KINDS[name] and info["path"] == m.path and info["backend"] == m.backend == "cpu"
        assert info["model_type"] == m.config["model_type"] and info["load_ms"] > 0
        mem = m.memory
        assert mem["weights"] > 0 and mem["charged"] >= mem["weights"]
        assert isinstance(m.dispatch_records, list)
    assert models["minilm"].is_encoder and models["whisper-tiny"].is_whisper and not models["smollm2"].is_encoder


def test_a_pipeline_class_refuses_another_kind(real_model):
    with pytest.raises(InvalidConfig, match="'whisper' is speech recognition models .*TextModel does not load it"):
        cyb_llm.TextModel(real_model("whisper-tiny"))
    with pytest.raises(InvalidConfig, match="'llama' is decoder models, not encoder models"):
        cyb_llm.Encoder(real_model("smollm2"))
    with pytest.raises(InvalidConfig, match="whisper models run only the curated path"):
        cyb_llm.load(real_model("whisper-tiny"), exec_path="graph")


def test_another_pipelines_method_is_an_attribute_error(models):
    enc, text, speech = models["minilm"], models["smollm2"], models["whisper-tiny"]
    with pytest.raises(AttributeError) as e:
        enc.create_chat_completion([{"role": "user", "content": "hi"}])
    assert str(e.value) == ("'Encoder' object has no attribute 'create_chat_completion': that is a TextModel "
                            "method (decoder models); this model is an encoder model (minilm, model_type 'bert')")
    with pytest.raises(AttributeError, match="'transcribe': that is a WhisperModel method .* a text model"):
        text.transcribe("x.wav")
    with pytest.raises(AttributeError, match="'embed': that is an Encoder method .* a speech model"):
        speech.embed("x")
    with pytest.raises(AttributeError, match="'chat': that is a TextModel attribute"):
        enc.chat
    assert not hasattr(enc, "generator") and not hasattr(text, "rerank") and hasattr(text, "generator")
    with pytest.raises(AttributeError, match=r"^'TextModel' object has no attribute 'no_such_method'$"):
        text.no_such_method
    assert getattr(enc, "chat", None) is None  # what callers that probe for a chat template rely on
    # the names every model has
    for m in models.values():
        assert m.tokenize("hello", add_bos=False) and m.detokenize(m.tokenize("hello", add_bos=False)) == b"hello"


def test_close_and_the_context_manager(real_model):
    with cyb_llm.load(real_model("minilm")) as m:
        assert m.embed("a cat").shape == (384,) and not m.closed
    assert m.closed and "closed" in repr(m)
    with pytest.raises(InvalidConfig, match="'minilm' is closed"):
        m.embed("a cat")
    m.close()  # twice is fine
    w = cyb_llm.load(real_model("whisper-tiny"))
    w.close()
    assert "closed" in repr(w)
    with pytest.raises(InvalidConfig, match="closed"):
        w.new_session()


def test_the_registry_and_the_native_core_agree():
    kinds = [p.kind for p in pipelines.PIPELINES]
    assert kinds == ["text", "encoder", "speech", "graph", "tts", "diffusion"]
    if hasattr(_core, "pipelines"):  # the native registry: every native kind has its Python row; the
        # kinds beyond it are graphs told apart by what they were imported for (pipelines.GRAPH_KINDS)
        assert {k for k, _ in _core.pipelines()} == set(kinds) - set(pipelines.GRAPH_KINDS[1:])
    if hasattr(_core, "pipeline_of"):
        for t, kind in pipelines._FALLBACK_KINDS.items():  # the fallback (cores without pipeline_of) agrees
            assert _core.pipeline_of(t) == kind, t
    for t, kind in (("llama", "text"), ("no-such-type", "text"), ("bert", "encoder"), ("whisper", "speech"),
                    ("onnx-graph", "graph")):
        assert pipelines.kind_of(t) == kind
    with pytest.raises(InvalidConfig, match="model_type"):
        pipelines.kind_of(None)
    with pytest.raises(InvalidConfig, match="no class for"):
        pipelines.get("video")


def test_kind_of_without_the_native_decision(monkeypatch):
    monkeypatch.delattr(_core, "pipeline_of", raising=False)
    assert [pipelines.kind_of(t) for t in ("qwen2", "xlm-roberta", "whisper")] == ["text", "encoder", "speech"]


def test_cli_commands_follow_the_rows(models):
    for name, m in models.items():
        row = pipelines.of(m)
        for verb in ("run", "chat", "embed", "transcribe", "serve", "bench"):
            if verb in row.verbs:
                pipelines.check_verb(m, verb)
            else:
                with pytest.raises(InvalidConfig, match=f"is an? {row.kind} model .*`cyb-llm {verb}` takes"):
                    pipelines.check_verb(m, verb, name)
    assert pipelines.serves(models["minilm"], "/v1/embeddings")
    assert not pipelines.serves(models["minilm"], "/v1/chat/completions")
    assert pipelines.of(object()).kind == "text"  # a stand-in without a kind: a text model, as the server took it
