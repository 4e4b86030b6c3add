"""llama.cpp (llama-cpp-python, the pinned LLAMA_CPP_VERSION) as a peer reference, live or from
its committed record.

What the default tiers ask of llama.cpp (the corpus's token ids; the fast path's logit error
against transformers f32 and its greedy continuations on the prompts of tests/oracles.py) is
computed by the functions below. `tools/make_llamacpp_fixtures.py` runs them once with the
pinned version and writes tests/data/llamacpp/reference.json.xz. A test asks `reference()`:
llama-cpp-python when it imports at the pinned version, else the record when
CYB_LLAMACPP_FIXTURES=1 (tools/test.sh sets it where no cached wheel of the pinned version
exists, so a cold CI does not build llama.cpp from its sdist), else a skip (a failure under
CYB_REQUIRE_PEERS=1). The slow tier builds llama-cpp-python, recomputes everything live and
compares it with the record (tests/slow/test_llamacpp_record.py).
"""
from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os

import numpy as np

import oracles

RECORD = os.path.join(oracles.DATA, "llamacpp", "reference.json.xz")
MODELS = ("smollm2", "qwen05", "gemma3")
N_TOKENS = 32  # greedy continuation length of the fidelity checks


def corpus_digest(lines) -> str:
    """What the tokenizer record was made from: a changed corpus makes the record stale."""
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def open_llama(llama_cpp, gguf: str, vocab_only: bool = False):
    if vocab_only:
        return llama_cpp.Llama(gguf, vocab_only=True, verbose=False)
    return llama_cpp.Llama(model_path=gguf, n_ctx=512, n_threads=2, logits_all=True, verbose=False)


def tokenize(llm, lines) -> list[list[int]]:
    return [llm.tokenize(line.encode("utf-8"), add_bos=False, special=True) for line in lines]


def logits(llm, ids) -> np.ndarray:
    llm.reset()
    llm.eval(list(ids))
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def greedy(llm, ids, n: int, eos: set[int]) -> list[int]:
    llm.reset()
    llm.eval(list(ids))
    out: list[int] = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        if t in eos:
            break
        llm.eval([t])
    return out


def fidelity(llm, hf, ids, eos: set[int]) -> dict:
    """llama.cpp on one prompt: its logit error against transformers f32 (oracles.rel_err, every
    position) and its greedy continuation."""
    return {"ids": list(map(int, ids)), "err": float(oracles.rel_err(logits(llm, ids), oracles.hf_logits(hf, ids))),
            "greedy": greedy(llm, ids, N_TOKENS, eos)}


@functools.lru_cache(maxsize=1)
def record() -> dict:
    with lzma.open(RECORD, "rt", encoding="utf-8") as f:
        return json.load(f)


class Live:
    """llama.cpp itself."""

    def __init__(self, mod):
        self.mod = mod
        self.source = f"llama-cpp-python {mod.__version__} (live)"

    def tokenize(self, gguf: str, name: str, lines) -> list[list[int]]:
        return tokenize(open_llama(self.mod, gguf, vocab_only=True), lines)

    def fidelity(self, gguf: str, name: str, hf, prompt_ids, eos) -> list[dict]:
        llm = open_llama(self.mod, gguf)
        return [fidelity(llm, hf, ids, eos) for ids in prompt_ids]


class Recorded:
    """The committed record of the pinned llama.cpp (same functions, same inputs)."""

    def __init__(self):
        self.data = record()
        self.source = f"the record of llama-cpp-python {self.data['version']} ({os.path.relpath(RECORD)})"
        if self.data["version"] != oracles.LLAMA_CPP_VERSION:
            raise AssertionError(f"{RECORD} was made with llama-cpp-python {self.data['version']}, the pinned "
                                 f"version is {oracles.LLAMA_CPP_VERSION}: run tools/make_llamacpp_fixtures.py")

    def tokenize(self, gguf: str, name: str, lines) -> list[list[int]]:
        tok = self.data["tokenizer"][name]
        if tok["corpus"] != corpus_digest(lines):
            raise AssertionError(f"{RECORD}: the tokenizer corpus changed since the record was made: "
                                 "run tools/make_llamacpp_fixtures.py")
        return tok["ids"]

    def fidelity(self, gguf: str, name: str, hf, prompt_ids, eos) -> list[dict]:
        rows = self.data["fidelity"][name]
        out = []
        for ids in prompt_ids:
            row = next((r for r in rows if r["ids"] == list(map(int, ids))), None)
            if row is None:
                raise AssertionError(f"{RECORD}: no {name} row for the prompt ids {list(ids)[:8]}...: "
                                     "run tools/make_llamacpp_fixtures.py")
            out.append(row)
        return out


