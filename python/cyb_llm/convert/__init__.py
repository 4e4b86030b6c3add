"""Importers: other model formats -> a `.model` file (docs/import.md).

    import_model("SmolLM2.gguf", "smollm2.model")
    import_model("path/to/hf_folder", "tiny.model", quantize="q8_0")
"""
from __future__ import annotations

import json
import os

from .. import _core
from ..errors import FormatError, InvalidConfig
from ..toml_writer import dumps as toml_dumps
from ..writer import write_model
from .common import Progress, make_error, write_atomically
from .ct2 import CT2Source
from .gguf import GGUFSource
from .hf import HFSource

__all__ = ["import_model", "detect_source", "emit_graph"]


def emit_graph(config: dict, tensor_names) -> str:
    """The unfused graph section (TOML text, docs/graph.md) of a curated decoder
    family, built natively from the same family description the curated path runs."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise make_error(InvalidConfig, "config has no model_type to emit a graph for", field="model_type", reason="missing")
    return _core.emit_decoder_graph(model_type, toml_dumps(config, "config"), list(tensor_names))


def detect_source(src: str) -> str:
    """'gguf', 'hf', 'speecht5' (an HF folder of SpeechT5ForTextToSpeech: convert/speecht5.py), 'ct2'
    (a CTranslate2 Whisper folder), 'diffusers' (a pipeline folder with model_index.json) or 'onnx'
    (a .onnx file) for an importable source, else a FormatError."""
    src = os.fspath(src)
    if os.path.isfile(src) and src.lower().endswith(".onnx"):
        return "onnx"
    if os.path.isfile(src):
        with open(src, "rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return "gguf"
        raise make_error(FormatError, f"{src}: not a GGUF file (magic {magic!r}) and not an HF folder", section="source", key="magic")
    if os.path.isdir(src):
        if os.path.isfile(os.path.join(src, "model_index.json")):
            return "diffusers"
        has_cfg = os.path.isfile(os.path.join(src, "config.json"))
        has_st = any(n.endswith(".safetensors") for n in os.listdir(src))
        if has_cfg and has_st:
            from .speecht5 import is_speecht5_config

            try:
                with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
                    cfg = json.load(f)
            except (OSError, ValueError):
                cfg = None  # HFSource says what is wrong with it
            return "speecht5" if is_speecht5_config(cfg) else "hf"
        if os.path.isfile(os.path.join(src, "model.bin")):
            return "ct2"
        raise make_error(
            FormatError, f"{src}: an HF folder needs config.json and *.safetensors (found config.json: {has_cfg}, "
            f"safetensors: {has_st}); a CTranslate2 folder needs model.bin",
            section="source", key="config.json" if not has_cfg else "safetensors",
        )
    raise make_error(FormatError, f"{src}: no such file or folder", section="source", key="path")


def import_model(src, out, *, quantize: str | None = None, progress: bool = True, graph: bool = False,
                 pipeline: str | None = None, vocoder: str | None = None) -> None:
    """Convert `src` (a .gguf file, an HF folder with config.json + *.safetensors, a CTranslate2
    Whisper folder with model.bin, a diffusers pipeline folder with model_index.json, or a .onnx file: docs/import.md, "ONNX") into the
    `.model` file `out`. Nothing is written when the import fails. `pipeline` (ONNX only: graph,
    tts, diffusion) records what the graph is for. `vocoder` (SpeechT5 only): a vocoder .onnx added
    as the file's `vocoder` stage (docs/tts.md "Two-stage models")."""
    kind = detect_source(src)
    if vocoder is not None and kind != "speecht5":
        raise make_error(InvalidConfig, f"--vocoder applies to a two-stage TTS folder (SpeechT5); {src} is a {kind} "
                         "source", field="vocoder", reason=f"not a SpeechT5 folder ({kind})")
    if kind == "speecht5":
        if quantize or graph or pipeline not in (None, "tts"):
            raise make_error(InvalidConfig, "a SpeechT5 folder is imported as it is (f32 stages, pipeline tts): no "
                             "--quantize, --graph or --pipeline", field="quantize" if quantize else "pipeline",
                             reason="not for SpeechT5")
        from .speecht5 import import_speecht5

        import_speecht5(src, out, vocoder=vocoder, progress=progress)
        return
    if kind == "onnx":  # a graph of named arrays (graph section version 2): convert/onnx_graph.py
        from .onnx_graph import import_onnx
        import_onnx(src, out, progress=progress, quantize=quantize, pipeline=pipeline or "graph")
        return
    if kind == "diffusers":  # the stages of a diffusion model (docs/diffusion.md): convert/diffusers.py
        from .diffusers import import_diffusers

        if graph:
            raise make_error(InvalidConfig, "--graph emits the graph of a curated decoder family; a diffusers folder's "
                             "stages are graphs already", field="graph", reason="not for diffusers folders")
        if pipeline not in (None, "diffusion"):
            raise make_error(InvalidConfig, f"--pipeline {pipeline}: a diffusers folder imports as the diffusion "
                             "pipeline's stages", field="pipeline", reason="not for diffusers folders")
        import_diffusers(src, out, quantize=quantize, progress=progress)
        return
    if pipeline is not None:
        raise make_error(InvalidConfig, f"--pipeline applies to ONNX graphs; {kind} sources have their model type's "
                         "pipeline", field="pipeline", reason=f"not an ONNX source ({kind})")
    if kind == "gguf":
        if quantize:
            raise make_error(
                InvalidConfig, "--quantize applies to HF float checkpoints; GGUF blocks are copied as they are",
                field="quantize", reason="gguf sources are never requantized",
            )
        s = GGUFSource(os.fspath(src))
        name, config, vocab, tok_json, chat, card = s.name, s.config, s.tok.vocab, s.tok.tokenizer_json, s.chat(), s.card()
        records = s.tensor_records
        total = sum(int(t.n_bytes) for _, t in s.plan)
    elif kind == "ct2":
        s = CT2Source(os.fspath(src), quantize=quantize)
        name, config, vocab, tok_json, chat, card = s.name, s.config, s.vocab, s.tokenizer_json, s.chat(), s.card()
        records = s.tensor_records
        total = s.total_bytes
    else:
        s = HFSource(os.fspath(src), quantize=quantize)
        name, config, vocab, tok_json, chat, card = s.name, s.config, s.vocab, s.tokenizer_json, s.chat(), s.card()
        records = s.tensor_records
        total = s.total_bytes

    graph_text = None
    if graph:
        graph_text = emit_graph(config, [r.name for r in records()])

    def write(tmp: str) -> None:
        bar = Progress(total, progress, f"import {os.path.basename(os.fspath(out))}")
        done = False
        try:
            write_model(
                tmp, name=name, config=config,
                tensors=[(r.name, r.encoding, r.shape, r.data) for r in records()],
                vocab=vocab, tokenizer_json=tok_json, chat=chat, card=card, graph=graph_text, progress=bar,
            )
            done = True
        finally:
            bar.close(done)

    write_atomically(out, write)
