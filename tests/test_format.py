"""The `.model` container: writer, native reader, TOML parser and emitter."""
from __future__ import annotations

import gc
import math
import os
import random
import tomllib

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core
from cyb_llm.errors import FormatError, WeightFormatMismatch
from cyb_llm.format import ENCODINGS, ModelFile, rewrite, tensor_nbytes, write_model
from cyb_llm.toml_writer import dumps

RNG = np.random.default_rng(1234)


def _shape_for(enc: str) -> list[int]:
    block = ENCODINGS[enc][0]
    return [3, 2 * block] if block > 1 else [3, 5]


def _data_for(enc: str, shape: list[int]) -> np.ndarray:
    if enc == "f32":
        return RNG.standard_normal(shape).astype(np.float32)
    if enc == "f16":
        return RNG.standard_normal(shape).astype(np.float16)
    if enc == "i32":
        return RNG.integers(-2**31, 2**31 - 1, size=shape, dtype=np.int32)
    if enc == "i64":
        return RNG.integers(-2**62, 2**62, size=shape, dtype=np.int64)
    return RNG.integers(0, 256, size=tensor_nbytes(enc, shape), dtype=np.uint8)


def _all_tensors():
    out = []
    for enc in ENCODINGS:
        shape = _shape_for(enc)
        out.append((f"model.{enc}.weight", enc, shape, _data_for(enc, shape)))
    out.append(("scalar.f32", "f32", [], np.array(2.5, dtype=np.float32)))
    out.append(("empty.f32", "f32", [0, 4], np.zeros((0, 4), np.float32)))
    out.append(("vec.q8", "q8", [64], RNG.integers(0, 256, 68, dtype=np.uint8)))  # alias
    return out


CONFIG = {
    "model_type": "llama",
    "parameters": 1234,
    "architecture": {"hidden_size": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                     "tie_word_embeddings": True, "layer_types": ["sliding", "full"],
                     "rope_scaling": {"type": "linear", "factor": 2.0},
                     "audio_encoder": {"d_model": 384}},
    "tokenizer": {"type": "bpe", "bos_token_id": 1, "eos_token_ids": [2, 3], "add_bos": False},
}
VOCAB = {
    "tokens": {0: "<s>", 1: "</s>", 2: "hello", 3: "\u0120world", 4: "a\"b\\c", 5: "\n", 6: "\t\x01",
               7: "日本", 8: "🙂", 9: "~~~weights"},
    "merges": {0: ["h", "e"], 1: ["he", "llo"]},
    "scores": {0: 0.0, 1: -1.5, 2: -1e10},
    "types": {0: 3, 1: 3, 2: 1},
    "special": {"bos": 0, "eos": 1},
}
CHAT = {"template": "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}\"\"\"\"",
        "eos_sequences": ["<|end|>"], "system_default": "You are helpful."}
CARD = "# Model\n\n~~~python\nprint(1)\n~~~\n\\~~~ already escaped\n"


def _write_full(path, tensors=None, **kw):
    args = dict(name="test-model", config=CONFIG, tensors=_all_tensors() if tensors is None else tensors,
                vocab=VOCAB, tokenizer_json='{"version": "1.0", "model": {"type": "BPE"}}\n', chat=CHAT,
                card=CARD, graph={"inputs": [{"name": "ids", "dtype": "i32"}],
                                  "nodes": [{"op": "Gather", "inputs": ["w", "ids"], "outputs": ["x"],
                                             "attrs": {"axis": 0}}],
                                  "outputs": ["x"]},
                extra_sections={"program": "fn main() {}\n", "notes": "free text\n~~~not_a_section\n"})
    args.update(kw)
    write_model(path, **args)


