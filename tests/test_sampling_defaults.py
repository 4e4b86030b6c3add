"""The model's own sampling defaults: recorded by the importers in [sampling], used by
run/chat/generate unless overridden, shown by `cyb-llm inspect` (docs/generation.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cyb_llm.convert.generation import MODEL_CARD_DEFAULTS, from_generation_config, from_gguf
from cyb_llm.text.sampling import DEFAULTS, SamplingParams

QUESTION = "What is the capital of France?"


def test_generation_config_values_and_greedy():
    got = from_generation_config({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                  "repetition_penalty": 1.05, "eos_token_id": 2})
    assert got == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
                   "source": "generation_config.json"}
    assert from_generation_config({"do_sample": False, "temperature": 0.9})["temperature"] == 0.0
    assert from_generation_config({"eos_token_id": 2}) is None


def test_gguf_metadata_wins_over_the_table_and_table_by_basename_and_size():
    meta = {"general.basename": "smollm2", "general.size_label": "1.7B",
            "general.sampling.temp": 0.6000000238418579, "general.sampling.top_k": 30}
    assert from_gguf(meta) == {"temperature": 0.6, "top_k": 30, "source": "GGUF general.sampling metadata"}
    del meta["general.sampling.temp"], meta["general.sampling.top_k"]
    assert from_gguf(meta)["temperature"] == MODEL_CARD_DEFAULTS["smollm2"]["temperature"] == 0.2
    meta["general.size_label"] = "135M"
    assert from_gguf(meta)["temperature"] == 0.0
    assert from_gguf({"general.basename": "Gemma-3"})["top_k"] == 64
    assert from_gguf({"general.basename": "unknown-model"}) is None


def test_default_model_records_its_sampling_section(real_model):
    from cyb_llm.format import ModelFile, describe

    path = real_model("smollm2")
    section = ModelFile(path).config["sampling"]
    assert section["temperature"] == 0.0 and section["top_p"] == 0.9
    assert "sampling:    temperature=0.0" in describe(path)


def test_first_answer_contains_paris_for_50_seeds(real_model):
    """The README's first command with the default settings: a correct answer on every run."""
    import cyb_llm

    m = cyb_llm.load(real_model("smollm2"))
    gen = m.generator()
    msgs = [{"role": "user", "content": QUESTION}]
    wrong = []
    for seed in range(50):
        params = SamplingParams.from_model(m, seed=seed)
        text = gen.generate(msgs, max_tokens=32, sampling=params).read()
        if "Paris" not in text:
            wrong.append((seed, text))
    assert not wrong, wrong[:3]


def test_overrides_win_over_the_model_section(real_model):
    import cyb_llm

    m = cyb_llm.load(real_model("smollm2"))
    p = SamplingParams.from_model(m, temperature=0.7)
    assert p.temperature == 0.7 and p.top_p == 0.9 and p.min_p == 0.0
    # a model without a section gets the llama.cpp-style defaults
    class Bare:
        config: dict = {}
    assert SamplingParams.from_model(Bare()).temperature == DEFAULTS["temperature"]


def test_cli_run_uses_the_model_defaults(real_model):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "run", real_model("smollm2"), QUESTION,
                          "--max-tokens", "16", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "Paris" in doc["text"]


def test_load_resolves_known_names_and_version(real_model):
    import cyb_llm

    real_model("smollm2")  # fetched into the cache once
    m = cyb_llm.load("smollm2")
    assert os.path.samefile(m.path, real_model("smollm2"))
    out = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"cyb-llm {cyb_llm.__version__}"
    with pytest.raises(cyb_llm.Error):
        cyb_llm.load("no-such-model-name")
