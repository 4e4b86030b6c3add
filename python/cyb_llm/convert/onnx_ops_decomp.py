"""ONNX ops translated as the ONNX ops they are made of (docs/import.md, "ONNX"): each handler
writes a few nodes of ops the importer already translates and translates them in its place, so that
they fold at import where their inputs are known, take the importer's shapes, and run on every
backend through the existing ops. Gelu (opset 20) maps to the gelu ops directly."""
from __future__ import annotations

from typing import Any

import numpy as np

from .onnx_registry import handler


class _Nodes:
    """Nodes of the decomposition of `node`: the nodes named after it, their values and constants
    (initializers) after its first output (unique in a graph, where node names need not be)."""

    def __init__(self, imp: Any, node: Any, nm: str) -> None:
        self.imp, self.node, self.nm = imp, node, nm
        self.at = f"{node.output[0]}::"
        self.helper = imp.onnx.helper
        self.nodes: list[Any] = []
        self.n = 0

    def _fresh(self, kind: str) -> str:
        self.n += 1
        name = f"{self.at}{kind}{self.n}"
        if name in self.imp.consts or name in self.imp.shapes:
            raise self.imp.unsupported(self.node, f"the name '{name}' its translation needs is taken")
        return name

    def const(self, value: np.ndarray) -> str:
        name = self._fresh("c")
        self.imp.consts[name] = value
        return name

    def add(self, op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        o = out or self._fresh("v")
        self.nodes.append(self.helper.make_node(op, inputs, [o], name=f"{self.nm}/{op}{self.n}", **attrs))
        return o

    def translate(self) -> None:
        imp = self.imp
        for n in self.nodes:
            if imp.try_fold(n) or imp.fold_any(n):
                continue
            imp.translate(n)
            imp.track_symval(n)


def _only_output(imp: Any, node: Any, what: str) -> None:
    if sum(1 for o in node.output if o) != 1:
        raise imp.unsupported(node, f"{what}: only its first output is translated")


@handler("Gelu")
def gelu(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    approx = a.get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else str(approx)
    if approx not in ("none", "tanh"):
        raise imp.unsupported(node, f"approximate '{approx}' (none and tanh are translated)")
    imp.emit(nm, "gelu" if approx == "none" else "gelu_tanh", [x], [node.output[0]], [imp.shape(x)])


def _hard_sigmoid(b: _Nodes, x: str, alpha: float, beta: float, out: str | None = None) -> str:
    """max(0, min(1, alpha * x + beta))."""
    t = b.add("Mul", [x, b.const(np.array([alpha], np.float32))])
    t = b.add("Add", [t, b.const(np.array([beta], np.float32))])
    return b.add("Clip", [t, b.const(np.array(0.0, np.float32)), b.const(np.array(1.0, np.float32))], out)


@handler("HardSigmoid")
def hard_sigmoid(imp: Any, node: Any, a: dict, nm: str) -> None:
    b = _Nodes(imp, node, nm)
    _hard_sigmoid(b, node.input[0], float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)), node.output[0])
    b.translate()


@handler("HardSwish")
def hard_swish(imp: Any, node: Any, a: dict, nm: str) -> None:
    """x * HardSigmoid(x) with alpha 1/6, beta 1/2."""
    b = _Nodes(imp, node, nm)
    b.add("Mul", [node.input[0], _hard_sigmoid(b, node.input[0], 1.0 / 6.0, 0.5)], node.output[0])
    b.translate()


@handler("BatchNormalization")
def batch_norm(imp: Any, node: Any, a: dict, nm: str) -> None:
    """Inference mode with constant statistics: x * s + t per channel (axis 1), s = scale /
    sqrt(var + eps) and t = bias - mean * s computed at import in float64."""
    if int(a.get("training_mode", 0)):
        raise imp.unsupported(node, "training_mode 1 (inference mode is translated)")
    _only_output(imp, node, "the running statistics outputs are training mode's")
    scale, bias, mean, var = (imp.const(node, i, w).astype(np.float64)
                              for i, w in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")))
    rank = len(imp.shape(node.input[0]))
    if rank < 2 or not (scale.ndim == bias.ndim == mean.ndim == var.ndim == 1):
        raise imp.unsupported(node, f"an input of rank {rank} with per-channel vectors (rank >= 2, axis 1)")
    s = scale / np.sqrt(var + float(a.get("epsilon", 1e-5)))
    t = bias - mean * s
    shape = [-1] + [1] * (rank - 2)
    b = _Nodes(imp, node, nm)
    y = b.add("Mul", [node.input[0], b.const(s.astype(np.float32).reshape(shape))])
    b.add("Add", [y, b.const(t.astype(np.float32).reshape(shape))], node.output[0])
    b.translate()


def _reduce_sum(b: _Nodes, imp: Any, node: Any, a: dict, x: str, out: str | None) -> str:
    """ReduceSum over the axes of `node` (an input from opset 18, an attribute before; ReduceSum's is
    an input from opset 13), with its keepdims and noop_with_empty_axes."""
    if len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.const(node, 1, "axes")]
    else:
        axes = [int(v) for v in a.get("axes", [])]
    ins = [x] + ([b.const(np.array(axes, np.int64))] if axes else [])
    return b.add("ReduceSum", ins, out, keepdims=int(a.get("keepdims", 1)),
                 noop_with_empty_axes=int(a.get("noop_with_empty_axes", 0)))


