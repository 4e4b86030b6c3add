"""The pipeline registry: one row per kind of model, the one place that ties a model type to the
Python class that runs it, the `cyb-llm` commands that take it and the server endpoints it answers.

    kind      class (imported on first use)        commands                       endpoints
    text      cyb_llm.text.model:TextModel         run, chat, serve, bench        chat/completions, completions
    encoder   cyb_llm.encode.model:Encoder         embed, serve                   embeddings, rerank
    speech    cyb_llm.speech.model:WhisperModel    transcribe, serve              audio/transcriptions, translations
    graph     cyb_llm.graph.model:GraphModel       run-graph                      -
    tts       cyb_llm.tts.model:TtsModel           speak, serve                   audio/speech
    diffusion cyb_llm.diffusion.model:DiffusionModel imagine, serve               images/generations

Which kind a model type is decides the native core (`_core.pipeline_of`: the families it was
built with); `kind_of` asks it. A graph's config may name the pipeline it is for (`[onnx] pipeline`,
written by `cyb-llm import x.onnx --pipeline tts`): `kind_of_config` reads it, and a pipeline
without a row here is an InvalidConfig naming it (a stages file says its pipeline in `[stages] pipeline`). `cyb_llm.load`, `cyb_llm.Model(path)`, the CLI and the server
route through this module, once. A new pipeline (TTS, diffusion) is a native family, one row of
PIPELINES and a Python module holding its class (a subclass of cyb_llm.base.Model); nothing else.

A leaf module: it names the classes by import path and imports them through importlib when first
asked, never at module level (tools/check_py_imports.py).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from . import _core
from .errors import InvalidConfig


@dataclass(frozen=True)
class Pipeline:
    """One row of the registry."""

    kind: str                    # what _core.pipeline_of answers for the model types it runs
    model_class: str             # "module:Class" of the Python class (a cyb_llm.base.Model)
    what: str                    # the models in words ("decoder models"), for messages
    verbs: tuple[str, ...]       # the cyb-llm commands that take such a model
    endpoints: tuple[str, ...]   # the server endpoints that answer for it
    engine: str                  # "module:Class" of the server's scheduler for it (cyb_llm.serve.engine)

    def load_class(self) -> Any:
        """The Python class (its module imported on first use)."""
        return _resolve(self.model_class)

    def load_engine(self) -> Any:
        return _resolve(self.engine)


PIPELINES: tuple[Pipeline, ...] = (
    Pipeline("text", "cyb_llm.text.model:TextModel", "decoder models",
             ("run", "chat", "serve", "bench"),
             ("/v1/chat/completions", "/v1/completions"),
             "cyb_llm.serve.engine:TextEngine"),
    Pipeline("encoder", "cyb_llm.encode.model:Encoder", "encoder models",
             ("embed", "serve"),
             ("/v1/embeddings", "/v1/rerank"),
             "cyb_llm.serve.engine:EncoderEngine"),
    Pipeline("speech", "cyb_llm.speech.model:WhisperModel", "speech recognition models (whisper)",
             ("transcribe", "serve"),
             ("/v1/audio/transcriptions", "/v1/audio/translations"),
             "cyb_llm.serve.engine:AudioEngine"),
    Pipeline("graph", "cyb_llm.graph.model:GraphModel", "named-array graphs (imported from ONNX)",
             ("run-graph",), (), ""),
    Pipeline("tts", "cyb_llm.tts.model:TtsModel", "text-to-speech models (Piper voices, vocoders)",
             ("speak", "serve"), ("/v1/audio/speech",), "cyb_llm.serve.engine:SpeechEngine"),
    Pipeline("diffusion", "cyb_llm.diffusion.model:DiffusionModel", "diffusion models (Stable Diffusion stages)",
             ("imagine", "serve"), ("/v1/images/generations",), "cyb_llm.serve.engine:ImageEngine"),
)

_BY_KIND = {p.kind: p for p in PIPELINES}
#: kinds whose models are imported graphs (the native "graph" family), told apart by `[onnx] pipeline`
#: or the sidecar; GraphModel loads any of them as a plain graph.
GRAPH_KINDS = ("graph", "tts", "diffusion")
#: the model type of a file holding several named graphs, the stages of one pipeline (a text
#: encoder, a UNet, a VAE decoder), each in its section `graph_<stage>`; its `[stages] pipeline`
#: says which (docs/graph.md "Stages"; csrc/model/array_graph_model.h)
STAGES_MODEL_TYPE = "graph-stages"
_CLASSES: dict[str, Any] = {}

# TODO(issue 43): remove this table and the fallback in kind_of once every built _core has
# pipeline_of (the native families decide; this copy of their lists is only for cores built
# before it). The families: csrc/families/encoder.cc kEncoderTypes, csrc/families/whisper.cc.
_FALLBACK_KINDS = {"bert": "encoder", "roberta": "encoder", "xlm-roberta": "encoder", "distilbert": "encoder",
                   "modernbert": "encoder", "whisper": "speech"}


def _resolve(spec: str) -> Any:
    obj = _CLASSES.get(spec)
    if obj is None:
        module, _, name = spec.partition(":")
        obj = _CLASSES[spec] = getattr(importlib.import_module(module), name)
    return obj


def kind_of(model_type: Any) -> str:
    """The pipeline kind of a model type ("text", "encoder" or "speech"), as the native core
    decides it (`_core.pipeline_of`); a type no native family claims is "text" (the graph path)."""
    if not isinstance(model_type, str):
        raise InvalidConfig(field="model_type", reason="required key is missing" if model_type is None
                            else f"must be a string, got {model_type!r}")
    native = getattr(_core, "pipeline_of", None)
    if native is not None:
        return native(model_type)
    return _FALLBACK_KINDS.get(model_type, "text")  # TODO(issue 43): the fallback above


def kind_of_config(config: Any) -> str:
    """The pipeline kind of a model from its config: its model type's (`kind_of`), and for a graph
    the pipeline its importer recorded (`[onnx] pipeline = "tts"`: `cyb-llm import x.onnx -o y.model
    --pipeline tts`; absent or "graph": the graph row). A recorded pipeline this package has no row
    for is an InvalidConfig naming it (not available yet)."""
    config = config if isinstance(config, dict) else {}
    kind = kind_of(config.get("model_type"))
    if kind != "graph":
        return kind
    # a graph-stages file records its pipeline in [stages], an imported ONNX graph in [onnx]
    table = "stages" if config.get("model_type") == STAGES_MODEL_TYPE else "onnx"
    rec = config.get(table)
    want = rec.get("pipeline", "graph") if isinstance(rec, dict) else "graph"
    if want == "graph":
        return kind
    if not isinstance(want, str):
        raise InvalidConfig(field=f"{table}.pipeline", reason=f"must be a string, got {want!r}")
    if want not in _BY_KIND:
        raise InvalidConfig(field=f"{table}.pipeline", reason=(
            f"the graph was imported for the {want!r} pipeline, which is not available yet in this version "
            f"(pipelines: {', '.join(_BY_KIND)}); re-import it with --pipeline graph to run it as a plain graph"))
    return want


def kind_of_file(mf: Any) -> str:
    """The pipeline kind of an opened ModelFile: kind_of_config, and a graph imported as a plain
    graph whose sidecar is a Piper voice config (`voice.onnx.json`: phoneme_id_map, num_symbols,
    audio) is a tts model."""
    kind = kind_of_config(mf.config)
    if kind != "graph" or "sidecar" not in mf.sections:
        return kind
    import json

    try:
        side = json.loads(mf.section_text("sidecar"))
    except ValueError:
        return kind  # GraphModel's load says what is wrong with it
    if isinstance(side, dict) and "phoneme_id_map" in side and "num_symbols" in side \
            and isinstance(side.get("audio"), dict):
        return "tts"
    return kind


def loads(cls_kind: str, file_kind: str) -> bool:
    """Whether the class of `cls_kind` loads a file of `file_kind`: its own, and GraphModel any
    imported graph (a Piper voice as a plain graph)."""
    return cls_kind == file_kind or (cls_kind == "graph" and file_kind in GRAPH_KINDS)


def get(kind: str) -> Pipeline:
    """The row of `kind`; InvalidConfig for a kind this package has no row for."""
    row = _BY_KIND.get(kind)
    if row is None:
        raise InvalidConfig(field="pipeline", reason=f"the native core names the pipeline {kind!r}, which this "
                                                     f"Python package has no class for (known: {', '.join(_BY_KIND)})")
    return row


def for_model_type(model_type: Any) -> Pipeline:
    return get(kind_of(model_type))


def model_class(model_type: Any) -> Any:
    """The Python class that runs a model of `model_type`."""
    return for_model_type(model_type).load_class()


def of(model: Any) -> Pipeline:
    """The row of a loaded model (its class's `kind`). A stand-in object without one counts as a
    text model, as the server has always taken it."""
    kind = getattr(type(model), "kind", None)
    return get(kind if isinstance(kind, str) and kind else "text")


def check_verb(model: Any, verb: str, ref: Any = None) -> None:
    """InvalidConfig(field="model") unless the `cyb-llm <verb>` command takes this model."""
    row = of(model)
    if verb in row.verbs:
        return
    takers = [p for p in PIPELINES if verb in p.verbs]
    config = getattr(model, "config", None) or {}
    name = ref if ref is not None else getattr(model, "name", "?")
    raise InvalidConfig(field="model", reason=(
        f"{name!r} is {_article(row.kind)} {row.kind} model ({config.get('model_type', '?')}): `cyb-llm {verb}` "
        f"takes {' or '.join(p.what for p in takers)}; {row.kind} models go to cyb-llm {', '.join(row.verbs)}"))


def serves(model: Any, endpoint: str) -> bool:
    """Whether the server answers `endpoint` for this model."""
    return endpoint in of(model).endpoints


def wrong_pipeline(model: Any, name: str) -> AttributeError:
    """The AttributeError of `model.<name>` that the model's class lacks: when another pipeline's
    class has it, the message names that class and the model's kind."""
    own = type(model).__name__
    here = of(model)
    for row in PIPELINES:
        if row.kind == here.kind:
            continue
        try:
            cls = row.load_class()
        except ImportError:
            continue
        if hasattr(cls, name):
            what = "method" if callable(getattr(cls, name, None)) else "attribute"
            d = getattr(model, "__dict__", {})
            config = d.get("config") or {}
            return AttributeError(
                f"{own!r} object has no attribute {name!r}: that is {_article(cls.__name__)} {cls.__name__} {what} "
                f"({row.what}); this "
                f"model is {_article(here.kind)} {here.kind} model ({d.get('name', '?')}, model_type "
                f"{config.get('model_type', '?')!r})")
    return AttributeError(f"{own!r} object has no attribute {name!r}")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


__all__ = ["Pipeline", "PIPELINES", "GRAPH_KINDS", "kind_of", "kind_of_config", "kind_of_file", "loads", "get", "for_model_type", "model_class", "of", "check_verb",
           "serves", "wrong_pipeline"]
