"""The graph pipeline (cyb_llm.pipelines kind "graph"): models imported from ONNX, run as
onnxruntime runs them (named arrays in, named arrays out).

    model.py    GraphModel: run(feeds) / run(output_names, feeds), inputs, outputs, state pairs,
                and GraphSession (carries the state outputs into the next call's inputs)
"""
from __future__ import annotations

from .model import GraphIO, GraphModel, GraphSession

__all__ = ["GraphModel", "GraphSession", "GraphIO"]
