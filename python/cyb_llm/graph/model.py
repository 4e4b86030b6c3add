"""GraphModel: a `.model` whose graph section is version 2 (docs/graph.md), usually written by
`cyb-llm import model.onnx -o x.model`. Shaped like onnxruntime's InferenceSession:

    m = cyb_llm.load("vad.model")             # a GraphModel (kind "graph")
    m.inputs, m.outputs                       # [GraphIO(name, dtype, shape)], dims are sizes or names
    out = m.run({"input": x, "h": h, "c": c}) # {"speech_probs": ..., "hn": ..., "cn": ...}
    probs, = m.run(["speech_probs"], feeds)   # onnxruntime's argument order: a list
    s = m.session()                           # carries the graph's state pairs (hn -> h, cn -> c)
    s.run({"input": x})                       # state inputs from the last call (zeros at first)
    m.sidecar                                 # the `x.onnx.json` kept at import (a dict), or None
    m.pipeline                                # what the graph is for: "graph" (or tts, diffusion)

Every node runs natively (csrc/model/array_graph_model.cc) through the dispatcher, on the cpu
(nox where it has the kernels); the arrays are numpy.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..named_arrays import GraphIO, NamedArrayModel


class GraphModel(NamedArrayModel):
    """A named-array graph: run(feeds) -> {name: array} (module docstring; the core is
    cyb_llm.named_arrays.NamedArrayModel's)."""

    kind = "graph"

    def session(self) -> "GraphSession":
        """A session over this model that carries the state pairs between calls."""
        return GraphSession(self)


class GraphSession:
    """Runs a GraphModel call after call, feeding each state output into its input on the next
    call (zeros before the first, or `reset(**arrays)`)."""

    def __init__(self, model: GraphModel):
        self.model = model
        self.state: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self, **arrays: Any) -> None:
        """Back to zero state (the inputs of `arrays` given instead)."""
        self.state = {}
        for out, inp in self.model.state.items():
            spec = next(i for i in self.model.inputs if i.name == inp)
            if inp in arrays:
                self.state[inp] = np.asarray(arrays[inp], dtype=spec.numpy_dtype)
            elif all(isinstance(d, int) for d in spec.shape):
                self.state[inp] = np.zeros(spec.shape, dtype=spec.numpy_dtype)

    def run(self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None) -> Any:
        out = self.model._run({**self.state, **feeds})
        for o, i in self.model.state.items():
            self.state[i] = out[o]
        if output_names is None:
            return out
        return [out[n] for n in output_names]


__all__ = ["GraphModel", "GraphSession", "GraphIO"]
