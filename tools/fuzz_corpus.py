#!/usr/bin/env python3
"""Writes the seed corpus of the `.model` reader fuzzer into DIR: valid files
(hand-assembled, and written by cyb_llm.format.write_model when cyb_llm is
importable) and broken ones (truncated, no marker, wrong sizes, overflowing
shapes, unknown encodings, duplicates, malformed TOML).

usage: tools/fuzz_corpus.py DIR
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile

FRONT = '[cyb]\ntypes = ["model"]\nname = "seed"\n\n[[files]]\nname = "weights"\nformat = "tensors"\nsize = {size}\n'
TENSOR = '["{name}"]\nshape = {shape}\nencoding = "{enc}"\noffset = {offset}\nsize = {size}\n'
CONFIG = ('model_type = "llama"\nparameters = 1_000\n\n[architecture]\nhidden_size = 64\nrms_norm_eps = 1e-5\n'
          'rope_scaling = { type = "linear", factor = 2.0 }\nlayer_types = ["sliding", "full"]\n\n'
          '[tokenizer]\ntype = "bpe"\neos_token_ids = [2]\nadd_bos = false\n')
VOCAB = ('[tokens]\n0 = "<s>"\n1 = "\\u0120the"\n2 = "\\n"\n3 = \'lit\'\n\n[merges]\n0 = ["\\u0120", "t"]\n\n'
         '[scores]\n0 = -1.5\n1 = inf\n\n[special]\nbos = 0\n')
CHAT = 'template = """\n{% for m in messages %}{{ m.content }}\\\n  {% endfor %}"""\neos_sequences = [\'</s>\']\n'
GRAPH = ('[[inputs]]\nname = "ids"\n\n[[nodes]]\nop = "Gather"\ninputs = ["w", "ids"]\noutputs = ["x"]\n'
         '[nodes.attrs]\naxis = 0\n\n[[nodes]]\nop = "RmsNorm"\ninputs = ["x"]\noutputs = ["y"]\n')


def assemble(tensors: str, weights: bytes, sections: str = "", size: int | None = None,
             front: str | None = None) -> bytes:
    front = FRONT.format(size=len(weights) if size is None else size) if front is None else front
    head = front + sections + f"~~~config\n{CONFIG}~~~tensors\n{tensors}"
    return head.encode() + b"~~~weights\n" + weights


def hand_seeds() -> list[bytes]:
    w = bytes(range(256)) * 2
    good = (TENSOR.format(name="model.embed_tokens.weight", shape="[2, 32]", enc="q4_0", offset=0, size=36) +
            TENSOR.format(name="norm", shape="[8]", enc="f32", offset=64, size=32) +
            TENSOR.format(name="k", shape="[256]", enc="q4k", offset=128, size=144))
    extra = f"~~~card\n# card\n\\~~~fence\n~~~vocab\n{VOCAB}~~~chat\n{CHAT}~~~graph\n{GRAPH}~~~eval\n[[prompts]]\ntext = \"hi\"\n"
    valid = assemble(good, w, extra)
    seeds = [valid, assemble(good, w), assemble("", b""), valid[: len(valid) // 2], valid[:-1], valid + b"\0"]
    seeds.append(valid.replace(b"~~~weights\n", b"~~~weight\n"))                      # no marker
    seeds.append(assemble(good, w, size=len(w) + 1))                                   # wrong [[files]] size
    seeds.append(assemble(TENSOR.format(name="w", shape="[2, 32]", enc="q4_0", offset=500, size=36), w))
    seeds.append(assemble(TENSOR.format(name="w", shape="[2, 32]", enc="q4_0", offset=0, size=35), w))
    seeds.append(assemble(TENSOR.format(name="w", shape="[2, 30]", enc="q4_0", offset=0, size=34), w))
    seeds.append(assemble(TENSOR.format(name="w", shape=f"[{1 << 62}, {1 << 62}]", enc="u8", offset=0, size=1), w))
    seeds.append(assemble(TENSOR.format(name="w", shape="[4]", enc="q9", offset=0, size=4), w))
    seeds.append(assemble(good + good, w))                                             # duplicate tensor
    seeds.append(assemble(good.replace("shape = [8]", "shape = [8"), w))               # malformed TOML
    seeds.append(assemble(good, w, front=""))                                          # no frontmatter
    return seeds


def writer_seeds(folder: str) -> list[bytes]:
    try:
        import numpy as np
        from cyb_llm.format import ENCODINGS, write_model
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        try:
            import numpy as np
            from cyb_llm.format import ENCODINGS, write_model
        except ImportError:
            print("fuzz_corpus: cyb_llm not importable, hand-assembled seeds only", file=sys.stderr)
            return []
    tensors = []
    for enc, (block, block_bytes) in ENCODINGS.items():
        shape = [2, block] if block > 1 else [3]
        tensors.append((f"t.{enc}", enc, shape, np.arange(shape[0] * block_bytes, dtype=np.uint8)))
    path = os.path.join(folder, "w.model")
    write_model(path, name="writer-seed", config={"model_type": "llama", "architecture": {"hidden_size": 8}},
                tensors=tensors, vocab={"tokens": {0: "a", 1: "b\n"}, "merges": {0: ["a", "b"]}},
                chat={"template": "{{ x }}\n\"\"\""}, card="~~~\nfence\n", tokenizer_json='{"model": {}}\n',
                graph={"nodes": [{"op": "Add", "inputs": ["a", "b"]}]})
    data = open(path, "rb").read()
    return [data, data[:-7]]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        seeds = hand_seeds() + writer_seeds(tmp)
    for s in seeds:
        with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print(f"fuzz_corpus: {len(seeds)} seeds in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
