"""Every curated family on tiny random checkpoints built with transformers.

No real weights of these families are reachable here (docs/models.md), so each is
built from a config with seeded random weights N(0, 0.2) (sharp: attention is
peaked, so rope, softcaps and windows all move the logits), saved as F32
safetensors, imported with cyb_llm.convert.import_model and compared with
transformers f32: a 24-token prefill (longer than the 8-token sliding windows)
then 10 single-token decode steps, each step checked against transformers'
logits at that position of the full sequence.
"""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from cyb_llm.convert import import_model

from oracles import greedy, hf_greedy, hf_logits, rel_err
from tolerances import tolerance

import torch  # noqa: E402  (test oracle)
import transformers  # noqa: E402  (test oracle)

VOCAB = 512
PRECISE_TOL = tolerance("precise-vs-transformers")  # docs/runtime.md, "Tolerances"
FAST_TOL = tolerance("fast-vs-precise/tiny-decoders")
BULK_TOL = tolerance("bulk-vs-token")
INIT_STD = 0.2  # weights N(0, 0.2)
PROMPT = 24  # > 2 x the sliding window below
DECODE = 10
WINDOW = 8
ATTN_CAP = 5.0  # small enough that the caps act on these tiny models' scores
FINAL_CAP = 10.0

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=INIT_STD)

# yarn with DeepSeek-style mscale / mscale_all_dim (attention factor
# (0.1 m ln f + 1) / (0.1 m_all ln f + 1) instead of 0.1 ln f + 1) and truncate off.
YARN_MSCALE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
               "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}

# gemma2/gemma3: 6 layers, so sliding and global layers both occur (twice).
GEMMA3_LAYERS = ["sliding_attention", "sliding_attention", "full_attention"] * 2

FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=10000.0)),
    "llama3_scaling": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "llama_linear_tied": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_scaling={"rope_type": "linear", "factor": 2.0}, tie_word_embeddings=True)),
    "llama_yarn_mscale": ("LlamaConfig", "LlamaForCausalLM", dict(rope_scaling=YARN_MSCALE)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=WINDOW, head_dim=16)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1e6)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=16, hidden_activation="gelu_pytorch_tanh")),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_hidden_layers=6, head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=24,
        attn_logit_softcapping=ATTN_CAP, final_logit_softcapping=FINAL_CAP)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_hidden_layers=6, head_dim=16, sliding_window=WINDOW, query_pre_attn_scalar=16, rope_theta=1e6,
        rope_local_base_freq=1e4, layer_types=GEMMA3_LAYERS,
        final_logit_softcapping=FINAL_CAP)),  # transformers' Gemma 3 has no attention softcap
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(partial_rotary_factor=0.5, pad_token_id=0)),
}


def _tokenizer_json(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))


