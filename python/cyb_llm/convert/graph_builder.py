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


# ---- layer helpers (the diffusers importer's, convert/diffusers.py): one function per layer kind,
# each appending its nodes to a builder `b` and returning the output value. Weights are numpy arrays
# in torch's layouts (Linear [out, in], Conv2d [out, in/group, kh, kw]), registered as `name.weight`
# and `name.bias`. ----

def linear(b: GraphBuilder, x: str, name: str, weight: np.ndarray, bias: np.ndarray | None = None) -> str:
    """x [.., K] @ weight[N, K]^T (+ bias [N]): one `matmul` node (its weight may be f16 or blocks)."""
    ins = [x, b.weight(name + ".weight", weight)]
    if bias is not None:
        ins.append(b.weight(name + ".bias", bias))
    return b.node("matmul", ins, name=name)


def conv2d(b: GraphBuilder, x: str, name: str, weight: np.ndarray, bias: np.ndarray | None = None,
           stride: int = 1, pads: Sequence[int] | None = None) -> str:
    """A 2-D convolution of x [N, C, H, W]; `pads` [top, left, bottom, right], default k // 2 each side
    (torch's padding=k//2 for odd kernels)."""
    kh, kw = (int(d) for d in weight.shape[2:4])
    if pads is None:
        pads = [kh // 2, kw // 2, kh // 2, kw // 2]
    ins = [x, b.weight(name + ".weight", weight)]
    if bias is not None:
        ins.append(b.weight(name + ".bias", bias))
    return b.node("conv", ins, name=name, strides=[stride, stride], pads=[int(p) for p in pads])


def group_norm(b: GraphBuilder, x: str, name: str, scale: np.ndarray, bias: np.ndarray, groups: int,
               eps: float) -> str:
    """torch.nn.GroupNorm over x [N, C, ..] with per-channel scale and bias."""
    return b.node("group_norm", [x, b.weight(name + ".weight", scale), b.weight(name + ".bias", bias)],
                  name=name, num_groups=int(groups), eps=float(eps))


def layer_norm(b: GraphBuilder, x: str, name: str, scale: np.ndarray, bias: np.ndarray | None, eps: float) -> str:
    """torch.nn.LayerNorm over the last dim of x."""
    ins = [x, b.weight(name + ".weight", scale)]
    if bias is not None:
        ins.append(b.weight(name + ".bias", bias))
    return b.node("layer_norm", ins, name=name, eps=float(eps))


def add(b: GraphBuilder, x: str, y: str, name: str | None = None) -> str:
    """x + y with numpy broadcasting."""
    return b.node("binary", [x, y], name=name or "add", fn="add")


def attention(b: GraphBuilder, q: str, k: str, v: str, heads: int, head_dim: int, scale: float,
              name: str = "attention") -> str:
    """Multi-head attention where every key is visible (self- or cross-attention): q [B, T, heads *
    head_dim], k and v [B, S, heads * head_dim] -> [B, T, heads * head_dim], one fused
    `encoder_attention` node (its key mask all ones, sized from k at run time)."""
    q4, k4, v4 = (b.node("reshape", [t], name=f"{name}.{w}4", shape=[0, 0, heads, head_dim])
                  for t, w in ((q, "q"), (k, "k"), (v, "v")))
    dims = b.node("shape", [k4], name=f"{name}.bs", range=[0, 2])
    mask = b.node("constant_of_shape", [dims], name=f"{name}.mask", value=1.0)
    o = b.node("encoder_attention", [q4, k4, v4, mask], name=name, n_heads=heads, n_kv_heads=heads,
               head_dim=head_dim, scale=float(scale))
    return b.node("reshape", [o], name=f"{name}.out", shape=[0, 0, heads * head_dim])


def masked_attention(b: GraphBuilder, q: str, k: str, v: str, mask: str, heads: int, head_dim: int,
                     scale: float, name: str = "attention") -> str:
    """Attention with an additive mask over the logits (a causal mask: 0 where a key is visible, a
    large negative number elsewhere): q, k, v [B, T, heads * head_dim], mask [T, T] ->
    [B, T, heads * head_dim], as matmul_nd, mul, add, softmax_axis, matmul_nd (encoder_attention
    takes a 0/1 key mask per sequence, not a mask per query)."""
    def heads_first(t: str, w: str, perm: list[int]) -> str:
        t4 = b.node("reshape", [t], name=f"{name}.{w}4", shape=[0, 0, heads, head_dim])
        return b.node("transpose", [t4], name=f"{name}.{w}t", perm=perm)

    qt = heads_first(q, "q", [0, 2, 1, 3])        # [B, H, T, hd]
    kt = heads_first(k, "k", [0, 2, 3, 1])        # [B, H, hd, S]
    vt = heads_first(v, "v", [0, 2, 1, 3])        # [B, H, S, hd]
    s = b.node("matmul_nd", [qt, kt], name=f"{name}.logits")
    s = b.node("binary", [s, b.const([scale])], name=f"{name}.scaled", fn="mul")
    s = b.node("binary", [s, mask], name=f"{name}.masked", fn="add")
    p = b.node("softmax_axis", [s], name=f"{name}.probs", axis=-1)
    o = b.node("matmul_nd", [p, vt], name=name)
    o = b.node("transpose", [o], name=f"{name}.bthd", perm=[0, 2, 1, 3])
    return b.node("reshape", [o], name=f"{name}.out", shape=[0, 0, heads * head_dim])


def upsample_nearest2x(b: GraphBuilder, x: str, name: str = "upsample") -> str:
    """torch's interpolate(x, scale_factor=2, mode="nearest") of x [N, C, H, W] whatever H and W are at
    run time (resize takes sizes fixed at import): x viewed [N, C, H, 1, W, 1], expanded to
    [N, C, H, 2, W, 2], viewed [N, C, 2H, 2W]."""
    x6 = b.node("unsqueeze", [x], name=f"{name}.x6", axes=[3, 5])
    e = b.node("expand", [x6, b.const([1, 1, 1, 2, 1, 2], "i64")], name=f"{name}.expand")
    dims = b.node("binary", [b.node("shape", [x], name=f"{name}.dims"), b.const([1, 1, 2, 2], "i64")],
                  name=f"{name}.dims2", fn="mul")
    return b.node("reshape_to", [e, dims], name=name)


def resize_nearest_like(b: GraphBuilder, x: str, like: str, name: str = "resize") -> str:
    """torch's interpolate(x, size=like.shape[2:], mode="nearest") of x [N, C, H, W], the sizes read at
    run time: along each spatial axis a gather of the source rows min(floor(i * (in / out)), in - 1),
    i < out, the scale a float32 division and the product a float32 one, as torch computes them (a
    size of 2 * in gives floor(i / 2))."""
    for axis in (2, 3):
        tag = f"{name}.{'hw'[axis - 2]}"
        n_in = b.node("shape", [x], name=f"{tag}.in", range=[axis, axis + 1])
        n_out = b.node("shape", [like], name=f"{tag}.out", range=[axis, axis + 1])
        scale = b.node("binary", [b.node("cast", [n_in], name=f"{tag}.inf", to="f32"),
                                  b.node("cast", [n_out], name=f"{tag}.outf", to="f32")], name=f"{tag}.scale", fn="div")
        pos = b.node("cumsum", [b.node("constant_of_shape", [n_out], name=f"{tag}.ones", value=1.0)],
                     name=f"{tag}.pos", axis=0, exclusive=True)
        src = b.node("unary", [b.node("binary", [pos, scale], name=f"{tag}.src", fn="mul")], name=f"{tag}.floor",
                     fn="floor")
        last = b.node("binary", [n_in, b.const([1], "i64")], name=f"{tag}.last", fn="sub")
        idx = b.node("binary", [b.node("cast", [src], name=f"{tag}.idx", to="i64"), last], name=f"{tag}.clamp",
                     fn="min")
        x = b.node("gather", [x, idx], name=tag, axis=axis)
    return x


# ---- transformer layer helpers (the SpeechT5 importer, convert/speecht5.py) ----------------------
# Each appends the nodes of one torch layer to a GraphBuilder, its weights read from `w` (tensor name
# -> array) under `name`; value names are hints made unique by the builder.

def tb_linear(b: GraphBuilder, x: str, w: dict, name: str, bias: bool = True) -> str:
    """nn.Linear `name` of the tensors `w` (linear above, f32)."""
    return linear(b, x, name, np.asarray(w[f"{name}.weight"], np.float32),
                  np.asarray(w[f"{name}.bias"], np.float32).reshape(-1) if bias else None)


def tb_layer_norm(b: GraphBuilder, x: str, w: dict, name: str, eps: float) -> str:
    """nn.LayerNorm `name` of the tensors `w` (layer_norm above, f32)."""
    return layer_norm(b, x, name, np.asarray(w[f"{name}.weight"], np.float32),
                      np.asarray(w[f"{name}.bias"], np.float32), eps)


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


__all__ = ["GraphBuilder", "linear", "conv2d", "group_norm", "layer_norm", "add", "attention",
           "masked_attention", "upsample_nearest2x", "resize_nearest_like", "tb_linear", "tb_layer_norm", "tb_heads",
           "tb_merge_heads", "tb_attend"]
