"""The reader rejects every corrupted `.model` with the right error class, and never crashes."""
from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core
from cyb_llm.errors import (BackendInit, Error, FormatError, InvalidConfig, MissingTensor, OutOfMemory,
                            ShapeMismatch, TokenizerError, UnsupportedOp, WeightFormatMismatch)
from cyb_llm.format import ModelFile, write_model

FILES_TEMPLATE = '[cyb]\ntypes = ["model"]\nname = "x"\n\n[[files]]\nname = "weights"\nformat = "tensors"\nsize = {size}\n'


def build(tensors: str, weights: bytes = b"\0" * 256, config: str = 'model_type = "llama"\n',
          files_size: int | None = None, front: str | None = None, extra: str = "") -> bytes:
    """A file assembled by hand (the writer would refuse most of these)."""
    if front is None:
        front = FILES_TEMPLATE.format(size=len(weights) if files_size is None else files_size)
    head = front + extra + f"~~~config\n{config}~~~tensors\n{tensors}"
    return head.encode("utf-8") + b"~~~weights\n" + weights


GOOD_TENSOR = '["w"]\nshape = [2, 32]\nencoding = "q4_0"\noffset = 0\nsize = 36\n'


def load(data: bytes) -> ModelFile:
    return ModelFile.from_bytes(data)


def valid_file_bytes(tmp_path) -> bytes:
    p = tmp_path / "valid.model"
    rng = np.random.default_rng(0)
    write_model(p, name="v", config={"model_type": "llama", "architecture": {"hidden_size": 64}},
                tensors=[("a", "f32", [4, 4], rng.standard_normal((4, 4)).astype(np.float32)),
                         ("b", "q4_k", [2, 256], rng.integers(0, 255, 288, dtype=np.uint8)),
                         ("c", "q8_0", [64], rng.integers(0, 255, 68, dtype=np.uint8))],
                vocab={"tokens": {0: "a", 1: "b"}, "merges": {0: ["a", "b"]}},
                chat={"template": "{{ messages }}"}, card="# card\n")
    return p.read_bytes()


def test_hand_built_base_file_is_valid():
    mf = load(build(GOOD_TENSOR))
    assert mf.tensors["w"].size == 36


def test_truncated_at_many_cut_points(tmp_path):
    data = valid_file_bytes(tmp_path)
    mf = load(data)
    marker_end = mf.weights_offset
    cuts = set(range(0, len(data), 7)) | set(range(marker_end - 20, marker_end + 20)) | {len(data) - 1}
    cuts.discard(len(data))
    assert len(cuts) > 100
    for cut in sorted(cuts):
        with pytest.raises(FormatError):
            load(data[:cut])
    # on disk too (the mmap path)
    for cut in (0, 10, marker_end - 1, marker_end, marker_end + 1, len(data) - 1):
        p = tmp_path / f"cut{cut}.model"
        p.write_bytes(data[:cut])
        with pytest.raises(FormatError):
            ModelFile(p)


def test_appended_bytes(tmp_path):
    with pytest.raises(FormatError) as ei:
        load(valid_file_bytes(tmp_path) + b"\0")
    assert ei.value.section == "frontmatter" and ei.value.key == "files.size"


def test_no_marker():
    with pytest.raises(FormatError) as ei:
        load(b'[cyb]\nname = "x"\n~~~config\na = 1\n~~~tensors\n')
    assert "~~~weights" in ei.value.reason
    with pytest.raises(FormatError):
        load(build(GOOD_TENSOR).replace(b"~~~weights\n", b"~~~weights \n"))
    with pytest.raises(FormatError):  # the marker must start a line
        load(build(GOOD_TENSOR).replace(b"\n~~~weights\n", b" ~~~weights\n"))


def test_no_marker_in_bounded_head(tmp_path):
    p = tmp_path / "huge.model"
    with open(p, "wb") as f:  # sparse: 300 MiB of zeros, marker only past the 256 MiB bound
        f.truncate(300 << 20)
        f.seek((300 << 20) - 11)
        f.write(b"~~~weights\n")
    with pytest.raises(FormatError) as ei:
        ModelFile(p)
    assert "256 MiB" in ei.value.reason


@pytest.mark.parametrize("declared", [0, 255, 257, 1 << 40])
def test_wrong_files_size(declared):
    with pytest.raises(FormatError) as ei:
        load(build(GOOD_TENSOR, files_size=declared))
    assert ei.value.key == "files.size"


