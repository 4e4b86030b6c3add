"""Generation end to end on the real SmolLM2-135M-Instruct (fetched and imported by cyb_llm.hub).

The loop tests run the precise path, whose greedy text is pinned to
transformers' (test_golden.py), so what they check is the loop itself; the
CLI acceptance test runs both the default path and --precise."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import cyb_llm
from cyb_llm import hub
from cyb_llm.text.generate import create_chat_completion
from cyb_llm.text.sampling import SamplingParams

from tolerances import tolerance

GREEDY = SamplingParams.greedy()
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def model():
    return cyb_llm.load(hub.fetch("smollm2"), precise=True)


@pytest.fixture(scope="module")
def greedy_answer(model):
    return model.generator().generate(QUESTION, max_tokens=24, sampling=GREEDY).read()


@pytest.mark.parametrize("path", [[], ["--precise"]], ids=["default", "precise"])
def test_cli_run_answers_paris(path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.join(os.path.dirname(cyb_llm.__file__), ".."),
                                                     env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-m", "cyb_llm.cli", "run", "What is the capital of France?",
                        "--max-tokens", "16", "--temperature", "0"] + path,
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "tok/s" in r.stderr


def test_prompt_ids_match_hf_apply_chat_template(model):
    from transformers import AutoTokenizer

    src = hub.fetch_source("smollm2")
    hf = AutoTokenizer.from_pretrained(os.path.dirname(src), gguf_file=os.path.basename(src))
    msgs = [{"role": "system", "content": "You are brief."}] + QUESTION
    want = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if isinstance(want, dict) or hasattr(want, "input_ids"):
        want = want["input_ids"]
    assert model.generator().encode_prompt(msgs) == list(want)


def test_greedy_chat_answer_and_timings(model, greedy_answer):
    assert "Paris" in greedy_answer
    s = model.generator().generate(QUESTION, max_tokens=24, sampling=GREEDY)
    assert s.read() == greedy_answer  # greedy is reproducible
    st = s.stats
    assert st.prefill_ms > 0 and st.tokens_per_s > 0 and st.load_ms > 0
    assert st.completion_tokens == len(s.tokens) and st.finish_reason in ("stop", "length")


def test_same_seed_same_text(model):
    p = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)

    def run(params):
        return model.generator().generate(QUESTION, max_tokens=32, sampling=params).read()

    a = run(p)
    assert run(p) == a
    assert run(p.replace(seed=99)) != a


def test_stop_string_cuts_before_it(model, greedy_answer):
    cut = greedy_answer.index("Paris")
    s = model.generator().generate(QUESTION, max_tokens=24, sampling=GREEDY, stop=["Paris"])
    assert s.read() == greedy_answer[:cut]
    assert s.finish_reason == "stop"


def test_utf8_streaming_of_multibyte_text(model):
    prompt = "東京タワー 東京タワー 東京タワー 東京タワー"
    s = model.generator().generate(prompt, max_tokens=24, sampling=GREEDY)
    chunks = [c.text for c in s]
    text = "".join(chunks)
    assert all("\ufffd" not in c for c in chunks)
    assert any(ord(ch) > 0x2FFF for ch in text)  # it did produce CJK, i.e. multi-byte pieces
    assert text == model.tokenizer.decode(s.tokens, skip_special_tokens=True)
    # some chunks were empty: a character spread over several byte-level tokens
    assert "" in chunks[:-1]


def test_closing_the_stream_stops_forwards(model):
    conv = model.new_conversation(256)
    s = model.generator().generate(QUESTION, max_tokens=24, sampling=GREEDY, conversation=conv)
    for i, _ in enumerate(s):
        if i == 2:
            break
    s.close()
    assert conv.position == len(s.prompt_ids) + 2


def test_second_turn_reuses_the_cache_and_matches_a_fresh_prefill(model, greedy_answer):
    gen = model.generator()
    conv = model.new_conversation(512)
    first = gen.generate(QUESTION, max_tokens=24, sampling=GREEDY, conversation=conv).read()
    history = QUESTION + [{"role": "assistant", "content": first},
                          {"role": "user", "content": "And of Germany?"}]
    reused = gen.generate(history, max_tokens=16, sampling=GREEDY, conversation=conv)
    text = reused.read()
    assert reused.stats.cached_tokens > len(reused.prompt_ids) // 2
    fresh = gen.generate(history, max_tokens=16, sampling=GREEDY, conversation=model.new_conversation(512))
    assert fresh.read() == text and fresh.stats.cached_tokens == 0


def test_chat_completion_logprobs(model):
    out = create_chat_completion(model, QUESTION, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    ch = out["choices"][0]
    content = ch["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] > 0
    joined = b"".join(bytes(e["bytes"]) for e in content).decode("utf-8")
    assert joined == ch["message"]["content"]
    for e in content:  # greedy: the chosen token is the most likely one
        assert e["logprob"] == pytest.approx(e["top_logprobs"][0]["logprob"], abs=tolerance("sampler-logprob"))


def test_stats_account_for_the_decode(model):
    """The timings' parts (docs/generation.md, "Timings") describe the run: one decode step per token
    after the first, the parts add up to the decode time, python_overhead the Python time per token over
    the forward time per step. How small the overhead is depends on the machine's load: that claim is
    bench/bench_python_overhead.py's."""
    s = model.generator().generate("Once upon a time", max_tokens=48, sampling=GREEDY)
    s.read()
    st = s.stats
    assert st.completion_tokens == 48 and st.decode_steps == st.completion_tokens - 1
    assert st.forward_ms > 0 and st.sample_ms >= 0 and st.python_ms >= 0
    assert st.forward_ms + st.sample_ms + st.mask_ms + st.python_ms == pytest.approx(st.decode_ms)
    assert st.python_overhead == pytest.approx((st.python_ms / st.completion_tokens) / (st.forward_ms / st.decode_steps))
