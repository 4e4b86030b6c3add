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
from cyb_llm.chat import ChatTemplate, chat_from_modelfile
from cyb_llm.format import ModelFile, write_model
from cyb_llm.sampling import SamplingParams

from graph_util import ARCH, llama_graph, tiny_tensors, write_tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    with pytest.raises(KeyboardInterrupt) as e:
        _core._raise_native_error("pending_sigint")
    assert isinstance(e.value.__context__, errors.FormatError)
    with pytest.raises(errors.InvalidConfig):  # no signal pending: the error itself
        _core._raise_native_error("InvalidConfig")
