"""ONNX translations of the network ops (docs/import.md "ONNX"): Conv, ConvTranspose, MatMul, Gemm,
Einsum (two operands), Softmax, Split, Concat, InstanceNormalization, GroupNormalization, Resize,
AveragePool / MaxPool / GlobalAveragePool -> the ops of tags 50-59 (docs/graph.md "Version 2"), or
the token-stream `matmul` when the right operand of MatMul / Gemm is a constant (its weight: any
encoding, quantizable at import)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .onnx_ops import broadcast
from .onnx_registry import handler


def _s(a: Any) -> str:
    return a.decode() if isinstance(a, bytes) else str(a)


def _known(*ds: Any) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in ds)


def _has(node: Any, i: int) -> bool:
    return len(node.input) > i and bool(node.input[i])


def _spatial(imp: Any, node: Any, a: dict, x_shape: list, k: list[int], transpose: bool) -> tuple[list, list, list, list]:
    """(strides, dilations, pads [begin.., end..], output spatial dims) of a Conv / ConvTranspose / pool."""
    n = len(k)
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dil = [int(v) for v in a.get("dilations", [1] * n)]
    pads = [int(v) for v in a.get("pads", [0] * (2 * n))]
    ap = _s(a.get("auto_pad", "NOTSET"))
    ins = x_shape[2:]
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        if transpose or not _known(*ins):
            raise imp.unsupported(node, f"auto_pad {ap} over dims unknown at import")
        pads = [0] * (2 * n)
        for i in range(n):
            out = -(-ins[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - ins[i])
            lo = total // 2 if ap == "SAME_UPPER" else total - total // 2
            pads[i], pads[n + i] = lo, total - lo
    elif ap == "VALID":
        pads = [0] * (2 * n)
    elif ap != "NOTSET":
        raise imp.unsupported(node, f"auto_pad {ap}")
    outs = []
    for i in range(n):
        d = ins[i]
        if not _known(d):
            outs.append(imp.fresh())
        elif transpose:
            op = int(a.get("output_padding", [0] * n)[i])
            outs.append(strides[i] * (d - 1) + op + dil[i] * (k[i] - 1) + 1 - pads[i] - pads[n + i])
        else:
            outs.append((d + pads[i] + pads[n + i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1)
    return strides, dil, pads, outs


def _conv(imp: Any, node: Any, a: dict, nm: str, transpose: bool) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    w = imp.const(node, 1, "weight")
    if len(s) not in (3, 4) or w.ndim != len(s):
        raise imp.unsupported(node, f"only 1-D and 2-D convolutions, got input dims {s}")
    if transpose and "output_shape" in a:
        raise imp.unsupported(node, "output_shape (explicit pads and output_padding only)")
    k = [int(v) for v in w.shape[2:]]
    strides, dil, pads, spatial = _spatial(imp, node, a, s, k, transpose)
    g = int(a.get("group", 1))
    O = int(w.shape[1]) * g if transpose else int(w.shape[0])
    ins = [x, imp.value(node, node.input[1])]
    if _has(node, 2):
        ins.append(imp.value(node, node.input[2]))
    attrs: dict[str, Any] = {"strides": strides, "dilations": dil, "pads": pads}
    if g != 1:
        attrs["group"] = g
    if transpose and any(int(v) for v in a.get("output_padding", [])):
        attrs["output_padding"] = [int(v) for v in a["output_padding"]]
    imp.emit(nm, "conv_transpose" if transpose else "conv", ins, [node.output[0]], [[s[0], O] + spatial], **attrs)


@handler("Conv")
def conv(imp: Any, node: Any, a: dict, nm: str) -> None:
    _conv(imp, node, a, nm, False)


@handler("ConvTranspose")
def conv_transpose(imp: Any, node: Any, a: dict, nm: str) -> None:
    _conv(imp, node, a, nm, True)


def _weight_matmul(imp: Any, node: Any, nm: str, x: str, W: np.ndarray, bias: np.ndarray | None, out: str,
                   source: tuple) -> None:
    """x [.., K] @ W^T + bias with W [N, K] a constant: the `matmul` op (weights in the weights section).
    `source` names the constant and the transform W came from: nodes with the same one (a weight
    shared by several layers, as ALBERT's) read one copy."""
    base = nm.strip("/").replace("/", ".") or "matmul"
    wname = imp.derived.get(source)
    if wname is None:
        wname = imp.derived[source] = f"{base}.weight"
        imp.consts[wname] = np.ascontiguousarray(W, dtype=np.float32)
    ins = [x, imp.value(node, wname)]
    if bias is not None:
        bname = f"{base}.bias"
        imp.consts[bname] = np.ascontiguousarray(bias.reshape(-1), dtype=np.float32)
        ins.append(imp.value(node, bname))
    imp.emit(nm, "matmul", ins, [out], [imp.shape(x)[:-1] + [int(W.shape[0])]])


@handler("MatMul")
def matmul(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    bname = imp.name(node.input[1])
    if bname in imp.consts and imp.consts[bname].ndim == 2 and imp.dtype(x) == "f32" and len(imp.shape(x)) >= 1:
        _weight_matmul(imp, node, nm, x, imp.consts[bname].T, None, node.output[0], (bname, "T"))
        return
    y = imp.value(node, node.input[1])
    sa, sb = imp.shape(x), imp.shape(y)
    if len(sa) == 1 or len(sb) == 1:
        out = (sa[:-1] if len(sb) == 1 else sa[:-2] + sb[-1:]) if len(sa) > 1 else sb[:-2] + sb[-1:]
    else:
        out = broadcast(imp, sa[:-2], sb[:-2]) + [sa[-2], sb[-1]]
    imp.emit(nm, "matmul_nd", [x, y], [node.output[0]], [out])


@handler("Gemm")
def gemm(imp: Any, node: Any, a: dict, nm: str) -> None:
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ta, tb = int(a.get("transA", 0)), int(a.get("transB", 0))
    x = imp.value(node, node.input[0])
    if ta:
        s = imp.shape(x)
        imp.emit(f"{nm}.transA", "transpose", [x], [f"{nm}.a"], [[s[1], s[0]]], perm=[1, 0])
        x = f"{nm}.a"
    bname = imp.name(node.input[1])
    if bname not in imp.consts:
        raise imp.unsupported(node, "a B computed at run time (a constant B is translated)")
    W = imp.consts[bname]
    W = (W if tb else W.T) * np.float32(alpha) if alpha != 1.0 else (W if tb else W.T)
    bias = None
    if _has(node, 2):
        c = imp.consts.get(imp.name(node.input[2]))
        N = int(W.shape[0])
        if c is None or c.size not in (1, N):
            raise imp.unsupported(node, "a C that is not a constant row of N values")
        bias = np.broadcast_to(c.reshape(-1).astype(np.float32) * np.float32(beta), (N,)).copy()
    _weight_matmul(imp, node, nm, x, W, bias, node.output[0], (bname, "T" if not tb else "", float(alpha)))


def _einsum_one(imp: Any, node: Any, nm: str, A: str, out: str, eq: str) -> None:
    """One operand: the letters missing from the output summed (reduce), then a transpose."""
    if len(set(A)) != len(A) or len(set(out)) != len(out) or not set(out) <= set(A):
        raise imp.unsupported(node, f"equation {eq!r} (distinct letters, the output's among the input's)")
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    gone = [i for i, c in enumerate(A) if c not in out]
    kept = "".join(c for c in A if c in out)
    if gone:
        o = f"{nm}.sum"
        imp.emit(o, "reduce", [x], [o], [[d for i, d in enumerate(s) if i not in gone]], fn="sum", axes=gone,
                 keepdims=False)
        x, s = o, [d for i, d in enumerate(s) if i not in gone]
    if kept == out:
        imp.alias[node.output[0]] = x
    else:
        imp.emit(nm, "transpose", [x], [node.output[0]], [[s[kept.index(c)] for c in out]],
                 perm=[kept.index(c) for c in out])


@handler("Einsum")
def einsum(imp: Any, node: Any, a: dict, nm: str) -> None:
    """One operand: a sum over the letters the output drops and a transpose. Two operands, each
    letter one dim: batch letters (both inputs and the output), contracted
    letters (both inputs, not the output) and free letters of each side (in the output) -> transposes +
    matmul_nd (+ reshapes and a transpose). Several contracted letters are one dim of their product;
    several free letters of B likewise (split again after the product); several free letters of A stay
    dims of their own, B broadcast over all but the last ('ibh,hnd->ibnd')."""
    eq = _s(a["equation"]).replace(" ", "")
    if "->" not in eq or "." in eq:
        raise imp.unsupported(node, f"equation {eq!r}: only equations with an explicit output ('->') and no "
                                    "ellipsis are translated")
    lhs, out = eq.split("->")
    ops = lhs.split(",")
    if len(ops) == 1 and len(node.input) == 1:
        _einsum_one(imp, node, nm, ops[0], out, eq)
        return
    if len(ops) != 2 or len(node.input) != 2:
        raise imp.unsupported(node, f"equation {eq!r} (one or two operands are translated)")
    A, B = ops
    if len(set(A)) != len(A) or len(set(B)) != len(B):
        raise imp.unsupported(node, f"equation {eq!r} (a repeated letter: a diagonal)")
    batch = [c for c in out if c in A and c in B]
    contr = [c for c in A if c in B and c not in out]
    fa = [c for c in A if c not in B]
    fb = [c for c in B if c not in A]
    if not contr or any(c not in out for c in fa + fb) or sorted(out) != sorted(batch + fa + fb):
        raise imp.unsupported(node, f"equation {eq!r} (batch letters, contracted letters, and free letters "
                                    "of each side that reach the output)")
    xa, xb = imp.value(node, node.input[0]), imp.value(node, node.input[1])
    sa, sb = imp.shape(xa), imp.shape(xb)
    dim = {c: sa[A.index(c)] for c in A}
    dim.update({c: sb[B.index(c)] for c in B if c not in dim})
    nb = len(batch)
    bd = [dim[c] for c in batch]

    def product(letters: list[str]) -> Any:
        ds = [dim[c] for c in letters]
        return int(np.prod(ds)) if _known(*ds) else imp.fresh()

    def permute(x: str, have: str, want: str, tag: str) -> str:
        if have == want:
            return x
        o = f"{nm}.{tag}"
        imp.emit(o, "transpose", [x], [o], [[dim[c] for c in want]], perm=[have.index(c) for c in want])
        return o

    def reshape(x: str, target: list, tag: str) -> str:
        if imp.shape(x) == target:
            return x
        o = f"{nm}.{tag}"
        imp.reshape(o, x, o, target)
        return o

    def unsqueeze(x: str, axes: list[int], target: list, tag: str) -> str:
        o = f"{nm}.{tag}"
        imp.emit(o, "unsqueeze", [x], [o], [target], axes=axes)
        return o

    K = product(contr)
    ta = permute(xa, A, "".join(batch + fa + contr), "a")
    ta = reshape(ta, bd + [dim[c] for c in fa] + [K], "ak")
    tb = permute(xb, B, "".join(batch + contr + fb), "b")
    FB = product(fb) if fb else 1
    tb = reshape(tb, bd + [K] + [dim[c] for c in fb], "bk")
    if len(fb) > 1:
        tb = reshape(tb, bd + [K, FB], "bf")
    elif not fb:  # [.., K] -> [.., K, 1]
        tb = unsqueeze(tb, [nb + 1], bd + [K, 1], "b1")
    if not fa:  # [.., K] -> [.., 1, K]
        ta = unsqueeze(ta, [nb], bd + [1, K], "a1")
    elif len(fa) > 1:  # B over A's free dims but the last: [.., 1 (len(fa) - 1 times), K, FB]
        tb = unsqueeze(tb, list(range(nb, nb + len(fa) - 1)), bd + [1] * (len(fa) - 1) + [K, FB], "bu")
    la = fa or ["_"]
    dim["_"], dim["^"] = 1, 1
    res = f"{nm}.mm"
    imp.emit(res, "matmul_nd", [ta, tb], [res], [bd + [dim[c] for c in la] + [FB]])
    if len(fb) > 1:
        res = reshape(res, bd + [dim[c] for c in la + fb], "split")
        order = batch + la + fb
    else:
        order = batch + la + (fb or ["^"])
    squeeze = [i for i, c in enumerate(order) if c in "_^"]
    if squeeze:
        o = f"{nm}.sq"
        imp.emit(o, "squeeze", [res], [o], [[dim[c] for c in order if c not in "_^"]], axes=squeeze)
        res, order = o, [c for c in order if c not in "_^"]
    if "".join(order) == out:
        imp.alias[node.output[0]] = res
    else:
        imp.emit(nm, "transpose", [res], [node.output[0]], [[dim[c] for c in out]],
                 perm=[order.index(c) for c in out])


@handler("Softmax")
def softmax(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    if imp.opset < 13:
        raise imp.unsupported(node, "Softmax of opset < 13 (a 2-D coercion)")
    ax = int(a.get("axis", -1))
    ax = ax + len(s) if ax < 0 else ax
    if ax == len(s) - 1 and imp.dtype(x) == "f32":
        imp.emit(nm, "softmax", [x], [node.output[0]], [s])
    else:
        imp.emit(nm, "softmax_axis", [x], [node.output[0]], [s], axis=ax)


@handler("Split")
def split(imp: Any, node: Any, a: dict, nm: str) -> None:
    """One `slice` per output (the sizes known at import: a constant `split` input, the attribute of
    opset < 13, or num_outputs over a known dim)."""
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    ax = int(a.get("axis", 0))
    ax = ax + len(s) if ax < 0 else ax
    n = len(node.output)
    if _has(node, 1):
        sizes = [int(v) for v in imp.const(node, 1, "split")]
    elif "split" in a:
        sizes = [int(v) for v in a["split"]]
    else:
        d = s[ax]
        if not _known(d):
            raise imp.unsupported(node, f"splitting dim {ax} of a size unknown at import")
        chunk = -(-int(d) // n)
        sizes = [min(chunk, max(0, int(d) - chunk * i)) for i in range(n)]
    if len(sizes) != n:
        raise imp.unsupported(node, f"{len(sizes)} sizes for {n} outputs")
    start = 0
    for i, (o, size) in enumerate(zip(node.output, sizes)):
        if o:
            t = list(s)
            t[ax] = size
            imp.emit(f"{nm}.{i}" if n > 1 else nm, "slice", [x], [o], [t], axis=ax, range=[start, start + size, 1])
        start += size


@handler("Concat")
def concat(imp: Any, node: Any, a: dict, nm: str) -> None:
    ins = [imp.value(node, i) for i in node.input if i]
    shapes = [imp.shape(v) for v in ins]
    ax = int(a["axis"])
    r = len(shapes[0])
    axn = ax + r if ax < 0 else ax
    out = list(shapes[0])
    tot = [sh[axn] for sh in shapes]
    out[axn] = sum(int(t) for t in tot) if _known(*tot) else imp.fresh()
    dts = {imp.dtype(v) for v in ins}
    if len(dts) != 1:
        raise imp.unsupported(node, f"inputs of several dtypes {sorted(dts)}")
    imp.emit(nm, "concat", ins, [node.output[0]], [out], dtypes=[dts.pop()], axis=ax)


def _norm_consts(imp: Any, node: Any, nm: str) -> list[str]:
    names = []
    for i, what in ((1, "scale"), (2, "bias")):
        c = imp.const(node, i, what)
        cname = f"{nm.strip('/').replace('/', '.') or 'norm'}.{what}"
        imp.consts[cname] = np.ascontiguousarray(c.reshape(-1), dtype=np.float32)
        names.append(imp.value(node, cname))
    return names


@handler("InstanceNormalization")
def instance_norm(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    imp.emit(nm, "instance_norm", [x] + _norm_consts(imp, node, nm), [node.output[0]], [imp.shape(x)],
             eps=float(a.get("epsilon", 1e-5)))


@handler("GroupNormalization")
def group_norm(imp: Any, node: Any, a: dict, nm: str) -> None:
    if imp.opset < 21:
        raise imp.unsupported(node, "GroupNormalization before opset 21 (per-group scale / bias)")
    x = imp.value(node, node.input[0])
    imp.emit(nm, "group_norm", [x] + _norm_consts(imp, node, nm), [node.output[0]], [imp.shape(x)],
             eps=float(a.get("epsilon", 1e-5)), num_groups=int(a["num_groups"]))


@handler("Resize")
def resize(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    mode = _s(a.get("mode", "nearest"))
    ctm = _s(a.get("coordinate_transformation_mode", "half_pixel"))
    nmode = _s(a.get("nearest_mode", "round_prefer_floor"))
    if mode not in ("nearest", "linear", "cubic") or ctm not in ("half_pixel", "asymmetric", "align_corners",
                                                         "pytorch_half_pixel"):
        raise imp.unsupported(node, f"mode {mode!r}, coordinate_transformation_mode {ctm!r}")
    if int(a.get("antialias", 0)) or _s(a.get("keep_aspect_ratio_policy", "stretch")) != "stretch" or "axes" in a:
        raise imp.unsupported(node, "antialias / keep_aspect_ratio_policy / axes")
    if _has(node, 3) and not imp.known(node, 3) and imp.name(node.input[3]) in imp.symvals:
        # sizes computed by shape arithmetic the importer tracked: each a size, or the input's own dim
        tracked = imp.symvals[imp.name(node.input[3])]
        if len(tracked) != len(s) or not all(_known(v) or v == d for v, d in zip(tracked, s)):
            raise imp.unsupported(node, f"sizes {tracked} over the dims {s} (sizes known at import, or a dim kept)")
        sizes = [int(v) if _known(v) else -1 for v in tracked]
    elif _has(node, 3):
        sizes = [int(v) for v in imp.const(node, 3, "sizes")]
    elif _has(node, 2):
        scales = [float(v) for v in imp.const(node, 2, "scales")]
        if len(scales) != len(s):
            raise imp.unsupported(node, f"{len(scales)} scales for {len(s)} dims")
        sizes = []
        for d, sc in zip(s, scales):
            if sc == 1.0:
                sizes.append(-1)
            elif _known(d):
                out = int(np.floor(int(d) * sc))
                # the kernel's scale is out / in; linear and cubic take a scale that is out / in up to
                # its float32 rounding (0.6 stored as 0.6000000238: coordinates 4e-8 apart, weights
                # that close), nearest only an exact one (such a shift could move an index across a tie)
                exact = out / int(d) == sc
                if not exact and (mode == "nearest" or abs(out / int(d) - sc) > 2.0 ** -22 * sc):
                    raise imp.unsupported(node, f"scale {sc} of dim {d} is not out / in"
                                                + (" (exactly, for mode nearest)" if mode == "nearest" else ""))
                sizes.append(out)
            else:
                raise imp.unsupported(node, f"scale {sc} over a dim unknown at import")
    else:
        raise imp.unsupported(node, "neither scales nor sizes")
    out = [d if z == -1 else z for d, z in zip(s, sizes)]
    attrs = {"sizes": sizes, "mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = nmode
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float(a.get("cubic_coeff_a", -0.75))
        if int(a.get("exclude_outside", 0)):
            attrs["exclude_outside"] = True
    imp.emit(nm, "resize", [x], [node.output[0]], [out], **attrs)


@handler("AveragePool", "MaxPool")
def pool(imp: Any, node: Any, a: dict, nm: str) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise imp.unsupported(node, "MaxPool's Indices output")
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    k = [int(v) for v in a["kernel_shape"]]
    if len(s) not in (3, 4) or len(k) != len(s) - 2:
        raise imp.unsupported(node, f"only 1-D and 2-D pools, got input dims {s}")
    strides, dil, pads, spatial = _spatial(imp, node, a, s, k, False)
    if int(a.get("ceil_mode", 0)):
        spatial = [imp.fresh() for _ in spatial]
    attrs: dict[str, Any] = {"mode": "avg" if node.op_type == "AveragePool" else "max", "kernel_shape": k,
                             "strides": strides, "pads": pads}
    if node.op_type == "MaxPool" and any(d != 1 for d in dil):
        attrs["dilations"] = dil
    if int(a.get("count_include_pad", 0)):
        attrs["count_include_pad"] = True
    if int(a.get("ceil_mode", 0)):
        attrs["ceil_mode"] = True
    imp.emit(nm, "pool", [x], [node.output[0]], [s[:2] + spatial], **attrs)


@handler("GlobalAveragePool", "GlobalMaxPool")
def global_pool(imp: Any, node: Any, a: dict, nm: str) -> None:
    x = imp.value(node, node.input[0])
    s = imp.shape(x)
    axes = list(range(2, len(s)))
    imp.emit(nm, "reduce", [x], [node.output[0]], [s[:2] + [1] * len(axes)],
             fn="mean" if node.op_type == "GlobalAveragePool" else "max", axes=axes, keepdims=True)


__all__: list[str] = []