@pytest.mark.parametrize("front", [
    "",                                                         # no frontmatter at all
    '[cyb]\nname = "x"\n',                                      # no [[files]]
    '[[files]]\nname = "config"\nformat = "toml"\n',            # no weights entry
    '[[files]]\nname = "weights"\nformat = "tensors"\n',        # no size
    '[[files]]\nname = "weights"\nsize = -1\n',
    '[[files]]\nname = "weights"\nsize = "256"\n',
    'files = 3\n',
    'files = [1, 2]\n',
])
def test_bad_frontmatter(front):
    with pytest.raises(FormatError) as ei:
        load(build(GOOD_TENSOR, front=front))
    assert ei.value.section == "frontmatter"


@pytest.mark.parametrize("offset,size_", [(240, 36), (256, 36), (1 << 62, 36), ((1 << 63) - 1, 36)])
def test_tensor_past_the_end(offset, size_):
    t = f'["w"]\nshape = [2, 32]\nencoding = "q4_0"\noffset = {offset}\nsize = {size_}\n'
    with pytest.raises(FormatError) as ei:
        load(build(t))
    assert ei.value.section == "tensors" and ei.value.key == "w"
    assert "outside the weights" in ei.value.reason


def test_tensor_at_the_very_end_is_fine():
    t = '["w"]\nshape = [2, 32]\nencoding = "q4_0"\noffset = 220\nsize = 36\n'
    assert load(build(t)).tensors["w"].offset == 220


@pytest.mark.parametrize("shape,enc,size_", [
    ("[2, 32]", "q4_0", 35), ("[2, 32]", "q4_0", 37), ("[4]", "f32", 12), ("[3, 3]", "f16", 16),
    ("[256]", "q4_k", 145), ("[]", "f32", 8),
])
def test_size_shape_mismatch(shape, enc, size_):
    t = f'["layer.w"]\nshape = {shape}\nencoding = "{enc}"\noffset = 0\nsize = {size_}\n'
    with pytest.raises(WeightFormatMismatch) as ei:
        load(build(t))
    e = ei.value
    assert e.name == "layer.w" and e.actual_bytes == size_ and enc in e.declared
    assert "layer.w" in str(e)


@pytest.mark.parametrize("shape,enc", [("[2, 30]", "q4_0"), ("[128]", "q6_k"), ("[]", "q8_0")])
def test_not_a_block_multiple(shape, enc):
    t = f'["w"]\nshape = {shape}\nencoding = "{enc}"\noffset = 0\nsize = 0\n'
    with pytest.raises(WeightFormatMismatch) as ei:
        load(build(t))
    assert ei.value.name == "w"


@pytest.mark.parametrize("shape,enc", [
    (f"[{1 << 62}, {1 << 62}]", "u8"), (f"[{1 << 40}, {1 << 30}]", "f32"), (f"[{1 << 62}]", "f32"),
    (f"[{(1 << 63) - 1}, 2]", "u8"), ("[" + ", ".join(["65536"] * 5) + "]", "i64"),
])
def test_shape_product_overflow(shape, enc):
    t = f'["w"]\nshape = {shape}\nencoding = "{enc}"\noffset = 0\nsize = 64\n'
    with pytest.raises(FormatError) as ei:
        load(build(t))
    assert ei.value.key == "w" and "overflow" in ei.value.reason


@pytest.mark.parametrize("section,text", [
    ("config", "model_type = \n"), ("config", "[architecture\n"), ("config", "a = 1\na = 2\n"),
    ("tensors", '["w"\nshape = [1]\n'), ("tensors", GOOD_TENSOR + "garbage\n"),
])
def test_malformed_toml(section, text):
    data = build(text if section == "tensors" else GOOD_TENSOR, config=text if section == "config" else "a = 1\n")
    with pytest.raises(FormatError) as ei:
        load(data)
    assert ei.value.section == section and ei.value.reason.startswith("line ")


@pytest.mark.parametrize("enc", ["q9", "F32", "float32", "", "q4_0 "])
def test_unknown_encoding(enc):
    t = f'["w"]\nshape = [4]\nencoding = "{enc}"\noffset = 0\nsize = 16\n'
    with pytest.raises(FormatError) as ei:
        load(build(t))
    assert ei.value.key == "w" and "encoding" in ei.value.reason


@pytest.mark.parametrize("tensors", [
    GOOD_TENSOR + GOOD_TENSOR,
    GOOD_TENSOR + '[w]\nshape = [4]\nencoding = "u8"\noffset = 64\nsize = 4\n',
    "w = 1\n" + GOOD_TENSOR,
])
def test_duplicate_tensor(tensors):
    with pytest.raises(FormatError) as ei:
        load(build(tensors))
    assert ei.value.section == "tensors"


