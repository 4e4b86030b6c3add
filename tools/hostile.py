#!/usr/bin/env python3
"""The hostile-input tier: a seeded corpus of broken inputs, each run in a child
process under a time and a memory limit (docs/testing.md, "Hostile inputs and fuzzing").

    python tools/hostile.py --seed 1                 # every case, 2 workers
    python tools/hostile.py --seed 1 --limit 20      # a deterministic subset (every k-th case)
    python tools/hostile.py --seed 1 --only NAME     # one case (a name printed by a failing run)
    python tools/hostile.py --seed 1 --list          # the case names

Groups: `.model` files (mutations of a tiny model: truncations, bit flips in the
TOML head, hostile config values, tensor index entries, duplicated keys, files
changed after load), GGUF files (GGUFWriter output with hostile metadata, then
corrupted header/KV/tensor-info bytes), HF safetensors folders (broken header,
offsets, config.json), chat templates (loops, include, recursion, huge output)
and API arguments (token ids, max_context, threads, sampling values, messages).

Each case ends as one of
  clean         a cyb_llm.Error (or a TypeError for an argument of a wrong Python type)
  ok            valid input that works (accepting a hostile value is not a failure here)
  nonfinite     accepted, then the model's outputs (logits) are not finite: a failure, since an
                input must either be refused with a cyb_llm.Error or give numbers
  crash         the child was killed by a signal (or exited without reporting)
  hang          the case ran past --timeout seconds
  unstructured  any other exception escaped
Exit status 1 when any case was non-finite, crashed, hung or was unstructured; the inputs of
those cases and a JSON list land in build/hostile/ (--out).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkout_path import ROOT, setup  # noqa: E402

setup()

CLASSES = ("clean", "ok", "nonfinite", "crash", "hang", "unstructured")
FAILING = ("nonfinite", "crash", "hang", "unstructured")


class NonFinite(Exception):
    """An accepted input gave non-finite outputs (the class `nonfinite`, a failure)."""


def check_finite(logits, what: str = "logits") -> None:
    import numpy as np

    a = np.asarray(logits)
    bad = int(a.size - np.isfinite(a).sum())
    if bad:
        raise NonFinite(f"accepted, then {bad} of {a.size} {what} not finite")

# ------------------------------------------------------------------ base inputs
# A llama-shaped model small enough that every case loads and runs it in
# milliseconds: 2 layers, hidden 32, a byte-level BPE vocab of 260 tokens.
TINY = dict(hidden=32, heads=4, kv_heads=2, head_dim=8, ffn=48, layers=2, context=64)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def gguf_meta(arch: str = "llama") -> list[tuple[str, Any, Any]]:
    """(key, value, GGUFValueType) of the tiny model's metadata, in writing order."""
    import gguf
    from cyb_llm.convert.gguf_tokenizer import bytes_to_unicode

    T = gguf.GGUFValueType
    t = TINY
    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u0120a"]
    a = arch
    return [
        ("general.name", "tiny", T.STRING),
        (f"{a}.block_count", t["layers"], T.UINT32),
        (f"{a}.context_length", t["context"], T.UINT32),
        (f"{a}.embedding_length", t["hidden"], T.UINT32),
        (f"{a}.feed_forward_length", t["ffn"], T.UINT32),
        (f"{a}.attention.head_count", t["heads"], T.UINT32),
        (f"{a}.attention.head_count_kv", t["kv_heads"], T.UINT32),
        (f"{a}.rope.freq_base", 10000.0, T.FLOAT32),
        (f"{a}.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32),
        (f"{a}.rope.dimension_count", t["head_dim"], T.UINT32),
        ("tokenizer.ggml.model", "gpt2", T.STRING),
        ("tokenizer.ggml.pre", "gpt2", T.STRING),
        ("tokenizer.ggml.tokens", tokens, T.ARRAY),
        ("tokenizer.ggml.token_type", [1] * 256 + [3, 3, 3, 1], T.ARRAY),
        ("tokenizer.ggml.merges", ["\u0120 a"], T.ARRAY),
        ("tokenizer.ggml.bos_token_id", 256, T.UINT32),
        ("tokenizer.ggml.eos_token_id", 258, T.UINT32),
        ("tokenizer.ggml.add_bos_token", False, T.BOOL),
        ("tokenizer.chat_template", CHAT_TEMPLATE, T.STRING),
    ]


def gguf_tensors(vocab: int = 260) -> list[tuple[str, tuple[int, ...]]]:
    t = TINY
    H, F, q, kv = t["hidden"], t["ffn"], t["heads"] * t["head_dim"], t["kv_heads"] * t["head_dim"]
    out = [("token_embd.weight", (vocab, H)), ("output_norm.weight", (H,)), ("output.weight", (vocab, H))]
    for layer in range(t["layers"]):
        p = f"blk.{layer}."
        out += [(p + "attn_norm.weight", (H,)), (p + "ffn_norm.weight", (H,)), (p + "attn_q.weight", (q, H)),
                (p + "attn_k.weight", (kv, H)), (p + "attn_v.weight", (kv, H)), (p + "attn_output.weight", (H, q)),
                (p + "ffn_gate.weight", (F, H)), (p + "ffn_up.weight", (F, H)), (p + "ffn_down.weight", (H, F))]
    return out


def build_gguf(path: str, meta_over: dict | None = None, drop: tuple = (), extra: list | None = None,
               tensors: list | None = None, arch: str = "llama") -> str:
    """The tiny GGUF, with metadata values replaced (key -> (value, type) or value), keys
    dropped, extra (key, value, type) entries appended and another tensor list."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(path, arch)
    for key, value, vtype in gguf_meta(arch):
        if key in drop:
            continue
        if meta_over and key in meta_over:
            o = meta_over[key]
            value, vtype = o if isinstance(o, tuple) else (o, vtype)
        sub = None
        if vtype == gguf.GGUFValueType.ARRAY and value and isinstance(value[0], str):
            sub = gguf.GGUFValueType.STRING
        w.add_key_value(key, value, vtype, sub) if sub else w.add_key_value(key, value, vtype)
    for key, value, vtype in extra or []:
        w.add_key_value(key, value, vtype)
    rng = np.random.default_rng(0)
    for name, shape in (gguf_tensors() if tensors is None else tensors):
        w.add_tensor(name, (0.05 * rng.standard_normal(shape)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_layout(data: bytes) -> dict:
    """Byte offsets of a GGUF's header fields, KV entries and tensor infos (v2/v3)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(p):
        n = struct.unpack_from("<Q", data, p)[0]
        return data[p + 8:p + 8 + n], p + 8 + n

    def value(p, t):
        if t in sizes:
            return p + sizes[t]
        if t == 8:
            return string(p)[1]
        st, n = struct.unpack_from("<IQ", data, p)
        p += 12
        for _ in range(n):
            p = value(p, st)
        return p

    kvs, infos = [], []
    for _ in range(n_kv):
        key, p = string(pos)
        t = struct.unpack_from("<I", data, p)[0]
        kvs.append(dict(key=key.decode(), off=pos, type_off=p, val_off=p + 4, type=t))
        pos = value(p + 4, t)
    for _ in range(n_tensors):
        name, p = string(pos)
        nd = struct.unpack_from("<I", data, p)[0]
        infos.append(dict(name=name.decode(), off=pos, ndims_off=p, dims_off=p + 4, type_off=p + 4 + 8 * nd,
                          offset_off=p + 8 + 8 * nd))
        pos = p + 4 + 8 * nd + 4 + 8
    return dict(kv=kvs, tensors=infos, infos_end=pos)


def build_hf(folder: str) -> str:
    """A tiny HF folder: config.json, model.safetensors (tests/graph_util.py's weights), tokenizer.json."""
    import numpy as np
    from graph_util import ARCH, tiny_tensors
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    os.makedirs(folder, exist_ok=True)
    cfg = dict(ARCH, model_type="llama", architectures=["LlamaForCausalLM"], torch_dtype="float32",
               bos_token_id=0, eos_token_id=1)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    save_file({n: np.ascontiguousarray(a) for n, _, _, a in tiny_tensors()}, os.path.join(folder, "model.safetensors"))
    tok = Tokenizer(models.BPE({f"t{i}": i for i in range(ARCH["vocab_size"])}, [], unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(folder, "tokenizer.json"))
    return folder


def build_base(folder: str) -> dict:
    """The base inputs every case starts from (deterministic; rebuilt when missing)."""
    from cyb_llm.convert import import_model

    os.makedirs(folder, exist_ok=True)
    paths = dict(gguf=os.path.join(folder, "base.gguf"), model=os.path.join(folder, "base.model"),
                 hf=os.path.join(folder, "hf"))
    if not os.path.exists(paths["model"]):
        build_gguf(paths["gguf"])
        import_model(paths["gguf"], paths["model"], progress=False)
    if not os.path.exists(os.path.join(paths["hf"], "tokenizer.json")):
        build_hf(paths["hf"])
    return paths


# ------------------------------------------------------------------ helpers for cases
MARK = b"~~~weights\n"


def split_model(data: bytes) -> tuple[bytes, bytes]:
    i = data.index(MARK)
    return data[:i], data[i:]


def sections(head: str) -> list[tuple[str, int, int]]:
    """(name, start of body, end of body) of every `~~~name` section of a `.model` head."""
    marks = [(m.group(1), m.start(), m.end()) for m in re.finditer(r"^~~~([a-z0-9_]+)\n", head, re.M)]
    out = []
    for i, (name, _, body) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else len(head)
        out.append((name, body, end))
    return out


def edit_section(data: bytes, name: str, fn: Callable[[str], str]) -> bytes:
    head, rest = split_model(data)
    text = head.decode("utf-8")
    for sec, a, b in sections(text):
        if sec == name:
            return (text[:a] + fn(text[a:b]) + text[b:]).encode("utf-8", "surrogatepass") + rest
    raise KeyError(name)


def set_key(body: str, key: str, line: str | None) -> str:
    """Replaces the line `key = ...` (its first occurrence) with `line` (None removes it;
    a key not present is added after the first table header or at the top)."""
    pat = re.compile(rf"^{re.escape(key)} = .*$", re.M)
    if pat.search(body):
        return pat.sub(lambda m: line if line is not None else "", body, count=1)
    if line is None:
        return body
    m = re.search(r"^\[architecture\]\n", body, re.M)
    return body[:m.end()] + line + "\n" + body[m.end():] if m else line + "\n" + body


def tensor_block(body: str, name: str) -> tuple[int, int]:
    m = re.search(rf'^\["{re.escape(name)}"\]\n', body, re.M)
    nxt = re.search(r"^\[", body[m.end():], re.M)
    return m.start(), m.end() + (nxt.start() if nxt else len(body) - m.end())


def edit_tensor(name: str, key: str, line: str | None) -> Callable[[str], str]:
    def fn(body: str) -> str:
        a, b = tensor_block(body, name)
        block = body[a:b]
        pat = re.compile(rf"^{key} = .*\n", re.M)
        block = pat.sub("" if line is None else line + "\n", block, count=1)
        return body[:a] + block + body[b:]
    return fn


def toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


# ------------------------------------------------------------------ what a case does
class Ctx:
    """Per-process state: the base inputs and a lazily loaded base model."""

    def __init__(self, base: dict):
        self.base = base
        self._model = None
        self._bytes: dict[str, bytes] = {}

    def data(self, kind: str) -> bytes:
        if kind not in self._bytes:
            with open(self.base[kind], "rb") as f:
                self._bytes[kind] = f.read()
        return self._bytes[kind]

    def model(self):
        if self._model is None:
            import cyb_llm

            self._model = cyb_llm.load(self.base["model"], backend="cpu", threads=1)
        return self._model


def use_model(path: str, threads: int = 1) -> str:
    """Loads a `.model` and exercises it: a forward (its logits must be finite), the tokenizer, a
    short chat generation."""
    import cyb_llm

    m = cyb_llm.load(path, backend="cpu", threads=threads)
    conv = m.new_conversation(16)
    v = max(1, m.vocab_size)
    check_finite(conv.forward([1 % v, 2 % v, 3 % v]))
    note = "logits finite"
    try:
        tok = m.tokenizer
    except cyb_llm.Error as e:
        return f"loaded, {note}; tokenizer: {type(e).__name__}"
    tok.decode(tok.encode("hi a"))
    if m.chat is not None:
        m.generator().generate([{"role": "user", "content": "hi"}], max_tokens=3,
                               sampling={"temperature": 0.0}).read()
    return f"loaded, {note}"


def import_and_use(src: str, tmp: str) -> str:
    from cyb_llm.convert import import_model

    out = os.path.join(tmp, "imported.model")
    import_model(src, out, progress=False)
    return "imported; " + use_model(out)


def write_bytes(folder: str, name: str, data: bytes) -> str:
    p = os.path.join(folder, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def in_threads(fns: list[Callable[[], Any]], timeout: float = 15.0) -> str:
    errs: list[BaseException] = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported to the case
            errs.append(e)

    ts = [threading.Thread(target=wrap, args=(fn,), daemon=True) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    if any(t.is_alive() for t in ts):
        time.sleep(3600)  # let the parent's time limit report the hang
    if errs:
        raise errs[0]
    return f"{len(fns)} threads finished"


# ------------------------------------------------------------------ the corpus
@dataclass
class Case:
    name: str
    group: str
    run: Callable[[Ctx, str], str]              # (ctx, scratch folder) -> detail of an ok run
    make: Callable[[Ctx, str], list[str]] | None = None  # writes the input files into a folder (reproducers)
    pytype: bool = False                        # a TypeError counts as clean (wrong Python type on purpose)
    note: str = ""


def file_case(name: str, group: str, build: Callable[[Ctx], bytes], fname: str = "case.model",
              action: Callable[[str, str], str] | None = None) -> Case:
    def make(ctx: Ctx, folder: str) -> list[str]:
        return [write_bytes(folder, fname, build(ctx))]

    def run(ctx: Ctx, tmp: str) -> str:
        path = make(ctx, tmp)[0]
        return (action or (lambda p, t: use_model(p)))(path, tmp)

    return Case(name, group, run, make)


HOSTILE_NUMBERS = ["nan", "inf", "-inf", "0", "-1", "1e308", "9223372036854775807", "-9223372036854775808",
                   '"32"', "1.5", "true", "[]", "{}", "4294967296", "1e-45"]
ARCH_KEYS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
             "intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps",
             "tie_word_embeddings", "rope_style", "hidden_act", "attention_bias"]
EXTRA_ARCH = [("sliding_window", "0"), ("sliding_window", "-1"), ("rope_scaling", '{ type = "linear", factor = 0.0 }'),
              ("rope_scaling", '{ type = "linear", factor = nan }'), ("rope_scaling", '{ type = "yarn" }'),
              ("rope_scaling", '"linear"'), ("layer_types", '["sliding"]'), ("layer_types", "[1, 2]"),
              ("final_logit_softcapping", "0.0"), ("final_logit_softcapping", "nan"),
              ("attn_logit_softcapping", "-1.0"), ("partial_rotary_factor", "nan"), ("partial_rotary_factor", "0.0"),
              ("query_pre_attn_scalar", "0"), ("rope_local_base_freq", "inf")]


def model_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []

    def add(name, build, **kw):
        cases.append(file_case("model/" + name, "model", build, **kw))

    # Truncations: at the start, in the head, at and after the weights marker, in the weights.
    def trunc(frac=None, at=None, rel=None):
        def build(ctx):
            d = ctx.data("model")
            n = at if at is not None else (d.index(MARK) + rel if rel is not None else int(len(d) * frac))
            return d[:max(0, n)]
        return build

    for n in (0, 1, 10):
        add(f"truncate/at{n}", trunc(at=n))
    for rel in (-1, 0, 5, len(MARK), len(MARK) + 1):
        add(f"truncate/marker{rel:+d}", trunc(rel=rel))
    for _ in range(6):
        f = round(rng.random(), 4)
        add(f"truncate/frac{f}", trunc(frac=f))
    add("truncate/minus1", lambda ctx: ctx.data("model")[:-1])
    add("extend/plus_bytes", lambda ctx: ctx.data("model") + b"\0" * 7)

    # Bit flips and garbage in the TOML head.
    for _ in range(60):
        r = rng.random()
        bit = rng.randrange(8)

        def flip(ctx, r=r, bit=bit):
            d = bytearray(ctx.data("model"))
            head_len = d.index(MARK) + len(MARK)
            i = int(r * head_len)
            d[i] ^= 1 << bit
            return bytes(d)
        add(f"bitflip/head{r:.5f}b{bit}", flip)
    for junk in (b"\xff\xfe", b"\x00", b"\"\"\"", b"[[", b"{", b"~~~config\n", b"\\u", b"\xed\xa0\x80"):
        r = rng.random()

        def insert(ctx, r=r, junk=junk):
            d = ctx.data("model")
            i = int(r * d.index(MARK))
            return d[:i] + junk + d[i:]
        add(f"insert/{junk.hex()}@{r:.4f}", insert)

    # Config values: the domain checks (every key a hostile value; the named ones always).
    required = [("rms_norm_eps", "nan"), ("rope_theta", "inf"), ("num_attention_heads", "0"),
                ("num_key_value_heads", "0"), ("max_position_embeddings", "9223372036854775807"),
                ("max_position_embeddings", "4294967296"), ("head_dim", "0"), ("hidden_size", "0"),
                ("vocab_size", "0"), ("num_hidden_layers", "0"), ("num_key_value_heads", "3"),
                ("intermediate_size", "-1"), ("rope_theta", "0"), ("rms_norm_eps", "-1")]
    combos = set(required)
    for key in ARCH_KEYS:
        for v in rng.sample(HOSTILE_NUMBERS, 3):
            combos.add((key, v))
    for key, v in sorted(combos):
        add(f"config/{key}={v}", lambda ctx, key=key, v=v: edit_section(ctx.data("model"), "config",
                                                                         lambda b: set_key(b, key, f"{key} = {v}")))
    for key in ("hidden_size", "num_attention_heads", "vocab_size", "rms_norm_eps"):
        add(f"config/{key}=missing", lambda ctx, key=key: edit_section(ctx.data("model"), "config",
                                                                        lambda b: set_key(b, key, None)))
    for key, v in EXTRA_ARCH:
        add(f"config/{key}={v}", lambda ctx, key=key, v=v: edit_section(ctx.data("model"), "config",
                                                                         lambda b: set_key(b, key, f"{key} = {v}")))
    for mt in ('"mystery"', "5", '""', '"llama\\u0000"'):
        add(f"config/model_type={mt}", lambda ctx, mt=mt: edit_section(
            ctx.data("model"), "config", lambda b: b.replace('model_type = "llama"', f"model_type = {mt}", 1)))
    for key, v in (("eos_token_ids", "[-1]"), ("eos_token_ids", "[4294967296]"), ("eos_token_ids", '"x"'),
                   ("bos_token_id", "-5"), ("bos_token_id", "1000000000000"), ("type", '"wordpiece"'),
                   ("add_bos", '"yes"')):
        add(f"config/tokenizer.{key}={v}", lambda ctx, key=key, v=v: edit_section(
            ctx.data("model"), "config",
            lambda b: b[:b.index("[tokenizer]")] + set_key(b[b.index("[tokenizer]"):], key, f"{key} = {v}")))

    # Duplicated keys and sections.
    add("dup/config_key", lambda ctx: edit_section(ctx.data("model"), "config",
                                                   lambda b: b.replace("hidden_size = 32\n", "hidden_size = 32\nhidden_size = 64\n", 1)))
    add("dup/architecture_table", lambda ctx: edit_section(ctx.data("model"), "config",
                                                           lambda b: b + "\n[architecture]\nhidden_size = 32\n"))
    add("dup/tensor_key", lambda ctx: edit_section(ctx.data("model"), "tensors",
                                                   lambda b: re.sub(r"^(encoding = .*)$", r"\1\n\1", b, count=1, flags=re.M)))
    add("dup/section", lambda ctx: edit_section(ctx.data("model"), "config", lambda b: b + "~~~config\n" + b))

    # Tensor index entries.
    tnames = ["model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.weight",
              "model.layers.1.mlp.down_proj.weight", "lm_head.weight"]
    entry_edits = [("shape", "shape = []"), ("shape", "shape = [0]"), ("shape", "shape = [-1, 32]"),
                   ("shape", "shape = [4294967296, 4294967296]"), ("shape", "shape = [32, 260]"),
                   ("shape", "shape = [1, 1, 1, 1, 1, 1, 1, 1, 1]"), ("shape", 'shape = ["a"]'), ("shape", "shape = 5"),
                   ("offset", "offset = -1"), ("offset", "offset = 9223372036854775807"), ("offset", "offset = 3"),
                   ("offset", "offset = 128000"), ("size", "size = 0"), ("size", "size = -1"),
                   ("size", "size = 18446744073709551615"), ("encoding", 'encoding = "q9"'), ("encoding", 'encoding = "f16"'),
                   ("encoding", "encoding = 5"), ("encoding", 'encoding = "q4_0"'), ("shape", None), ("offset", None)]
    for key, line in entry_edits:
        t = rng.choice(tnames)
        add(f"tensor/{t}/{line or key + ' missing'}",
            lambda ctx, t=t, key=key, line=line: edit_section(ctx.data("model"), "tensors", edit_tensor(t, key, line)))
    for t in ("model.norm.weight", "model.layers.1.self_attn.k_proj.weight", "lm_head.weight"):
        def drop(ctx, t=t):
            def fn(b):
                a, e = tensor_block(b, t)
                return b[:a] + b[e:]
            return edit_section(ctx.data("model"), "tensors", fn)
        add(f"tensor/{t}/removed", drop)
    add("tensor/unknown_extra", lambda ctx: edit_section(ctx.data("model"), "tensors", lambda b: b + '\n["extra"]\nshape = [4]\nencoding = "f32"\noffset = 0\nsize = 16\n'))

    # Tokenizer, vocab and chat sections.
    add("tokenizer/truncated_json", lambda ctx: edit_section(ctx.data("model"), "tokenizer", lambda b: b[: len(b) // 2] + "\n"))
    add("tokenizer/not_json", lambda ctx: edit_section(ctx.data("model"), "tokenizer", lambda b: "not json\n"))
    add("tokenizer/json_array", lambda ctx: edit_section(ctx.data("model"), "tokenizer", lambda b: "[1, 2]\n"))
    add("tokenizer/model_null", lambda ctx: edit_section(ctx.data("model"), "tokenizer",
                                                         lambda b: re.sub(r'"model":\s*\{', '"model": null, "x": {', b, count=1)))
    add("vocab/token_int", lambda ctx: edit_section(ctx.data("model"), "vocab", lambda b: b.replace('0 = "', "0 = 5\nx0 = \"", 1)))
    add("vocab/empty", lambda ctx: edit_section(ctx.data("model"), "vocab", lambda b: "[tokens]\n"))
    for tname, tmpl in CHAT_TEMPLATES[:6]:
        add(f"chat_section/{tname}", lambda ctx, tmpl=tmpl: edit_section(
            ctx.data("model"), "chat", lambda b: "template = " + toml_str(tmpl) + "\n"))
    add("chat_section/template_int", lambda ctx: edit_section(ctx.data("model"), "chat", lambda b: "template = 5\n"))
    add("chat_section/template_surrogate", lambda ctx: edit_section(ctx.data("model"), "chat",
                                                                    lambda b: 'template = "a\\ud800"\n'))

    # Weights that are not numbers: NaN everywhere (refused at the first forward: non-finite logits raise).
    def nan_weights(ctx):
        head, rest = split_model(ctx.data("model"))
        n = len(rest) - len(MARK)
        return head + MARK + (struct.pack("<f", math.nan) * (n // 4 + 1))[:n]
    add("weights/all_nan", nan_weights)

    # The file changes under a loaded model.
    def changed(kind):
        def action(path, tmp):
            import cyb_llm

            m = cyb_llm.load(path, backend="cpu", threads=1)
            conv = m.new_conversation(16)
            check_finite(conv.forward([1, 2]))
            size = os.path.getsize(path)
            if kind == "truncate":
                os.truncate(path, size // 2)
            elif kind == "zero":
                with open(path, "r+b") as f:
                    f.seek(size // 2)
                    f.write(b"\0" * (size - size // 2))
            elif kind == "delete":
                os.remove(path)
            check_finite(conv.forward([3, 4]))
            check_finite(m.new_conversation(8).forward([5]))
            if kind != "delete":
                check_finite(cyb_llm.load(path, backend="cpu", threads=1).new_conversation(8).forward([1]))
            return "forward after the change worked"
        return action

    for kind in ("truncate", "zero", "delete"):
        add(f"changed_after_load/{kind}", lambda ctx: ctx.data("model"), action=changed(kind))
    return cases


CHAT_TEMPLATES = [
    ("nested_range_loop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"),
    ("huge_repeat", "{{ 'x' * 10000000000 }}"),
    ("pow_tower", "{{ 10 ** 10 ** 10 }}"),
    ("pow_huge", "{{ 10 ** (10 ** 10) }}"),
    ("lshift_huge", "{{ (2 ** 64) * (2 ** 64) * (2 ** 64) ** 100000 }}"),
    ("macro_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
    ("include", "{% include 'other.j2' %}"),
    ("range_too_big", "{% for i in range(10 ** 9) %}{% endfor %}"),
    ("extends", "{% extends 'base.j2' %}"),
    ("import", "{% import 'lib.j2' as lib %}{{ lib.x }}"),
    ("loop_recursive", "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}"),
    ("div_zero", "{{ 1 / 0 }}"),
    ("mod_zero", "{{ 1 % 0 }}"),
    ("dunder", "{{ messages.__class__.__mro__ }}"),
    ("format_attack", "{{ '{0.__class__}'.format(messages) }}"),
    ("raise_exception", "{{ raise_exception('no system role') }}"),
    ("deep_nesting", "{% if true %}" * 400 + "x" + "{% endif %}" * 400),
    ("deep_parens", "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}"),
    ("unclosed", "{% for m in messages %}"),
    ("huge_join", "{{ (messages * 2000000) | tojson }}"),
    ("string_mult_loop", "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"),
    ("int_parse_huge", "{{ ('9' * 100000) | int }}"),
    ("tojson_cycle", "{% set d = {} %}{{ d.update({'a': d}) }}{{ d | tojson }}"),
    ("namespace_setitem", "{% set ns = namespace() %}{% set ns.__class__ = 1 %}"),
    ("strftime", "{{ strftime_now('%Y' * 100000) }}"),
    ("content_attr", "{% for m in messages %}{{ m.content.upper() }}{{ m.content | length }}{% endfor %}"),
    ("map_attr", "{{ messages | map(attribute='content') | join(',') }}"),
    ("slice_huge", "{{ messages[::-1][0:10**18] }}"),
    ("batch_zero", "{{ messages | batch(0) | list }}"),
    ("wordwrap_zero", "{{ 'abc def' | wordwrap(0) }}"),
    ("indent_huge", "{{ 'a\nb' | indent(10**9) }}"),
    ("center_huge", "{{ 'a' | center(10**10) }}"),
]


def chat_cases(rng: random.Random) -> list[Case]:
    from_msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    cases = []
    for name, tmpl in CHAT_TEMPLATES:
        def run(ctx, tmp, tmpl=tmpl):
            from cyb_llm.text.chat import ChatTemplate

            out = ChatTemplate(tmpl).render(from_msgs)
            return f"rendered {len(out)} chars"
        cases.append(Case(f"chat/{name}", "chat", run, note=tmpl[:200]))
    msg_sets = {
        "content_none": [{"role": "user", "content": None}],
        "content_int": [{"role": "user", "content": 5}],
        "content_list": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "content_huge": [{"role": "user", "content": "x" * 20_000_000}],
        "role_none": [{"role": None, "content": "x"}],
        "no_content": [{"role": "user"}],
        "not_dict": ["hello"],
        "lone_surrogate": [{"role": "user", "content": "a\ud800b"}],
        "nested_deep": [{"role": "user", "content": "x", "extra": _deep(5000)}],
    }
    for name, msgs in msg_sets.items():
        def run(ctx, tmp, msgs=msgs):
            from cyb_llm.text.chat import ChatTemplate

            out = ChatTemplate(CHAT_TEMPLATE).render(msgs)
            return f"rendered {len(out)} chars"
        cases.append(Case(f"chat/messages_{name}", "chat", run))
    return cases


def _deep(n: int) -> Any:
    d: Any = {}
    for _ in range(n):
        d = {"a": d}
    return d


def gguf_cases(rng: random.Random) -> list[Case]:
    import gguf

    T = gguf.GGUFValueType
    cases: list[Case] = []

    def add(name, build):
        def b(ctx, build=build):
            with tempfile.TemporaryDirectory() as d:
                return build(ctx, os.path.join(d, "x.gguf"))
        cases.append(file_case("gguf/" + name, "gguf", b, fname="case.gguf", action=import_and_use))

    def meta(over=None, drop=(), extra=None, tensors=None, arch="llama"):
        def build(ctx, p):
            build_gguf(p, over, drop, extra, tensors, arch)
            return open(p, "rb").read()
        return build

    a = "llama"
    for key, v in ((f"{a}.attention.head_count", 0), (f"{a}.attention.head_count_kv", 0),
                   (f"{a}.attention.head_count_kv", 3), (f"{a}.block_count", 0), (f"{a}.block_count", 1000),
                   (f"{a}.embedding_length", 0), (f"{a}.context_length", 0), (f"{a}.feed_forward_length", 0),
                   (f"{a}.rope.dimension_count", 0), (f"{a}.rope.dimension_count", 1000),
                   ("tokenizer.ggml.bos_token_id", 100000), ("tokenizer.ggml.eos_token_id", 4294967295)):
        cases_name = f"meta/{key}={v}"
        add(cases_name, meta({key: v}))
    for key, v, t in ((f"{a}.context_length", 2 ** 62, T.UINT64), (f"{a}.rope.freq_base", math.nan, T.FLOAT32),
                      (f"{a}.rope.freq_base", math.inf, T.FLOAT32), (f"{a}.rope.freq_base", 0.0, T.FLOAT32),
                      (f"{a}.attention.layer_norm_rms_epsilon", math.nan, T.FLOAT32),
                      (f"{a}.attention.layer_norm_rms_epsilon", -1.0, T.FLOAT32),
                      (f"{a}.attention.head_count", "4", T.STRING), (f"{a}.attention.head_count", 4.5, T.FLOAT32),
                      (f"{a}.attention.head_count", [4, 4], T.ARRAY), (f"{a}.block_count", -2, T.INT32),
                      ("tokenizer.ggml.model", "mystery", T.STRING), ("tokenizer.ggml.tokens", ["a"], T.ARRAY),
                      ("tokenizer.ggml.token_type", [1], T.ARRAY), ("tokenizer.ggml.merges", ["nospace"], T.ARRAY),
                      ("tokenizer.chat_template", "{% for %}", T.STRING),
                      ("tokenizer.chat_template", "x" * 3_000_000, T.STRING),
                      ("tokenizer.ggml.bos_token_id", -1, T.INT32)):
        add(f"meta/{key}={str(v)[:20]}:{t.name}", meta({key: (v, t)}))
    for key in (f"{a}.attention.head_count", f"{a}.embedding_length", f"{a}.block_count", "tokenizer.ggml.tokens",
                "tokenizer.ggml.model"):
        add(f"meta/{key}=missing", meta(drop=(key,)))
    add("meta/long_key", meta(extra=[("k" * 1_000_000, 1, T.UINT32)]))
    add("meta/alignment_0", meta(extra=[("general.alignment", 0, T.UINT32)]))
    add("meta/alignment_3", meta(extra=[("general.alignment", 3, T.UINT32)]))
    add("tensors/zero", meta(tensors=[]))
    add("tensors/missing_output_norm", meta(tensors=[t for t in gguf_tensors() if t[0] != "output_norm.weight"]))
    add("tensors/wrong_shape", meta(tensors=[(n, s[::-1]) for n, s in gguf_tensors()]))
    add("tensors/vocab_mismatch", meta(tensors=gguf_tensors(vocab=100)))
    add("arch/unknown", meta(arch="mystery"))

    # Byte-level corruption of a valid file.
    def patch(fn):
        def build(ctx, p):
            d = bytearray(ctx.data("gguf"))
            fn(d, gguf_layout(bytes(d)))
            return bytes(d)
        return build

    def put(fmt, which, value):
        def fn(d, lay):
            off = which(lay)
            struct.pack_into(fmt, d, off, value)
        return fn

    for n in (0, 1, 2 ** 63, 2 ** 32, 10 ** 6):
        add(f"header/n_tensors={n}", patch(put("<Q", lambda lay: 8, n)))
        add(f"header/n_kv={n}", patch(put("<Q", lambda lay: 16, n)))
    for v in (0, 1, 99):
        add(f"header/version={v}", patch(put("<I", lambda lay: 4, v)))
    for k in ("general.name", "tokenizer.ggml.tokens", "llama.attention.head_count"):
        idx = lambda lay, k=k: next(e for e in lay["kv"] if e["key"] == k)  # noqa: E731
        add(f"kv/{k}/key_len_huge", patch(put("<Q", lambda lay, idx=idx: idx(lay)["off"], 2 ** 62)))
        add(f"kv/{k}/type_99", patch(put("<I", lambda lay, idx=idx: idx(lay)["type_off"], 99)))
    add("kv/tokens/array_len_huge", patch(put("<Q", lambda lay: next(e for e in lay["kv"] if e["key"] == "tokenizer.ggml.tokens")["val_off"] + 4, 2 ** 61)))
    add("kv/tokens/string_len_huge", patch(put("<Q", lambda lay: next(e for e in lay["kv"] if e["key"] == "tokenizer.ggml.tokens")["val_off"] + 12, 2 ** 40)))
    add("kv/tokens/array_subtype_9", patch(put("<I", lambda lay: next(e for e in lay["kv"] if e["key"] == "tokenizer.ggml.tokens")["val_off"], 9)))
    tn = ["token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"]
    for t in tn:
        ti = lambda lay, t=t: next(e for e in lay["tensors"] if e["name"] == t)  # noqa: E731
        for nd in (0, 5, 200):
            add(f"tinfo/{t}/n_dims={nd}", patch(put("<I", lambda lay, ti=ti: ti(lay)["ndims_off"], nd)))
        for dim in (0, 2 ** 62, 2 ** 32 + 1):
            add(f"tinfo/{t}/dim0={dim}", patch(put("<Q", lambda lay, ti=ti: ti(lay)["dims_off"], dim)))
        for ty in (999, 2, 30):
            add(f"tinfo/{t}/type={ty}", patch(put("<I", lambda lay, ti=ti: ti(lay)["type_off"], ty)))
        for off in (2 ** 62, 1, 10 ** 7):
            add(f"tinfo/{t}/offset={off}", patch(put("<Q", lambda lay, ti=ti: ti(lay)["offset_off"], off)))
    add("tinfo/name_len_huge", patch(put("<Q", lambda lay: lay["tensors"][0]["off"], 2 ** 62)))
    add("tinfo/duplicate_name", patch(lambda d, lay: d.__setitem__(
        slice(lay["tensors"][1]["off"] + 8, lay["tensors"][1]["off"] + 8 + len("output_norm.weight")), b"token_embd.weight\0")))

    def trunc(frac):
        def build(ctx, p):
            d = ctx.data("gguf")
            return d[:int(len(d) * frac)]
        return build

    for f in (0.0, 0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999):
        add(f"truncate/{f}", trunc(f))
    for _ in range(30):
        r, bit = rng.random(), rng.randrange(8)

        def flip(ctx, p, r=r, bit=bit):
            d = bytearray(ctx.data("gguf"))
            end = gguf_layout(bytes(d))["infos_end"]
            d[int(r * end)] ^= 1 << bit
            return bytes(d)
        add(f"bitflip/meta{r:.5f}b{bit}", flip)
    return cases


def hf_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []

    def add(name, fn):
        """fn(folder) corrupts a copy of the base HF folder."""
        def make(ctx, folder):
            d = os.path.join(folder, "hf")
            shutil.copytree(ctx.base["hf"], d)
            fn(d)
            return [d]

        def run(ctx, tmp):
            return import_and_use(make(ctx, tmp)[0], tmp)
        cases.append(Case("hf/" + name, "hf", run, make))

    def st_header(edit):
        def fn(d):
            p = os.path.join(d, "model.safetensors")
            data = open(p, "rb").read()
            n = struct.unpack_from("<Q", data)[0]
            head = data[8:8 + n]
            new_head, body = edit(head, data[8 + n:])
            with open(p, "wb") as f:
                f.write(struct.pack("<Q", len(new_head)) + new_head + body)
        return fn

    def st_json(edit):
        def e(head, body):
            j = json.loads(head)
            edit(j)
            return json.dumps(j).encode(), body
        return st_header(e)

    def first_tensor(j):
        return j[sorted(k for k in j if k != "__metadata__")[0]]

    def raw(fn):
        def f(d):
            p = os.path.join(d, "model.safetensors")
            data = bytearray(open(p, "rb").read())
            fn(data)
            open(p, "wb").write(bytes(data))
        return f

    add("st/header_len_huge", raw(lambda b: struct.pack_into("<Q", b, 0, 2 ** 62)))
    add("st/header_len_past_end", raw(lambda b: struct.pack_into("<Q", b, 0, len(b))))
    add("st/header_len_zero", raw(lambda b: struct.pack_into("<Q", b, 0, 0)))
    add("st/empty_file", raw(lambda b: b.__delitem__(slice(0, None))))
    add("st/truncated_body", raw(lambda b: b.__delitem__(slice(len(b) // 2, None))))
    add("st/header_not_json", st_header(lambda h, b: (b"{not json" + h[9:], b)))
    add("st/header_array", st_header(lambda h, b: (b"[1, 2, 3]", b)))
    add("st/header_bad_utf8", st_header(lambda h, b: (h[:20] + b"\xff\xfe" + h[22:], b)))
    add("st/offsets_out_of_range", st_json(lambda j: first_tensor(j).__setitem__("data_offsets", [0, 10 ** 12])))
    add("st/offsets_reversed", st_json(lambda j: first_tensor(j).__setitem__("data_offsets", [100, 0])))
    add("st/offsets_negative", st_json(lambda j: first_tensor(j).__setitem__("data_offsets", [-8, 8])))
    add("st/offsets_strings", st_json(lambda j: first_tensor(j).__setitem__("data_offsets", ["0", "8"])))
    add("st/dtype_unknown", st_json(lambda j: first_tensor(j).__setitem__("dtype", "F99")))
    add("st/dtype_int", st_json(lambda j: first_tensor(j).__setitem__("dtype", 7)))
    add("st/shape_mismatch", st_json(lambda j: first_tensor(j).__setitem__("shape", [3, 3])))
    add("st/shape_negative", st_json(lambda j: first_tensor(j).__setitem__("shape", [-1, 32])))
    add("st/shape_huge", st_json(lambda j: first_tensor(j).__setitem__("shape", [2 ** 40, 2 ** 40])))
    add("st/entry_not_dict", st_json(lambda j: j.__setitem__(sorted(k for k in j if k != "__metadata__")[0], 5)))

    def cfg(edit):
        def fn(d):
            p = os.path.join(d, "config.json")
            j = json.load(open(p))
            edit(j)
            open(p, "w").write(json.dumps(j))
        return fn

    def cfg_raw(text):
        return lambda d: open(os.path.join(d, "config.json"), "w").write(text)

    add("config/not_json", cfg_raw("{model_type: llama"))
    add("config/array", cfg_raw("[1, 2]"))
    add("config/empty", cfg_raw(""))
    for key, v in (("hidden_size", "32"), ("num_attention_heads", 0), ("rms_norm_eps", "nan"), ("rms_norm_eps", None),
                   ("vocab_size", -1), ("rope_theta", math.inf), ("rope_theta", math.nan), ("max_position_embeddings", 2 ** 70),
                   ("num_hidden_layers", 1.5), ("head_dim", [8]), ("model_type", "mystery"), ("model_type", 5),
                   ("tie_word_embeddings", "no"), ("rope_scaling", {"rope_type": "yarn", "factor": -1}),
                   ("architectures", "LlamaForCausalLM"), ("num_key_value_heads", 3)):
        add(f"config/{key}={str(v)[:20]}", cfg(lambda j, key=key, v=v: j.__setitem__(key, v)))
    add("config/model_type_missing", cfg(lambda j: j.pop("model_type")))
    add("tokenizer/broken", lambda d: open(os.path.join(d, "tokenizer.json"), "w").write("{"))
    add("tokenizer/missing", lambda d: os.remove(os.path.join(d, "tokenizer.json")))
    add("index/missing_shard", lambda d: open(os.path.join(d, "model.safetensors.index.json"), "w").write(
        json.dumps({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}})))
    add("index/path_escape", lambda d: open(os.path.join(d, "model.safetensors.index.json"), "w").write(
        json.dumps({"weight_map": {"model.norm.weight": "../../../etc/passwd"}})))
    return cases


def api_cases(rng: random.Random) -> list[Case]:
    import numpy as np

    cases: list[Case] = []

    def add(name, fn, pytype=False):
        cases.append(Case("api/" + name, "api", lambda ctx, tmp, fn=fn: fn(ctx), pytype=pytype))

    def fwd(ids, ctx_len=16, pre=None):
        def fn(ctx):
            conv = ctx.model().new_conversation(ctx_len)
            if pre:
                conv.forward(pre)
            out = conv.forward(ids)
            check_finite(out)
            return f"forward ok, shape {getattr(out, 'shape', None)}"
        return fn

    for name, ids, pyt in (("neg", [-1], False), ("vocab", [260], False), ("int32_max", [2 ** 31 - 1], False),
                           ("int64", [2 ** 40], False), ("int_huge", [2 ** 70], False), ("float", [1.5], True),
                           ("str", ["a"], True), ("none", [None], True), ("bool", [True], True), ("empty", [], False),
                           ("np_float", np.array([1.0, 2.0]), True), ("np_2d", np.array([[1, 2]]), False),
                           ("np_int64_ok", np.array([1, 2], dtype=np.int64), False),
                           ("np_uint64_huge", np.array([2 ** 63], dtype=np.uint64), False),
                           ("np_object", np.array([1, "a"], dtype=object), True), ("string_arg", "hello", True),
                           ("too_long", list(range(1, 40)), False), ("generator_arg", (i for i in (1, 2)), True),
                           ("scalar_int", 5, True), ("dict", {1: 2}, True)):
        add(f"forward/{name}", fwd(ids), pytype=pyt)
    add("forward/overflow_after_fill", fwd([1], 16, pre=list(range(1, 17))))
    add("forward/all_logits_str", lambda ctx: str(ctx.model().new_conversation(8).forward([1], all_logits="yes").shape), pytype=True)

    for v, pyt in ((0, False), (-1, False), (2 ** 40, False), (2 ** 62, False), (2 ** 70, False), ("16", True),
                   (1.5, True), (math.nan, True), (True, False), (10 ** 6, False)):
        add(f"max_context/{v!r}", lambda ctx, v=v: (check_finite(ctx.model().new_conversation(v).forward([1])), "made")[1],
            pytype=pyt)

    def load_with(**kw):
        def fn(ctx):
            import cyb_llm

            m = cyb_llm.load(ctx.base["model"], **kw)
            check_finite(m.new_conversation(8).forward([1, 2]))
            return f"loaded with {kw}"
        return fn

    for kw, pyt in (({"threads": -1}, False), ({"threads": 10 ** 6}, False), ({"threads": 2 ** 31}, False),
                    ({"threads": 2 ** 70}, False), ({"threads": "2"}, True), ({"threads": 1.5}, True),
                    ({"threads": math.nan}, True), ({"threads": 64}, False), ({"backend": "bogus"}, False),
                    ({"backend": 5}, True), ({"exec_path": "bogus"}, False), ({"backend": "nox"}, False),
                    ({"precise": "yes"}, False)):
        add("load/" + ",".join(f"{k}={v!r}" for k, v in kw.items()), load_with(**kw), pytype=pyt)
    add("load/missing_file", lambda ctx: load_with()(Ctx(dict(ctx.base, model="/nonexistent/x.model"))))
    add("load/directory", lambda ctx: load_with()(Ctx(dict(ctx.base, model=os.path.dirname(ctx.base["model"])))))
    add("load/path_int", lambda ctx: load_with()(Ctx(dict(ctx.base, model=5))), pytype=True)

    def gen(messages=None, **kw):
        def fn(ctx):
            out = ctx.model().generator().generate(messages or [{"role": "user", "content": "hi"}], **kw).read()
            return f"generated {len(out)} chars"
        return fn

    samp = [("temperature", math.nan), ("temperature", -1.0), ("temperature", math.inf), ("temperature", 1e30),
            ("temperature", "hot"), ("top_k", -1), ("top_k", 2 ** 40), ("top_k", 2 ** 70), ("top_k", 1.5),
            ("top_p", 2.0), ("top_p", math.nan), ("top_p", -0.1), ("min_p", math.nan), ("min_p", 1.5),
            ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", math.nan),
            ("presence_penalty", math.inf), ("frequency_penalty", -math.inf), ("penalty_last_n", -5),
            ("penalty_last_n", 2 ** 40), ("seed", -1), ("seed", 2 ** 70), ("seed", "x"), ("seed", 1.5),
            ("unknown_key", 1), ("stop", 5), ("stop", [None]), ("stop", [""])]
    for k, v in samp:
        add(f"sampling/{k}={v!r}", gen(max_tokens=3, sampling={k: v}), pytype=isinstance(v, str) or k == "stop")
    for kw in ({"max_tokens": -1}, {"max_tokens": 10 ** 12}, {"max_tokens": "5"}, {"max_tokens": math.nan},
               {"top_logprobs": 25}, {"top_logprobs": -1}, {"logprobs": True, "max_tokens": 2}, {"sampling": 5},
               {"stop": 5}):
        add("generate/" + ",".join(f"{k}={v!r}" for k, v in kw.items()), gen(**kw), pytype=True)
    msgs = {"content_none": [{"role": "user", "content": None}], "content_int": [{"role": "user", "content": 7}],
            "role_none": [{"role": None, "content": "x"}], "no_content": [{"role": "user"}],
            "lone_surrogate": [{"role": "user", "content": "\ud800"}], "huge": [{"role": "user", "content": "ab " * 200000}],
            "bytes_content": [{"role": "user", "content": b"hi"}], "nul": [{"role": "user", "content": "a\0b"}]}
    for name, m in msgs.items():
        add(f"messages/{name}", gen(m, max_tokens=2))
    add("messages/strings", gen(["hello", "world"], max_tokens=2), pytype=True)
    add("messages/mixed_ids", gen([1, "a"], max_tokens=2), pytype=True)
    add("messages/ids_out_of_range", gen([1, 100000], max_tokens=2))
    add("messages/ids_negative", gen([-3], max_tokens=2))

    def tok(fn_name, *args):
        def fn(ctx):
            out = getattr(ctx.model().tokenizer, fn_name)(*args)
            return f"{fn_name} -> {str(out)[:40]!r}"
        return fn

    for name, call, pyt in (("encode_none", ("encode", None), True), ("encode_int", ("encode", 5), True),
                            ("encode_surrogate", ("encode", "a\ud800"), False),
                            ("encode_huge", ("encode", "xy " * 500000), False), ("encode_bytes", ("encode", b"hi"), True),
                            ("decode_neg", ("decode", [-1]), False), ("decode_huge", ("decode", [10 ** 12]), False),
                            ("decode_int_huge", ("decode", [2 ** 70]), False), ("decode_str", ("decode", ["a"]), True),
                            ("decode_float", ("decode", [1.5]), True), ("id_to_token_neg", ("id_to_token", -1), False),
                            ("id_to_token_huge", ("id_to_token", 2 ** 40), False),
                            ("token_to_id_none", ("token_to_id", None), True)):
        add(f"tokenizer/{name}", tok(*call), pytype=pyt)

    def stream_push(ids):
        def fn(ctx):
            d = ctx.model().tokenizer.stream_decoder()
            return "".join(d.push(i) for i in ids) + d.flush()
        return fn
    add("tokenizer/stream_push_neg", stream_push([-1]))
    add("tokenizer/stream_push_huge", stream_push([2 ** 40]))

    def completion(**kw):
        def fn(ctx):
            out = ctx.model().create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, **kw)
            return f"completion {str(out)[:40]}"
        return fn
    for kw in ({"temperature": math.nan}, {"top_k": -5}, {"seed": -1}, {"top_logprobs": 3, "logprobs": True},
               {"stream": "yes"}):
        add("completion/" + ",".join(f"{k}={v!r}" for k, v in kw.items()), completion(**kw))
    add("completion/messages_str", lambda ctx: str(ctx.model().create_chat_completion("hi")))

    # Concurrency: one conversation from two threads, one generator from two threads,
    # two conversations of one model (valid), a model dropped while a conversation runs.
    def same_conv(ctx):
        conv = ctx.model().new_conversation(64)

        def loop():
            for _ in range(30):
                if conv.position > 60:
                    conv.reset_kv_cache()
                conv.forward([1, 2])
        return in_threads([loop, loop])

    def same_gen(ctx):
        g = ctx.model().generator()

        def loop():
            for _ in range(10):
                g.generate("hi", max_tokens=3, sampling={"temperature": 0.0}).read()
        return in_threads([loop, loop])

    def two_convs(ctx):
        m = ctx.model()

        def loop():
            c = m.new_conversation(32)
            for _ in range(15):
                c.forward([1, 2])
        return in_threads([loop, loop])

    def reset_while_forward(ctx):
        conv = ctx.model().new_conversation(64)

        def fwd_loop():
            for _ in range(40):
                if conv.position > 60:
                    conv.reset_kv_cache()
                conv.forward([3])

        def reset_loop():
            for _ in range(200):
                conv.reset_kv_cache()
        return in_threads([fwd_loop, reset_loop])

    def dropped_model(ctx):
        import cyb_llm

        m = cyb_llm.load(ctx.base["model"], backend="cpu", threads=1)
        conv = m.new_conversation(8)
        del m
        import gc

        gc.collect()
        conv.forward([1, 2])
        return "conversation outlives its model"

    add("threads/same_conversation", same_conv)
    add("threads/same_generator", same_gen)
    add("threads/two_conversations", two_convs)
    add("threads/reset_while_forward", reset_while_forward)
    add("lifetime/conversation_after_model_dropped", dropped_model)
    return cases


def selftest_cases() -> list[Case]:
    """Cases that must come out crash, hang and unstructured: a check of the harness itself."""
    def segv(ctx, tmp):
        import ctypes

        ctypes.string_at(0)
        return "not reached"

    def sleep(ctx, tmp):
        time.sleep(3600)
        return "not reached"

    def abort(ctx, tmp):
        os.abort()

    def raise_value(ctx, tmp):
        raise ValueError("an unstructured error")

    def clean(ctx, tmp):
        import cyb_llm

        raise cyb_llm.InvalidConfig(field="x", reason="a clean error")

    def nonfinite(ctx, tmp):  # what use_model does with a forward's logits, on logits holding a NaN
        check_finite([0.5, float("nan"), 1.0])
        return "not reached"
    return [Case("selftest/segv", "selftest", segv), Case("selftest/hang", "selftest", sleep),
            Case("selftest/abort", "selftest", abort), Case("selftest/unstructured", "selftest", raise_value),
            Case("selftest/nonfinite", "selftest", nonfinite),
            Case("selftest/clean", "selftest", clean), Case("selftest/ok", "selftest", lambda ctx, tmp: "fine")]


def generate_cases(seed: int, selftest: bool = False) -> list[Case]:
    """The whole corpus for `seed`, in a fixed order (names are unique); with `selftest`,
    only the harness checks."""
    if selftest:
        return selftest_cases()
    rng = random.Random(seed)
    cases = (model_cases(random.Random(rng.random())) + gguf_cases(random.Random(rng.random())) +
             hf_cases(random.Random(rng.random())) + chat_cases(random.Random(rng.random())) +
             api_cases(random.Random(rng.random())))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SystemExit(f"hostile: duplicate case names {sorted(dup)[:5]}")
    return cases


# ------------------------------------------------------------------ the child side
def execute(case: Case, ctx: Ctx) -> tuple[str, str]:
    import cyb_llm

    tmp = tempfile.mkdtemp(prefix="hostile-")
    try:
        detail = case.run(ctx, tmp)
        return "ok", _line(detail)
    except NonFinite as e:
        return "nonfinite", _line(str(e))
    except cyb_llm.Error as e:
        return "clean", _line(f"{type(e).__name__}: {e}")
    except TypeError as e:
        if case.pytype:
            return "clean", _line(f"TypeError: {e}")
        return "unstructured", _line(f"TypeError: {e}", f" @ {_where(e)}")
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        return "unstructured", _line(f"{type(e).__module__}.{type(e).__name__}: {e}", f" @ {_where(e)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _line(text: Any, suffix: str = "") -> str:
    """One line of at most ~250 characters (the detail printed per failing case)."""
    return " ".join(str(text).split())[:250] + suffix


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    own = [f for f in tb if "cyb_llm" in f.filename or "site-packages" in f.filename]
    f = (own or tb or [None])[-1]
    return f"{os.path.relpath(f.filename, ROOT) if f.filename.startswith(ROOT) else os.path.basename(f.filename)}:{f.lineno}" if f else "?"


def worker_main(args) -> int:
    # Results go through the original stdout; anything native code prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    cases = generate_cases(args.seed, args.selftest)
    ctx = Ctx(json.loads(args.base))
    out.write("READY\n")
    for line in sys.stdin:
        i = int(line)
        out.write(f"START {i}\n")
        sys.stderr.write(f"=== case {cases[i].name}\n")
        sys.stderr.flush()
        cls, detail = execute(cases[i], ctx)
        out.write("RESULT " + json.dumps({"i": i, "cls": cls, "detail": detail}) + "\n")
    return 0


# ------------------------------------------------------------------ the parent side
@dataclass
class Worker:
    proc: subprocess.Popen
    log: str
    ready: bool = False
    case: int | None = None
    started: float = 0.0
    log_off: int = 0
    spawned: float = field(default_factory=time.monotonic)
    buf: str = ""


def _limits(mem_bytes: int):
    def fn():
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        except (ImportError, ValueError, OSError):
            pass
    return fn


def spawn(args, base: dict, log: str) -> Worker:
    env = dict(os.environ, OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONFAULTHANDLER="1")
    errf = open(log, "ab")
    kw: dict[str, Any] = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, env=env, text=True, bufsize=1)
    if os.name == "posix":
        kw.update(preexec_fn=_limits(args.mem_gib << 30), start_new_session=True)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(args.seed),
                             "--base", json.dumps(base)] + (["--selftest"] if args.selftest else []), **kw)
    errf.close()
    return Worker(proc, log)


def kill(w: Worker) -> None:
    try:
        if os.name == "posix":
            os.killpg(w.proc.pid, signal.SIGKILL)
        else:
            w.proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    w.proc.wait()


def tail_of(log: str, off: int) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(off)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("=== case")]
    fatal = [k for k, ln in enumerate(lines) if ln.startswith("Fatal Python error")]
    if fatal:  # faulthandler: the error, then the innermost Python frame of the crashing thread
        frames = [ln for ln in lines[fatal[-1]:] if ln.startswith("File ")]
        return " | ".join([lines[fatal[-1]]] + frames[:1])[:300]
    keep = [ln for ln in lines if "Error" in ln or "error" in ln or "Sanitizer" in ln] or lines
    return " | ".join(keep[-2:])[:300]


def run_cases(args, cases: list[Case], order: list[int], base: dict, logdir: str, jobs: int) -> dict[int, tuple[str, str]]:
    results: dict[int, tuple[str, str]] = {}
    pending = list(order)
    workers: list[Worker | None] = [None] * jobs
    sel = selectors.DefaultSelector()
    n_spawn = 0

    def start(slot: int) -> None:
        nonlocal n_spawn
        n_spawn += 1
        w = spawn(args, base, os.path.join(logdir, f"worker{slot}-{n_spawn}.log"))
        workers[slot] = w
        sel.register(w.proc.stdout, selectors.EVENT_READ, slot)

    def retire(slot: int) -> None:
        w = workers[slot]
        if w is None:
            return
        try:
            sel.unregister(w.proc.stdout)
        except (KeyError, ValueError):
            pass
        kill(w)
        workers[slot] = None

    def feed(slot: int) -> None:
        w = workers[slot]
        if w and w.ready and w.case is None and pending:
            w.case = pending.pop(0)
            w.started = time.monotonic()
            w.log_off = os.path.getsize(w.log) if os.path.exists(w.log) else 0
            w.proc.stdin.write(f"{w.case}\n")
            w.proc.stdin.flush()

    for s in range(jobs):
        if pending:
            start(s)
    while any(workers):
        for key, _ in sel.select(timeout=0.5):
            slot = key.data
            w = workers[slot]
            if w is None:
                continue
            # Raw reads and a buffer of our own: a buffered readline() could swallow a
            # second line that select() would then never report.
            chunk = os.read(w.proc.stdout.fileno(), 65536)
            w.buf += chunk.decode("utf-8", "replace")
            lines = w.buf.split("\n")
            w.buf = lines.pop()
            if not chunk:  # the child died
                code = w.proc.wait()
                if w.case is not None:
                    sig = -code if code < 0 else None
                    how = f"killed by {signal.Signals(sig).name}" if sig else f"exited with status {code} mid-case"
                    results[w.case] = ("crash", f"{how}; {tail_of(w.log, w.log_off)}")
                    if args.verbose:
                        print(f"  crash  {cases[w.case].name}", flush=True)
                elif not w.ready:
                    raise SystemExit(f"hostile: a worker failed to start; see {w.log}:\n{tail_of(w.log, 0)}")
                retire(slot)
                if pending:
                    start(slot)
                continue
            for line in lines:
                if line == "READY":
                    w.ready = True
                elif line.startswith("RESULT "):
                    r = json.loads(line[7:])
                    results[r["i"]] = (r["cls"], r["detail"])
                    if args.verbose:
                        print(f"  {r['cls']:<12} {cases[r['i']].name}: {r['detail'][:100]}", flush=True)
                    w.case = None
            feed(slot)
        now = time.monotonic()
        for slot, w in enumerate(workers):
            if w is None:
                continue
            if w.case is not None and now - w.started > args.timeout:
                results[w.case] = ("hang", f"no result after {args.timeout:g} s")
                if args.verbose:
                    print(f"  hang   {cases[w.case].name}", flush=True)
                retire(slot)
                if pending:
                    start(slot)
            elif not w.ready and now - w.spawned > 120:
                raise SystemExit(f"hostile: a worker did not start within 120 s; see {w.log}")
            else:
                feed(slot)
                if w.ready and w.case is None and not pending:
                    retire(slot)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case (default 20)")
    ap.add_argument("--mem-gib", type=int, default=4, help="address-space limit of a worker (default 4 GiB)")
    ap.add_argument("--limit", type=int, default=0, help="run N cases spread evenly over the corpus")
    ap.add_argument("--only", action="append", default=[], help="run the named case (repeatable)")
    ap.add_argument("--group", action="append", default=[], help="run one group: model, gguf, hf, chat, api")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "hostile"))
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--selftest", action="store_true",
                    help="run only the harness checks (a segfault, a hang, an abort, ...): exits 1 by design")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)

    t0 = time.monotonic()
    cases = generate_cases(args.seed, args.selftest)
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    order = list(range(len(cases)))
    if args.group:
        order = [i for i in order if cases[i].group in args.group]
    if args.only:
        known = {c.name: i for i, c in enumerate(cases)}
        missing = [n for n in args.only if n not in known]
        if missing:
            print(f"hostile: no case named {missing}", file=sys.stderr)
            return 2
        order = [known[n] for n in args.only]
    if args.limit and args.limit < len(order):
        step = len(order) / args.limit
        order = [order[int(k * step)] for k in range(args.limit)]
    os.makedirs(args.out, exist_ok=True)
    base = build_base(os.path.join(args.out, "base"))
    logdir = os.path.join(args.out, "logs")
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    results = run_cases(args, cases, order, base, logdir, args.jobs)

    # A crash is re-run alone in a fresh worker: the verdict names whether it needs the cases before it.
    crashed = [i for i in order if results[i][0] == "crash"]
    for i in crashed[:20]:
        again = run_cases(args, cases, [i], base, logdir, 1)[i]
        cls, detail = results[i]
        results[i] = (cls, detail + ("; reproduced alone" if again[0] == "crash" else f"; alone it is {again[0]}"))

    counts = {c: sum(1 for i in order if results[i][0] == c) for c in CLASSES}
    failing = [i for i in order if results[i][0] in FAILING]
    print(f"hostile: {len(order)} cases, {counts['clean']} clean errors, {counts['ok']} ok, crashes {counts['crash']}, "
          f"hangs {counts['hang']}, unstructured {counts['unstructured']}, non-finite {counts['nonfinite']}  "
          f"({time.monotonic() - t0:.0f} s, seed {args.seed})")
    for i in failing:
        print(f"  {results[i][0].upper():<12} {cases[i].name}: {results[i][1]}")

    fdir = os.path.join(args.out, "failures")
    shutil.rmtree(fdir, ignore_errors=True)
    os.makedirs(fdir)
    listing = []
    ctx = Ctx(base)
    for i in failing:
        c = cases[i]
        entry = dict(name=c.name, group=c.group, cls=results[i][0], detail=results[i][1], seed=args.seed,
                     repro=f"python tools/hostile.py --seed {args.seed}{' --selftest' if args.selftest else ''} --only '{c.name}'",
                     files=[])
        if c.note:
            entry["input"] = c.note
        if c.make is not None:
            d = os.path.join(fdir, re.sub(r"[^A-Za-z0-9._=+-]+", "_", c.name)[:150])
            os.makedirs(d, exist_ok=True)
            try:
                entry["files"] = [os.path.relpath(p, ROOT) for p in c.make(ctx, d)]
            except Exception as e:  # noqa: BLE001 - a reproducer that cannot be written is noted, not fatal
                entry["files_error"] = f"{type(e).__name__}: {e}"
        listing.append(entry)
    with open(os.path.join(args.out, "failures.json"), "w") as f:
        json.dump(listing, f, indent=1)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump([dict(name=cases[i].name, cls=results[i][0], detail=results[i][1]) for i in order], f, indent=1)
    if failing:
        print(f"hostile: reproducers and the list in {os.path.relpath(args.out, ROOT)}/ (failures.json)")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
