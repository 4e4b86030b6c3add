"""Writing version-2 graphs (docs/graph.md "Version 2") from Python, for importers that emit a
graph from a model's config and weights instead of translating a graph file: the diffusers folder
(text encoder, UNet, VAE as the stages of one file, docs/graph.md "Stages") and the TTS acoustic
models. The runtime never imports torch: the weights are numpy arrays read from safetensors.

    b = GraphBuilder()
    x = b.input("x", "f32", ["batch", 3])
    w = b.weight("lin.weight", np.ones((3, 4), np.float32))
    y = b.node("matmul_nd", [x, w])
    b.output("y", y, ["batch", 4])
    graph, weights = b.build()          # the section as a dict, {tensor name: array}

Value names are made unique by the builder (`name` is a hint); node ops and attributes are those
of the op schema (csrc/dispatch/op_schema*.cc), checked by the native parser at load, not here.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import FormatError

class GraphBuilder:
    """Accumulates inputs, weights, constants and nodes in order; `build()` gives the graph dict
    (what write_model(graph=...) or write_model(stages={name: graph}) writes) and the weights."""

    def __init__(self, prefix: str = ""):
        #: prepended to every weight's tensor name (a stage's "unet."), not to value names
        self.prefix = prefix
        self.inputs: list[dict] = []
        self.outputs: list[dict] = []
        self.state: list[dict] = []
        self.initializers: list[dict] = []
        self.constants: list[dict] = []
        self.nodes: list[dict] = []
        self.weights: dict[str, np.ndarray] = {}
        self._names: set[str] = set()
        self._count = 0

    # ---- names -----------------------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        """A value name not used yet, from `hint`."""
        name = hint
        while name in self._names:
            self._count += 1
            name = f"{hint}.{self._count}"
        self._names.add(name)
        return name

    # ---- values ----------------------------------------------------------------------------
    def input(self, name: str, dtype: str, shape: Sequence[Any]) -> str:
        if name in self._names:
            raise FormatError("graph", name, f"input '{name}' is defined twice")
        self._names.add(name)
        self.inputs.append({"name": name, "dtype": dtype, "shape": [d if isinstance(d, str) else int(d)
                                                                    for d in shape]})
        return name

    def weight(self, name: str, array: np.ndarray) -> str:
        """A tensor of the weights section (its tensor name `prefix + name`), read as value `name`."""
        tensor = self.prefix + name
        if tensor in self.weights:
            raise FormatError("graph", name, f"weight '{tensor}' is given twice")
        value = self.fresh(name)
        self.weights[tensor] = np.ascontiguousarray(array)
        init = {"name": value}
        if tensor != value:
            init["tensor"] = tensor
        self.initializers.append(init)
        return value

    def const(self, values: Any, dtype: str = "f32", name: str = "const") -> str:
        """A small literal array (integers exact, floats written as numbers)."""
        arr = np.asarray(values)
        value = self.fresh(name)
        flat = arr.reshape(-1)
        vals = [int(v) for v in flat] if dtype not in ("f32", "f16") else [float(v) for v in flat]
        self.constants.append({"name": value, "dtype": dtype, "shape": [int(d) for d in arr.shape] or [1],
                               "values": vals})
        return value

    def node(self, opname: str, inputs: Sequence[str], n_out: int = 1, name: str | None = None,
             **attrs: Any) -> Any:
        """Appends a node of op `opname` with attributes `attrs` (`fn="add"` of a binary node is an
        attribute); returns its output name (a list when n_out > 1). An absent optional input is ""."""
        label = self.fresh(name or opname)
        outs = [label] if n_out == 1 else [self.fresh(f"{label}:{k}") for k in range(n_out)]
        node: dict[str, Any] = {"name": label, "op": opname, "inputs": list(inputs), "outputs": outs}
        if attrs:
            node["attrs"] = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def output(self, name: str, value: str, shape: Sequence[Any], dtype: str = "f32") -> None:
        """Declares graph output `name` (dims: sizes or names) computed as `value`, a node's output:
        that node's output (and its readers) are renamed to `name`."""
        for n in reversed(self.nodes):
            if value in n["outputs"]:
                n["outputs"] = [name if o == value else o for o in n["outputs"]]
                for m in self.nodes:
                    m["inputs"] = [name if i == value else i for i in m["inputs"]]
                break
        else:
            raise FormatError("graph", name, f"output '{name}': '{value}' is not a node's output")
        if name != value and name in self._names:
            raise FormatError("graph", name, f"output '{name}': the name is taken")
        self._names.add(name)
        self.outputs.append({"name": name, "dtype": dtype, "shape": [d if isinstance(d, str) else int(d)
                                                                     for d in shape]})

    def state_pair(self, output: str, input: str) -> None:
        """A state pair: the pipeline feeds `output` back into `input` on the next call."""
        self.state.append({"output": output, "input": input})

    def build(self) -> tuple[dict, dict[str, np.ndarray]]:
        graph: dict[str, Any] = {"version": 2, "inputs": self.inputs, "outputs": self.outputs}
        if self.initializers:
            graph["initializers"] = self.initializers
        if self.constants:
            graph["constants"] = self.constants
        graph["nodes"] = self.nodes
        if self.state:
            graph["state"] = self.state
        return graph, dict(self.weights)


