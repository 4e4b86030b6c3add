"""Model lifecycle on the real smollm2 file: conversations, KV cache,
equivalence of loads, errors at load and forward, the C++ API."""
from __future__ import annotations

import gc
import os
import shutil
import subprocess

import numpy as np
import pytest

import cyb_llm
from cyb_llm import errors, hub

from oracles import greedy, rel_err
from tolerances import tolerance


@pytest.fixture(scope="module")
def path():
    return hub.fetch("smollm2")


@pytest.fixture(scope="module")
def model(path):
    return cyb_llm.load(path, precise=True)


def test_conversations_share_weights_and_keep_their_own_cache(model):
    a_ids = model.tokenizer.encode("The capital of France is")
    b_ids = model.tokenizer.encode("def add(a, b):")
    alone_a = greedy(model.new_conversation(64), a_ids, 6, set())
    alone_b = greedy(model.new_conversation(64), b_ids, 6, set())
    ca, cb = model.new_conversation(64), model.new_conversation(64)
    la, lb = ca.forward(a_ids), cb.forward(b_ids)
    out_a, out_b = [], []
    for _ in range(6):  # interleaved steps of two conversations over one model
        ta, tb = int(la.argmax()), int(lb.argmax())
        out_a.append(ta)
        out_b.append(tb)
        la, lb = ca.forward([ta]), cb.forward([tb])
    assert out_a == alone_a and out_b == alone_b
    assert ca.position == len(a_ids) + 6


def test_reset_kv_cache_restarts_the_conversation(model):
    ids = model.tokenizer.encode("Hello there")
    c = model.new_conversation(32)
    first = c.forward(ids)
    c.forward([1, 2, 3])
    c.reset_kv_cache()
    assert c.position == 0
    np.testing.assert_array_equal(c.forward(ids), first)


# Bulk prefill == token-by-token (docs/runtime.md, "Conversations and the KV cache"): 36 tokens,
# enough for the multi-token matmul tiles and the >= 8-query attention tiles of the prefill.
BULK_TEXT = ("The quick brown fox jumps over the lazy dog. In the beginning the Universe was created. "
             "This has made a lot of people very angry and been widely regarded as a bad move.")


@pytest.mark.parametrize("precise", [True, False], ids=["precise", "fast"])
def test_bulk_prefill_equals_token_by_token(path, model, precise):
    m = model if precise else cyb_llm.load(path)
    key = "bulk-vs-token" if precise else "bulk-vs-token-fast/smollm2"
    ids = m.tokenizer.encode(BULK_TEXT)
    assert len(ids) == 36
    bulk = m.new_conversation(64).forward(ids, all_logits=True)
    conv = m.new_conversation(64)
    steps = np.stack([conv.forward([t]) for t in ids])
    err, tol = rel_err(bulk, steps), tolerance(key)
    assert err <= tol, f"{key}: bulk vs token-by-token {err:.2e} > {tol}"
    assert (bulk.argmax(-1) == steps.argmax(-1)).all(), f"{key}: argmax differs"


def test_loading_twice_gives_equivalent_models(path, model):
    other = cyb_llm.load(path, precise=True)
    ids = model.tokenizer.encode("Equivalent loads")
    np.testing.assert_array_equal(other.new_conversation(16).forward(ids),
                                  model.new_conversation(16).forward(ids))
    del other
    gc.collect()


def test_context_overflow_and_bad_ids_are_structured_errors(model):
    c = model.new_conversation(4)
    with pytest.raises(errors.ShapeMismatch):
        c.forward([1, 2, 3, 4, 5])
    assert c.position == 0
    with pytest.raises(errors.InvalidConfig):
        c.forward([model.vocab_size + 5])
    with pytest.raises(errors.InvalidConfig):
        model.new_conversation(0)


def test_unknown_backend_and_unavailable_backends(path):
    with pytest.raises(errors.BackendInit) as e:
        cyb_llm.load(path, backend="nope")
    assert "nope" in str(e.value)
    with pytest.raises(errors.BackendInit):
        cyb_llm.load(path, backend="honeycrisp")


def _rewrite(src, dst, mutate):
    """Rewrites a .model with a mutated config/tensor list (through our writer)."""
    from cyb_llm.format import ModelFile, write_model

    mf = ModelFile(src)
    config = mutate["config"](dict(mf.config)) if "config" in mutate else mf.config
    keep = mutate.get("keep", lambda n: True)
    tensors = [(n, i.encoding, i.shape, mf.tensor_bytes(n)) for n, i in mf.tensors.items() if keep(n)]
    write_model(dst, name="mutated", config=config, tensors=tensors,
                tokenizer_json=mf.sections.get("tokenizer"))


def test_unknown_model_type_names_it(path, tmp_path):
    dst = str(tmp_path / "unknown.model")
    _rewrite(path, dst, {"config": lambda c: {**c, "model_type": "mamba9"}})
    with pytest.raises(errors.InvalidConfig) as e:
        cyb_llm.load(dst)
    assert "mamba9" in str(e.value) and e.value.field == "model_type"


def test_missing_tensor_names_it(path, tmp_path):
    dst = str(tmp_path / "missing.model")
    gone = "model.layers.3.mlp.up_proj.weight"
    _rewrite(path, dst, {"keep": lambda n: n != gone})
    with pytest.raises(errors.MissingTensor) as e:
        cyb_llm.load(dst)
    assert e.value.name == gone


def test_missing_config_key_names_it(path, tmp_path):
    dst = str(tmp_path / "nokey.model")

    def drop(c):
        arch = dict(c["architecture"])
        del arch["num_hidden_layers"]
        return {**c, "architecture": arch}

    _rewrite(path, dst, {"config": drop})
    with pytest.raises(errors.InvalidConfig) as e:
        cyb_llm.load(dst)
    assert "num_hidden_layers" in e.value.field


def _example_binary():
    root = os.path.join(os.path.dirname(__file__), "..")
    for d in (os.environ.get("CYB_NATIVE_BUILD_DIR", ""), "build/dev", "build/native"):
        p = os.path.join(root, d, "example_generate") if d else ""
        if p and os.path.exists(p):
            return p
    return shutil.which("example_generate")


def test_cpp_program_uses_the_core_without_python(path, model):
    exe = _example_binary()
    assert exe, "example_generate is built by tools/devbuild.sh (and by tools/test.sh into build/native)"
    ids = model.tokenizer.encode("The capital of France is")
    out = subprocess.run([exe, path, "--precise", "-n", "6", *map(str, ids)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [int(t) for t in out.stdout.split()] == greedy(model.new_conversation(64), ids, 6, set())


def test_one_native_load_path(path, model):
    """The file is opened once (cyb_llm.ModelFile) and that open file is what the
    native load builds the model over; there is no second, path-taking loader."""
    from cyb_llm import _core

    assert not hasattr(_core, "load_model")
    with pytest.raises(TypeError):
        _core.Model(path)  # no constructor: models come from _core.load
    with pytest.raises(TypeError):
        _core.load(path)  # a path is not an open ModelFile
    mf = cyb_llm.ModelFile(path)
    m = cyb_llm.Model(mf, precise=True)
    assert m.file is mf and m.path == mf.path
    ids = model.tokenizer.encode("One load path")
    np.testing.assert_array_equal(m.new_conversation(16).forward(ids), model.new_conversation(16).forward(ids))
    with pytest.raises(TypeError):
        cyb_llm.load(path, path_mode="curated")  # one name for the execution path: exec_path
    assert cyb_llm.load(path, exec_path="curated").execution_path == "curated"
