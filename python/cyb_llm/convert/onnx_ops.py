"""ONNX translations of the element-wise, reduction and shape ops (docs/import.md "ONNX"): each
ONNX node whose inputs are not all known at import becomes one op of graph v2 (docs/graph.md
"Version 2"): unary / binary (numpy broadcasting) / where / cast / reduce, shape, and the views
reshape_to / squeeze / unsqueeze / flatten. The importer (onnx_graph.py) folds the nodes whose
inputs are known and calls these through the registry (onnx_registry.py)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .onnx_registry import handler

_UNARY = {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Erf": "erf", "Sin": "sin", "Cos": "cos",
          "Ceil": "ceil", "Floor": "floor", "Round": "round", "Sign": "sign", "Reciprocal": "reciprocal",
          "Softplus": "softplus", "LeakyRelu": "leaky_relu", "Not": "not", "IsNaN": "isnan"}
_BINARY = {"Sub": "sub", "Div": "div", "Min": "min", "Max": "max", "Mod": "mod",
           "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
           "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or", "Xor": "xor"}
_COMPARE = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}
_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}
_CAST = {1: "f32", 10: "f16", 6: "i32", 7: "i64", 2: "u8", 3: "i8", 9: "bool"}


def broadcast(imp: Any, *shapes: list) -> list:
    """Numpy broadcasting of symbolic shapes (sizes or names); a pair it cannot decide gets a fresh name."""
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        dims = [s[i - (n - len(s))] for s in shapes if i - (n - len(s)) >= 0]
        dims = [d for d in dims if d != 1] or [1]
        first = dims[0]
        out.append(first if all(d == first for d in dims) else
                   next((d for d in dims if isinstance(d, (int, np.integer))), None) or imp.fresh())
    return out


def _emit_binary(imp: Any, node: Any, nm: str, fn: str) -> None:
    x, y = imp.value(node, node.input[0]), imp.value(node, node.input[1])
    if imp.dtype(x) != imp.dtype(y):
        raise imp.unsupported(node, f"inputs of two dtypes ({imp.dtype(x)}, {imp.dtype(y)})")
    out = broadcast(imp, imp.shape(x), imp.shape(y))
    dt = "bool" if fn in ("equal", "less", "less_equal", "greater", "greater_equal", "and", "or", "xor") \
        else imp.dtype(x)
    imp.emit(nm, "binary", [x, y], [node.output[0]], [out], dtypes=[dt], fn=fn)


@handler(*_BINARY)
def binary(imp: Any, node: Any, a: dict, nm: str) -> None:
    _emit_binary(imp, node, nm, _BINARY[node.op_type])


def _sigmoid_source(imp: Any, v: str) -> str | None:
    """The input of the sigmoid node that computed `v` among the last emitted nodes (None: not one).
    The sigmoid stays (dropped later as dead when nothing else reads it)."""
    for n in reversed(imp.nodes[-64:]):
        if v in n["outputs"]:
            return n["inputs"][0] if n["op"] == "sigmoid" else None
    return None


@handler("Add", "Mul")
def add_mul(imp: Any, node: Any, a: dict, nm: str) -> None:
    """The row-broadcast f32 cases keep the fast add / mul ops; anything else is `binary`."""
    x, y = imp.value(node, node.input[0]), imp.value(node, node.input[1])
    sx, sy = imp.shape(x), imp.shape(y)
    op = "add" if node.op_type == "Add" else "mul"

    def is_row(s: list, full: list) -> bool:
        return len(s) >= 1 and s[-1] == full[-1] and all(d == 1 for d in s[:-1]) and len(s) <= len(full)

    if imp.dtype(x) == "f32" and imp.dtype(y) == "f32" and sx and sy:
        if op == "mul" and sx == sy:  # x * Sigmoid(x) (SiLU, either order): one silu op
            for v, s in ((x, y), (y, x)):
                src = _sigmoid_source(imp, s)
                if src is not None and src == v:
                    imp.emit(nm, "silu", [v], [node.output[0]], [sx])
                    return
        if sx == sy or is_row(sy, sx):
            imp.emit(nm, op, [x, y], [node.output[0]], [sx])
            return
        if is_row(sx, sy) and len(sx) == len(sy):
            imp.emit(nm, op, [y, x], [node.output[0]], [sy])
            return
    _emit_binary(imp, node, nm, op)


@handler("Pow")
def power(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    e = imp.consts.get(imp.name(node.input[1]))
    if e is not None and e.size == 1 and imp.dtype(x) == "f32":
        v = float(e.reshape(-1)[0])
        if v == 2.0:
            imp.emit(nm, "mul", [x, x], [node.output[0]], [imp.shape(x)])
            return
        if v == 0.5:
            imp.emit(nm, "sqrt", [x], [node.output[0]], [imp.shape(x)])
            return
        if v == 1.0:
            imp.alias[node.output[0]] = x
            return
        if e.dtype != np.float32:  # Pow's exponent may have its own type: as the base's
            imp.consts[imp.name(node.input[1])] = e.astype(np.float32)
    _emit_binary(imp, node, nm, "pow")


@handler(*_UNARY)
def unary(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    attrs: dict[str, Any] = {"fn": _UNARY[node.op_type]}
    if node.op_type == "LeakyRelu":
        attrs["alpha"] = float(a.get("alpha", 0.01))
    imp.emit(nm, "unary", [x], [node.output[0]], [imp.shape(x)], dtypes=["bool" if node.op_type == "IsNaN" else
                                                                           imp.dtype(x)], **attrs)


@handler("IsInf")
def isinf(imp: Any, node: Any, a: dict, nm: str) -> None:
    if int(a.get("detect_negative", 1)) != 1 or int(a.get("detect_positive", 1)) != 1:
        raise imp.unsupported(node, "detecting one sign of infinity only")
    x = imp.value(node, node.input[0])
    imp.emit(nm, "unary", [x], [node.output[0]], [imp.shape(x)], dtypes=["bool"], fn="isinf")


@handler("LayerNormalization")
def layer_norm(imp: Any, node: Any, a: dict, nm: str) -> None:
    """Over the last axis with constant scale / bias: the layer_norm op."""
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    ax = int(a.get("axis", -1))
    if (ax + len(s) if ax < 0 else ax) != len(s) - 1 or len(node.output) > 1 and any(node.output[1:]):
        raise imp.unsupported(node, "normalizing over more than the last axis, or the Mean / InvStdDev outputs")
    ins = [x]
    for i, what in ((1, "scale"), (2, "bias")):
        if len(node.input) > i and node.input[i]:
            c = imp.const(node, i, what)
            cname = f"{nm.strip('/').replace('/', '.') or 'ln'}.{what}"
            imp.consts[cname] = np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (int(s[-1]),)) if
                                                     isinstance(s[-1], int) else c.reshape(-1), dtype=np.float32)
            ins.append(imp.value(node, cname))
    imp.emit(nm, "layer_norm", ins, [node.output[0]], [s], eps=float(a.get("epsilon", 1e-5)))


@handler("Clip")
def clip(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    lo, hi = -np.inf, np.inf
    if len(node.input) > 1 and node.input[1]:
        lo = float(imp.const(node, 1, "min").reshape(-1)[0])
    if len(node.input) > 2 and node.input[2]:
        hi = float(imp.const(node, 2, "max").reshape(-1)[0])
    imp.emit(nm, "unary", [x], [node.output[0]], [imp.shape(x)], fn="clip", alpha=max(lo, -3.4e38),
             beta=min(hi, 3.4e38))


@handler("Where")
def where(imp: Any, node: Any, a: dict, nm: str) -> None:
    c, x, y = (imp.value(node, i) for i in node.input[:3])
    if imp.dtype(x) != imp.dtype(y):
        raise imp.unsupported(node, f"x and y of two dtypes ({imp.dtype(x)}, {imp.dtype(y)})")
    out = broadcast(imp, imp.shape(c), imp.shape(x), imp.shape(y))
    imp.emit(nm, "where", [c, x, y], [node.output[0]], [out], dtypes=[imp.dtype(x)])


@handler("Cast")
def cast(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    to = _CAST.get(int(a["to"]))
    if to is None:
        raise imp.unsupported(node, f"cast to ONNX element type {a['to']}")
    if to == imp.dtype(x):
        imp.alias[node.output[0]] = x
        return
    imp.emit(nm, "cast", [x], [node.output[0]], [imp.shape(x)], dtypes=[to], to=to)


@handler(*_REDUCE)
def reduce(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    if len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in imp.const(node, 1, "axes")]
    else:
        axes = [int(v) for v in a.get("axes", [])]
    if not axes and a.get("noop_with_empty_axes", 0):
        imp.alias[node.output[0]] = x
        return
    keep = bool(a.get("keepdims", 1))
    red = {v % len(s) for v in axes} if axes else set(range(len(s)))
    out = [(1 if i in red else d) for i, d in enumerate(s) if keep or i not in red]
    imp.emit(nm, "reduce", [x], [node.output[0]], [out], fn=_REDUCE[node.op_type], axes=axes, keepdims=keep)


@handler("Shape")
def shape(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    n = len(imp.shape(x))
    st, en = int(a.get("start", 0)), a.get("end")
    lo = max(0, min(n, st + n if st < 0 else st))
    hi = n if en is None else max(0, min(n, int(en) + n if int(en) < 0 else int(en)))
    attrs = {} if (st == 0 and en is None) else {"range": [st, n if en is None else int(en)]}
    imp.emit(nm, "shape", [x], [node.output[0]], [[max(0, hi - lo)]], dtypes=["i64"], **attrs)


def reshape_runtime(imp: Any, node: Any, a: dict, nm: str) -> None:
    """Reshape whose target is computed at run time: the reshape_to view."""
    x, t = imp.value(node, node.input[0]), imp.value(node, node.input[1])
    ts = imp.shape(t)
    if len(ts) != 1 or not isinstance(ts[0], (int, np.integer)):
        raise imp.unsupported(node, "a target shape whose length is unknown at import")
    imp.emit(nm, "reshape_to", [x, t], [node.output[0]], [[imp.fresh() for _ in range(int(ts[0]))]],
             dtypes=[imp.dtype(x)], **({"allowzero": True} if a.get("allowzero", 0) else {}))


__all__ = ["broadcast", "reshape_runtime"]
