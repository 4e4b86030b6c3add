"""ONNX -> `.model` with a graph section of version 2 (docs/import.md, "ONNX"; docs/graph.md,
"Version 2"). Needs the `onnx` package (the `cyb_llm[onnx]` extra); only this importer uses it.

    import_onnx("silero_vad_v6.onnx", "vad.model")

What it does:
- float initializers read by ops go to the weights section as f32 (LSTM weights squeezed to
  [4H, I], [4H, H], [8H]); integer ones (shapes, axes, pads) are only read at import;
- Constant nodes, Shape of known shapes and the small integer ops over constants (Cast, Gather,
  Concat, Unsqueeze, Squeeze, Reshape, Add, Sub, Mul, Div) are folded;
- every other node becomes one or a few ops of the op schema (the table in docs/import.md:
  Pow 2 -> mul, Pow 0.5 -> sqrt, Conv -> conv1d + transpose, LSTM -> the fused lstm op,
  Squeeze/Unsqueeze/Reshape/Flatten -> reshape views, Identity -> an alias);
- ops it cannot translate are reported together, with their counts and node names
  (UnsupportedOp), before anything is written.
Shapes are tracked symbolically (sizes or the graph's dim names) to write reshape targets and the
outputs' dims. State pairs (an output fed back as an input on the next call): `state=` or, by
default, an output named like an input plus "n" ("hn" -> "h") of the same dtype and dims.
"""
from __future__ import annotations

import heapq
import json
import os
from typing import Any

import numpy as np

from ..errors import Error, FormatError, InvalidConfig, UnsupportedOp
from ..pipelines import STAGES_MODEL_TYPE
from . import onnx_ops, onnx_ops_decomp, onnx_ops_index, onnx_ops_nn  # noqa: F401  (register the translations)
from .common import make_error, write_import
from .onnx_registry import HANDLERS

MODEL_TYPE = "onnx-graph"

# ONNX elem_type -> (.model dtype name, numpy dtype)
_DTYPES = {1: ("f32", np.float32), 6: ("i32", np.int32), 7: ("i64", np.int64), 10: ("f16", np.float16),
           9: ("bool", np.bool_), 2: ("u8", np.uint8), 3: ("i8", np.int8)}