# ---- transformer layer helpers (the SpeechT5 importer, convert/speecht5.py) ----------------------
# Each appends the nodes of one torch layer to a GraphBuilder, its weights read from `w` (tensor name
# -> array) under `name`; value names are hints made unique by the builder.

def tb_linear(b: GraphBuilder, x: str, w: dict, name: str, bias: bool = True) -> str:
    """nn.Linear over the last axis: x [.., K] @ W^T + bias, W [N, K] as torch stores it (`matmul`)."""
    ins = [x, b.weight(f"{name}.weight", np.asarray(w[f"{name}.weight"], np.float32))]
    if bias:
        ins.append(b.weight(f"{name}.bias", np.asarray(w[f"{name}.bias"], np.float32).reshape(-1)))
    return b.node("matmul", ins, name=name)


def tb_layer_norm(b: GraphBuilder, x: str, w: dict, name: str, eps: float) -> str:
    """nn.LayerNorm over the last axis (`layer_norm`)."""
    return b.node("layer_norm", [x, b.weight(f"{name}.weight", np.asarray(w[f"{name}.weight"], np.float32)),
                                 b.weight(f"{name}.bias", np.asarray(w[f"{name}.bias"], np.float32))],
                  name=name, eps=float(eps))


def tb_heads(b: GraphBuilder, x: str, heads: int, head_dim: int) -> str:
    """[B, T, heads * head_dim] -> [B, heads, T, head_dim]."""
    return b.node("transpose", [b.node("reshape", [x], shape=[0, 0, heads, head_dim])], perm=[0, 2, 1, 3])


def tb_merge_heads(b: GraphBuilder, x: str, heads: int, head_dim: int) -> str:
    """[B, heads, T, head_dim] -> [B, T, heads * head_dim]."""
    return b.node("reshape", [b.node("transpose", [x], perm=[0, 2, 1, 3])], shape=[0, 0, heads * head_dim])


def tb_attend(b: GraphBuilder, q: str, k: str, v: str, bias: str | None = None) -> str:
    """softmax(q @ k^T (+ bias)) @ v over [B, heads, T, head_dim] arrays (q already scaled)."""
    s = b.node("matmul_nd", [q, b.node("transpose", [k], perm=[0, 1, 3, 2])], name="scores")
    if bias is not None:
        s = b.node("binary", [s, bias], fn="add")
    return b.node("matmul_nd", [b.node("softmax_axis", [s], axis=-1), v], name="attn")


__all__ = ["GraphBuilder", "tb_linear", "tb_layer_norm", "tb_heads", "tb_merge_heads", "tb_attend"]
