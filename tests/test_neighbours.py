"""cyb_llm in a process shared with other C++ extensions (docs/install.md, "A good neighbour").

The module `cyb_llm._core` exports `PyInit__core` and nothing else: no C++ runtime symbol and
no STB_GNU_UNIQUE symbol, which the dynamic loader binds process-wide whatever RTLD_LOCAL says.
A module that exported its statically linked libstdc++ made the next library's locale facets
resolve to its copies: after `cyb_llm.load(...)`, llama-cpp-python's model load failed with
`error loading model vocabulary: std::bad_cast` and `torch.jit.script` hung.

Each case runs in a fresh interpreter: a cyb_llm model loaded and run, and another C++
extension used (llama-cpp-python's vocabulary load and tokenizer, sentencepiece's trainer and
encoder, torch's TorchScript compiler and tensor printing), in both orders; each step's results
must be the same in either order.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracles  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm import hub  # noqa: E402

CHILD = r'''
import faulthandler, json, os, sys, tempfile
faulthandler.dump_traceback_later(int(os.environ["CYB_NEIGHBOUR_HANG_S"]), exit=True)
sys.path.insert(0, os.environ["CYB_NEIGHBOUR_PKG_DIR"])
MODEL, GGUF = os.environ["CYB_NEIGHBOUR_MODEL"], os.environ["CYB_NEIGHBOUR_GGUF"]
TEXT = "The capital of France is Paris, and 3.25 + 1.5 = 4.75."


def cyb():
    import numpy as np
    import cyb_llm
    m = cyb_llm.load(MODEL)
    ids = m.tokenizer.encode(TEXT)
    logits = m.new_conversation().forward(ids)
    return {"module": cyb_llm._core.__file__, "ids": list(map(int, ids)),
            "argmax": int(np.argmax(logits[-1] if logits.ndim == 2 else logits))}


def llama_cpp():
    import llama_cpp
    llm = llama_cpp.Llama(GGUF, vocab_only=True, verbose=True)  # its log names the error
    return {"ids": llm.tokenize(TEXT.encode(), add_bos=False)}


def sentencepiece():
    import sentencepiece as spm
    d = tempfile.mkdtemp()
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(f"héllo wörld {i}: the quick brown fox, ünïcode {i * 7}" for i in range(300)))
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "m"), vocab_size=60,
                                   minloglevel=2, num_threads=1)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "m.model"))
    return {"pieces": sp.encode("héllo brown fox 42", out_type=str)}


def torch():
    import torch

    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2.5 + 1.25

    torch.manual_seed(0)
    y = f(torch.arange(4, dtype=torch.float32))
    return {"graph": str(f.graph).count("prim::Constant"), "y": repr(y), "sum": float(y.sum())}


STEPS = {"cyb": cyb, "llama_cpp": llama_cpp, "sentencepiece": sentencepiece, "torch": torch}
print(json.dumps({name: STEPS[name]() for name in sys.argv[1:]}))
'''

HANG_S = 120  # the child dumps its stacks and exits after this long (a deadlock, not slowness)


def _run(tmp_path, order: list[str]) -> dict:
    script = tmp_path / "neighbours_child.py"  # a file: TorchScript reads the function's source
    script.write_text(CHILD)
    env = dict(os.environ,
               CYB_NEIGHBOUR_PKG_DIR=os.path.dirname(os.path.dirname(os.path.abspath(cyb_llm.__file__))),
               CYB_NEIGHBOUR_MODEL=str(hub.fetch("smollm2", progress=False)),
               CYB_NEIGHBOUR_GGUF=str(hub.fetch_source("smollm2", progress=False)),
               CYB_NEIGHBOUR_HANG_S=str(HANG_S))
    try:
        p = subprocess.run([sys.executable, str(script), *order], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=HANG_S + 60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' then '.join(order)}: no answer in {e.timeout} s\n{e.stderr}")
    assert p.returncode == 0, f"{' then '.join(order)} in one process failed (rc {p.returncode}):\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _neighbour(name: str):
    if name == "llama_cpp":
        oracles.llama_cpp()  # skips, or fails under CYB_REQUIRE_PEERS=1, where it is missing
    else:
        pytest.importorskip(name)


@pytest.mark.parametrize("other", ["llama_cpp", "sentencepiece", "torch"])
def test_cyb_then_other_and_other_then_cyb(tmp_path, other):
    _neighbour(other)
    first = _run(tmp_path, ["cyb", other])
    second = _run(tmp_path, [other, "cyb"])
    assert os.path.samefile(first["cyb"]["module"], cyb_llm._core.__file__), "the child ran another cyb_llm"
    assert first == second, f"results depend on the order of loading:\n{first}\n{second}"
    if other == "llama_cpp":  # the same tokenizer: the same ids
        assert first["llama_cpp"]["ids"] == first["cyb"]["ids"]


def test_all_in_one_process(tmp_path):
    names = ["llama_cpp", "sentencepiece", "torch"]
    present = []
    for n in names:
        try:
            _neighbour(n)
            present.append(n)
        except pytest.skip.Exception:
            pass
    if not present:
        pytest.skip("no other C++ extension installed")
    assert _run(tmp_path, ["cyb", *present]) == _run(tmp_path, [*present, "cyb"])


# --- the module's dynamic symbol table -----------------------------------------------------

STB_GNU_UNIQUE = 10
SHT_DYNSYM = 11


def _dynamic_symbols(path: str) -> list[tuple[str, int, bool]]:
    """(name, binding, defined) of each entry of an ELF64 little-endian file's .dynsym."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not an ELF64 LE file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _name, kind, _flags, _addr, off, size, link, _info, _align, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        stroff = sections[link][4]
        for i in range(1, size // entsize):  # entry 0 is the null symbol
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, off + i * entsize)
            end = data.index(b"\0", stroff + st_name)
            out.append((data[stroff + st_name:end].decode(), st_info >> 4, st_shndx != 0))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF symbol tables (Linux)")
def test_module_exports_only_its_init_function():
    path = cyb_llm._core.__file__
    syms = _dynamic_symbols(path)
    defined = sorted(n for n, _b, d in syms if d)
    unique = sorted(n for n, b, _d in syms if b == STB_GNU_UNIQUE)
    assert not unique, f"{path}: {len(unique)} STB_GNU_UNIQUE symbols, e.g. {unique[:5]}"
    assert defined == ["PyInit__core"], \
        f"{path} exports {len(defined)} symbols, not only PyInit__core: e.g. {defined[:8]}"