@pytest.mark.parametrize("tensors", [
    '["w"]\nencoding = "u8"\noffset = 0\nsize = 4\n',                     # no shape
    '["w"]\nshape = [4]\noffset = 0\nsize = 4\n',                         # no encoding
    '["w"]\nshape = [4]\nencoding = "u8"\nsize = 4\n',                    # no offset
    '["w"]\nshape = [4]\nencoding = "u8"\noffset = 0\n',                  # no size
    '["w"]\nshape = [-4]\nencoding = "u8"\noffset = 0\nsize = 4\n',
    '["w"]\nshape = [4.0]\nencoding = "u8"\noffset = 0\nsize = 4\n',
    '["w"]\nshape = 4\nencoding = "u8"\noffset = 0\nsize = 4\n',
    '["w"]\nshape = [4]\nencoding = 8\noffset = 0\nsize = 4\n',
    '["w"]\nshape = [4]\nencoding = "u8"\noffset = -1\nsize = 4\n',
    '["w"]\nshape = [4]\nencoding = "u8"\noffset = 0\nsize = "4"\n',
    "w = 1\n",
    '["w"]\nshape = [' + ", ".join(["1"] * 17) + ']\nencoding = "u8"\noffset = 0\nsize = 1\n',
])
def test_bad_tensor_entries(tensors):
    with pytest.raises(FormatError) as ei:
        load(build(tensors))
    assert ei.value.section == "tensors" and ei.value.key == "w"


def test_missing_required_sections():
    w = b"\0" * 4
    front = FILES_TEMPLATE.format(size=4)
    for head in (front + "~~~config\na = 1\n", front + "~~~tensors\n", front):
        with pytest.raises(FormatError) as ei:
            load(head.encode() + b"~~~weights\n" + w)
        assert ei.value.section in ("config", "tensors") and "missing" in ei.value.reason


def test_section_twice_and_reserved_name():
    with pytest.raises(FormatError):
        load(build(GOOD_TENSOR, extra="~~~card\na\n~~~card\nb\n"))
    with pytest.raises(FormatError):
        load(build(GOOD_TENSOR, extra="~~~frontmatter\n"))


def test_invalid_utf8_in_text_section():
    data = build(GOOD_TENSOR, extra="~~~card\nok\n").replace(b"ok\n", b"o\xff\n")
    with pytest.raises(FormatError) as ei:
        load(data)
    assert ei.value.section == "card"


def test_empty_file(tmp_path):
    with pytest.raises(FormatError):
        load(b"")
    p = tmp_path / "empty.model"
    p.write_bytes(b"")
    with pytest.raises(FormatError) as ei:
        ModelFile(p)
    assert "empty" in ei.value.reason


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FormatError) as ei:
        ModelFile(tmp_path / "nope.model")
    assert "nope.model" in str(ei.value)
    with pytest.raises(FormatError):
        ModelFile(tmp_path)


@pytest.mark.parametrize("seed", range(40))
def test_random_bytes(seed):
    rng = random.Random(seed)
    data = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 10, 100, 1000, 5000])))
    with pytest.raises(FormatError):
        load(data)
    with pytest.raises(FormatError):  # random bytes after a plausible start
        load(b"[cyb]\n~~~config\n" + data + b"\n~~~weights\n" + data)


def test_vocab_is_parsed_lazily():
    data = build(GOOD_TENSOR, extra="~~~vocab\n[tokens]\n0 = \n")
    mf = load(data)  # opening does not parse vocab
    assert "vocab" in mf.sections
    with pytest.raises(FormatError) as ei:
        mf.sections["vocab"]
    assert ei.value.section == "vocab"


def test_missing_tensor():
    mf = load(build(GOOD_TENSOR))
    with pytest.raises(MissingTensor) as ei:
        mf.tensor("nope")
    assert ei.value.name == "nope"


# ---------------------------------------------------------------------------
# The error classes and the native translation

NATIVE_KINDS = {
    "FormatError": (FormatError, {"section": "config", "key": "architecture.hidden_size"}),
    "UnsupportedOp": (UnsupportedOp, {"op": "rope", "backend": "wgpu", "input_dtype": "q4_k"}),
    "ShapeMismatch": (ShapeMismatch, {"op": "matmul", "expected": "[2, 3]", "got": "[3, 2]"}),
    "MissingTensor": (MissingTensor, {"name": "lm_head.weight", "required_by": "llama"}),
    "WeightFormatMismatch": (WeightFormatMismatch, {"name": "w", "declared": "q4_0 [2, 32]", "actual_bytes": 35}),
    "OutOfMemory": (OutOfMemory, {"backend": "cpu", "requested_bytes": 1 << 40}),
    "BackendInit": (BackendInit, {"backend": "wgpu", "reason": "no adapter"}),
    "InvalidConfig": (InvalidConfig, {"field": "head_dim", "reason": "must be positive"}),
    "Tokenizer": (TokenizerError, {"reason": "unknown token type"}),
}


