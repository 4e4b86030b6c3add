"""The generation loop and the OpenAI-shaped API, on a scripted fake model."""
from __future__ import annotations

import pytest
from fake_model import ASSISTANT, BOS, EOS, FakeModel

from cyb_llm.errors import InvalidConfig
from cyb_llm.text.generate import Generator, create_chat_completion
from cyb_llm.text.sampling import DEFAULTS, SamplingParams

GREEDY = SamplingParams.greedy()


def forwards(model):
    return [c[1] for c in model.calls if c[0] == "forward"]


def test_greedy_follows_script_and_stops_at_eos():
    m = FakeModel("Paris.")
    s = Generator(m).generate("Capital of France?", sampling=GREEDY)
    chunks = list(s)
    assert "".join(c.text for c in chunks) == "Paris." == s.text
    assert [c.token for c in chunks[:-1]] == list(b"Paris.")
    assert chunks[-1].token is None and chunks[-1].finish_reason == "stop"
    assert s.finish_reason == "stop" == s.stats.finish_reason
    # one bulk prefill of the whole prompt (BOS added for raw text), then one token per step
    calls = forwards(m)
    assert calls[0] == [BOS] + list(b"Capital of France?")
    assert all(len(c) == 1 for c in calls[1:]) and len(calls) == 1 + len("Paris.")


def test_max_tokens_gives_length():
    m = FakeModel("Paris is nice")
    s = Generator(m).generate("q", max_tokens=5, sampling=GREEDY)
    assert s.read() == "Paris" and s.finish_reason == "length"
    assert s.stats.completion_tokens == 5
    s = Generator(m).generate("q", max_tokens=0, sampling=GREEDY)
    assert s.read() == "" and s.finish_reason == "length"


def test_context_end_gives_length_and_long_prompt_raises():
    m = FakeModel("abcdefghijklmnop", max_context=12)
    s = Generator(m).generate("0123456", sampling=GREEDY)  # 8 prompt tokens with BOS
    assert s.read() == "abcde" and s.finish_reason == "length"
    with pytest.raises(InvalidConfig, match="context"):
        Generator(m).generate("x" * 20, sampling=GREEDY)


@pytest.mark.parametrize("bad", [dict(max_tokens=-1), dict(max_tokens=1.5), dict(top_logprobs=-1)])
def test_bad_requests_raise(bad):
    with pytest.raises(InvalidConfig):
        Generator(FakeModel()).generate("hi", sampling=GREEDY, **bad)


def test_empty_prompt_raises_when_nothing_to_condition_on():
    m = FakeModel()
    with pytest.raises(InvalidConfig, match="empty"):
        Generator(m).generate([], sampling=GREEDY)
    # a raw "" still has BOS to start from
    assert Generator(m).generate("", sampling=GREEDY, max_tokens=3).read() == "Par"


def test_chat_messages_use_the_template_without_extra_special_tokens():
    m = FakeModel("Paris")
    msgs = [{"role": "user", "content": "Capital of France?"}]
    s = Generator(m).generate(msgs, sampling=GREEDY)
    assert s.read() == "Paris"
    rendered = m.chat.render(msgs, add_generation_prompt=True)
    assert forwards(m)[0] == m.tokenizer.encode(rendered, add_special_tokens=False)
    assert forwards(m)[0][-1] == ASSISTANT and BOS not in forwards(m)[0]


def test_no_chat_template_is_a_clear_error():
    m = FakeModel()
    m.chat = None
    with pytest.raises(InvalidConfig, match="chat template"):
        Generator(m).generate([{"role": "user", "content": "hi"}])


def test_utf8_is_never_split_across_byte_tokens():
    answer = "Ça coûte 5€ — 東京 🚀!"
    m = FakeModel(answer)
    chunks = list(Generator(m).generate("q", sampling=GREEDY))
    texts = [c.text for c in chunks]
    assert "".join(texts) == answer
    assert all("\ufffd" not in t for t in texts)
    # multi-byte characters arrive whole, with their last byte's token
    assert "🚀" in texts and "" in texts


@pytest.mark.parametrize("stop,want", [(["France"], "Paris is the capital of "), (" is", "Paris"), ("is", "Par"),
                                       (["xyz", " the"], "Paris is"), (["."], "Paris is the capital of France")])
def test_stop_strings_are_never_emitted(stop, want):
    m = FakeModel("Paris is the capital of France.")
    s = Generator(m).generate("q", sampling=GREEDY, stop=stop)
    texts = [c.text for c in s]
    assert s.text == want and s.finish_reason == "stop"
    # nothing of the stop string leaked into any chunk, even partially at the end
    assert "".join(texts) == want


def test_stop_string_prefix_that_does_not_complete_is_released():
    m = FakeModel("Paris is the capital")
    s = Generator(m).generate("q", sampling=GREEDY, stop=["the end"])
    assert s.read() == "Paris is the capital" and s.finish_reason == "stop"  # EOS


def test_stop_strings_from_sampling_params_and_argument_combine():
    m = FakeModel("Paris is the capital of France.")
    s = Generator(m).generate("q", sampling=GREEDY.replace(stop=["France"]), stop=["capital"])
    assert s.read() == "Paris is the "


def test_seed_determinism():
    m = FakeModel("Paris is the capital of France.", peak=2.0)
    hot = SamplingParams(temperature=1.5, seed=42)

    def run(p):
        return Generator(m).generate("q", sampling=p, max_tokens=24).read()

    a, b = run(hot), run(hot)
    assert a == b
    assert run(hot.replace(seed=7)) != a
    assert a != "Paris is the capital of France."[:24]  # it did sample


