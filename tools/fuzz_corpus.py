#!/usr/bin/env python3
"""Writes the seed corpus of the `.model` reader fuzzer into DIR: valid files
(hand-assembled, and written by cyb_llm.format.write_model when cyb_llm is
importable) and broken ones (truncated, no marker, wrong sizes, overflowing
shapes, unknown encodings, duplicates, malformed TOML).

With --all, writes the seed corpus of every fuzz target into ROOT/<target>/
(the one kept in the repo is tests/data/fuzz/): fuzz_model_file (the seeds
above), fuzz_toml (section texts of a .model, edge cases of the TOML subset),
fuzz_sampler (sampler configs + logits as the target reads them), and the
Python targets of tools/fuzz_py.py: gguf (tiny GGUF files from
tools/hostile.py's builder) and chat (chat template + messages).

usage: tools/fuzz_corpus.py DIR
       tools/fuzz_corpus.py --all ROOT
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


def toml_seeds() -> list[bytes]:
    texts = [CONFIG, VOCAB, CHAT, GRAPH, TENSOR.format(name="w", shape="[2, 32]", enc="q4_0", offset=0, size=36),
             FRONT.format(size=10),
             'a = 1\nb = -0x7f\nc = 0o17\nd = 0b101\ne = 1_000\nf = +inf\ng = -nan\nh = 6.02e23\ni = true\n',
             's = "tab\\t \\u00e9 \\U0001F600"\nl = \'C:\\path\'\nm = """\nmulti\\\n  line"""\nn = \'\'\'raw\n\'\'\'\n',
             'a.b.c = 1\n"quoted key" = 2\n[t]\nx = { y = [1, [2, [3]]], z = {} }\n[[arr]]\nk = 1\n[[arr]]\nk = 2\n',
             "x = [" * 64 + "]" * 64 + "\n", "# comment only\n", "a = 9223372036854775807\nb = -9223372036854775808\n",
             "a = 1\na = 2\n", "[t]\n[t]\n", "a = \"\\ud800\"\n", "a = \"unterminated\n", "= 1\n", "a = 1 b = 2\n"]
    return [t.encode() for t in texts] + [b"a = \"\xff\xfe\"\n", b"\xef\xbb\xbfa = 1\r\n"]


def sampler_seeds() -> list[bytes]:
    """Byte layouts fuzz_sampler.cc reads: 7 config floats/ints, seed, vocab size, history, logits."""
    import struct

    def seed(t, k, p, mn, rep, pres, freq, last_n, sd, n, hist, logits):
        return (struct.pack("<fifffffiQHB", t, k, p, mn, rep, pres, freq, last_n, sd, n, len(hist)) +
                struct.pack(f"<{len(hist)}i", *hist) + struct.pack(f"<{len(logits)}f", *logits))
    row = [0.5, -1.0, 3.0, 2.0, 0.0, -7.5, 1.25, 3.0]
    nan, inf = float("nan"), float("inf")
    return [seed(1.0, 0, 1.0, 0.0, 1.0, 0.0, 0.0, 64, 1, 7, [], row),
            seed(0.0, 0, 1.0, 0.0, 1.1, 0.5, 0.5, -1, 2, 7, [1, 2, 2, 9, -3], row),
            seed(0.7, 3, 0.9, 0.05, 1.3, 0.0, 0.2, 8, 3, 255, [0, 4], row),
            seed(1e-6, 1, 0.0, 1.0, 1e6, 1e30, -1e30, 0, 4, 4095, [2 ** 31 - 1], row),
            seed(2.0, 0, 0.5, 0.0, 1.0, 0.0, 0.0, 64, 5, 7, [], [nan, inf, -inf, 0.0, 1.0, nan, -inf, 2.0]),
            seed(nan, -1, 2.0, -0.5, 0.0, inf, nan, -2, 6, 7, [], row)]


def chat_seeds() -> list[bytes]:
    """fuzz_py.py chat: template, a NUL byte, then message contents separated by NUL bytes."""
    tmpl = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return [s.encode("utf-8", "surrogatepass") for s in (
        tmpl + "\0hello\0hi there",
        "{{ bos_token }}{% for m in messages %}{% if loop.first %}{{ m.content|upper }}{% endif %}{% endfor %}\0a",
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}\0x\0y",
        "{{ messages|tojson }}{{ raise_exception('x') if messages|length > 3 }}\0\u00e9\U0001F600\0<|im_end|>",
        "{% macro f(x) %}[{{ x }}]{% endmacro %}{{ f(messages[0].content) * 3 }}\0caf\u00e9",
        "{% for i in range(5) %}{{ i }}{% endfor %}{{ strftime_now('%Y') }}\0",
    )]


def gguf_seeds() -> list[bytes]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hostile

    out = []
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.gguf")
        out.append(open(hostile.build_gguf(p), "rb").read())
        out.append(open(hostile.build_gguf(p, tensors=[]), "rb").read())
        out.append(open(hostile.build_gguf(p, tensors=[("output_norm.weight", (32,))]), "rb").read())
    out.append(out[1][: len(out[1]) // 3])
    return out


def write_seeds(out: str, seeds: list[bytes]) -> None:
    os.makedirs(out, exist_ok=True)
    for s in seeds:
        with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print(f"fuzz_corpus: {len(seeds)} seeds in {out}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--all":
        root = sys.argv[2]
        with tempfile.TemporaryDirectory() as tmp:
            write_seeds(os.path.join(root, "fuzz_model_file"), hand_seeds() + writer_seeds(tmp))
        write_seeds(os.path.join(root, "fuzz_toml"), toml_seeds())
        write_seeds(os.path.join(root, "fuzz_sampler"), sampler_seeds())
        write_seeds(os.path.join(root, "chat"), chat_seeds())
        write_seeds(os.path.join(root, "gguf"), gguf_seeds())
        return 0
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