@handler("ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceLogSum")
def reduce_composite(imp: Any, node: Any, a: dict, nm: str) -> None:
    """ReduceSumSquare = ReduceSum(x * x), ReduceL2 = its Sqrt, ReduceL1 = ReduceSum(|x|), ReduceLogSum
    = Log(ReduceSum(x))."""
    op, x, out = node.op_type, node.input[0], node.output[0]
    b = _Nodes(imp, node, nm)
    if op in ("ReduceSumSquare", "ReduceL2"):
        s = _reduce_sum(b, imp, node, a, b.add("Mul", [x, x]), out if op == "ReduceSumSquare" else None)
        if op == "ReduceL2":
            b.add("Sqrt", [s], out)
    elif op == "ReduceL1":
        _reduce_sum(b, imp, node, a, b.add("Abs", [x]), out)
    else:
        b.add("Log", [_reduce_sum(b, imp, node, a, x, None)], out)
    b.translate()


def _diagonal_offsets(b: _Nodes, x: str) -> str:
    """j - i over the last two dims [R, C] of x (int64, [R, C])."""
    sh = b.add("Shape", [x])
    rows = b.add("Gather", [sh, b.const(np.array(-2, np.int64))], axis=0)
    cols = b.add("Gather", [sh, b.const(np.array(-1, np.int64))], axis=0)
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    i = b.add("Unsqueeze", [b.add("Range", [zero, rows, one]), b.const(np.array([1], np.int64))])
    return b.add("Sub", [b.add("Range", [zero, cols, one]), i])


def _k(b: _Nodes, node: Any, index: int, default: int) -> str:
    if len(node.input) > index and node.input[index]:
        return node.input[index]
    return b.const(np.array(default, np.int64))


@handler("Trilu")
def trilu(imp: Any, node: Any, a: dict, nm: str) -> None:
    """Where(j - i >= k (upper) or j - i <= k (lower), x, 0) over the last two dims."""
    x = node.input[0]
    if len(imp.shape(x)) < 2:
        raise imp.unsupported(node, "an input of fewer than 2 dims")
    b = _Nodes(imp, node, nm)
    keep = b.add("GreaterOrEqual" if int(a.get("upper", 1)) else "LessOrEqual", [_diagonal_offsets(b, x), _k(b, node, 1, 0)])
    dt = imp.dtype(x)
    zero = np.zeros(1, np.float32 if dt in ("f32", "f16") else {"i64": np.int64, "i32": np.int32, "bool": np.bool_,
                                                                "u8": np.uint8, "i8": np.int8}[dt])
    b.add("Where", [keep, x, b.const(zero)], node.output[0])
    b.translate()


@handler("EyeLike")
def eye_like(imp: Any, node: Any, a: dict, nm: str) -> None:
    """Cast(j - i == k) of the input's 2-D shape to `dtype` (the input's by default)."""
    x = node.input[0]
    if len(imp.shape(x)) != 2:
        raise imp.unsupported(node, f"an input of {len(imp.shape(x))} dims (EyeLike is 2-D)")
    b = _Nodes(imp, node, nm)
    eq = b.add("Equal", [_diagonal_offsets(b, x), b.const(np.array(int(a.get("k", 0)), np.int64))])
    to = int(a["dtype"]) if "dtype" in a else {"f32": 1, "f16": 10, "i32": 6, "i64": 7, "u8": 2, "i8": 3,
                                                "bool": 9}[imp.dtype(x)]
    b.add("Cast", [eq], node.output[0], to=to)
    b.translate()