def compute(lines) -> dict:
    """Everything the record holds, computed live with the pinned llama-cpp-python."""
    import llama_cpp

    import cyb_llm
    from cyb_llm import hub

    if llama_cpp.__version__ != oracles.LLAMA_CPP_VERSION:
        raise RuntimeError(f"llama-cpp-python {llama_cpp.__version__}, the pinned version is {oracles.LLAMA_CPP_VERSION}")
    live = Live(llama_cpp)
    out = {"version": llama_cpp.__version__, "build": build(llama_cpp), "tokenizer": {}, "fidelity": {}}
    for name in MODELS:
        gguf = hub.fetch_source(name, progress=False)
        out["tokenizer"][name] = {"corpus": corpus_digest(lines), "ids": live.tokenize(gguf, name, lines)}
        m = cyb_llm.load(hub.fetch(name, progress=False))
        prompt_ids = [m.tokenizer.encode(p, add_special_tokens=True) for p in oracles.PROMPTS]
        out["fidelity"][name] = live.fidelity(gguf, name, oracles.hf_from_gguf(gguf), prompt_ids, m.eos_token_ids)
        print(f"{name}: {len(lines)} corpus lines, {len(prompt_ids)} prompts; llama.cpp error max "
              f"{max(r['err'] for r in out['fidelity'][name]):.2e}", flush=True)
    return out


def reference():
    """Live llama.cpp at the pinned version, or its record (see the module's docstring)."""
    try:
        import llama_cpp as mod
    except ImportError as e:
        mod, why = None, f"llama_cpp does not import: {e}"
    else:
        why = f"llama_cpp {mod.__version__}, want {oracles.LLAMA_CPP_VERSION}"
        if mod.__version__ == oracles.LLAMA_CPP_VERSION:
            return Live(mod)
    if os.environ.get("CYB_LLAMACPP_FIXTURES") == "1":
        return Recorded()
    oracles.peer_missing(why)


def build(llama_cpp) -> str:
    """The CPU features llama.cpp was compiled with (its kernels, and so its logits, differ by them)."""
    info = llama_cpp.llama_print_system_info()
    return (info.decode() if isinstance(info, bytes) else str(info)).strip(" |")


def compare(recorded: dict, live: dict, say) -> bool:
    """Whether a live recomputation agrees with the record: the same version, token ids and greedy
    continuations; and, where llama.cpp was compiled for the same CPU features as the record's, the
    same logit errors bit for bit (llama.cpp is deterministic for a build and thread count; another
    build's kernels round differently, so its errors are printed, not compared). Says each
    difference."""
    same_build = recorded.get("build") == live["build"]
    if not same_build:
        say(f"llama.cpp here is compiled for [{live['build']}], the record for [{recorded.get('build')}]: "
            "the logit errors are printed, not compared")
    ok = True

    def bad(msg):
        nonlocal ok
        ok = False
        say(msg)

    if recorded["version"] != live["version"]:
        bad(f"version: record {recorded['version']}, live {live['version']}")
    for name, tok in live["tokenizer"].items():
        rt = recorded["tokenizer"].get(name)
        if rt is None or rt["corpus"] != tok["corpus"]:
            bad(f"{name}: the record's tokenizer corpus differs")
            continue
        diff = sum(a != b for a, b in zip(rt["ids"], tok["ids"])) + abs(len(rt["ids"]) - len(tok["ids"]))
        if diff:
            bad(f"{name}: llama.cpp's token ids differ from the record on {diff} lines")
    for name, rows in live["fidelity"].items():
        rec = {tuple(r["ids"]): r for r in recorded["fidelity"].get(name, [])}
        for r in rows:
            q = rec.get(tuple(r["ids"]))
            if q is None:
                bad(f"{name}: no record for prompt ids {r['ids'][:8]}...")
                continue
            if q["greedy"] != r["greedy"]:
                bad(f"{name} {r['ids'][:4]}...: greedy continuation differs from the record")
            if same_build and q["err"] != r["err"]:
                bad(f"{name} {r['ids'][:4]}...: logit error {r['err']!r}, record {q['err']!r} (same build)")
            else:
                say(f"{name} {r['ids'][:4]}...: logit error {r['err']:.3e}, record {q['err']:.3e}")
    return ok