def test_closing_the_stream_stops_the_work():
    m = FakeModel("Paris is the capital of France.")
    g = Generator(m)
    s = g.generate("q", sampling=GREEDY)
    for i, c in enumerate(s):
        if i == 2:
            break
    s.close()
    n = len(forwards(m))
    assert n == 3  # prefill + two steps: nothing ran after the third chunk was taken
    # the generator's own conversation is free again and its cache is reused
    s2 = g.generate("q", sampling=GREEDY, max_tokens=3)
    assert s2.read() == "Par"


def test_stats_are_filled():
    m = FakeModel("Paris")
    s = Generator(m).generate("q", sampling=GREEDY)
    s.read()
    st = s.stats
    assert st.load_ms == 1.5 and st.prompt_tokens == 2 and st.completion_tokens == 5
    assert st.prefill_ms > 0 and st.decode_ms > 0 and st.tokens_per_s > 0
    assert st.decode_steps == 5 and st.forward_ms > 0 and st.sample_ms > 0
    assert st.decode_ms >= st.forward_ms + st.sample_ms
    d = st.as_dict()
    assert {"prefill_ms", "step_ms", "tokens_per_s", "python_overhead"} <= set(d)


def test_conversation_reuse_only_forwards_the_new_suffix():
    m = FakeModel("Paris")
    g = Generator(m)
    conv = m.new_conversation()
    msgs = [{"role": "user", "content": "Capital of France?"}]
    s = g.generate(msgs, sampling=GREEDY, conversation=conv)
    assert s.read() == "Paris"
    msgs += [{"role": "assistant", "content": "Paris"}, {"role": "user", "content": "Sure?"}]
    m.calls.clear()
    s = g.generate(msgs, sampling=GREEDY, conversation=conv)
    assert s.read() == "Paris"
    full = m.tokenizer.encode(m.chat.render(msgs), add_special_tokens=False)
    first = forwards(m)[0]
    assert s.stats.cached_tokens > 0 and first == full[s.stats.cached_tokens:]
    assert ("reset",) not in m.calls
    # a different history shares only the template's first tokens: the cache is cut back to
    # them (Conversation.truncate) and the rest is forwarded
    m.calls.clear()
    other = [{"role": "user", "content": "Other"}]
    s = g.generate(other, sampling=GREEDY, conversation=conv)
    assert s.read() == "Paris"
    ids = m.tokenizer.encode(m.chat.render(other), add_special_tokens=False)
    shared = s.stats.cached_tokens
    assert 0 < shared < len(ids) and ("truncate", shared) in m.calls
    assert ("reset",) not in m.calls and forwards(m)[0] == ids[shared:]
    # nothing in common: reset and full prefill
    m.calls.clear()
    s = g.generate("zzz", sampling=GREEDY, conversation=conv)
    assert s.read() == "Paris" and ("reset",) in m.calls and s.stats.cached_tokens == 0


def test_logprobs_and_chat_completion_shape():
    m = FakeModel("Hi €")
    out = create_chat_completion(m, [{"role": "user", "content": "hello"}], temperature=0.0,
                                 logprobs=True, top_logprobs=3, seed=1)
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    ch = out["choices"][0]
    assert ch["message"] == {"role": "assistant", "content": "Hi €"} and ch["finish_reason"] == "stop"
    content = ch["logprobs"]["content"]
    assert len(content) == len("Hi €".encode())  # one entry per byte token
    assert b"".join(bytes(e["bytes"]) for e in content) == "Hi €".encode()
    for e in content:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 3
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
        assert e["logprob"] == pytest.approx(e["top_logprobs"][0]["logprob"])  # greedy picked the top one
    assert out["usage"] == {"prompt_tokens": out["usage"]["prompt_tokens"], "completion_tokens": 6,
                            "total_tokens": out["usage"]["prompt_tokens"] + 6}


def test_chat_completion_stream():
    m = FakeModel("Paris")
    chunks = list(create_chat_completion(m, [{"role": "user", "content": "q"}], stream=True, temperature=0))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "Paris"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["usage"]["completion_tokens"] == 5
    it = create_chat_completion(m, [{"role": "user", "content": "q"}], stream=True, temperature=0)
    next(it), next(it)
    it.close()


def test_sampling_params_defaults_from_model():
    m = FakeModel(sampling={"temperature": 0.6, "top_k": 20, "repeat_penalty": 1.1, "unknown": 3})
    p = SamplingParams.from_model(m, top_p=None, seed=3)
    assert (p.temperature, p.top_k, p.top_p, p.repetition_penalty, p.seed) == (0.6, 20, DEFAULTS["top_p"], 1.1, 3)
    assert SamplingParams.from_model(FakeModel()).temperature == DEFAULTS["temperature"]
    assert SamplingParams().is_greedy
    with pytest.raises(InvalidConfig, match="top_p"):
        SamplingParams(top_p=2.0)
    with pytest.raises(InvalidConfig, match="nucleus"):
        GREEDY.replace(nucleus=0.5)


def test_sampling_dict_overrides_model_defaults():
    m = FakeModel("Paris is", sampling={"temperature": 0.9})
    s = Generator(m).generate("q", sampling={"temperature": 0.0})
    assert s.read() == "Paris is"


def test_eos_first_gives_empty_text():
    m = FakeModel("")
    s = Generator(m).generate("q", sampling=GREEDY)
    chunks = list(s)
    assert len(chunks) == 1 and chunks[0].text == "" and chunks[0].finish_reason == "stop"
    assert s.stats.completion_tokens == 0 and EOS not in s.tokens
