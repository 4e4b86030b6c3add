"""Chat templates from the `.model` file render exactly as transformers' apply_chat_template."""
from __future__ import annotations

import os

import pytest

from cyb_llm import errors
from cyb_llm.text.chat import ChatTemplate, chat_from_modelfile
from cyb_llm.format import ModelFile

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "user", "content": "Write a haiku about café and 東京 🌸"},
        {"role": "assistant", "content": "Steam over the cup\nneon rain on old temples\nspring in every sip"},
        {"role": "user", "content": "Now one   with  spaces\n\nand newlines."},
    ],
    [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "List two colors"},
        {"role": "assistant", "content": "{\"colors\": [\"red\", \"blue\"]}"},
        {"role": "user", "content": "<|im_start|> is just text here"},
    ],
]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module", params=["smollm2", "qwen05"])
def pair(request, real_model, real_source):
    """(our ChatTemplate from the .model, transformers' tokenizer from the same GGUF)."""
    transformers = pytest.importorskip("transformers")
    name = request.param
    mf = ModelFile(real_model(name))
    ours = chat_from_modelfile(mf)
    src = real_source(name)
    ref = transformers.AutoTokenizer.from_pretrained(os.path.dirname(src), gguf_file=os.path.basename(src))
    return name, ours, ref


@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("gen", [True, False])
def test_render_equals_transformers(pair, conv, gen):
    name, ours, ref = pair
    messages = CONVERSATIONS[conv]
    want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    assert ours.render(messages, add_generation_prompt=gen) == want


def test_render_with_tools_equals_transformers(pair):
    name, ours, ref = pair
    messages = CONVERSATIONS[1]
    want = ref.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert ours.render(messages, tools=TOOLS, add_generation_prompt=True) == want


def test_chat_section_eos(real_model):
    mf = ModelFile(real_model("smollm2"))
    chat = chat_from_modelfile(mf)
    assert "<|im_end|>" in chat.eos_sequences
    assert mf.config["tokenizer"]["eos_token_ids"][0] == mf.tokenizer.token_to_id("<|im_end|>")


def test_sandbox_and_helpers():
    t = ChatTemplate("{{ messages[0].content | tojson }}{{ bos_token }}{% if add_generation_prompt %}>{% endif %}",
                     bos_token="<s>")
    assert t.render([{"role": "user", "content": "<b>é</b>"}]) == "\"<b>é</b>\"<s>>"
    with pytest.raises(errors.InvalidConfig, match="stop here"):
        ChatTemplate("{{ raise_exception('stop here') }}").render([])
    with pytest.raises(errors.InvalidConfig):  # no access to Python internals
        ChatTemplate("{{ messages.__class__.__mro__ }}").render([])
    with pytest.raises(errors.InvalidConfig):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render([])
    with pytest.raises(errors.InvalidConfig):  # immutable sandbox: no mutation of inputs
        ChatTemplate("{{ messages.append(1) }}").render([])
    bad = ChatTemplate("{% if %}")  # compiled on first use, not at load
    with pytest.raises(errors.InvalidConfig):
        bad.render([])
    g = ChatTemplate("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}")
    assert g.render([{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]) == "xy"
    assert len(ChatTemplate("{{ strftime_now('%Y') }}").render([])) == 4
