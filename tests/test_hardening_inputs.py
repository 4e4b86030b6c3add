"""Hostile inputs on the Python and config side: each one is rejected with a named error
(docs/errors.md, "Input validation") instead of being coerced, producing NaN, or escaping as
a bare Python exception."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import cyb_llm
from cyb_llm import _core, errors
from cyb_llm.text.chat import ChatTemplate, chat_from_modelfile
from cyb_llm.format import ModelFile, write_model
from cyb_llm.text.sampling import SamplingParams

from graph_util import ARCH, llama_graph, tiny_tensors, write_tiny



# --- 1. token ids are never coerced ------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = write_tiny(tmp_path_factory.mktemp("tiny") / "tiny.model", model_type="llama")
    return cyb_llm.load(path)


@pytest.mark.parametrize("ids", [[1.0, 2.0], [True, 2], [[1, 2], [3, 4]], b"\x01\x02", "12",
                                 np.array([1.0, 2.0]), np.array([True, False]), 7])
def test_token_ids_of_a_wrong_type_raise_type_error(tiny_model, ids):
    conv = tiny_model.new_conversation(16)
    with pytest.raises(TypeError, match="token ids"):
        conv.forward(ids)
    assert conv.position == 0


@pytest.mark.parametrize("ids", [[2**32 + 5], [-1], [48], np.array([2**32 + 5], dtype=np.int64),
                                 np.array([2**64 - 1], dtype=np.uint64), [2**70]])
def test_token_ids_out_of_range_name_the_id(tiny_model, ids):
    conv = tiny_model.new_conversation(16)
    with pytest.raises(errors.InvalidConfig, match="token id .* is outside") as e:
        conv.forward(ids)
    assert e.value.field == "input_ids"


def test_two_dimensional_id_array_is_a_shape_mismatch(tiny_model):
    with pytest.raises(errors.ShapeMismatch):
        tiny_model.new_conversation(16).forward(np.array([[1, 2]], dtype=np.int32))


def test_valid_ids_of_every_integer_kind_still_run(tiny_model):
    a = tiny_model.new_conversation(16).forward([1, 2, 3])
    b = tiny_model.new_conversation(16).forward(np.array([1, 2, 3], dtype=np.uint16))
    c = tiny_model.new_conversation(16).forward((np.int64(1), 2, np.int8(3)))
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_generate_checks_prompt_ids_before_any_work(tiny_model):
    gen = tiny_model.generator()
    with pytest.raises(TypeError):
        gen.generate([1.5, 2], max_tokens=1)
    with pytest.raises(errors.InvalidConfig, match="outside"):
        gen.generate([1, 2**32 + 1], max_tokens=1)


# --- 2. config values outside their domain -------------------------------------------------------

DOMAIN_CASES = [
    ("rms_norm_eps", math.nan, "architecture.rms_norm_eps"),
    ("rms_norm_eps", -1e-5, "architecture.rms_norm_eps"),
    ("rms_norm_eps", 1e39, "architecture.rms_norm_eps"),
    ("rope_theta", math.inf, "architecture.rope_theta"),
    ("rope_theta", -1.0, "architecture.rope_theta"),
    ("rope_scaling", {"rope_type": "linear", "factor": math.inf}, "architecture.rope_scaling.factor"),
    ("rope_scaling", {"rope_type": "yarn", "factor": 2.0, "beta_slow": 0.0}, "architecture.rope_scaling.beta_slow"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32}, "architecture.rope_scaling.high_freq_factor"),
    ("final_logit_softcapping", -30.0, "architecture.final_logit_softcapping"),
    ("attn_logit_softcapping", math.nan, "architecture.attn_logit_softcapping"),
    ("sliding_window", -4, "architecture.sliding_window"),
]


@pytest.mark.parametrize("model_type", ["llama", "mystery"])  # curated family / graph path
@pytest.mark.parametrize("key,value,field", DOMAIN_CASES, ids=[f"{c[0]}={c[1]}" for c in DOMAIN_CASES])
def test_config_values_outside_their_domain_are_invalid_config(tmp_path, model_type, key, value, field):
    arch = dict(ARCH, **{key: value})
    with pytest.raises(errors.InvalidConfig) as e:
        path = write_tiny(tmp_path / "m.model", model_type=model_type, arch=arch)
        cyb_llm.load(path)
    assert e.value.field == field


@pytest.mark.parametrize("key,value", [("rope_scaling", "linear"), ("rope_scaling", 2.0), ("layer_types", "sliding")])
def test_tables_and_arrays_of_the_wrong_type_are_invalid_config(tmp_path, key, value):
    """Not silently ignored: a rope_scaling that is not a table, layer_types that is not an array."""
    arch = dict(ARCH, **{key: value})
    with pytest.raises(errors.InvalidConfig) as e:
        cyb_llm.load(write_tiny(tmp_path / "m.model", model_type="llama", arch=arch))
    assert e.value.field == f"architecture.{key}"


def test_gemma3_sliding_window_pattern_zero(tmp_path):
    arch = dict(ARCH, sliding_window=4, sliding_window_pattern=0)
    with pytest.raises(errors.InvalidConfig) as e:
        cyb_llm.load(write_tiny(tmp_path / "m.model", model_type="gemma3_text", arch=arch))
    assert e.value.field == "architecture.sliding_window_pattern"


@pytest.mark.parametrize("old,new,field", [
    ("eps = 1.0000000000000001e-05", "eps = nan", "eps"),
    ("eps = 1.0000000000000001e-05", "eps = -1.0", "eps"),
    ("theta = 10000.0", "theta = inf", "theta"),
    ("theta = 10000.0", "theta = 1e39", "theta"),
])
def test_graph_section_attributes_have_the_same_domains(tmp_path, old, new, field):
    graph = llama_graph()
    assert old in graph
    path = write_tiny(tmp_path / "g.model", graph=graph.replace(old, new))
    with pytest.raises(errors.InvalidConfig) as e:
        cyb_llm.load(path)
    assert e.value.field.startswith("graph.") and e.value.field.endswith("attrs." + field)


# --- 6. native error text keeps NUL bytes ----------------------------------------------------------

def test_native_error_message_is_not_cut_at_a_nul_byte(tmp_path):
    with pytest.raises(errors.FormatError) as e:
        _core.ModelFile.open(str(tmp_path / "a") + "\0tail-after-nul")
    assert "tail-after-nul" in str(e.value)
    assert "\\0tail-after-nul" in str(e.value)


# --- 7. a signal pending when a native call fails --------------------------------------------------

def test_pending_sigint_during_a_native_error_raises_keyboard_interrupt():
    # The hook raises SIGINT inside the native call, then fails as an interrupted open() would.
    # Python's own SIGINT handler, as in an interactive run (a shell starts background jobs with
    # SIGINT ignored, and then Python installs none).
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            _core._raise_native_error("pending_sigint")
    finally:
        signal.signal(signal.SIGINT, old)
    assert isinstance(e.value.__context__, errors.FormatError)
    with pytest.raises(errors.InvalidConfig):  # no signal pending: the error itself
        _core._raise_native_error("InvalidConfig")


# --- 5. GGUF import ------------------------------------------------------------------------------

def _gguf(path, *, head_count=4, tensors=True, arch="llama", block_count=1):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(block_count)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(head_count)
    w.add_head_count_kv(2)
    w.add_token_list(["a", "b", "c"])
    if tensors:
        w.add_tensor("token_embd.weight", np.zeros((3, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_gguf_without_the_tensors_its_family_needs_is_missing_tensor(tmp_path):
    from cyb_llm.convert import import_model

    for tensors in (False, True):  # none at all; only the embedding
        src = _gguf(tmp_path / f"t{tensors}.gguf", tensors=tensors)
        with pytest.raises(errors.MissingTensor):
            import_model(src, str(tmp_path / "out.model"), progress=False)
        assert not os.path.exists(tmp_path / "out.model")


def test_gguf_head_count_zero_is_invalid_config(tmp_path):
    from cyb_llm.convert.gguf import GGUFSource

    with pytest.raises(errors.InvalidConfig) as e:
        GGUFSource(_gguf(tmp_path / "h.gguf", head_count=0))
    assert e.value.field == "llama.attention.head_count"


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gemma3"])
def test_gguf_layer_count_beyond_its_tensors_is_invalid_config(tmp_path, arch):
    """A block_count of 2**31-1 once built per-layer tables of that length (4 GB before any check)."""
    from cyb_llm.convert.gguf import GGUFSource

    with pytest.raises(errors.InvalidConfig) as e:
        GGUFSource(_gguf(tmp_path / "h.gguf", arch=arch, block_count=2**31 - 1))
    assert e.value.field == f"{arch}.block_count"


@pytest.mark.parametrize("model_type", ["llama", "gemma3", "modernbert"])
def test_hf_layer_count_beyond_its_tensors_is_invalid_config(tmp_path, model_type):
    import json

    from cyb_llm.convert.hf import HFSource

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 2**40,
                                                      "hidden_size": 8, "num_attention_heads": 2}))
    with pytest.raises(errors.InvalidConfig) as e:
        HFSource(str(tmp_path))
    assert e.value.field == "num_hidden_layers"


def test_hf_gemma3_sliding_window_pattern_zero_is_invalid_config(tmp_path):
    import json

    from safetensors.numpy import save_file

    from cyb_llm.convert.hf import HFSource

    save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "num_hidden_layers": 1,
                                                      "sliding_window_pattern": 0}))
    with pytest.raises(errors.InvalidConfig) as e:
        HFSource(str(tmp_path))
    assert e.value.field == "sliding_window_pattern"


def _patched(tmp_path, data: bytes, name: str) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_corrupted_gguf_names_the_field(tmp_path):
    import struct

    from cyb_llm.convert.gguf import GGUFSource

    good = open(_gguf(tmp_path / "g.gguf"), "rb").read()
    cases = {
        "n_tensors": good[:8] + struct.pack("<Q", 2**62) + good[16:],
        "n_kv": good[:16] + struct.pack("<Q", 2**40) + good[24:],
        "key 0 length": good[:24] + struct.pack("<Q", 2**50) + good[32:],
        "magic": b"GGUX" + good[4:],
        "version": good[:4] + struct.pack("<I", 99) + good[8:],
    }
    for field, data in cases.items():
        with pytest.raises(errors.FormatError) as e:
            GGUFSource(_patched(tmp_path, data, "bad.gguf"))
        assert e.value.section == "gguf" and e.value.key == field, (field, e.value)
    # truncated anywhere inside the header: the field being read and the offset
    header_end = good.index(b"token_embd.weight") + len(b"token_embd.weight") + 4 + 16 + 4 + 8
    for cut in (2, 10, 20, 30, 60, header_end // 2, header_end - 3):
        with pytest.raises(errors.FormatError, match="truncated at byte|cannot fit") as e:
            GGUFSource(_patched(tmp_path, good[:cut], "cut.gguf"))
        assert e.value.section == "gguf" and e.value.key not in ("", "header"), cut


# --- 3. config keys of the wrong type, messages, sampling ranges, text ----------------------------

def _with_config(tmp_path, **tables):
    config = {"model_type": "llama", "architecture": dict(ARCH), **tables}
    path = str(tmp_path / "c.model")
    write_model(path, name="c", config=config, tensors=tiny_tensors())
    return path


@pytest.mark.parametrize("tables,field", [
    ({"tokenizer": 5}, "tokenizer"),
    ({"sampling": 5}, "sampling"),
    ({"tokenizer": {"eos_token_ids": 2}}, "tokenizer.eos_token_ids"),
    ({"tokenizer": {"bos_token_id": "x"}}, "tokenizer.bos_token_id"),
    ({"tokenizer": {"add_bos": "yes"}}, "tokenizer.add_bos"),
    ({"tokenizer": {"type": 5}}, "tokenizer.type"),
    ({"tokenizer": {"bos_token_id": 100000}}, "tokenizer.bos_token_id"),  # beyond vocab_size (48)
])
def test_config_keys_of_the_wrong_type_are_invalid_config(tmp_path, tables, field):
    with pytest.raises(errors.InvalidConfig) as e:
        m = cyb_llm.load(_with_config(tmp_path, **tables))
        m.eos_token_ids
        SamplingParams.from_model(m)
    assert e.value.field == field


def test_chat_section_of_the_wrong_type(tmp_path):
    path = str(tmp_path / "chat.model")
    write_model(path, name="c", config={"model_type": "llama", "architecture": dict(ARCH)},
                tensors=tiny_tensors(), chat={"template": "{{ messages }}", "eos_sequences": 5})
    with pytest.raises(errors.InvalidConfig) as e:
        chat_from_modelfile(ModelFile(path))
    assert e.value.field == "chat.eos_sequences"


T = "{% for m in messages %}[{{ m.role }}]{{ m.content | trim }}{% endfor %}"


@pytest.mark.parametrize("content", [None, 5, [{"type": "image_url", "image_url": "x"}], [5]])
def test_message_content_of_the_wrong_type(content):
    with pytest.raises(errors.InvalidConfig) as e:
        ChatTemplate(T).render([{"role": "user", "content": content}])
    assert e.value.field.startswith("messages[0].content")


def test_deeply_nested_message_is_invalid_config_not_recursion_error():
    deep: dict = {}
    for _ in range(5000):
        deep = {"x": deep}
    with pytest.raises(errors.InvalidConfig, match="nested deeper"):
        ChatTemplate(T).render([{"role": "user", "content": "hi", "extra": deep}])


def test_openai_text_parts_are_joined():
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}]
    assert ChatTemplate(T).render([{"role": "user", "content": parts}]) == "[user]Hello world"


@pytest.mark.parametrize("template,what", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{% for c in 'x' * 2000 %}{% for d in 'y' * 2000 %}{% endfor %}{% endfor %}", "steps"),
    ("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}", None),
    ("{{ 'x' * 1000000000 }}", "output"),
    ("{{ 'x' | center(1000000000) }}", "output"),
    ("{% set a = 'x' * 10000000 %}{{ a ~ a ~ a }}", "output"),
    ("{{ 7 ** 100000000 }}", "output"),
    ("{% include 'other.jinja' %}", "include"),
    ("{% extends 'base.jinja' %}", "extends"),
])
def test_hostile_templates_stop_at_a_budget(template, what):
    t = ChatTemplate(template)  # compiled lazily: constructing never runs or folds template code
    with pytest.raises(errors.InvalidConfig, match=what) as e:
        t.render([{"role": "user", "content": "hi"}])
    assert e.value.field == "chat.template"


@pytest.mark.parametrize("field,value", [("top_k", 2**31), ("penalty_last_n", 2**40), ("temperature", 1e39),
                                         ("presence_penalty", -1e300), ("temperature", math.nan),
                                         ("seed", 2**64)])
def test_sampling_values_beyond_native_ranges_fail_at_construction(field, value):
    with pytest.raises(errors.InvalidConfig) as e:
        SamplingParams(**{field: value})
    assert e.value.field == field


def test_lone_surrogate_prompt_is_a_tokenizer_error():
    from cyb_llm import hub

    path = hub.fetch("smollm2") if "smollm2" in hub.MODELS else None
    if path is None or not os.path.exists(path):
        pytest.skip("smollm2 not cached")
    tok = ModelFile(path).tokenizer
    with pytest.raises(errors.TokenizerError, match="surrogate"):
        tok.encode("ab\udc80cd")
    with pytest.raises(errors.TokenizerError, match="surrogate"):
        tok.encode_batch(["ok", "ab\ud800"])


def test_id_to_token_outside_the_vocabulary_is_none():
    from cyb_llm import hub

    path = hub.fetch("smollm2") if "smollm2" in hub.MODELS else None
    if path is None or not os.path.exists(path):
        pytest.skip("smollm2 not cached")
    tok = ModelFile(path).tokenizer
    assert tok.id_to_token(-1) is None and tok.id_to_token(2**40) is None
    assert tok.id_to_token(1) == "<|im_start|>"
    with pytest.raises(TypeError):
        tok.id_to_token("1")


@pytest.mark.parametrize("header", [b"[1, 2]", b'{"w": 5}', b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}}',
                                    b'{"w": {"dtype": "F32", "shape": [1]}}'])
def test_malformed_safetensors_header_is_a_format_error(tmp_path, header):
    import struct

    from cyb_llm.convert.hf import _SafetensorsFile as SafetensorsFile

    p = tmp_path / "model.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(errors.FormatError) as e:
        SafetensorsFile(str(p))
    assert e.value.section == "safetensors"


# --- CLI -----------------------------------------------------------------------------------------

def _cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(cyb_llm.__file__)), os.environ.get("PYTHONPATH", "")]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "cyb_llm.cli", *args], capture_output=True, text=True,
                          env=e, timeout=300)


def test_cli_prints_one_error_line_for_a_bad_config(tmp_path):
    r = _cli("run", _with_config(tmp_path, sampling=5), "hi", "--max-tokens", "1")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: InvalidConfig")


def test_cli_gpu_probe_prints_no_xdg_runtime_dir_noise(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    path = write_tiny(tmp_path / "x.model", model_type="llama")
    e = dict(env, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(cyb_llm.__file__)), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", "import cyb_llm; cyb_llm.load(__import__('sys').argv[1])", path],
                       capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "XDG_RUNTIME_DIR" not in r.stderr