@pytest.mark.parametrize("kind", list(NATIVE_KINDS))
def test_native_errors_translate_to_classes(kind):
    cls, fields = NATIVE_KINDS[kind]
    with pytest.raises(cls) as ei:
        _core._raise_native_error(kind)
    e = ei.value
    assert isinstance(e, Error) and type(e) is cls
    for k, v in fields.items():
        assert getattr(e, k) == v and e.fields[k] == v
    for v in fields.values():
        assert str(v) in str(e)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is cls and again.fields == e.fields and str(again) == str(e)


def test_other_native_exceptions_are_structured():
    with pytest.raises(OutOfMemory):
        _core._raise_native_error("bad_alloc")
    with pytest.raises(OutOfMemory):
        _core._raise_native_error("length_error")
    with pytest.raises(Error) as ei:
        _core._raise_native_error("runtime_error")
    assert "boom" in str(ei.value)
    with pytest.raises(ValueError):  # pybind11's own exceptions pass through
        _core._raise_native_error("no such kind")


def test_python_side_construction():
    e = MissingTensor("lm_head.weight", required_by="llama")
    assert e.name == "lm_head.weight" and e.required_by == "llama"
    assert str(e) == "missing tensor 'lm_head.weight' (required by llama)"
    e = FormatError("config", "", "bad")
    assert str(e) == "malformed .model (section 'config'): bad"
    assert str(Error("plain message")) == "plain message"
    assert cyb_llm.TokenizerError is TokenizerError and issubclass(cyb_llm.FormatError, cyb_llm.Error)


# ---------------------------------------------------------------------------
# In a child process, so that a crash fails the test instead of killing pytest

CHILD = textwrap.dedent(r"""
    import random, sys
    from cyb_llm import Error
    from cyb_llm import _core
    from cyb_llm.format import ModelFile
    data = open(sys.argv[1], "rb").read()
    rng = random.Random(7)
    results = {"ok": 0, "error": 0}

    def attempt(blob):
        try:
            mf = ModelFile.from_bytes(blob)
            for name in mf.sections:
                mf.sections[name]
            for name in mf.tensors:
                mf.tensor(name).sum()
            results["ok"] += 1
        except Error:
            results["error"] += 1

    for cut in range(0, len(data), 3):
        attempt(data[:cut])
    for _ in range(400):  # byte flips, insertions and deletions in the text head
        blob = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(blob))
            op = rng.random()
            if op < 0.5:
                blob[i] = rng.randrange(256)
            elif op < 0.75:
                blob[i:i] = bytes([rng.choice(b'"[]{}=.\n\\~#, 0123456789-')])
            else:
                del blob[i]
        attempt(bytes(blob))
    for n in (1, 64, 4096):
        for _ in range(30):
            attempt(bytes(rng.getrandbits(8) for _ in range(n)))
    for doc in ("a = " + "[" * 1000000, "a = " + "{b=" * 1000000, '"' * 1000000, "[" + "a." * 1000000 + "a]"):
        try:
            _core.toml_loads(doc)
        except Error:
            results["error"] += 1
    print("survived", results["ok"], results["error"])
""")


def test_nasty_inputs_in_a_child_process(tmp_path):
    src = tmp_path / "valid.model"
    src.write_bytes(valid_file_bytes(tmp_path))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(cyb_llm.__file__)),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", CHILD, str(src)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("survived")
    ok, err = map(int, r.stdout.split()[1:3])
    assert err > 500  # nearly every mutation is caught ...
    assert ok >= 1    # ... and the untouched parts of some mutations still load


def test_error_classes_mirror_the_native_table():
    """Variants, fields and messages are defined once, natively (_core)."""
    variants = {name: (tuple(f), tuple(i)) for name, f, i in _core.error_variants()}
    classes = {cls.native_kind: cls for cls in (FormatError, UnsupportedOp, ShapeMismatch, MissingTensor,
                                                WeightFormatMismatch, OutOfMemory, BackendInit, InvalidConfig,
                                                TokenizerError)}
    assert set(variants) == set(classes)
    for name, (fields, ints) in variants.items():
        assert classes[name].field_names == fields and classes[name].int_fields == ints
    e = ShapeMismatch("matmul", [2, 3], [3, 2])
    assert str(e) == _core.error_message("ShapeMismatch", {"op": "matmul", "expected": "[2, 3]", "got": "[3, 2]"})
    assert str(e) == "shape mismatch in 'matmul': expected [2, 3], got [3, 2]"
