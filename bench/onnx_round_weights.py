"""A copy of an .onnx file whose f32 initializers keep only their top 32 - BITS bits (the low BITS
bits of each value zeroed: BITS = 16 leaves bfloat16's precision in f32 storage), so that xz
compresses it to a size the device machine's 64 MiB transfer takes (docs/gpu-bench.md, "ONNX graphs
on the GPU"). The graph, its shapes and the work it does are unchanged; cyb_llm and onnxruntime then
run the same rounded weights, so their cross-check still compares the two runtimes.

Usage: python bench/onnx_round_weights.py SRC.onnx DST.onnx [BITS]   (needs the `onnx` package)
"""
from __future__ import annotations

import sys

import numpy as np


def main() -> None:
    import onnx
    from onnx import numpy_helper

    src, dst = sys.argv[1], sys.argv[2]
    bits = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    m = onnx.load(src)
    mask = np.uint32((0xFFFFFFFF << bits) & 0xFFFFFFFF)
    n = 0
    for init in m.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            a = numpy_helper.to_array(init).copy()
            a.view(np.uint32)[...] &= mask
            init.CopyFrom(numpy_helper.from_array(a, init.name))
            n += a.size
    onnx.save(m, dst)
    print(f"{dst}: {n} f32 weights kept to their top {32 - bits} bits")


if __name__ == "__main__":
    main()
