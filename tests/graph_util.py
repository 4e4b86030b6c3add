"""Small deterministic models for the graph-path tests (no transformers needed).

`write_tiny(path, ...)` writes a llama-shaped `.model` whose f32 weights come
from an integer hash (exactly representable values), with a graph section:
the one given, or the llama graph the importer emits.
"""
from __future__ import annotations

import numpy as np

from cyb_llm.convert import emit_graph
from cyb_llm.format import write_model

ARCH = dict(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def weight_values(k: int, shape, norm: bool) -> np.ndarray:
    """Tensor number k: ((h(i) mod 4096) - 2048) / 8192 with an integer hash h; norms get 1 + v/4."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    h = ((i * np.uint64(2654435761) + np.uint64(k * 40503 + 17)) & np.uint64(0xFFFFFFFF)) >> np.uint64(8)
    v = ((h % np.uint64(4096)).astype(np.int64) - 2048).astype(np.float32) / np.float32(8192.0)
    if norm:
        v = np.float32(1.0) + v / np.float32(4.0)
    return v.reshape(shape).astype(np.float32)


def tiny_tensors(arch=ARCH):
    D, V, I = arch["hidden_size"], arch["vocab_size"], arch["intermediate_size"]
    H, KV, hd = arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"]
    shapes = [("model.embed_tokens.weight", [V, D])]
    for l in range(arch["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", [D]), (p + "post_attention_layernorm.weight", [D]),
                   (p + "self_attn.q_proj.weight", [H * hd, D]), (p + "self_attn.k_proj.weight", [KV * hd, D]),
                   (p + "self_attn.v_proj.weight", [KV * hd, D]), (p + "self_attn.o_proj.weight", [D, H * hd]),
                   (p + "mlp.gate_proj.weight", [I, D]), (p + "mlp.up_proj.weight", [I, D]),
                   (p + "mlp.down_proj.weight", [D, I])]
    shapes += [("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
    return [(n, "f32", s, weight_values(k, s, n.endswith("norm.weight"))) for k, (n, s) in enumerate(shapes)]


def llama_graph(arch=ARCH) -> str:
    cfg = {"model_type": "llama", "architecture": dict(arch)}
    return emit_graph(cfg, [t[0] for t in tiny_tensors(arch)])


def write_tiny(path, *, graph: str | None = None, model_type: str = "mystery", arch=ARCH) -> str:
    cfg = {"model_type": model_type, "architecture": dict(arch)}
    write_model(str(path), name="tiny-graph", config=cfg, tensors=tiny_tensors(arch),
                graph=llama_graph(arch) if graph is None else graph)
    return str(path)
