"""Reference implementations used as test oracles (test dependencies only)."""
from __future__ import annotations

import functools
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


def llama_cpp():
    """llama-cpp-python, the peer reference. Skips the test where it is not installed, except
    under CYB_REQUIRE_PEERS=1 (tools/test.sh sets it), where a missing or different version fails."""
    import pytest

    if os.environ.get("CYB_REQUIRE_PEERS") != "1":
        return pytest.importorskip("llama_cpp")
    try:
        import llama_cpp as mod
    except ImportError as e:
        pytest.fail(f"CYB_REQUIRE_PEERS=1 but llama_cpp does not import: {e}")
    if mod.__version__ != LLAMA_CPP_VERSION:
        pytest.fail(f"CYB_REQUIRE_PEERS=1: llama_cpp {mod.__version__}, want {LLAMA_CPP_VERSION}")
    return mod


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


def long_prompt(tokenizer, n_tokens: int) -> list[int]:
    """A deterministic prompt of exactly n_tokens ids (numbered paragraphs, cut to length)."""
    text = "".join(LONG_TEXT.format(n=i) for i in range(1, 400))
    ids = tokenizer.encode(text, add_special_tokens=True)
    assert len(ids) >= n_tokens, (len(ids), n_tokens)
    return ids[:n_tokens]