def test_round_trip_every_encoding(tmp_path):
    p = tmp_path / "m.model"
    tensors = _all_tensors()
    _write_full(p, tensors)
    mf = ModelFile(p)
    assert mf.name == "test-model"
    assert set(mf.tensors) == {t[0] for t in tensors}
    for name, enc, shape, data in tensors:
        info = mf.tensors[name]
        assert info.shape == tuple(shape)
        assert info.encoding == cyb_llm.format.canonical_encoding(enc)
        assert info.size == tensor_nbytes(enc, shape)
        raw = mf.tensor_bytes(name)
        assert raw.dtype == np.uint8 and raw.shape == (info.size,)
        assert raw.tobytes() == np.ascontiguousarray(data).tobytes()
        view = mf.tensor(name)
        block, block_bytes = ENCODINGS[info.encoding]
        if info.encoding in ("f32", "f16", "i32", "i64", "u8", "i8", "bool"):  # viewed element by element
            assert view.shape == tuple(shape)
            want = {"u8": np.uint8, "i8": np.int8, "bool": np.bool_}.get(info.encoding, data.dtype)
            assert view.dtype == want
            assert view.tobytes() == raw.tobytes()
        else:
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            assert view.dtype == np.uint8
            assert view.shape == (rows, shape[-1] // block * block_bytes)
            assert view.tobytes() == raw.tobytes()


def test_sections_parsed_and_text(tmp_path):
    p = tmp_path / "m.model"
    _write_full(p)
    mf = ModelFile(p)
    assert list(mf.sections) == ["frontmatter", "card", "config", "program", "vocab", "tokenizer", "chat",
                                 "graph", "notes", "tensors"]
    assert mf.config == CONFIG_READ
    assert mf.sections["card"] == CARD
    assert mf.sections["program"] == "fn main() {}\n"
    assert mf.sections["notes"] == "free text\n~~~not_a_section\n"
    assert mf.sections["chat"] == CHAT
    vocab = mf.sections["vocab"]
    assert vocab["tokens"] == {str(k): v for k, v in VOCAB["tokens"].items()}
    assert vocab["merges"] == {"0": ["h", "e"], "1": ["he", "llo"]}
    assert vocab["special"] == {"bos": 0, "eos": 1}
    assert mf.sections["graph"]["nodes"][0]["attrs"] == {"axis": 0}
    assert mf.sections["tokenizer"].startswith('{"version"')
    files = {f["name"]: f for f in mf.sections["frontmatter"]["files"]}
    assert files["weights"]["size"] == mf.weights_size == os.path.getsize(p) - mf.weights_offset
    assert files["tokenizer"]["format"] == "json" and files["card"]["format"] == "md"
    # every TOML section also parses with tomllib to the same data
    for name in ("config", "vocab", "chat", "graph", "tensors", "frontmatter"):
        assert tomllib.loads(mf.section_text(name)) == mf.sections[name]


CONFIG_READ = {
    "model_type": "llama", "parameters": 1234,
    "architecture": {"hidden_size": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                     "tie_word_embeddings": True, "layer_types": ["sliding", "full"],
                     "rope_scaling": {"type": "linear", "factor": 2.0}, "audio_encoder": {"d_model": 384}},
    "tokenizer": {"type": "bpe", "bos_token_id": 1, "eos_token_ids": [2, 3], "add_bos": False},
}


def test_alignment(tmp_path):
    p = tmp_path / "m.model"
    _write_full(p)
    mf = ModelFile(p)
    assert mf.weights_offset % 64 == 0
    with open(p, "rb") as f:
        head = f.read(mf.weights_offset)
    assert head.endswith(b"\n~~~weights\n")
    for info in mf.tensors.values():
        assert info.offset % 64 == 0
        addr = mf.tensor_bytes(info.name).__array_interface__["data"][0]
        assert addr % 64 == 0


def test_zero_copy_views_keep_mapping_alive(tmp_path):
    p = tmp_path / "m.model"
    _write_full(p)
    mf = ModelFile(p)
    infos = list(mf.tensors.values())
    a, b = mf.tensor(infos[0].name), mf.tensor(infos[1].name)
    addr = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    assert addr(b) - addr(a) == infos[1].offset - infos[0].offset  # both point into one mapping
    assert addr(mf.tensor(infos[0].name)) == addr(a)                # no copy per call
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[...] = 0
    expected = a.copy()
    del mf, b
    gc.collect()
    np.testing.assert_array_equal(a, expected)  # the view still reads the mapped bytes


def test_byte_identical_rewrite(tmp_path):
    p1, p2, p3 = tmp_path / "a.model", tmp_path / "b.model", tmp_path / "c.model"
    _write_full(p1)
    rewrite(p1, p2)
    assert p1.read_bytes() == p2.read_bytes()
    rewrite(p2, p3)
    assert p1.read_bytes() == p3.read_bytes()


def test_streamed_and_list_writes_agree(tmp_path):
    tensors = _all_tensors()
    seen = []
    _write_full(tmp_path / "list.model", tensors)
    _write_full(tmp_path / "gen.model", (t for t in tensors), progress=lambda n, b: seen.append((n, b)))
    assert (tmp_path / "list.model").read_bytes() == (tmp_path / "gen.model").read_bytes()
    assert [n for n, _ in seen] == [t[0] for t in tensors]
    assert sum(b for _, b in seen) == sum(tensor_nbytes(t[1], t[2]) for t in tensors)
    assert sorted(os.listdir(tmp_path)) == ["gen.model", "list.model"]  # no spool left behind


def test_data_as_bytes_memoryview_and_callable(tmp_path):
    w = np.arange(8, dtype=np.float32)
    p = tmp_path / "m.model"
    write_model(p, name="x", config={}, tensors=[
        ("a", "f32", [8], w.tobytes()), ("b", "f32", [2, 4], memoryview(w.tobytes())),
        ("c", "f32", [8], lambda: w), ("d", "f32", [4], w[::2]),  # non-contiguous: copied
        ("e", "bf16", [2, 2], np.arange(4, dtype=np.uint16))])
    mf = ModelFile(p)
    for n in "abc":
        np.testing.assert_array_equal(mf.tensor(n).reshape(-1), w)
    np.testing.assert_array_equal(mf.tensor("d"), w[::2])
    assert mf.tensor("e").shape == (2, 4) and mf.tensor("e").dtype == np.uint8


@pytest.mark.parametrize("bad", [
    ("w", "f32", [4], np.zeros(3, np.float32)),      # too few bytes
    ("w", "q4_0", [2, 32], np.zeros(35, np.uint8)),  # one byte short
    ("w", "q4_0", [2, 30], np.zeros(36, np.uint8)),  # not a block multiple
    ("w", "q8_0", [32], np.zeros(32, np.float32)),   # float values for a quantized encoding
    ("w", "f16", [4], np.zeros(4, np.float32)),      # f32 values for f16
])
@pytest.mark.parametrize("streamed", [False, True])
def test_writer_rejects_mismatched_data_and_leaves_nothing(tmp_path, bad, streamed):
    dst = tmp_path / "out.model"
    dst.write_bytes(b"previous content")
    good = ("ok", "f32", [2], np.zeros(2, np.float32))
    tensors = [good, bad]
    with pytest.raises(WeightFormatMismatch) as ei:
        write_model(dst, name="x", config={}, tensors=iter(tensors) if streamed else tensors)
    assert ei.value.name == "w"
    assert dst.read_bytes() == b"previous content"
    assert os.listdir(tmp_path) == ["out.model"]


@pytest.mark.parametrize("tensors,cls", [
    ([("a", "q9", [1], b"x")], FormatError),
    ([("a", "u8", [1], b"x"), ("a", "u8", [1], b"y")], FormatError),
    ([("", "u8", [1], b"x")], FormatError),
    ([("a", "u8", [1], 12)], FormatError),
])
def test_writer_rejects_bad_index(tmp_path, tensors, cls):
    with pytest.raises(cls):
        write_model(tmp_path / "o.model", name="x", config={}, tensors=tensors)
    assert os.listdir(tmp_path) == []


def test_writer_rejects_unrepresentable_config(tmp_path):
    for cfg in ({"a": None}, {"a": 1 << 64}, {"a": object()}, {1.5: 1}, {"a": "\ud800"}):
        with pytest.raises(FormatError):
            write_model(tmp_path / "o.model", name="x", config=cfg, tensors=[])
    assert os.listdir(tmp_path) == []


def test_empty_model_and_no_tensors(tmp_path):
    p = tmp_path / "e.model"
    write_model(p, name="", config={}, tensors=[])
    mf = ModelFile(p)
    assert mf.tensors == {} and mf.config == {} and mf.weights_size == 0
    assert mf.weights_offset % 64 == 0
    rewrite(p, tmp_path / "f.model")
    assert p.read_bytes() == (tmp_path / "f.model").read_bytes()


def test_describe(tmp_path):
    p = tmp_path / "m.model"
    _write_full(p)
    text = cyb_llm.describe(p)
    assert "test-model" in text and "llama" in text and "hidden_size=64" in text
    assert "q4_k" in text and f"{len(_all_tensors())} (" in text
    assert "vocab" in text and "tokenizer" in text


# ---------------------------------------------------------------------------
# TOML: the native parser agrees with tomllib


def _norm(x):
    """NaN != NaN: compare through a stand-in."""
    if isinstance(x, float) and math.isnan(x):
        return "<nan>"
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_norm(v) for v in x]
    return x


