"""Every curated family on tiny random checkpoints built with transformers.

No real weights of these families are reachable here (MODELS.md), so each is
built from a config with seeded random weights, saved as an HF folder,
imported with our HF importer and compared with transformers f32.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import cyb_llm
from cyb_llm.convert import import_model

from oracles import greedy, hf_greedy, hf_logits, rel_err

import torch  # noqa: E402  (test oracle)
import transformers  # noqa: E402  (test oracle)

VOCAB = 512
PRECISE_TOL = 1e-4  # RUNTIME.md: precise whole forward vs transformers f32

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, tie_word_embeddings=False)

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=10000.0)),
    "llama3_scaling": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "llama_linear_tied": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_scaling={"rope_type": "linear", "factor": 2.0}, tie_word_embeddings=True)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=8, head_dim=16)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1e6)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=16, hidden_activation="gelu_pytorch_tanh")),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=16, sliding_window=8, query_pre_attn_scalar=24, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=16, sliding_window=8, query_pre_attn_scalar=16, rope_theta=1e6, rope_local_base_freq=1e4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"])),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(partial_rotary_factor=0.5, pad_token_id=0)),
}


def _tokenizer_json(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(path, "tokenizer.json"))


def _build(family, tmp_path_factory):
    cfg_cls, model_cls, extra = FAMILIES[family]
    kwargs = dict(BASE)
    kwargs.update(extra)
    cfg = getattr(transformers, cfg_cls)(**kwargs)
    torch.manual_seed(1234)
    model = getattr(transformers, model_cls)(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                base = 0.0 if family.startswith("gemma") else 1.0
                p.copy_(base + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.12 * torch.randn_like(p))
    d = tmp_path_factory.mktemp(family)
    model.save_pretrained(d, safe_serialization=True)
    _tokenizer_json(str(d))
    out = str(d / f"{family}.model")
    import_model(str(d), out, progress=False)
    return model, out


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def tiny(request, tmp_path_factory):
    return request.param, *_build(request.param, tmp_path_factory)


def _ids(n, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, size=n).tolist()


def test_logits_match_transformers(tiny):
    family, hf, path = tiny
    m = cyb_llm.load(path, precise=True)
    ids = _ids(24)  # longer than the sliding windows above
    ours = m.new_conversation(64).forward(ids, all_logits=True)
    ref = hf_logits(hf, ids)
    assert np.isfinite(ours).all()
    err = rel_err(ours, ref)
    assert err <= PRECISE_TOL, f"{family}: error {err:.2e}"


def test_greedy_matches_transformers(tiny):
    family, hf, path = tiny
    m = cyb_llm.load(path, precise=True)
    ids = _ids(6, seed=1)
    ours = greedy(m.new_conversation(64), ids, 16, set())
    ref = hf_greedy(hf, ids, 16, set())
    assert ours == ref, family


def test_bulk_prefill_equals_token_by_token(tiny):
    family, _, path = tiny
    m = cyb_llm.load(path, precise=True)
    ids = _ids(20, seed=2)
    bulk = m.new_conversation(64).forward(ids, all_logits=True)
    conv = m.new_conversation(64)
    steps = np.stack([conv.forward([t]) for t in ids])
    assert rel_err(bulk, steps) <= PRECISE_TOL
    assert (bulk.argmax(-1) == steps.argmax(-1)).all()


def test_fast_mode_close_to_precise(tiny):
    family, _, path = tiny
    ids = _ids(20, seed=3)
    a = cyb_llm.load(path).new_conversation(64).forward(ids, all_logits=True)
    b = cyb_llm.load(path, precise=True).new_conversation(64).forward(ids, all_logits=True)
    assert rel_err(a, b) <= 5e-2  # RUNTIME.md: fast path vs precise
