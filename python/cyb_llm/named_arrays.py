"""The named-array core shared by the pipelines whose models are imported graphs (docs/graph.md):
cyb_llm.graph.GraphModel (kind "graph") and cyb_llm.tts.TtsModel (kind "tts") both subclass
NamedArrayModel. A leaf module (tools/check_py_imports.py): a pipeline package may import it,
where it may not import another pipeline's package."""
from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple

import numpy as np

from .base import Model
from .errors import FormatError, InvalidConfig

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


class NamedArrayModel(Model):
    """The named-array core of a graph model (cyb_llm.graph.GraphModel, cyb_llm.tts.TtsModel):
    its inputs, outputs, state pairs, sidecar, run(feeds) -> {name: array}. Not a pipeline itself."""

    kind = ""

    def _native_options(self, exec_path: str | None, fuse: bool) -> tuple[str | None, bool]:
        if exec_path not in (None, "", "graph"):
            raise InvalidConfig(field="exec_path", reason="a graph model has only the graph path")
        return None, fuse

    def _setup(self, **options: Any) -> None:
        #: the stage of a "graph-stages" file this object runs ("" for a file of one graph)
        self.stage: str = options.get("stage") or self._native_stage(self.file)
        section = self.file.sections.get(f"graph_{self.stage}" if self.stage else "graph") or {}
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
        if type(feeds) is not dict:  # a plain dict goes as it is (the native run only reads it)
            if not isinstance(feeds, Mapping):
                raise InvalidConfig(field="feeds", reason="must be a dict {input name: array}")
            feeds = dict(feeds)
        return self._native.run(feeds, seed)

    def memory_plan(self, **dims: int) -> dict:
        """The memory plan of a run whose inputs have these dims (every named dim of the inputs, e.g.
        `memory_plan(seq_len=512)`), computed before running (docs/graph.md "Shapes and the memory
        plan"): {"peak_bytes" (the arena every value of known size lives in), "complete" (False when
        some sizes depend on the data: then peak_bytes is a lower bound and "unknown" names those
        values), "sum_bytes" (each value in its own buffer), "live_max_bytes", "reused", "dims",
        "values": [{name, node, dtype, shape, bytes, offset, first, last, view_of}]}."""
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InvalidConfig(field=f"dims['{k}']", reason=f"a size is an integer, got {v!r}")
        return json.loads(self._native.memory_plan_json({k: int(v) for k, v in dims.items()}))

    def plan_dims(self, feeds: Mapping[str, Any]) -> dict[str, int]:
        """The named dims of the inputs as these feeds (arrays or shapes) give them."""
        dims: dict[str, int] = {}
        for spec in self.inputs:
            if spec.name not in feeds:
                raise InvalidConfig(field=f"inputs['{spec.name}']", reason="missing")
            f = feeds[spec.name]
            shape = tuple(f) if isinstance(f, (tuple, list)) else np.shape(f)
            if len(shape) != len(spec.shape):
                raise InvalidConfig(field=f"inputs['{spec.name}']",
                                    reason=f"rank {len(shape)}, the graph declares {list(spec.shape)}")
            for d, n in zip(spec.shape, shape):
                if isinstance(d, str):
                    dims.setdefault(d, int(n))
        return dims

    @property
    def shapes(self) -> dict[str, dict]:
        """Every node output's dtype and shape as inferred at load: {"dtype", "shape"}, the shape a
        list of sizes and expressions of the inputs' dim names ("seq_len", "4*batch", "seq_len+2"),
        with "<node>:<k>" for sizes the data decides and "<value>[k]" for other run-time sizes;
        shape None when not even the rank is known before running."""
        return json.loads(self._native.shapes_json())

    def last_run_memory(self) -> dict:
        """What the last run held: {"planned_peak" (its arena), "measured_peak" (the high-water mark
        of the bytes it held: the arena plus buffers of values sized at run time), "dynamic_peak",
        "unknown_values", "unplanned", "weight_cache_bytes" (the packed weight copies the model keeps,
        built on first use: cpu convolutions), "released_weight_bytes" (the original weights' pages
        handed back once packed: they leave the resident set and fault in again from the file if
        read; 0 for a file read into memory at open), "pooled_bytes" (node buffers kept for the next
        run: release_memory)}."""
        return json.loads(self._native.last_run_memory_json())

    def release_memory(self, weights: bool = False) -> int:
        """Frees what the model keeps between runs only to run faster: the pooled node buffers (the
        last run's arena among them) and the calling thread's cpu kernel scratch; the next run makes
        them again. Packed weights stay. weights=True: the resident pages of the model's weights in
        a mapped file (or in its huge-page copy) are handed back too, to fault in again from the
        file at the next run; returns those bytes (0 otherwise, and for a file read into memory at
        open). Pipelines call it when they move on to another stage (DiffusionModel: each stage once
        its output is taken; the text encoder's weights too, idle through the UNet steps)."""
        return int(self._native.release_memory(bool(weights)))

    @property
    def last_digest(self) -> str:
        """nox: the SHA-256 digest chain (hex) of the last run, version 2 of docs/graph.md "The digest
        chain" ('' on other backends, before the first run, or after a run that failed)."""
        return self._native.last_digest()


def stage_names(mf: Any) -> list[str]:
    """The stages of a "graph-stages" file, in the order of its `[stages] names` (each has a section
    `graph_<stage>`); [] for a file of one graph."""
    rec = mf.config.get("stages")
    names = rec.get("names") if isinstance(rec, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidConfig(field="stages.names", reason="a graph-stages file lists its stages: names = [\"unet\", ...]")
    missing = [n for n in names if f"graph_{n}" not in mf.sections]
    if missing:
        raise FormatError(f"graph_{missing[0]}", "", f"stage {missing[0]!r} of [stages] names has no section "
                                                    f"graph_{missing[0]}")
    return list(names)


def load_stage(file: Any, stage: str, *, backend: str | None = None, precise: bool = False,
               threads: int | None = None, fuse: bool = True, max_memory: int | None = None) -> NamedArrayModel:
    """One stage of a "graph-stages" file (a cyb_llm.format.ModelFile or a path) as a named-array
    model: `load_stage(f, "unet").run({"sample": x, ...})`. The pipeline classes of several stages
    (diffusion, two-stage TTS) hold one per stage; an unknown stage is InvalidConfig naming the
    file's stages."""
    from . import _core
    from .format import ModelFile

    mf = file if isinstance(file, ModelFile) else ModelFile(file)
    if stage not in stage_names(mf):
        raise InvalidConfig(field="stage", reason=f"the file has no stage {stage!r} (stages: "
                                                  f"{', '.join(stage_names(mf)) or 'none'})")
    native = _core.load(mf._native, backend or "", bool(precise), 0 if threads is None else threads, "", bool(fuse),
                        max_memory, stage)
    m = NamedArrayModel._over(mf, native, backend=backend or native.backends()[0], stage=stage)
    m.precise = bool(precise)
    m.name = f"{m.name}:{stage}"
    return m


__all__ = ["NamedArrayModel", "GraphIO", "load_stage", "stage_names"]