VALID_DOCS = [
    "",
    "# only a comment\n\n",
    'a = 1\nb = -2\nc = +3\nd = 1_000_000\ne = 0xDEAD_beef\nf = 0o755\ng = 0b1101\nh = 0\ni = -0\n',
    "big = 9223372036854775807\nsmall = -9223372036854775808\n",
    "f1 = 1.0\nf2 = -3.5e-7\nf3 = 6.02E+23\nf4 = 1e10\nf5 = 0.0\nf6 = -0.0\nf7 = 1_000.5_5\nf8 = inf\n"
    "f9 = -inf\nf10 = +inf\nf11 = nan\nf12 = 1e-400\nf13 = 1e400\nf14 = 0e0\n",
    't = true\nf = false\n',
    'bare_key-1 = 1\n"quoted key" = 2\n\'literal key\' = 3\n"" = 4\n"a.b" = 5\n',
    'a.b.c = 1\na.b.d = 2\na . e = 3\n"x.y".z = 4\n',
    's1 = "tab\\there"\ns2 = "quote\\" back\\\\ \\b\\f\\n\\r"\ns3 = "\\u00e9\\U0001F600"\ns4 = \'C:\\path\'\n',
    's = """\nline1\nline2\\\n    continued\n"""\n',
    "s = '''\nraw \\n text\n'''\n",
    's = """ends with quotes"""""\n',
    "s = '''two''''\n",
    's = """a""b"""\n',
    's = "日本語 🙂"\n',
    'a = [1, 2, 3]\nb = [ ]\nc = [[1, 2], ["a", "b"], []]\nd = [\n  1, # one\n  2,\n]\ne = [1, "mixed", 2.5, true]\n',
    'p = { x = 1, y = "two", z.w = 3 }\nq = {}\nr = [{ a = 1 }, { a = 2 }]\n',
    '[table]\nk = 1\n[table.sub]\nk = 2\n["quoted.table.name"]\nk = 3\n[ spaced . header ]\nk = 4\n',
    '[a.b.c]\nx = 1\n[a]\ny = 2\n',
    '[[fruits]]\nname = "apple"\n[fruits.physical]\ncolor = "red"\n[[fruits.varieties]]\nname = "red delicious"\n'
    '[[fruits.varieties]]\nname = "granny smith"\n[[fruits]]\nname = "banana"\n[[fruits.varieties]]\nname = "plantain"\n',
    '[fruit]\napple.color = "red"\napple.taste.sweet = true\n[fruit.apple.texture]\nsmooth = true\n',
    'a = 1\r\nb = "x"\r\n[t]\r\nc = """\r\nline\r\n"""\r\n',
    'key = "value" # trailing comment\n[t] # comment\n',
    "a = 1\n\n\n   \t\nb = 2",
    '"0" = "<s>"\n1 = "</s>"\n2 = "\\u0120"\n',
]