_NP_NAMES = {np.dtype(v[1]): v[0] for v in _DTYPES.values()}
OPSET_RANGE = (13, 21)  # the default-domain opsets the importer reads
_NOT_FOLDED = {"RandomNormalLike", "RandomNormal", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Sqrt": "sqrt", "Softmax": None}
_FOLDABLE = {"Constant", "Shape", "Cast", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Add", "Sub", "Mul",
             "Div", "Identity", "ConstantOfShape", "Range"}
_SUPPORTED = {"Relu", "Sigmoid", "Tanh", "Sqrt", "Add", "Mul", "Pow", "Conv", "Transpose", "Slice", "Pad",
              "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "LSTM", "Constant", "Shape", "Cast",
              "Gather", "Concat", "Sub", "Div", "ConstantOfShape", "Range"}

Dim = Any  # int (a known size) or str (a symbolic size)


def _contiguous(arr: np.ndarray, dtype: Any) -> np.ndarray:
    """`arr` as a C-contiguous array of `dtype` (a copy only where needed) that keeps a 0-d array 0-d
    (np.ascontiguousarray makes it 1-d: a scalar initializer became a [1] tensor, and a scalar op
    with it gave [1], not [])."""
    return np.asarray(arr, dtype=dtype, order="C")


def _mono(d: Dim) -> tuple[int, tuple[str, ...]]:
    """A symbolic size as coefficient x names: 12 -> (12, ()), "batch" -> (1, ("batch",)),
    "4*batch" -> (4, ("batch",))."""
    if isinstance(d, (int, np.integer)):
        return int(d), ()
    coef, names = 1, []
    for part in str(d).split("*"):
        if part.lstrip("-").isdigit():
            coef *= int(part)
        else:
            names.append(part)
    return coef, tuple(sorted(names))


def _dim(coef: int, names: tuple[str, ...]) -> Dim:
    """The inverse of _mono: an int when there are no names."""
    if not names:
        return coef
    return "*".join(([str(coef)] if coef != 1 else []) + list(names))


def _mono_mul(a: Dim, b: Dim) -> Dim:
    ca, na = _mono(a)
    cb, nb = _mono(b)
    return _dim(ca * cb, tuple(sorted(na + nb)))


def _mono_div(a: Dim, b: Dim) -> Dim | None:
    """a / b when it is exact (b's names all in a's, coefficients dividing), else None."""
    ca, na = _mono(a)
    cb, nb = _mono(b)
    left = list(na)
    for n in nb:
        if n not in left:
            return None
        left.remove(n)
    if cb == 0 or ca % cb:
        return None
    return _dim(ca // cb, tuple(left))


def _label(node: Any, k: int | None = None) -> str:
    """The name messages give a node: its name, else its first output, else its index."""
    if node.name:
        return node.name
    out = next((o for o in node.output if o), "")
    return out or (f"#{k} ({node.op_type})" if k is not None else f"({node.op_type} without outputs)")


def tensor_array(t: Any, what: str) -> np.ndarray:
    """The values of an ONNX TensorProto, checked first: element type known, dims >= 0, and as many
    bytes (raw_data) or values (the typed fields) as the dims say. FormatError naming `what`
    otherwise (nothing is allocated from the dims of a broken tensor)."""
    from onnx import TensorProto, helper, numpy_helper

    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise make_error(FormatError, f"{what}: negative dims {dims}", section="onnx", key=t.name)
    if t.data_location == TensorProto.EXTERNAL:
        raise make_error(FormatError, f"{what}: its data is in an external file that was not read", section="onnx",
                         key=t.name)
    try:
        npt = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    except Exception:  # noqa: BLE001 - an element type this onnx package does not know
        raise make_error(FormatError, f"{what}: unknown ONNX element type {t.data_type}", section="onnx",
                         key=t.name) from None
    n = 1
    for d in dims:
        n *= d
    name = TensorProto.DataType.Name(t.data_type) if t.data_type in TensorProto.DataType.values() else t.data_type
    if t.data_type != TensorProto.STRING and npt.itemsize and t.HasField("raw_data"):
        bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4}.get(t.data_type, 8 * npt.itemsize)
        want = (n * bits + 7) // 8
        if len(t.raw_data) != want:
            raise make_error(FormatError, f"{what}: raw_data holds {len(t.raw_data)} bytes, its dims {dims} of "
                             f"{name} need {want}", section="onnx", key=t.name)
    elif n and t.data_type not in (TensorProto.STRING,):
        field = helper.tensor_dtype_to_field(t.data_type)
        per = 2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1
        have = len(getattr(t, field))
        if have != n * per and t.data_type not in (TensorProto.INT4, TensorProto.UINT4):
            raise make_error(FormatError, f"{what}: {field} holds {have} values, its dims {dims} of {name} need "
                             f"{n * per}", section="onnx", key=t.name)
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - any other inconsistency the onnx package finds
        raise make_error(FormatError, f"{what}: unreadable tensor ({e})", section="onnx", key=t.name) from None


def _need_onnx():
    try:
        import onnx  # noqa: F401  (the importer's own dependency: the cyb_llm[onnx] extra)
        from onnx import numpy_helper
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise make_error(InvalidConfig, "importing .onnx files needs the onnx package: pip install 'cyb_llm[onnx]'",
                         field="source", reason="the onnx package is not installed") from e
    return onnx, numpy_helper


def _slice_count(start: int, end: int, step: int, dim: int) -> int:
    """Elements ONNX Slice takes from a dim (starts / ends from the end when negative, clamped to
    [0, dim] for steps > 0 and [0, dim - 1] / [-1, dim - 1] for steps < 0: unlike Python's slicing, a
    start before the dim's first element still reads it backwards)."""
    start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return max(0, (end - start + step - 1) // step)
    if dim == 0:
        return 0
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return max(0, (start - end - step - 1) // -step)


class _Importer:
    def __init__(self, model: Any, state: dict[str, str] | None):
        onnx, self.nh = _need_onnx()
        self.onnx = onnx
        self.model = model
        self.g = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.state_arg = state
        self.consts: dict[str, np.ndarray] = {}     # values known at import (initializers, folded)
        self.shapes: dict[str, list[Dim]] = {}       # symbolic shapes of run-time values
        self.alias: dict[str, str] = {}              # Identity outputs -> their input
        self.weights: dict[str, np.ndarray] = {}     # tensors of the weights section (f32)
        # weights made at import from a constant (a MatMul's B transposed, a Gemm's scaled), keyed
        # by the constant and the transform: nodes sharing one initializer share the one copy
        self.derived: dict[tuple, str] = {}
        self.nodes: list[dict] = []
        self.node_names: set[str] = set()
        self.constants: list[dict] = []
        self.const_names: set[str] = set()
        self.dtypes: dict[str, str] = {}             # element types of run-time values (default f32)
        # run-time integer vectors whose elements are known at import as sizes or dim names (a
        # Shape of a symbolic shape, and Gather / Concat / Slice / Unsqueeze / Squeeze / Cast of
        # those): a Reshape to one of them is a static reshape view (its shape nodes then drop out)
        self.symvals: dict[str, list[Dim]] = {}
        self.n_sym = 0
        self.fresh_names: set[str] = set()  # sizes this inference could not name
        self.used: set[str] = set()
        for t in self.g.initializer:
            self.consts[t.name] = tensor_array(t, f"initializer '{t.name}'")

    # ---- helpers ----------------------------------------------------------------------------
    def name(self, v: str) -> str:
        while v in self.alias:
            v = self.alias[v]
        return v

    def fresh(self) -> str:
        self.n_sym += 1
        name = f"d{self.n_sym}"
        self.fresh_names.add(name)
        return name

    def attrs(self, node: Any) -> dict[str, Any]:
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    def const(self, node: Any, i: int, what: str) -> np.ndarray:
        if i >= len(node.input) or not node.input[i]:
            raise self.unsupported(node, f"its {what} input is absent")
        v = self.name(node.input[i])
        if v not in self.consts:
            raise self.unsupported(node, f"its {what} must be known at import (a constant), "
                                         f"'{node.input[i]}' is computed at run time")
        return self.consts[v]

    def unsupported(self, node: Any, why: str) -> Exception:
        return make_error(UnsupportedOp, f"ONNX node '{_label(node)}' ({node.op_type}): {why}",
                          op=f"{node.op_type} (node '{_label(node)}': {why})", backend="onnx import",
                          dtype="")

    def value(self, node: Any, v: str) -> str:
        """A run-time value's name for the graph; a float constant becomes an initializer."""
        v = self.name(v)
        if v in self.shapes:
            return v
        if v in self.consts:
            arr = self.consts[v]
            if arr.ndim > 8:
                raise self.unsupported(node, f"'{v}' has {arr.ndim} dims (at most 8)")
            if arr.dtype.kind != "f":  # integers and booleans read at run time: a constant of the graph
                if v not in self.const_names and v not in self.weights:
                    dt = _NP_NAMES.get(arr.dtype)
                    if dt is None:
                        raise self.unsupported(node, f"'{v}' has element type {arr.dtype}")
                    if arr.size > 1 << 16:  # a large one (a quantized embedding table): a tensor of the weights section
                        self.weights[v] = _contiguous(arr, arr.dtype)
                        return v
                    self.constants.append({"name": v, "dtype": dt, "shape": [int(d) for d in arr.shape],
                                           "values": [int(x) for x in arr.reshape(-1)]})
                    self.const_names.add(v)
                return v
            if v not in self.weights:
                self.weights[v] = _contiguous(arr, np.float32)
            return v
        raise make_error(FormatError, f"ONNX node '{node.name}' reads '{v}', which nothing defines before it",
                         section="onnx", key=v)

    def shape(self, v: str) -> list[Dim]:
        v = self.name(v)
        if v in self.shapes:
            return self.shapes[v]
        return list(self.consts[v].shape)

    def emit(self, name: str, op: str, inputs: list[str], outputs: list[str], shapes: list[list[Dim]],
             dtypes: list[str] | None = None, **attrs: Any) -> None:
        """Appends a node; `shapes` (sizes or names) and `dtypes` (default: the first input's, f32 for
        a constant) describe its outputs for the translation of later nodes. Node names are unique in
        a graph section while ONNX's need not be: a name taken gets "#2", "#3", ..."""
        if name in self.node_names:
            k = 2
            while f"{name}#{k}" in self.node_names:
                k += 1
            name = f"{name}#{k}"
        self.node_names.add(name)
        node = {"name": name, "op": op, "inputs": inputs, "outputs": outputs}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        first = self.dtype(inputs[0]) if inputs and inputs[0] else "f32"
        for k, (o, s) in enumerate(zip(outputs, shapes)):
            self.shapes[o] = list(s)
            self.dtypes[o] = dtypes[k] if dtypes else first

    def dtype(self, v: str) -> str:
        """The element type of a value (run-time or constant)."""
        v = self.name(v)
        if v in self.dtypes:
            return self.dtypes[v]
        if v in self.consts:
            return _NP_NAMES.get(self.consts[v].dtype, "f32") if self.consts[v].dtype.kind != "f" else "f32"
        return "f32"

    def reshape(self, name: str, x: str, out: str, target: list[Dim]) -> None:
        """A reshape view of x to `target` (sizes or names): names equal to x's dim at the same
        index become 0, one remaining name becomes -1."""
        src = self.shape(x)
        spec: list[int] = []
        unknown = 0
        for i, d in enumerate(target):
            if isinstance(d, (int, np.integer)):
                spec.append(int(d))
            elif i < len(src) and src[i] == d:
                spec.append(0)
            else:
                spec.append(-1)
                unknown += 1
        if not target:  # a 0-d result: the reshape op's shape has 1 to 8 dims (the callers fall back to views)
            raise make_error(UnsupportedOp, f"reshape '{name}': a 0-d target", op=f"reshape (node '{name}')",
                             backend="onnx import", dtype="")
        if unknown > 1:
            raise make_error(UnsupportedOp, f"reshape '{name}': more than one dim unknown at import ({target})",
                             op=f"reshape (node '{name}')", backend="onnx import", dtype="")
        # a 0 meant for a size 0 would copy the input's dim: sizes 0 are not supported
        if any(isinstance(d, (int, np.integer)) and d == 0 for d in target):
            raise make_error(UnsupportedOp, f"reshape '{name}': empty dims", op=f"reshape (node '{name}')",
                             backend="onnx import", dtype="")
        self.emit(name, "reshape", [x], [out], [target], shape=spec)

    # ---- folding ----------------------------------------------------------------------------
    def try_fold(self, node: Any) -> bool:
        op = node.op_type
        if op not in _FOLDABLE:
            return False
        a = self.attrs(node)
        if op == "Constant":
            if "value" in a:
                val = tensor_array(a["value"], f"the value of Constant node '{node.name or node.output[0]}'")
            elif "value_float" in a:
                val = np.array(a["value_float"], np.float32)
            elif "value_floats" in a:
                val = np.array(a["value_floats"], np.float32)
            elif "value_int" in a:
                val = np.array(a["value_int"], np.int64)
            elif "value_ints" in a:
                val = np.array(a["value_ints"], np.int64)
            else:
                raise self.unsupported(node, "a Constant without a tensor or number value")
            self.consts[node.output[0]] = val
            return True
        if op == "Shape":
            s = self.shape(node.input[0])
            start, end = a.get("start", 0), a.get("end", None)
            s = s[start:end]
            if all(isinstance(d, (int, np.integer)) for d in s):
                self.consts[node.output[0]] = np.array(s, np.int64)
                return True
            return False
        ins = [self.name(i) for i in node.input if i]
        if not all(i in self.consts for i in ins):
            return False
        x = [self.consts[i] for i in ins]
        if op == "Cast":
            to = a["to"]
            val = x[0].astype(_DTYPES[to][1]) if to in _DTYPES else None
            if val is None:
                return False
        elif op == "Identity":
            val = x[0]
        elif op == "Gather":
            val = np.take(x[0], x[1], axis=a.get("axis", 0))
        elif op == "Concat":
            val = np.concatenate(x, axis=a["axis"])
        elif op == "Unsqueeze":
            axes = list(x[1]) if len(x) > 1 else a["axes"]
            val = x[0]
            nd = val.ndim + len(axes)
            for ax in sorted(int(v) % nd for v in axes):
                val = np.expand_dims(val, ax)
        elif op == "Squeeze":
            axes = list(x[1]) if len(x) > 1 else a.get("axes")
            val = np.squeeze(x[0], axis=None if axes is None else tuple(int(v) for v in axes))
        elif op == "Reshape":
            shape = [int(d) if d != 0 else x[0].shape[i] for i, d in enumerate(x[1])]
            val = x[0].reshape(shape)
        elif op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}.get(op)
            if op == "Div":
                val = x[0] // x[1] if x[0].dtype.kind == "i" else x[0] / x[1]
            else:
                val = f(x[0], x[1])
        elif op == "ConstantOfShape":
            fill = self.nh.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
            val = np.full(tuple(int(d) for d in x[0]), fill.reshape(-1)[0], dtype=fill.dtype)
        elif op == "Range":
            val = np.arange(x[0], x[1], x[2])
        else:
            return False
        self.consts[node.output[0]] = np.asarray(val)
        return True

    def fold_any(self, node: Any) -> bool:
        """Any other deterministic node whose inputs are all known at import: evaluated once with the
        onnx package's reference evaluator (its outputs become constants)."""
        if node.op_type in _NOT_FOLDED or node.domain not in ("", "ai.onnx"):
            return False
        ins = [self.name(i) for i in node.input]
        if not node.input or not all((not i) or i in self.consts for i in ins):
            return False
        if sum(int(self.consts[i].size) for i in ins if i) > 1 << 22:
            return False  # a large computation is the run time's
        from onnx.reference import ReferenceEvaluator
        h = self.onnx.helper
        feeds = {f"in{k}": self.consts[i] for k, i in enumerate(ins) if i}
        n2 = h.make_node(node.op_type, [f"in{k}" if i else "" for k, i in enumerate(ins)],
                         [f"out{k}" for k in range(len(node.output))], domain=node.domain)
        n2.attribute.extend(node.attribute)
        g = h.make_graph([n2], "fold",
                         [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), None)
                          for k, v in feeds.items()],
                         [h.make_tensor_value_info(f"out{k}", 0, None) for k in range(len(node.output))])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", self.opset)])
        try:
            outs = ReferenceEvaluator(m).run(None, feeds)
        except Exception:  # noqa: BLE001 - not foldable here: translated for the run time instead
            return False
        for o, val in zip(node.output, outs):
            if o:
                self.consts[o] = np.asarray(val)
        return True

    # ---- structure --------------------------------------------------------------------------
    def ordered_nodes(self, defined: list[str]) -> list[Any]:
        """The nodes in an order where each reads only names defined before it (ONNX asks for that
        order; a file out of order is sorted). FormatError naming the node for a node without
        outputs, inputs or outputs outside the op's arity, a name defined twice, an input nothing
        defines, and a cycle (the nodes along it)."""
        nodes = list(self.g.node)
        made: dict[str, int] = {}
        known = set(defined)
        for k, n in enumerate(nodes):
            if not any(n.output):
                raise make_error(FormatError, f"ONNX node '{_label(n, k)}' ({n.op_type}) has no outputs",
                                 section="onnx", key=_label(n, k))
            self.check_arity(n)
            for o in n.output:
                if not o:
                    continue
                if o in made or o in known:
                    first = f"node '{_label(nodes[made[o]])}'" if o in made else "an input or initializer"
                    raise make_error(FormatError, f"ONNX node '{_label(n)}' ({n.op_type}) defines '{o}', which "
                                     f"{first} defines already (each name is defined once)", section="onnx", key=o)
                made[o] = k
        deps: list[set[int]] = []
        for n in nodes:
            d = set()
            for i in n.input:
                if not i or i in known:
                    continue
                if i not in made:
                    raise make_error(FormatError, f"ONNX node '{_label(n)}' ({n.op_type}) reads '{i}', which no "
                                     "node, graph input or initializer defines", section="onnx", key=i)
                d.add(made[i])
            deps.append(d)
        order: list[int] = []
        done = [False] * len(nodes)
        readers: dict[int, list[int]] = {}
        waiting = [len(d) for d in deps]
        for k, d in enumerate(deps):
            for j in d:
                readers.setdefault(j, []).append(k)
        ready = [k for k in range(len(nodes)) if not waiting[k]]
        heapq.heapify(ready)  # the file's order among the ready nodes: a sorted file is kept as it is
        while ready:
            k = heapq.heappop(ready)
            order.append(k)
            done[k] = True
            for r in readers.get(k, ()):
                waiting[r] -= 1
                if not waiting[r]:
                    heapq.heappush(ready, r)
        if len(order) < len(nodes):
            start = next(k for k in range(len(nodes)) if not done[k])
            path, seen = [start], {start: 0}
            while True:  # walk to an undone dependency until one repeats: that loop is a cycle
                nxt = next(j for j in sorted(deps[path[-1]]) if not done[j])
                if nxt in seen:
                    loop = path[seen[nxt]:] + [nxt]
                    break
                seen[nxt] = len(path)
                path.append(nxt)
            names = " <- ".join(f"'{_label(nodes[j])}'" for j in loop)
            raise make_error(FormatError, f"the ONNX graph has a cycle: {names} (each reads the next's output)",
                             section="onnx", key=_label(nodes[loop[0]]))
        return [nodes[k] for k in order]

    def check_declarations(self) -> None:
        """FormatError for a graph input, initializer or output declared twice; UnsupportedOp for
        sparse initializers (not read by this importer), naming them."""
        if self.g.sparse_initializer:
            names = [t.values.name for t in self.g.sparse_initializer]
            raise make_error(UnsupportedOp, f"sparse initializers ({', '.join(names[:5])}"
                             f"{', ...' if len(names) > 5 else ''}): this importer reads dense tensors only",
                             op=f"sparse initializer '{names[0]}'", backend="onnx import", dtype="")
        for what, names in (("graph input", [i.name for i in self.g.input]),
                            ("initializer", [t.name for t in self.g.initializer]),
                            ("graph output", [o.name for o in self.g.output])):
            seen: set[str] = set()
            for n in names:
                if n in seen:
                    raise make_error(FormatError, f"{what} '{n}' is declared twice", section="onnx", key=n)
                seen.add(n)

    def check_arity(self, n: Any) -> None:
        """FormatError naming the node when its input / output count is outside the ONNX op's."""
        if n.domain not in ("", "ai.onnx"):
            return
        try:
            sch = self.onnx.defs.get_schema(n.op_type, self.opset, "")
        except Exception:  # noqa: BLE001 - not an op of this opset: check_supported reports it
            return
        ni = len(n.input)
        while ni and not n.input[ni - 1]:
            ni -= 1  # trailing "" = absent optional inputs
        no = len(n.output)
        for what, count, lo, hi in (("inputs", ni, sch.min_input, sch.max_input),
                                    ("outputs", no, sch.min_output, sch.max_output)):
            if not lo <= count <= hi:
                rng = str(lo) if lo == hi else f"{lo} to {hi}"
                raise make_error(FormatError, f"ONNX node '{_label(n)}' ({n.op_type}) has {count} {what}; "
                                 f"{n.op_type} of opset {self.opset} takes {rng}", section="onnx", key=_label(n))

    # ---- translation --------------------------------------------------------------------------
    def check_supported(self) -> None:
        bad: dict[str, list[str]] = {}
        for n in self.g.node:
            if n.domain not in ("", "ai.onnx") or (n.op_type not in _SUPPORTED and n.op_type not in HANDLERS):
                key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                bad.setdefault(key, []).append(_label(n))
        if bad:
            parts = [f"{op} x{len(names)} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
                     for op, names in sorted(bad.items())]
            raise make_error(UnsupportedOp, "the ONNX graph has ops this importer does not translate: " +
                             "; ".join(parts), op=", ".join(parts), backend="onnx import", dtype="")

    def run(self) -> tuple[dict, dict[str, np.ndarray]]:
        lo, hi = OPSET_RANGE
        if not lo <= self.opset <= hi:
            raise make_error(UnsupportedOp, f"ONNX opset {self.opset}: this importer reads opsets {lo} to {hi} "
                             "(onnx.version_converter can convert the file)", op=f"opset {self.opset}",
                             backend="onnx import", dtype="")
        self.check_supported()
        self.check_declarations()
        inputs = []
        init_names = {t.name for t in self.g.initializer}
        for i in self.g.input:
            if i.name in init_names:
                continue
            tt = i.type.tensor_type
            if tt.elem_type not in _DTYPES:
                raise make_error(UnsupportedOp, f"input '{i.name}': ONNX element type {tt.elem_type}",
                                 op=f"input '{i.name}'", backend="onnx import", dtype=str(tt.elem_type))
            dims: list[Dim] = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                else:
                    dims.append(d.dim_param or f"{i.name}_{k}")
            self.shapes[i.name] = dims
            self.dtypes[i.name] = _DTYPES[tt.elem_type][0]
            inputs.append({"name": i.name, "dtype": _DTYPES[tt.elem_type][0], "shape": dims})
        for node in self.ordered_nodes([i.name for i in self.g.input] + list(init_names)):
            try:
                if self.try_fold(node) or self.fold_any(node):
                    continue
                self.translate(node)
                self.track_symval(node)
            except Error:
                raise
            except Exception as e:  # noqa: BLE001 - a node this importer did not foresee: named, not a traceback
                raise make_error(FormatError, f"ONNX node '{_label(node)}' ({node.op_type}) could not be translated: "
                                 f"{type(e).__name__}: {e}", section="onnx", key=_label(node)) from e
        outputs = []
        for o in self.g.output:
            v = self.name(o.name)
            if v not in self.shapes and v not in self.consts:
                raise make_error(FormatError, f"graph output '{o.name}' is defined by no node, input or initializer",
                                 section="onnx", key=o.name)
            if v not in self.shapes:
                raise make_error(UnsupportedOp, f"output '{o.name}' is a constant of the graph",
                                 op=f"output '{o.name}'", backend="onnx import", dtype="")
            if v != o.name:  # an output that is another value (Identity): a reshape view under its own name
                self.reshape(f"{o.name}.identity", v, o.name, self.shapes[v])
            dims = self.shapes[o.name]
            declared = o.type.tensor_type.shape.dim
            if len(declared) == len(dims):  # the file's dim names where this inference has none of its own
                dims = [d.dim_param if (x in self.fresh_names and d.dim_param) else x for x, d in zip(dims, declared)]
            outputs.append({"name": o.name, "dtype": self.dtype(o.name), "shape": dims})
        self.drop_dead_nodes([o["name"] for o in outputs])
        state = self.state_pairs(inputs, outputs)
        graph: dict[str, Any] = {"version": 2, "inputs": inputs, "outputs": outputs}
        if self.weights:
            graph["initializers"] = [{"name": n} for n in self.weights]
        if self.constants:
            graph["constants"] = self.constants
        graph["nodes"] = self.nodes
        if state:
            graph["state"] = [{"output": o, "input": i} for o, i in state]
        return graph, self.weights

    def symval(self, v: str) -> list[Dim] | None:
        """The elements of a 0-D / 1-D integer value known at import (sizes or names), or None."""
        v = self.name(v)
        if v in self.symvals:
            return self.symvals[v]
        c = self.consts.get(v)
        if c is not None and c.dtype.kind in "iu" and c.ndim <= 1 and c.size <= 16:
            return [int(x) for x in c.reshape(-1)]
        return None

    def track_symval(self, node: Any) -> None:
        op, a = node.op_type, None
        out = node.output[0] if node.output else ""
        if not out:
            return
        ins = [self.symval(i) if i else None for i in node.input]
        a = self.attrs(node)
        val: list[Dim] | None = None
        if op == "Shape":
            s = self.shape(node.input[0])
            st, en = int(a.get("start", 0)), a.get("end")
            val = list(s[st:en if en is None else int(en)])
        elif ins and ins[0] is not None:
            x = ins[0]
            if op == "Gather" and int(a.get("axis", 0)) == 0 and len(ins) > 1 and ins[1] is not None and \
                    all(isinstance(k, int) for k in ins[1]):
                try:
                    val = [x[k] for k in ins[1]]
                except IndexError:
                    val = None
            elif op == "Concat" and all(v is not None for v in ins):
                val = [d for v in ins for d in v]  # type: ignore[union-attr]
            elif op in ("Unsqueeze", "Squeeze", "Identity", "Reshape", "Flatten") or \
                    (op == "Cast" and int(a.get("to", 0)) in (6, 7)):
                val = list(x) if len(self.shape(out)) <= 1 else None
            elif op in ("Mul", "Div", "Add", "Sub") and len(ins) == 2 and ins[1] is not None and \
                    (len(x) == len(ins[1]) or len(ins[1]) == 1 or len(x) == 1):
                n = max(len(x), len(ins[1]))
                xa = x * n if len(x) == 1 else x
                xb = ins[1] * n if len(ins[1]) == 1 else ins[1]
                res: list[Dim] = []
                for u, w in zip(xa, xb):
                    if op == "Mul":
                        r: Dim | None = _mono_mul(u, w)
                    elif op == "Div":
                        r = _mono_div(u, w)
                    elif isinstance(u, int) and isinstance(w, int):
                        r = u + w if op == "Add" else u - w
                    else:
                        r = None
                    if r is None:
                        break
                    res.append(r)
                else:
                    val = res if len(self.shape(out)) == 1 or (len(res) == 1 and not self.shape(out)) else None
            elif op == "Slice" and all(v is not None for v in ins[1:3]) and len(ins) <= 4:
                st, en = ins[1][0], ins[2][0]  # type: ignore[index]
                if isinstance(st, int) and isinstance(en, int):
                    val = list(x[st:min(en, 2 ** 62)])
        if val is not None:
            self.symvals[out] = val

    def drop_dead_nodes(self, outputs: list[str]) -> None:
        """Removes the nodes no graph output depends on, and the weights / constants they alone read."""
        live = set(outputs)
        kept = []
        for n in reversed(self.nodes):
            if any(o in live for o in n["outputs"]):
                kept.append(n)
                live.update(i for i in n["inputs"] if i)
        self.n_dead = len(self.nodes) - len(kept)
        self.nodes = kept[::-1]
        self.weights = {k: v for k, v in self.weights.items() if k in live}
        self.constants = [c for c in self.constants if c["name"] in live]

    def state_pairs(self, inputs: list[dict], outputs: list[dict]) -> list[tuple[str, str]]:
        ins = {i["name"]: i for i in inputs}
        outs = {o["name"]: o for o in outputs}
        if self.state_arg is not None:
            for o, i in self.state_arg.items():
                if o not in outs or i not in ins:
                    raise make_error(InvalidConfig, f"state pair {o} -> {i}: needs an output and an input of the graph",
                                     field="state", reason=f"{o} -> {i} is not an output -> input pair")
            return list(self.state_arg.items())
        pairs = []
        for o in outputs:
            for i in inputs:
                if o["name"].lower() in (i["name"].lower() + "n", i["name"].lower() + "_out") \
                        and o["dtype"] == i["dtype"] and o["shape"] == i["shape"]:
                    pairs.append((o["name"], i["name"]))
        return pairs

    def translate(self, node: Any) -> None:
        op = node.op_type
        a = self.attrs(node)
        nm = node.name or node.output[0]
        out = node.output[0]
        if op in HANDLERS:
            HANDLERS[op](self, node, a, nm)
        elif op in ("Relu", "Sigmoid", "Tanh", "Sqrt"):
            x = self.value(node, node.input[0])
            self.emit(nm, _UNARY[op], [x], [out], [self.shape(x)])
        elif op in ("Add", "Mul"):
            self.binary(node, "add" if op == "Add" else "mul")
        elif op == "Pow":
            e = self.const(node, 1, "exponent")
            x = self.value(node, node.input[0])
            if e.size != 1:
                raise self.unsupported(node, "only a scalar exponent")
            e = float(e.reshape(-1)[0])
            if e == 2.0:
                self.emit(nm, "mul", [x, x], [out], [self.shape(x)])
            elif e == 0.5:
                self.emit(nm, "sqrt", [x], [out], [self.shape(x)])
            elif e == 1.0:
                self.alias[out] = x
            else:
                raise self.unsupported(node, f"exponent {e} (2, 0.5 and 1 are translated)")
        elif op == "Identity" or (op == "Cast" and self.shape_dtype_float(node, a)):
            self.alias[out] = self.value(node, node.input[0])
        elif op == "Transpose":
            x = self.value(node, node.input[0])
            s = self.shape(x)
            perm = [int(p) for p in a.get("perm", reversed(range(len(s))))]
            if sorted(perm) != list(range(len(s))):
                raise make_error(FormatError, f"ONNX node '{nm}' (Transpose): perm {perm} is not a permutation of "
                                 f"the {len(s)} axes of its input", section="onnx", key=nm)
            self.emit(nm, "transpose", [x], [out], [[s[p] for p in perm]], perm=perm)
        elif op == "Slice":
            self.slice(node, nm)
        elif op == "Pad":
            self.pad(node, a, nm)
        elif op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten"):
            self.view(node, a, nm)
        elif op == "Conv":
            self.conv(node, a, nm)
        elif op == "LSTM":
            self.lstm(node, a, nm)
        else:
            raise self.unsupported(node, "its inputs are not all known at import and it has no run-time translation")

    def shape_dtype_float(self, node: Any, a: dict) -> bool:
        return a.get("to") == 1 and self.name(node.input[0]) in self.shapes

    def binary(self, node: Any, op: str) -> None:
        nm, out = node.name or node.output[0], node.output[0]
        x, y = self.value(node, node.input[0]), self.value(node, node.input[1])
        sx, sy = self.shape(x), self.shape(y)
        if sx == sy:
            self.emit(nm, op, [x, y], [out], [sx])
            return
        # one row broadcast over the other's rows (bias-like): [.., C] with [C] / [1, .., C]
        def is_row(s: list[Dim], full: list[Dim]) -> bool:
            return len(s) >= 1 and s[-1] == full[-1] and all(d == 1 for d in s[:-1]) and len(s) <= len(full)
        if sx and sy and is_row(sy, sx):
            self.emit(nm, op, [x, y], [out], [sx])
        elif sx and sy and is_row(sx, sy):
            self.emit(nm, op, [y, x], [out], [sy])
        else:
            raise self.unsupported(node, f"broadcasting {sx} with {sy} (same shapes or one trailing row)")

    def known(self, node: Any, i: int) -> bool:
        """Input i is absent or known at import."""
        return i >= len(node.input) or not node.input[i] or self.name(node.input[i]) in self.consts

    def slice(self, node: Any, nm: str) -> None:
        """Constant bounds with steps >= 1: one `slice` op per axis; run-time bounds or axes, or a
        negative step: one `slice_dyn` (ONNX Slice's own semantics, integer inputs read at run time)."""
        if self.opset < 10:
            raise self.unsupported(node, "Slice of opset < 10 (attributes)")
        x = self.value(node, node.input[0])
        s = list(self.shape(x))
        has = [i < len(node.input) and bool(node.input[i]) for i in range(5)]
        if all(self.known(node, i) for i in range(1, 5)):
            starts = [int(v) for v in self.const(node, 1, "starts")]
            ends = [int(v) for v in self.const(node, 2, "ends")]
            axes = [int(v) for v in self.const(node, 3, "axes")] if has[3] else list(range(len(starts)))
            steps = [int(v) for v in self.const(node, 4, "steps")] if has[4] else [1] * len(starts)
            if all(sp >= 1 for sp in steps):
                self.slice_static(node, nm, x, s, starts, ends, axes, steps)
                return
            if any(sp == 0 for sp in steps):
                raise self.unsupported(node, "a step of 0")
        # run-time bounds (or a negative step): the dims sliced are unknown at import unless the axes,
        # the bounds and the dim are all known
        out: list[Dim] = list(s)
        axes_c: list[int] | None = None
        if has[3]:
            axes_c = [int(v) for v in self.const(node, 3, "axes")] if self.known(node, 3) else None
        else:
            n = self.shape(node.input[1])
            axes_c = list(range(int(n[0]))) if len(n) == 1 and isinstance(n[0], (int, np.integer)) else None
        if axes_c is None:
            out = [self.fresh() for _ in s]
        else:
            vals = None
            if all(self.known(node, i) for i in (1, 2, 4)):
                vals = (self.const(node, 1, "starts"), self.const(node, 2, "ends"),
                        self.const(node, 4, "steps") if has[4] else np.ones(len(axes_c), np.int64))
            for k, ax in enumerate(axes_c):
                ax = ax + len(s) if ax < 0 else ax
                if not 0 <= ax < len(s):
                    raise self.unsupported(node, f"axis {axes_c[k]} of an input of {len(s)} dims")
                d = s[ax]
                if vals is not None and isinstance(d, (int, np.integer)):
                    out[ax] = _slice_count(*(int(v[k]) for v in vals), int(d))
                else:
                    out[ax] = self.fresh()
        ins = [x] + [self.value(node, node.input[i]) if has[i] else "" for i in range(1, 5)]
        if has[4] and not has[3]:  # steps without axes: the default axes 0, 1, .. as a constant
            if axes_c is None:
                raise self.unsupported(node, "steps without axes, and starts of a length unknown at import")
            self.consts[f"{nm}.axes"] = np.arange(len(axes_c), dtype=np.int64)
            ins[3] = self.value(node, f"{nm}.axes")
        if not has[4]:
            ins = ins[:4] if has[3] else ins[:3]
        self.emit(nm, "slice_dyn", ins, [node.output[0]], [out], dtypes=[self.dtype(x)])

    def slice_static(self, node: Any, nm: str, x: str, s: list[Dim], starts: list[int], ends: list[int],
                     axes: list[int], steps: list[int]) -> None:
        cur = x
        for k, (st, en, ax, sp) in enumerate(zip(starts, ends, axes, steps)):
            if not -len(s) <= ax < len(s):
                raise make_error(FormatError, f"ONNX node '{nm}' (Slice): axis {ax} of an input of {len(s)} dims",
                                 section="onnx", key=nm)
            ax = ax + len(s) if ax < 0 else ax
            d = s[ax]
            en = min(en, 2 ** 62)
            st = max(st, -2 ** 62)
            if isinstance(d, int):
                b, e = (st + d if st < 0 else st), (en + d if en < 0 else en)
                b, e = min(max(b, 0), d), min(max(e, 0), d)
                s[ax] = max(0, (e - b + sp - 1) // sp)
            elif not (st == 0 and en >= 2 ** 62 and sp == 1):
                s[ax] = self.fresh()
            o = node.output[0] if k == len(starts) - 1 else f"{nm}.{k}"
            self.emit(nm if k == len(starts) - 1 else f"{nm}.{k}", "slice", [cur], [o], [s], axis=ax,
                      range=[st, en, sp])
            cur = o

    def pad(self, node: Any, a: dict, nm: str) -> None:
        """Constant pads: `pad`; pads computed at run time: `pad_dyn` (the constant value and the axes
        must be known at import)."""
        x = self.value(node, node.input[0])
        s = self.shape(x)
        mode = a.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("constant", "reflect", "edge"):
            raise self.unsupported(node, f"mode {mode!r}")
        if self.opset >= 11 and not self.known(node, 1):
            value = float(self.const(node, 2, "constant_value").reshape(-1)[0]) if len(node.input) > 2 and \
                node.input[2] else 0.0
            attrs: dict[str, Any] = {"mode": mode}
            if value:
                attrs["value"] = value
            axes = list(range(len(s)))
            if len(node.input) > 3 and node.input[3]:
                axes = [int(v) % len(s) for v in self.const(node, 3, "axes")]
                attrs["axes"] = axes
            o = [self.fresh() if i in axes else d for i, d in enumerate(s)]
            self.emit(nm, "pad_dyn", [x, self.value(node, node.input[1])], [node.output[0]], [o],
                      dtypes=[self.dtype(x)], **attrs)
            return
        if self.opset >= 11:
            pads = [int(v) for v in self.const(node, 1, "pads")]
            value = float(self.const(node, 2, "constant_value").reshape(-1)[0]) if len(node.input) > 2 and \
                node.input[2] else 0.0
            if len(node.input) > 3 and node.input[3]:
                axes = [int(v) % len(s) for v in self.const(node, 3, "axes")]
                full = [0] * (2 * len(s))
                for k, ax in enumerate(axes):
                    full[ax], full[len(s) + ax] = pads[k], pads[len(axes) + k]
                pads = full
        else:
            pads, value = list(a["pads"]), float(a.get("value", 0.0))
        if any(p < 0 for p in pads):
            raise self.unsupported(node, "negative pads (cropping)")
        n = len(s)
        o = [d + pads[i] + pads[n + i] if isinstance(d, int) else (d if pads[i] + pads[n + i] == 0 else self.fresh())
             for i, d in enumerate(s)]
        attrs = {"pads": pads, "mode": mode}
        if value:
            attrs["value"] = value
        self.emit(nm, "pad", [x], [node.output[0]], [o], **attrs)

    def view(self, node: Any, a: dict, nm: str) -> None:
        op = node.op_type
        x = self.value(node, node.input[0])
        s = list(self.shape(x))
        target = self.symval(node.input[1]) if op == "Reshape" else None
        if op == "Reshape" and self.name(node.input[1]) not in self.consts and (
                target is None or any(d == 0 for d in target)):  # a 0: x's dim, or (allowzero) a size 0
            onnx_ops.reshape_runtime(self, node, a, nm)
            return
        if op in ("Unsqueeze", "Squeeze", "Flatten") and any(not isinstance(d, (int, np.integer)) for d in s):
            self.view_op(node, a, nm, x, s)
            return
        if op == "Unsqueeze":
            axes = [int(v) for v in (self.const(node, 1, "axes") if self.opset >= 13 else a["axes"])]
            nd = len(s) + len(axes)
            t = list(s)
            for ax in sorted(v % nd for v in axes):
                t.insert(ax, 1)
        elif op == "Squeeze":
            axes = None
            if self.opset >= 13 and len(node.input) > 1 and node.input[1]:
                axes = [int(v) for v in self.const(node, 1, "axes")]
            elif "axes" in a:
                axes = list(a["axes"])
            if axes is None:
                if any(isinstance(d, str) for d in s):
                    raise self.unsupported(node, "Squeeze without axes over dims unknown at import")
                axes = [i for i, d in enumerate(s) if d == 1]
            axes = [v % len(s) for v in axes]
            for ax in axes:
                if s[ax] != 1:
                    raise self.unsupported(node, f"squeezing axis {ax} of size {s[ax]}")
            t = [d for i, d in enumerate(s) if i not in axes]
        elif op == "Flatten":
            ax = a.get("axis", 1) % (len(s) + 1) if s else 0
            def prod(ds: list[Dim]) -> Dim:
                p = 1
                for d in ds:
                    if isinstance(d, str):
                        return self.fresh()
                    p *= d
                return p
            t = [prod(s[:ax]), prod(s[ax:])]
        else:  # Reshape
            spec = target if self.name(node.input[1]) not in self.consts else \
                [int(v) for v in self.const(node, 1, "shape")]
            if a.get("allowzero", 0) and 0 in spec:
                raise self.unsupported(node, "allowzero with a 0 in the shape")
            t = []
            for i, d in enumerate(spec):
                t.append(s[i] if d == 0 else d)
            if -1 in t:  # the -1 from x's sizes over the others (symbolic sizes as monomials)
                total: Dim = 1
                for d in s:
                    total = _mono_mul(total, d)
                known: Dim = 1
                for d in t:
                    if d != -1:
                        known = _mono_mul(known, d)
                idx = t.index(-1)
                rem = _mono_div(total, known)
                t[idx] = rem if rem is not None else self.fresh()
        try:
            self.reshape(nm, x, node.output[0], t)
        except UnsupportedOp:  # the target is not expressible with 0 / one -1: resolved at run time
            if op != "Reshape":
                self.view_op(node, a, nm, x, s)
                return
            if self.name(node.input[1]) not in self.consts:
                onnx_ops.reshape_runtime(self, node, a, nm)
                return
            spec = np.array([int(v) for v in self.const(node, 1, "shape")], np.int64)
            cname = f"{nm}.shape"
            self.consts[cname] = spec
            self.emit(nm, "reshape_to", [x, self.value(node, cname)], [node.output[0]],
                      [[d if d > 0 else self.fresh() for d in spec]], dtypes=[self.dtype(x)])

    def view_op(self, node: Any, a: dict, nm: str, x: str, s: list[Dim]) -> None:
        """Squeeze / Unsqueeze / Flatten as the run-time view ops (dims resolved when the graph runs)."""
        op = node.op_type
        if op == "Flatten":
            self.emit(nm, "flatten", [x], [node.output[0]], [[self.fresh(), self.fresh()]], axis=int(a.get("axis", 1)))
            return
        if len(node.input) > 1 and node.input[1]:
            axes = [int(v) for v in self.const(node, 1, "axes")]
        else:
            axes = [int(v) for v in a.get("axes", [])]
        if op == "Unsqueeze":
            nd = len(s) + len(axes)
            t = list(s)
            for ax in sorted(v % nd for v in axes):
                t.insert(ax, 1)
            self.emit(nm, "unsqueeze", [x], [node.output[0]], [t], axes=axes)
        else:
            drop = {v % len(s) for v in axes}
            t = [d for i, d in enumerate(s) if i not in drop] if axes else [d for d in s if d != 1]
            self.emit(nm, "squeeze", [x], [node.output[0]], [t], **({"axes": axes} if axes else {}))

    def conv(self, node: Any, a: dict, nm: str) -> None:
        x = self.value(node, node.input[0])
        s = self.shape(x)
        w = self.const(node, 1, "weight")
        if len(s) != 3 or w.ndim != 3:
            raise self.unsupported(node, f"only 1-D convolutions ([N, C, L] input), got input dims {s}")
        if a.get("group", 1) != 1:
            raise self.unsupported(node, f"group = {a['group']} (only 1)")
        if any(d != 1 for d in a.get("dilations", [1])):
            raise self.unsupported(node, f"dilations {a['dilations']} (only 1)")
        ap = a.get("auto_pad", b"NOTSET")
        if (ap.decode() if isinstance(ap, bytes) else ap) != "NOTSET":
            raise self.unsupported(node, "auto_pad (explicit pads only)")
        pads = list(a.get("pads", [0, 0]))
        stride = int(a.get("strides", [1])[0])
        wname = self.value(node, node.input[1])
        ins = [x, wname]
        if len(node.input) > 2 and node.input[2]:
            ins.append(self.value(node, node.input[2]))
        k, O = int(w.shape[2]), int(w.shape[0])
        if pads[0] != pads[1]:  # asymmetric: a pad op first
            L = s[2]
            padded = L + pads[0] + pads[1] if isinstance(L, int) else self.fresh()
            self.emit(f"{nm}.pad", "pad", [x], [f"{nm}.padded"], [[s[0], s[1], padded]],
                      pads=[0, 0, pads[0], 0, 0, pads[1]], mode="constant")
            ins[0], s, pads = f"{nm}.padded", [s[0], s[1], padded], [0, 0]
        L = s[2]
        L_out = (L + 2 * pads[0] - k) // stride + 1 if isinstance(L, int) else self.fresh()
        self.emit(f"{nm}.conv1d", "conv1d", ins, [f"{nm}.rows"], [[s[0], L_out, O]], stride=stride,
                  padding=int(pads[0]), channels_first=True)
        self.emit(nm, "transpose", [f"{nm}.rows"], [node.output[0]], [[s[0], O, L_out]], perm=[0, 2, 1])

    def lstm(self, node: Any, a: dict, nm: str) -> None:
        direction = a.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction != "forward":
            raise self.unsupported(node, f"direction {direction!r} (forward only)")
        for key in ("activations", "clip", "activation_alpha", "activation_beta"):
            if key in a:
                raise self.unsupported(node, f"attribute {key} (the default activations only)")
        if a.get("input_forget", 0) or a.get("layout", 0):
            raise self.unsupported(node, "input_forget / layout (the defaults only)")
        if (len(node.input) > 4 and node.input[4]) or (len(node.input) > 7 and node.input[7]):
            raise self.unsupported(node, "sequence_lens or peepholes (P)")
        x = self.value(node, node.input[0])
        s = self.shape(x)
        W, R = self.const(node, 1, "W"), self.const(node, 2, "R")
        H = int(a.get("hidden_size", R.shape[-1]))
        B = self.const(node, 3, "B") if len(node.input) > 3 and node.input[3] else np.zeros((1, 8 * H), np.float32)
        base = nm.strip("/").replace("/", ".") or "lstm"
        names = []
        for suffix, arr in (("W", W.reshape(4 * H, -1)), ("R", R.reshape(4 * H, H)), ("B", B.reshape(8 * H))):
            n = f"{base}.{suffix}"
            self.weights[n] = _contiguous(arr, np.float32)
            names.append(n)
        S, N = s[0], s[1]
        ins = [x] + names
        given = [len(node.input) > k and bool(node.input[k]) for k in (5, 6)]
        if given[1] and not given[0]:
            raise self.unsupported(node, "initial_c without initial_h")
        for k, what, g in ((5, "h0", given[0]), (6, "c0", given[1])):
            if g:
                v = self.value(node, node.input[k])
                flat = f"{nm}.{what}"
                self.reshape(f"{nm}.{what}", v, flat, [N, H])
                ins.append(flat)
        outs = [f"{nm}.Y", f"{nm}.h", f"{nm}.c"]
        self.emit(nm, "lstm", ins, outs, [[S, N, H], [N, H], [N, H]])
        want = list(node.output) + [""] * (3 - len(node.output))
        if want[0]:
            self.reshape(f"{nm}.Y.view", outs[0], want[0], [S, 1, N, H])
        for k in (1, 2):
            if want[k]:
                self.reshape(f"{nm}.{'hc'[k - 1]}.view", outs[k], want[k], [1, N, H])


def load_external_data(model: Any, path: str) -> None:
    """Reads the tensors whose data is in external files (`onnx.save(..., save_as_external_data=True)`:
    `model.onnx` + `model.onnx.data`), each checked first: the file named next to the model (a name
    that leaves the model's folder is refused), present, and long enough for the tensor's bytes.
    FormatError naming the tensor and the file otherwise."""
    from onnx import external_data_helper as ext
    from onnx import helper

    base = os.path.dirname(os.path.abspath(path))
    tensors = [t for t in ext._get_all_tensors(model) if ext.uses_external_data(t)]
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        what = f"tensor '{t.name}'"
        if not loc:
            raise make_error(FormatError, f"{what}: external data without a location", section="onnx", key=t.name)
        full = os.path.normpath(os.path.join(base, loc))
        if os.path.isabs(loc) or not full.startswith(base + os.sep):
            raise make_error(FormatError, f"{what}: external data file '{loc}' is outside the model's folder {base}",
                             section="onnx", key=t.name)
        if not os.path.isfile(full):
            raise make_error(FormatError, f"{what}: its data is in '{loc}', which is missing (expected at {full}, "
                             f"next to {os.path.basename(path)}: copy the data file with the model)",
                             section="onnx", key=t.name)
        try:
            offset = int(info.get("offset", 0) or 0)
            n = 1
            for d in t.dims:
                n *= int(d)
            item = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
            length = int(info["length"]) if info.get("length") else n * item
        except Exception as e:  # noqa: BLE001 - offset / length / element type that make no sense
            raise make_error(FormatError, f"{what}: bad external data fields {info} ({e})", section="onnx",
                             key=t.name) from None
        size = os.path.getsize(full)
        if offset < 0 or length < 0 or offset + length > size:
            raise make_error(FormatError, f"{what}: needs bytes {offset}..{offset + length} of '{loc}', which has "
                             f"{size} bytes (the data file is too short)", section="onnx", key=t.name)
        try:
            ext.load_external_data_for_tensor(t, base)
        except Exception as e:  # noqa: BLE001 - the onnx package's own checks
            raise make_error(FormatError, f"{what}: external data '{loc}' unreadable ({e})", section="onnx",
                             key=t.name) from None


PIPELINES = ("graph", "tts", "diffusion")  # what `--pipeline` records ([onnx] pipeline; cyb_llm.pipelines)
SIDECAR_MAX_BYTES = 16 << 20
# --quantize choices -> (GGML type name, .model encoding): the matmul weights only
QUANTIZE_TYPES = {"q8_0": ("Q8_0", "q8_0"), "q8": ("Q8_0", "q8_0"), "q4_0": ("Q4_0", "q4_0"), "q4": ("Q4_0", "q4_0")}


def _convert(path: str, state: dict[str, str] | None) -> tuple[dict, dict[str, np.ndarray], dict, "_Importer"]:
    onnx, _ = _need_onnx()
    path = os.fspath(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - the onnx package's own parse errors
        raise make_error(FormatError, f"{path}: not a readable ONNX file ({e})", section="onnx", key="model") from None
    load_external_data(model, path)
    imp = _Importer(model, state)
    graph, weights = imp.run()
    config = {"model_type": MODEL_TYPE,
              "onnx": {"opset": int(imp.opset), "producer": model.producer_name or "",
                       "source": os.path.basename(os.fspath(path))}}
    return graph, weights, config, imp


def onnx_to_graph(path: str, state: dict[str, str] | None = None) -> tuple[dict, dict[str, np.ndarray], dict]:
    """(graph section as a dict, weights {name: f32 array}, config) of an ONNX file."""
    graph, weights, config, _ = _convert(path, state)
    return graph, weights, config


def _weights_read_as(graph: dict, uses: set[tuple[str, int]]) -> set[str]:
    """The names every reader of which reads them as one of `uses` ((op, input index) pairs)."""
    readers: dict[str, list[tuple[str, int]]] = {}
    for n in graph["nodes"]:
        for k, i in enumerate(n["inputs"]):
            readers.setdefault(i, []).append((n["op"], k))
    outs = {o["name"] for o in graph["outputs"]}
    return {v for v, rs in readers.items() if v not in outs and all(r in uses for r in rs)}


def matmul_weights(graph: dict) -> set[str]:
    """The names every reader of which is a `matmul` node reading it as its weight W (input 1)."""
    return _weights_read_as(graph, {("matmul", 1)})


def conv_weights(graph: dict) -> set[str]:
    """The names every reader of which is a `conv` / `conv_transpose` node reading it as its weight
    (input 1: f32 or f16 on every backend)."""
    return _weights_read_as(graph, {("conv", 1), ("conv_transpose", 1)})


def _exact_f16(w: np.ndarray) -> bool:
    """Whether every value of w is an f16 value (an f16 initializer, or a Cast of one folded at import)."""
    with np.errstate(over="ignore"):
        return bool(np.array_equal(w.astype(np.float16).astype(w.dtype), w))


def weight_records(graph: dict, weights: dict[str, np.ndarray], quantize: str | None
                   ) -> list[tuple[str, str, list[int], Any]]:
    """(name, encoding, shape, data) of each weight: the 2-D W of matmul nodes in blocks of `quantize`
    (when their rows are whole blocks of 32), else f16 when every value is an f16 value (the model
    shipped them as f16: written f16, losslessly; the matmul op takes any weight encoding); the
    weights of conv / conv_transpose nodes f16 likewise (those ops take f32 or f16 weights); every
    other weight f32 (the other ops read f32 weights)."""
    qtype = None
    if quantize:
        qtype = QUANTIZE_TYPES.get(quantize.lower())
        if qtype is None:
            raise make_error(InvalidConfig, f"--quantize {quantize!r} is not available for ONNX graphs (choices: "
                             f"{', '.join(QUANTIZE_TYPES)})", field="quantize", reason="unknown type")
    ws, cs = matmul_weights(graph), conv_weights(graph)
    recs = []
    for name, w in weights.items():
        if w.dtype.kind != "f":  # integers (a quantized model's tables) keep their type
            recs.append((name, _NP_NAMES[w.dtype], list(w.shape), _contiguous(w, w.dtype)))
        elif name in ws and w.ndim == 2 and qtype is not None and w.shape[1] % 32 == 0 and w.size:
            from gguf import GGMLQuantizationType, quants

            blocks = quants.quantize(np.ascontiguousarray(w, np.float32), GGMLQuantizationType[qtype[0]])
            recs.append((name, qtype[1], list(w.shape), blocks.reshape(-1).view(np.uint8)))
        elif ((name in ws and w.ndim == 2) or name in cs) and w.size and _exact_f16(w):
            recs.append((name, "f16", list(w.shape), np.ascontiguousarray(w, np.float16)))
        else:
            recs.append((name, "f32", list(w.shape), w))
    return recs


def read_sidecar(path: str) -> str:
    """The text of a JSON sidecar (a Piper voice's `voice.onnx.json`), checked: a JSON object of at
    most 16 MiB. FormatError naming the file otherwise."""
    size = os.path.getsize(path)
    if size > SIDECAR_MAX_BYTES:
        raise make_error(FormatError, f"{path}: sidecar config of {size} bytes (at most {SIDECAR_MAX_BYTES})",
                         section="sidecar", key=os.path.basename(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise make_error(FormatError, f"{path}: the sidecar config is not JSON ({e})", section="sidecar",
                         key=os.path.basename(path)) from None
    if not isinstance(obj, dict):
        raise make_error(FormatError, f"{path}: the sidecar config is a JSON {type(obj).__name__}, not an object",
                         section="sidecar", key=os.path.basename(path))
    return text


def import_onnx(src: str, out: str, *, state: dict[str, str] | None = None, progress: bool = True,
                quantize: str | None = None, pipeline: str = "graph", sidecar: Any = None) -> None:
    """Writes `out` (a .model with a version-2 graph section) from the ONNX file `src`; nothing is
    written when the import fails. `quantize` ("q8_0", "q4_0"): the 2-D weights of matmul nodes in
    those blocks. `pipeline` ("graph", "tts", "diffusion"): what the graph is for, recorded as
    `[onnx] pipeline` (cyb_llm.load routes on it). `sidecar`: a JSON config kept verbatim in the
    file's `sidecar` section (GraphModel.sidecar); None = `src + ".json"` when that file exists (a
    Piper voice's `voice.onnx.json`), False = none."""
    if pipeline not in PIPELINES:
        raise make_error(InvalidConfig, f"--pipeline {pipeline!r}: one of {', '.join(PIPELINES)}",
                         field="pipeline", reason="unknown pipeline")
    if sidecar is None:
        sidecar = os.fspath(src) + ".json" if os.path.isfile(os.fspath(src) + ".json") else False
    sidecar_text = read_sidecar(os.fspath(sidecar)) if sidecar else None
    graph, weights, config, imp = _convert(src, state)
    records = weight_records(graph, weights, quantize)
    config["onnx"]["pipeline"] = pipeline
    if quantize:
        config["onnx"]["quantize"] = quantize.lower()
    extra = {}
    if sidecar_text is not None:
        config["onnx"]["sidecar"] = os.path.basename(os.fspath(sidecar))
        extra["sidecar"] = sidecar_text
    name = os.path.splitext(os.path.basename(os.fspath(src)))[0]
    write_import(out, records, name=name, config=config, graph=graph, extra_sections=extra, progress=progress)


def stage_graph(graph: dict, weights: dict[str, np.ndarray], stage: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The graph and weights of one stage of a "graph-stages" file: each initializer reads the tensor
    `<stage>.<name>` (its value name in the graph unchanged), so the stages' weights never collide."""
    graph = dict(graph)
    graph["initializers"] = [{"name": i["name"], "tensor": f"{stage}.{i.get('tensor', i['name'])}"}
                             for i in graph.get("initializers", [])]
    return graph, {f"{stage}.{k}": v for k, v in weights.items()}


def import_onnx_stages(stages: dict[str, str], out: str, *, pipeline: str, progress: bool = True,
                       quantize: str | None = None, sidecar: Any = False, extra_config: dict | None = None,
                       tokenizer_json: str | None = None) -> None:
    """Writes `out`, a model_type "graph-stages" file (docs/graph.md "Stages"), from one ONNX file per
    stage ({"text_encoder": "te.onnx", "unet": "unet.onnx", ...}): each stage's graph in its section
    `graph_<stage>`, its weights named `<stage>.<initializer>`. `pipeline`: what the stages are for
    (recorded as `[stages] pipeline`); `extra_config`: more config tables (the pipeline's own, such as
    diffusion's `[diffusion]`, docs/diffusion.md); `tokenizer_json`: an HF tokenizer.json (its text)
    kept as the file's tokenizer section (a diffusion model's CLIP tokenizer)."""
    if pipeline not in PIPELINES:
        raise make_error(InvalidConfig, f"--pipeline {pipeline!r}: one of {', '.join(PIPELINES)}",
                         field="pipeline", reason="unknown pipeline")
    if not stages:
        raise make_error(InvalidConfig, "no stages given (--stage NAME=FILE.onnx)", field="stage", reason="empty")
    graphs: dict[str, dict] = {}
    records: list = []
    sources = {}
    for stage, src in stages.items():
        if not isinstance(stage, str) or not stage or not all(c.isalnum() and c.isascii() and not c.isupper()
                                                             or c == "_" for c in stage):
            raise make_error(InvalidConfig, f"stage name {stage!r}: lowercase letters, digits and '_'",
                             field="stage", reason="bad name")
        graph, weights, _config, _ = _convert(src, None)
        records.extend((f"{stage}.{n}", enc, shape, data) for n, enc, shape, data in weight_records(graph, weights, quantize))
        graphs[stage], _ = stage_graph(graph, {}, stage)
        sources[stage] = os.path.basename(os.fspath(src))
    config = {"model_type": STAGES_MODEL_TYPE, "stages": {"pipeline": pipeline, "names": list(stages),
                                                         "sources": sources}}
    if quantize:
        config["stages"]["quantize"] = quantize.lower()
    config.update(extra_config or {})
    extra = {"sidecar": read_sidecar(os.fspath(sidecar))} if sidecar else {}
    if tokenizer_json is not None:
        _check_tokenizer_json(tokenizer_json)
    name = os.path.splitext(os.path.basename(os.fspath(out)))[0]
    write_import(out, records, name=name, config=config, stages=graphs, extra_sections=extra,
                 tokenizer_json=tokenizer_json, progress=progress)


def _check_tokenizer_json(text: Any) -> None:
    """InvalidConfig(field="tokenizer_json") unless `text` is an HF tokenizer.json that loads."""
    from tokenizers import Tokenizer

    if not isinstance(text, str):
        raise make_error(InvalidConfig, "tokenizer_json must be the text of a tokenizer.json",
                         field="tokenizer_json", reason=f"got {type(text).__name__}")
    try:
        Tokenizer.from_str(text)
    except Exception as e:  # noqa: BLE001 - the tokenizers library's own message says what is wrong
        raise make_error(InvalidConfig, f"tokenizer_json does not load: {e}", field="tokenizer_json",
                         reason=str(e)) from None


__all__ = ["import_onnx", "import_onnx_stages", "onnx_to_graph", "stage_graph", "MODEL_TYPE", "STAGES_MODEL_TYPE",
           "PIPELINES", "QUANTIZE_TYPES"]
