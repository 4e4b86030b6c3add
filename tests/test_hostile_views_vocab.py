"""Two hostile inputs (issue 42, item 6).

(a) A `.model` file truncated while a numpy array from `ModelFile(path).tensor(name)` is alive:
reading the array used to kill the process with SIGBUS (the array was a view of the file's
mapping). Arrays of a mapped file are now private copies read from the descriptor; a later
`tensor()` call on the changed file raises FormatError (docs/errors.md, "The file changes on disk").
(b) A `[vocab]` section with a key that is no token id, in a file without a `[tokenizer]` section:
every entry point (tokenizer, generate, chat completion) used to raise a bare ValueError; now
FormatError(section="vocab") naming the key."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cyb_llm
from cyb_llm import FormatError


def test_truncating_the_file_under_a_live_tensor_array_is_safe(real_model, tmp_path):
    copy = tmp_path / "big.model"
    shutil.copyfile(real_model("smollm2"), copy)
    assert os.path.getsize(copy) > 64 << 20  # mapped, not read at open (docs/errors.md)
    code = textwrap.dedent(f"""
        import os, sys
        import cyb_llm
        path = {str(copy)!r}
        mf = cyb_llm.ModelFile(path)
        info = max(mf.tensors.values(), key=lambda t: t.size)
        with open(path, "rb") as f:
            f.seek(mf.weights_offset + info.offset)
            expected = f.read(info.size)
        view = mf.tensor(info.name)
        raw = mf.tensor_bytes(info.name)
        os.truncate(path, mf.weights_offset + 4096)
        assert view.tobytes() == expected and raw.tobytes() == expected
        try:
            mf.tensor(info.name)
        except cyb_llm.FormatError as e:
            assert "changed on disk" in str(e) and path in str(e), e
        else:
            sys.exit("no FormatError from tensor() of the truncated file")
        print("ok")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(cyb_llm.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def _tiny_with_vocab(path, tokens: dict) -> str:
    from cyb_llm.format import write_model

    D, H, HD, I, V = 16, 2, 8, 32, len(tokens)
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,),
              "model.layers.0.input_layernorm.weight": (D,), "model.layers.0.post_attention_layernorm.weight": (D,),
              "model.layers.0.self_attn.q_proj.weight": (H * HD, D), "model.layers.0.self_attn.k_proj.weight": (H * HD, D),
              "model.layers.0.self_attn.v_proj.weight": (H * HD, D), "model.layers.0.self_attn.o_proj.weight": (D, H * HD),
              "model.layers.0.mlp.gate_proj.weight": (I, D), "model.layers.0.mlp.up_proj.weight": (I, D),
              "model.layers.0.mlp.down_proj.weight": (D, I)}
    tensors = [(n, "f32", s, rng.standard_normal(s).astype(np.float32)) for n, s in shapes.items()]
    config = {"model_type": "llama",
              "architecture": {"hidden_size": D, "num_attention_heads": H, "num_key_value_heads": H, "head_dim": HD,
                               "num_hidden_layers": 1, "intermediate_size": I, "vocab_size": V,
                               "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                               "tie_word_embeddings": True},
              "tokenizer": {"type": "bpe", "eos_token_ids": [0]}}
    write_model(path, name="tiny", config=config, tensors=tensors, vocab={"tokens": tokens, "merges": {"0": ["a", "b"]}},
                chat={"template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"})
    return str(path)


def test_vocab_key_that_is_no_token_id_is_a_format_error_naming_it(tmp_path):
    tokens = {str(i): t for i, t in enumerate(["<eos>", "a", "b", "c", "ab", "e"])}
    good = _tiny_with_vocab(tmp_path / "good.model", tokens)
    assert cyb_llm.ModelFile(good).tokenizer.encode("abc", add_special_tokens=False)  # the rebuild works
    tokens["x6"] = "f"
    bad = _tiny_with_vocab(tmp_path / "bad.model", tokens)
    m = cyb_llm.load(bad)
    calls = {
        "ModelFile.tokenizer": lambda: cyb_llm.ModelFile(bad).tokenizer,
        "Model.tokenizer": lambda: m.tokenizer,
        "generate": lambda: m.generator().generate("abc", max_tokens=2).read(),
        "create_chat_completion": lambda: m.create_chat_completion([{"role": "user", "content": "abc"}], max_tokens=2),
        "create_completion": lambda: m.create_completion("abc", max_tokens=2),
    }
    for where, call in calls.items():
        with pytest.raises(FormatError) as e:
            call()
        assert e.value.section == "vocab" and e.value.key == "tokens.x6" and "'x6'" in str(e.value), where