INVALID_DOCS = [
    "a = 1\na = 2\n",                       # duplicate key
    "[t]\n[t]\n",                           # table defined twice
    "a = 1\n[a]\n",                         # value then table
    "[a]\nb = 1\n[a.b]\n",                   # key then table
    "[[a]]\n[a]\n",                          # array of tables then table
    "[a]\n[[a]]\n",                          # table then array of tables
    "a = [1]\n[[a]]\n",                      # static array extended
    "a = {b = 1}\n[a.c]\n",                  # inline table extended
    "a = {b = 1}\na.c = 2\n",                # inline table extended by dotted key
    "[fruit]\napple.color = 'red'\n[fruit.apple]\n",  # dotted table redefined
    "[a.b]\nx = 1\n[a]\nb.y = 2\n",          # dotted key into a [header] table
    "a = \n", "= 1\n", "a 1\n", "a = 1 b = 2\n", "[a\n", "[[a]\n", "[]\n",
    'a = "unterminated\n', "a = 'x\n", 'a = """never closed', "a = '''never closed",
    'a = "bad \\x escape"\n', 'a = "\\uD800"\n', 'a = "\\U00110000"\n', 'a = "\\u12"\n',
    'a = "ctrl \x01 char"\n', "a = 1 # ctrl \x01 in comment\n", "a = 'ctrl \x7f'\n",
    "a = 01\n", "a = 1__0\n", "a = _1\n", "a = 1_\n", "a = 0x\n", "a = -0x1\n", "a = 1.\n", "a = .5\n",
    "a = 1e\n", "a = 1.5e+\n", "a = 1e_5\n", "a = True\n", "a = tru\n",
    "a = [1, 2\n", "a = [1 2]\n", "a = [,]\n", "a = {b = 1,}\n", "a = {b = 1\n", "a = {\nb = 1}\n",
    "a = {b = 1, b = 2}\n", "a = 1\rb = 2\n", "a = nan1\n", "a = infinity\n", "a = +nan_\n",
    "a.b = 1\na.b.c = 2\n", "a = 1\n b = 2 = 3\n",
]