# ---- quantization (onnxruntime's quantize_dynamic / QDQ models) --------------------------------
# The integer ops run as float arithmetic on the integer values (exact up to 2^24, the sums of a
# MatMulInteger rounded as f32 past that): MatMulInteger's result is f32, which the Cast to float
# that follows it in these graphs leaves as it is.

_QRANGE = {"u8": (0.0, 255.0, 2), "i8": (-128.0, 127.0, 3)}


def _per_axis(b: _Nodes, imp: Any, node: Any, v: str, rank: int, axis: int, of: str | None = None) -> str:
    """A 1-D per-channel scale or zero point along `axis` of a rank-`rank` input, reshaped to broadcast
    (`of`: the input of the node whose shape v has, when v is one of the nodes still to translate)."""
    s = imp.shape(of or v)
    if len(s) == 0 or rank <= 1:
        return v
    if len(s) != 1:
        raise imp.unsupported(node, f"a scale / zero point of {len(s)} dims (a scalar or one per channel)")
    axis = axis + rank if axis < 0 else axis
    return b.add("Reshape", [v, b.const(np.array([-1] + [1] * (rank - axis - 1), np.int64))])


@handler("DequantizeLinear")
def dequantize_linear(imp: Any, node: Any, a: dict, nm: str) -> None:
    """(float(x) - float(zero_point)) * scale (constant inputs fold at import)."""
    if int(a.get("block_size", 0)):
        raise imp.unsupported(node, "block_size (blocked quantization)")
    b = _Nodes(imp, node, nm)
    rank, axis = len(imp.shape(node.input[0])), int(a.get("axis", 1))
    x = b.add("Cast", [node.input[0]], to=1)
    if len(node.input) > 2 and node.input[2]:
        x = b.add("Sub", [x, _per_axis(b, imp, node, b.add("Cast", [node.input[2]], to=1), rank, axis, node.input[2])])
    b.add("Mul", [x, _per_axis(b, imp, node, node.input[1], rank, axis)], node.output[0])
    b.translate()


def _quantize(b: _Nodes, x: str, scale: str, zp_float: str | None, dt: str, out: str) -> str:
    """saturate(round(x / scale) + zero point) as the integer type `dt`."""
    lo, hi, onnx_type = _QRANGE[dt]
    q = b.add("Round", [b.add("Div", [x, scale])])
    if zp_float is not None:
        q = b.add("Add", [q, zp_float])
    q = b.add("Clip", [q, b.const(np.array(lo, np.float32)), b.const(np.array(hi, np.float32))])
    return b.add("Cast", [q], out, to=onnx_type)


@handler("QuantizeLinear")
def quantize_linear(imp: Any, node: Any, a: dict, nm: str) -> None:
    if int(a.get("block_size", 0)) or not int(a.get("saturate", 1)):
        raise imp.unsupported(node, "block_size or saturate 0")
    b = _Nodes(imp, node, nm)
    rank, axis = len(imp.shape(node.input[0])), int(a.get("axis", 1))
    dt, zpf = "u8", None
    if len(node.input) > 2 and node.input[2]:
        dt = imp.dtype(node.input[2])
        if dt not in _QRANGE:
            raise imp.unsupported(node, f"a zero point of type {dt} (u8 and i8 are translated)")
        zpf = _per_axis(b, imp, node, b.add("Cast", [node.input[2]], to=1), rank, axis, node.input[2])
    _quantize(b, node.input[0], _per_axis(b, imp, node, node.input[1], rank, axis), zpf, dt, node.output[0])
    b.translate()


@handler("DynamicQuantizeLinear")
def dynamic_quantize_linear(imp: Any, node: Any, a: dict, nm: str) -> None:
    """u8 with scale = (max(x, 0) - min(x, 0)) / 255 and zero point round(saturate(-min / scale)),
    as the ONNX definition writes them."""
    b = _Nodes(imp, node, nm)
    x = node.input[0]
    zero = b.const(np.array(0.0, np.float32))
    mn = b.add("Min", [b.add("ReduceMin", [x], keepdims=0), zero])
    mx = b.add("Max", [b.add("ReduceMax", [x], keepdims=0), zero])
    y, scale_out, zp_out = (list(node.output) + ["", ""])[:3]
    scale = b.add("Div", [b.add("Sub", [mx, mn]), b.const(np.array(255.0, np.float32))], scale_out or None)
    zpf = b.add("Clip", [b.add("Sub", [zero, b.add("Div", [mn, scale])]), zero, b.const(np.array(255.0, np.float32))])
    zpf = b.add("Round", [zpf])
    if zp_out:
        b.add("Cast", [zpf], zp_out, to=2)
    _quantize(b, x, scale, zpf, "u8", y)
    b.translate()