def _build(family, tmp_path_factory, **overrides):
    cfg_cls, model_cls, extra = FAMILIES[family]
    kwargs = dict(BASE)
    kwargs.update(extra)
    kwargs.update(overrides)
    cfg = getattr(transformers, cfg_cls)(**kwargs)
    torch.manual_seed(1234)
    model = getattr(transformers, model_cls)(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # gemma stores norm weights as w - 1
                base = 0.0 if family.startswith("gemma") else 1.0
                p.copy_(base + 0.1 * torch.randn_like(p))
            else:
                p.copy_(INIT_STD * torch.randn_like(p))
    d = tmp_path_factory.mktemp(family)
    model.save_pretrained(d, safe_serialization=True)
    _tokenizer_json(d)
    out = str(d / f"{family}.model")
    import_model(str(d), out, progress=False)
    return model, out


def _ids(n, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, size=n).tolist()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def tiny(request, tmp_path_factory):
    """(family, transformers model, .model path, prompt, HF greedy continuation, HF logits of it all)."""
    family = request.param
    hf, path = _build(family, tmp_path_factory)
    prompt = _ids(PROMPT, seed=sum(map(ord, family)))
    cont = hf_greedy(hf, prompt, DECODE, set())
    assert len(cont) == DECODE
    ref = hf_logits(hf, prompt + cont)
    assert np.isfinite(ref).all()
    return family, hf, path, prompt, cont, ref


def test_prefill_then_decode_matches_transformers(tiny):
    family, _, path, prompt, cont, ref = tiny
    conv = cyb_llm.load(path, precise=True).new_conversation(64)
    pre = conv.forward(prompt, all_logits=True)
    assert pre.shape == (PROMPT, VOCAB) and np.isfinite(pre).all()
    err = rel_err(pre, ref[:PROMPT])
    assert err <= PRECISE_TOL, f"{family} prefill: error {err:.2e}"
    # Decode: feed transformers' continuation one token at a time; the step that
    # feeds cont[i] yields the logits of position PROMPT + i of the full sequence.
    for i, t in enumerate(cont):
        step = np.asarray(conv.forward([t])).reshape(-1)
        assert np.isfinite(step).all()
        err = rel_err(step, ref[PROMPT + i])
        assert err <= PRECISE_TOL, f"{family} decode step {i}: error {err:.2e}"


def test_greedy_matches_transformers(tiny):
    family, _, path, prompt, cont, _ = tiny
    m = cyb_llm.load(path, precise=True)
    assert greedy(m.new_conversation(64), prompt, DECODE, set()) == cont, family


def test_bulk_prefill_equals_token_by_token(tiny):
    family, _, path, prompt, cont, _ = tiny
    ids = prompt + cont
    m = cyb_llm.load(path, precise=True)
    bulk = m.new_conversation(64).forward(ids, all_logits=True)
    conv = m.new_conversation(64)
    steps = np.stack([np.asarray(conv.forward([t])).reshape(-1) for t in ids])
    assert rel_err(bulk, steps) <= BULK_TOL, family
    assert (bulk.argmax(-1) == steps.argmax(-1)).all(), family


def test_fast_mode_close_to_precise(tiny):
    family, _, path, prompt, _, ref = tiny
    a = cyb_llm.load(path).new_conversation(64).forward(prompt, all_logits=True)
    assert rel_err(a, ref[:PROMPT]) <= FAST_TOL, family


CROSS_PATH_TOL = tolerance("cross-path")  # precise vs precise across paths (curated, graph)


@pytest.fixture(scope="module")
def yarn(tmp_path_factory):
    hf, path = _build("llama_yarn_mscale", tmp_path_factory)
    prompt = _ids(PROMPT, seed=7)
    return hf, path, prompt, hf_logits(hf, prompt)


def test_yarn_mscale_same_logits_on_curated_and_graph_paths(yarn):
    """One rope inverse-frequency function honours mscale / mscale_all_dim / truncate on every path: the
    curated forward and the graph built from the same decoder plan agree, and both match transformers
    (which applies mscale), so a path that ignored mscale would fail here (see the sensitivity check)."""
    hf, path, prompt, ref = yarn
    curated = cyb_llm.load(path, precise=True, exec_path="curated")
    graph = cyb_llm.load(path, precise=True, exec_path="graph")
    assert curated.execution_path == "curated" and graph.execution_path == "graph"
    a = curated.new_conversation(64).forward(prompt, all_logits=True)
    b = graph.new_conversation(64).forward(prompt, all_logits=True)
    assert rel_err(a, b) <= CROSS_PATH_TOL
    assert rel_err(a, ref) <= PRECISE_TOL, "curated path vs transformers (yarn mscale)"
    assert rel_err(b, ref) <= PRECISE_TOL, "graph path vs transformers (yarn mscale)"
    # Sensitivity: the same weights with mscale ignored (attention factor 0.1 ln f + 1) are far off.
    cfg = hf.config.to_dict()
    cfg_no = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("rope_parameters", "rope_scaling")},
                                      rope_scaling={k: v for k, v in YARN_MSCALE.items()
                                                    if k not in ("mscale", "mscale_all_dim")})
    hf_no = transformers.LlamaForCausalLM(cfg_no).float().eval()
    hf_no.load_state_dict(hf.state_dict())
    assert rel_err(hf_logits(hf_no, prompt), ref) > tolerance("decoder-ablation")