# Valid TOML outside the subset (docs/toml-subset.md): 64-bit integers only, no dates.
SUBSET_REJECTS = ["a = 9223372036854775808\n", "a = -9223372036854775809\n", "a = 0xFFFFFFFFFFFFFFFF\n",
                  "a = 1979-05-27\n", "a = 07:32:00\n", "a = 1979-05-27T07:32:00Z\n"]


@pytest.mark.parametrize("doc", SUBSET_REJECTS)
def test_native_toml_rejects_outside_subset(doc):
    tomllib.loads(doc)
    with pytest.raises(FormatError):
        _core.toml_loads(doc)


@pytest.mark.parametrize("doc", VALID_DOCS)
def test_native_toml_agrees_with_tomllib(doc):
    assert _norm(_core.toml_loads(doc)) == _norm(tomllib.loads(doc))


@pytest.mark.parametrize("doc", INVALID_DOCS)
def test_native_toml_rejects_what_tomllib_rejects(doc):
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(doc)
    with pytest.raises(FormatError) as ei:
        _core.toml_loads(doc, "config")
    assert ei.value.section == "config"
    assert ei.value.reason.startswith("line ")


def test_native_toml_error_names_line_and_key():
    with pytest.raises(FormatError) as ei:
        _core.toml_loads("a = 1\n[t]\nhidden_size = 12x\n", "config")
    e = ei.value
    assert e.key == "hidden_size" and e.reason.startswith("line 3:")
    assert "section 'config'" in str(e) and "hidden_size" in str(e)