@handler("MatMulInteger")
def matmul_integer(imp: Any, node: Any, a: dict, nm: str) -> None:
    """(A - a_zero_point) @ (B - b_zero_point) in float: a constant B (its zero point subtracted at
    import) is a weight of the matmul op."""
    b = _Nodes(imp, node, nm)
    A = b.add("Cast", [node.input[0]], to=1)
    if len(node.input) > 2 and node.input[2]:
        A = b.add("Sub", [A, b.add("Cast", [node.input[2]], to=1)])
    Bn = node.input[1]
    if imp.known(node, 1) and imp.known(node, 3):
        w = imp.const(node, 1, "B").astype(np.float32)
        if len(node.input) > 3 and node.input[3]:
            w = w - imp.const(node, 3, "b_zero_point").astype(np.float32)
        B = b.const(np.ascontiguousarray(w))
    else:
        B = b.add("Cast", [Bn], to=1)
        if len(node.input) > 3 and node.input[3]:
            B = b.add("Sub", [B, b.add("Cast", [node.input[3]], to=1)])
    b.add("MatMul", [A, B], node.output[0])
    b.translate()


# ---- DepthToSpace / SpaceToDepth (pixel_shuffle / pixel_unshuffle) ------------------------------

def _nchw(b: _Nodes, x: str) -> list[str]:
    """N, C, H, W of a 4-D x as 1-element int64 vectors (Shape, then Gather of each)."""
    sh = b.add("Shape", [x])
    return [b.add("Gather", [sh, b.const(np.array([i], np.int64))], axis=0) for i in range(4)]


@handler("DepthToSpace")
def depth_to_space(imp: Any, node: Any, a: dict, nm: str) -> None:
    """[N, C, H, W] -> [N, C / b^2, H b, W b]: a reshape to six dims, a transpose (DCR: the block
    dims first; CRD: the channels first) and a reshape back."""
    x, bs = node.input[0], int(a["blocksize"])
    mode = a.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if len(imp.shape(x)) != 4 or mode not in ("DCR", "CRD") or bs < 1:
        raise imp.unsupported(node, f"a {len(imp.shape(x))}-D input, mode {mode}, blocksize {bs} (4-D, DCR or CRD)")
    b = _Nodes(imp, node, nm)
    n, c, h, w = _nchw(b, x)
    blk, c2 = b.const(np.array([bs], np.int64)), b.add("Div", [c, b.const(np.array([bs * bs], np.int64))])
    six = [n, blk, blk, c2, h, w] if mode == "DCR" else [n, c2, blk, blk, h, w]
    t = b.add("Reshape", [x, b.add("Concat", six, axis=0)])
    t = b.add("Transpose", [t], perm=[0, 3, 4, 1, 5, 2] if mode == "DCR" else [0, 1, 4, 2, 5, 3])
    hb, wb = b.add("Mul", [h, blk]), b.add("Mul", [w, blk])
    b.add("Reshape", [t, b.add("Concat", [n, c2, hb, wb], axis=0)], node.output[0])
    b.translate()


@handler("SpaceToDepth")
def space_to_depth(imp: Any, node: Any, a: dict, nm: str) -> None:
    """[N, C, H, W] -> [N, C b^2, H / b, W / b] (DCR order, ONNX's only one)."""
    x, bs = node.input[0], int(a["blocksize"])
    if len(imp.shape(x)) != 4 or bs < 1:
        raise imp.unsupported(node, f"a {len(imp.shape(x))}-D input, blocksize {bs} (4-D)")
    b = _Nodes(imp, node, nm)
    n, c, h, w = _nchw(b, x)
    blk = b.const(np.array([bs], np.int64))
    h2, w2 = b.add("Div", [h, blk]), b.add("Div", [w, blk])
    t = b.add("Reshape", [x, b.add("Concat", [n, c, h2, blk, w2, blk], axis=0)])
    t = b.add("Transpose", [t], perm=[0, 3, 5, 1, 2, 4])
    b.add("Reshape", [t, b.add("Concat", [n, b.add("Mul", [c, b.const(np.array([bs * bs], np.int64))]), h2, w2],
                                 axis=0)], node.output[0])
    b.translate()
