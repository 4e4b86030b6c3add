"""ONNX translations of the index and data-dependent-shape ops (docs/import.md "ONNX"): Gather,
GatherElements, GatherND, ScatterND, ScatterElements, NonZero, Range, CumSum, ConstantOfShape,
Expand, Tile, RandomNormalLike, ArgMax -> the ops of tags 60-72 (docs/graph.md "Version 2").
Shapes the importer cannot know (they depend on values) get fresh names; the executor resolves
them when the graph runs."""
from __future__ import annotations

from typing import Any

import numpy as np

from .onnx_registry import handler

_CAST = {1: "f32", 10: "f16", 6: "i32", 7: "i64", 2: "u8", 3: "i8", 9: "bool"}


def _axis(a: dict, rank: int, default: int = 0) -> int:
    ax = int(a.get("axis", default))
    return ax + rank if ax < 0 else ax


def _vals(imp: Any, node: Any) -> list[str]:
    return [imp.value(node, i) if i else "" for i in node.input]


@handler("Gather")
def gather(imp: Any, node: Any, a: dict, nm: str) -> None:
    x, idx = _vals(imp, node)[:2]
    s, si = imp.shape(x), imp.shape(idx)
    ax = _axis(a, len(s))
    imp.emit(nm, "gather", [x, idx], [node.output[0]], [s[:ax] + si + s[ax + 1:]], dtypes=[imp.dtype(x)],
             axis=int(a.get("axis", 0)))


@handler("GatherElements")
def gather_elements(imp: Any, node: Any, a: dict, nm: str) -> None:
    x, idx = _vals(imp, node)[:2]
    imp.emit(nm, "gather_elements", [x, idx], [node.output[0]], [imp.shape(idx)], dtypes=[imp.dtype(x)],
             axis=int(a.get("axis", 0)))


@handler("GatherND")
def gather_nd(imp: Any, node: Any, a: dict, nm: str) -> None:
    x, idx = _vals(imp, node)[:2]
    s, si = imp.shape(x), imp.shape(idx)
    b = int(a.get("batch_dims", 0))
    k = si[-1]
    out = si[:-1] + (s[b + int(k):] if isinstance(k, (int, np.integer)) else [imp.fresh()])
    imp.emit(nm, "gather_nd", [x, idx], [node.output[0]], [out], dtypes=[imp.dtype(x)], batch_dims=b)


def _reduction(imp: Any, node: Any, a: dict) -> dict:
    r = a.get("reduction", b"none")
    r = r.decode() if isinstance(r, bytes) else r
    return {} if r == "none" else {"reduction": r}


@handler("ScatterND")
def scatter_nd(imp: Any, node: Any, a: dict, nm: str) -> None:
    x, idx, upd = _vals(imp, node)[:3]
    imp.emit(nm, "scatter_nd", [x, idx, upd], [node.output[0]], [imp.shape(x)], dtypes=[imp.dtype(x)],
             **_reduction(imp, node, a))


@handler("ScatterElements")
def scatter_elements(imp: Any, node: Any, a: dict, nm: str) -> None:
    x, idx, upd = _vals(imp, node)[:3]
    imp.emit(nm, "scatter_elements", [x, idx, upd], [node.output[0]], [imp.shape(x)], dtypes=[imp.dtype(x)],
             axis=int(a.get("axis", 0)), **_reduction(imp, node, a))


@handler("NonZero")
def nonzero(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = _vals(imp, node)[0]
    imp.emit(nm, "nonzero", [x], [node.output[0]], [[len(imp.shape(x)), imp.fresh()]], dtypes=["i64"])


@handler("Range")
def range_(imp: Any, node: Any, a: dict, nm: str) -> None:
    st, lim, d = _vals(imp, node)[:3]
    imp.emit(nm, "range", [st, lim, d], [node.output[0]], [[imp.fresh()]], dtypes=[imp.dtype(st)])


@handler("CumSum")
def cumsum(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    ax = int(imp.const(node, 1, "axis").reshape(-1)[0])
    attrs: dict[str, Any] = {"axis": ax}
    if a.get("exclusive", 0):
        attrs["exclusive"] = True
    if a.get("reverse", 0):
        attrs["reverse"] = True
    imp.emit(nm, "cumsum", [x], [node.output[0]], [imp.shape(x)], **attrs)


@handler("ConstantOfShape")
def constant_of_shape(imp: Any, node: Any, a: dict, nm: str) -> None:
    shp = imp.value(node, node.input[0])
    fill = imp.nh.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    to = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
          np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8",
          np.dtype(np.bool_): "bool"}.get(fill.dtype)
    if to is None:
        raise imp.unsupported(node, f"a fill value of type {fill.dtype}")
    n = imp.shape(shp)[0]
    dims = [imp.fresh() for _ in range(int(n))] if isinstance(n, (int, np.integer)) else None
    if dims is None:
        raise imp.unsupported(node, "a shape whose length is unknown at import")
    imp.emit(nm, "constant_of_shape", [shp], [node.output[0]], [dims], dtypes=[to],
             value=float(fill.reshape(-1)[0]), to=to)


def _expand_like(imp: Any, node: Any, nm: str, op: str) -> None:
    x, shp = _vals(imp, node)[:2]
    n = imp.shape(shp)[0]
    if not isinstance(n, (int, np.integer)):
        raise imp.unsupported(node, "a shape whose length is unknown at import")
    rank = max(int(n), len(imp.shape(x))) if op == "expand" else len(imp.shape(x))
    imp.emit(nm, op, [x, shp], [node.output[0]], [[imp.fresh() for _ in range(rank)]], dtypes=[imp.dtype(x)])


@handler("Expand")
def expand(imp: Any, node: Any, a: dict, nm: str) -> None:
    _expand_like(imp, node, nm, "expand")


@handler("Tile")
def tile(imp: Any, node: Any, a: dict, nm: str) -> None:
    _expand_like(imp, node, nm, "tile")


@handler("RandomNormalLike")
def random_normal_like(imp: Any, node: Any, a: dict, nm: str) -> None:
    """The noise of the graph: numbers of the runtime's counter-based generator (seed: the node's
    `seed` attribute when it has one, else 0; docs/graph.md "random_normal_like")."""
    x = imp.value(node, node.input[0])
    dt = _CAST.get(int(a["dtype"])) if "dtype" in a else imp.dtype(x)
    if dt != imp.dtype(x):
        raise imp.unsupported(node, f"an output dtype ({dt}) other than the input's")
    attrs: dict[str, Any] = {"mean": float(a.get("mean", 0.0)), "scale": float(a.get("scale", 1.0))}
    if "seed" in a:
        attrs["seed"] = int(a["seed"])
    imp.emit(nm, "random_normal_like", [x], [node.output[0]], [imp.shape(x)], **attrs)


@handler("ArgMax")
def argmax(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    ax = _axis(a, len(s))
    keep = bool(a.get("keepdims", 1))
    out = [(1 if i == ax else d) for i, d in enumerate(s) if keep or i != ax]
    imp.emit(nm, "argmax", [x], [node.output[0]], [out], dtypes=["i64"], axis=int(a.get("axis", 0)), keepdims=keep,
             **({"select_last_index": True} if a.get("select_last_index", 0) else {}))


__all__: list[str] = []