def test_native_toml_bounds():
    for doc in ("a = " + "[" * 100_000, "a = " + "{b = " * 100_000, "[" + "a." * 10_000 + "a]\n",
                "a" + ".a" * 10_000 + " = 1\n"):
        with pytest.raises(FormatError):
            _core.toml_loads(doc)
    assert _core.toml_loads("a = " + "[" * 60 + "]" * 60)["a"] is not None
    with pytest.raises(FormatError):
        _core.toml_loads(b"a = \"\xff\xfe\"\n")  # invalid UTF-8
    with pytest.raises(FormatError):
        _core.toml_loads(b"a = \"\xed\xa0\x80\"\n")  # encoded surrogate


def _random_value(rng: random.Random, depth: int):
    kinds = ["int", "float", "str", "bool", "list"] + (["dict", "aot"] if depth < 3 else [])
    k = rng.choice(kinds if depth < 4 else kinds[:4])
    if k == "int":
        return rng.choice([0, 1, -1, 2**63 - 1, -2**63, rng.randint(-10**12, 10**12)])
    if k == "float":
        return rng.choice([0.0, -0.0, 1e-5, 1e300, -2.5, float("inf"), float("-inf"), float("nan"),
                           rng.uniform(-1e6, 1e6), 5e-324])
    if k == "str":
        alphabet = ['a', 'Z', ' ', '"', "'", '\\', '\n', '\t', '\r', '\x00', '\x1f', '\x7f', 'é', '日', '🙂',
                    '"""', "'''", '~~~', '#', '=', '[', ']', '{', '}', '\u2028', '\ufeff']
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    if k == "bool":
        return rng.random() < 0.5
    if k == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if k == "dict":
        return _random_table(rng, depth + 1)
    return [_random_table(rng, depth + 1) for _ in range(rng.randint(1, 3))]


def _random_key(rng: random.Random) -> str:
    return rng.choice(["a", "b-c", "d_e", "0", "12", "with space", "dot.ted", "", "日本", 'q"uote', "x\\y",
                       "tab\tkey", "model.layers.0.self_attn.q_proj.weight"]) + str(rng.randint(0, 3))


def _random_table(rng: random.Random, depth: int) -> dict:
    return {_random_key(rng): _random_value(rng, depth) for _ in range(rng.randint(0, 5))}


@pytest.mark.parametrize("seed", range(60))
def test_emitter_round_trips_through_both_parsers(seed):
    rng = random.Random(seed)
    doc = _random_table(rng, 0)
    text = dumps(doc)
    via_tomllib = tomllib.loads(text)
    via_native = _core.toml_loads(text)
    assert _norm(via_tomllib) == _norm(via_native)
    assert dumps(via_native) == text  # emit -> parse -> emit is stable
    assert _norm(via_native) == _norm(_reorder_like_emitter(doc))


def _reorder_like_emitter(d):
    """The emitter writes plain keys before sub-tables; parsing yields that order."""
    def is_table(v):
        return isinstance(v, dict) or (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))
    out = {}
    for k, v in d.items():
        if not is_table(v):
            out[k] = _reorder_value(v)
    for k, v in d.items():
        if is_table(v):
            out[k] = _reorder_like_emitter(v) if isinstance(v, dict) else [_reorder_like_emitter(x) for x in v]
    return out


def _reorder_value(v):
    if isinstance(v, list):
        return [_reorder_value(x) for x in v]
    return v


def test_encoding_tables_come_from_the_native_core():
    assert cyb_llm.format.ENCODINGS == {e: (b, bb) for e, _n, b, bb, _q in _core.encodings()}
    assert cyb_llm.format.ENCODING_ALIASES == _core.encoding_aliases()
    for alias, enc in cyb_llm.format.ENCODING_ALIASES.items():
        assert cyb_llm.format.canonical_encoding(alias) == enc


def test_load_parses_the_tensor_index_once(tmp_path):
    """The native side parses and validates the index at open; loading a model for inference
    does not copy it into Python objects again (a 1M-entry index cost seconds twice)."""
    import cyb_llm
    from graph_util import write_tiny

    m = cyb_llm.load(write_tiny(tmp_path / "t.model", model_type="llama"))
    m.new_conversation(8).forward([1, 2])
    assert m.file._tensors is None
    assert "model.embed_tokens.weight" in m.file.tensors  # built on first use
