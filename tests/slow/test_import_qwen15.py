"""The fourth real GGUF (qwen15, 1.1 GB): every tensor of the imported .model equals the
GGUF's bytes (slow tier: the file is large)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import test_import  # noqa: E402

test_import.REAL["qwen15"] = dict(model_type="qwen2", hidden_size=1536, num_hidden_layers=28,
                                  num_attention_heads=12, num_key_value_heads=2, head_dim=128,
                                  rope_theta=1000000.0, attention_bias=True)


def test_qwen15_tensors_equal_gguf_bytes(real_source, real_model):
    test_import.test_real_gguf_import("qwen15", real_source, real_model)
