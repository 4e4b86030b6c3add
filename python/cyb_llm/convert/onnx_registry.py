"""The table of ONNX op translations of the ONNX importer (onnx_graph.py): op_type -> fn(importer,
node, attrs, name), filled by the modules that translate groups of ops (onnx_ops.py, ...), each
registering with `@handler("OpType", ...)`. A leaf module, so those modules and the importer can
all import it."""
from __future__ import annotations

from typing import Callable

HANDLERS: dict[str, Callable[..., None]] = {}


def handler(*op_types: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Registers fn(importer, node, attrs, name) as the translation of `op_types`."""
    def reg(fn: Callable[..., None]) -> Callable[..., None]:
        for t in op_types:
            old = HANDLERS.get(t)
            # a module imported again (a reload) registers the same function again: it replaces it
            if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
                raise RuntimeError(f"two translations of ONNX {t}")
            HANDLERS[t] = fn
        return fn
    return reg


__all__ = ["HANDLERS", "handler"]
