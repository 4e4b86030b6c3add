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

import json
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..base import Model
from ..errors import FormatError, InvalidConfig

_NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "i8": np.int8,
          "bool": np.bool_}


class GraphIO(NamedTuple):
    """An input or output of the graph: its name, dtype ("f32", ...) and dims (ints, or the names
    of sizes known only at run time, such as "seq_len")."""

    name: str
    dtype: str
    shape: tuple

    @property
    def numpy_dtype(self) -> Any:
        return np.dtype(_NUMPY[self.dtype])


class GraphModel(Model):
    """A named-array graph: run(feeds) -> {name: array} (module docstring)."""

    kind = "graph"

    def _native_options(self, exec_path: str | None, fuse: bool) -> tuple[str | None, bool]:
        if exec_path not in (None, "", "graph"):
            raise InvalidConfig(field="exec_path", reason="a graph model has only the graph path")
        return None, fuse

    def _setup(self, **options: Any) -> None:
        section = self.file.sections.get("graph") or {}
        self.inputs: list[GraphIO] = [GraphIO(i["name"], i["dtype"], tuple(i["shape"]))
                                      for i in section.get("inputs", [])]
        self.outputs: list[GraphIO] = [GraphIO(o["name"], o["dtype"], tuple(o["shape"]))
                                       for o in section.get("outputs", [])]
        #: output -> input pairs a session feeds back (hn -> h)
        self.state: dict[str, str] = {s["output"]: s["input"] for s in section.get("state", [])}
        onnx = self.config.get("onnx") if isinstance(self.config.get("onnx"), dict) else {}
        #: what the graph is for (`[onnx] pipeline`: graph, tts, diffusion)
        self.pipeline: str = onnx.get("pipeline", "graph")
        #: the JSON config that sat next to the .onnx (`voice.onnx.json`), as a dict; None when none
        self.sidecar: dict | None = None
        if "sidecar" in self.file.sections:
            try:
                self.sidecar = json.loads(self.file.section_text("sidecar"))
            except ValueError as e:
                raise FormatError("sidecar", "", f"the sidecar section is not JSON ({e})") from None

    @property
    def fusion_report(self) -> str:
        """What the load-time fusion pass rewrote (counts per pattern, what was not fused and why;
        docs/graph.md "Fusion of version-2 graphs"); "fusion: disabled" with `fuse=False`."""
        return self._native.fusion_report()

    @property
    def fusions(self) -> list[tuple[str, str]]:
        """(pattern, fused node name) for every rewrite of the fusion pass."""
        return [tuple(e) for e in self._native.fusion_entries()]

    def get_inputs(self) -> list[GraphIO]:
        return list(self.inputs)

    def get_outputs(self) -> list[GraphIO]:
        return list(self.outputs)

    def run(self, output_names: Any = None, feeds: Mapping[str, Any] | None = None, *,
            seed: int | None = None) -> Any:
        """run(feeds) -> {name: array}; run(output_names, feeds) -> [array, ...] in that order
        (None: every output), as onnxruntime's InferenceSession.run. seed: the random ops' seed
        for this run (the k-th random node draws from seed_for_node(seed, k), docs/graph.md;
        None: the seeds the graph holds, the same numbers every run)."""
        if isinstance(output_names, Mapping) and feeds is None:
            return self._run(output_names, seed)
        if feeds is None or not isinstance(feeds, Mapping):
            raise InvalidConfig(field="feeds", reason="run(feeds) or run(output_names, feeds) with feeds a dict "
                                                      "{input name: array}")
        out = self._run(feeds, seed)
        names = [o.name for o in self.outputs] if output_names is None else list(output_names)
        missing = [n for n in names if n not in out]
        if missing:
            raise InvalidConfig(field="output_names", reason=f"{missing} are not outputs of the graph (its outputs: "
                                                             f"{', '.join(o.name for o in self.outputs)})")
        return [out[n] for n in names]

    def _run(self, feeds: Mapping[str, Any], seed: int | None = None) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InvalidConfig(field="feeds", reason="must be a dict {input name: array}")
        return self._native.run(dict(feeds), seed)

    @property
    def last_digest(self) -> str:
        """nox: the SHA-256 digest chain (hex) of the last run, version 2 of docs/graph.md "The digest
        chain" ('' on other backends, before the first run, or after a run that failed)."""
        return self._native.last_digest()

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
        full = dict(self.state)
        full.update(feeds)
        out = self.model._run(full)
        for o, i in self.model.state.items():
            self.state[i] = out[o]
        if output_names is None:
            return out
        return [out[n] for n in output_names]


__all__ = ["GraphModel", "GraphSession", "GraphIO"]
