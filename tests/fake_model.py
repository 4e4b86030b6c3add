"""A small stand-in for cyb_llm.Model with exactly the surface the generation
loop and the CLI use, for tests that must not depend on real weights.

Tokens are bytes (ids 0..255) plus four specials. The model "answers" with a
fixed script: after the last <|assistant|> token (or after its first prompt,
for raw completion) the k-th next token is byte k of the script's UTF-8, then
EOS. Logits are that peak on top of deterministic noise, so sampling at a
high temperature wanders off the script while greedy follows it. Every
forward call is recorded, so tests can check what was prefilled.
"""
from __future__ import annotations

import codecs
import re

import numpy as np

BOS, EOS, USER, ASSISTANT = 256, 257, 258, 259
SPECIALS = {BOS: "<s>", EOS: "</s>", USER: "<|user|>", ASSISTANT: "<|assistant|>"}
VOCAB = 260
_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS.values()) + ")")
_ID_OF = {v: k for k, v in SPECIALS.items()}


class FakeStreamDecoder:
    def __init__(self, tok, skip_special_tokens):
        self.skip = skip_special_tokens
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id):
        if token_id in SPECIALS:
            return "" if self.skip else self.utf8.decode(b"", final=True) + SPECIALS[token_id]
        return self.utf8.decode(bytes([token_id]))

    def flush(self):
        return self.utf8.decode(b"", final=True)


class FakeTokenizer:
    bos_token_id = BOS
    eos_token_ids = [EOS]

    def encode(self, text, add_special_tokens=True):
        ids = [BOS] if add_special_tokens else []
        for part in _SPLIT.split(text):
            if part in _ID_OF:
                ids.append(_ID_OF[part])
            else:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids, skip_special_tokens=False):
        out, buf = [], bytearray()
        for i in ids:
            if i in SPECIALS:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
                if not skip_special_tokens:
                    out.append(SPECIALS[i])
            else:
                buf.append(i)
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def id_to_token(self, i):
        return SPECIALS.get(i, f"<0x{i:02X}>")

    def stream_decoder(self, skip_special_tokens=False):
        return FakeStreamDecoder(self, skip_special_tokens)


class FakeChat:
    def render(self, messages, add_generation_prompt=True):
        out = []
        for m in messages:
            tag = "<|assistant|>" if m["role"] == "assistant" else "<|user|>"
            out.append(f"{tag}{m['content']}" + ("</s>" if m["role"] == "assistant" else "\n"))
        if add_generation_prompt:
            out.append("<|assistant|>")
        return "".join(out)


class FakeConversation:
    def __init__(self, model, max_context):
        self.model = model
        self.max_context = max_context
        self.tokens = []
        self.first_len = None

    @property
    def position(self):
        return len(self.tokens)

    def reset_kv_cache(self):
        self.tokens = []
        self.first_len = None
        self.model.calls.append(("reset",))

    def truncate(self, position):
        self.tokens = self.tokens[:position]
        if not self.tokens:
            self.first_len = None
        self.model.calls.append(("truncate", position))

    def forward(self, ids, all_logits=False):
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("forward of no tokens")
        if len(self.tokens) + len(ids) > self.max_context:
            raise ValueError("context overflow in the fake model")
        self.model.calls.append(("forward", list(ids)))
        if self.first_len is None:
            self.first_len = len(ids)
        rows = []
        for i in ids:
            self.tokens.append(i)
            rows.append(self.model.next_logits(self.tokens, self.first_len))
        return np.stack(rows) if all_logits else rows[-1]


class FakeModel:
    def __init__(self, script="Paris is the capital of France.", max_context=256, sampling=None,
                 name="fake", peak=8.0):
        self.script = script.encode("utf-8")
        self.tokenizer = FakeTokenizer()
        self.chat = FakeChat()
        self.eos_token_ids = {EOS}
        self.bos_token_id = BOS
        self.config = {"sampling": dict(sampling)} if sampling else {}
        self.name = name
        self.timings = {"load_ms": 1.5}
        self.dispatch_records = [{"label": "fake", "op": "matmul", "backend": "cpu", "fallback": False}]
        self.max_context = max_context
        self.peak = peak
        self.calls = []

    def new_conversation(self, max_context=None):
        return FakeConversation(self, max_context or self.max_context)

    def generator(self):
        from cyb_llm.text.generate import Generator

        return Generator(self)

    def next_logits(self, tokens, first_len):
        anchor = first_len
        for j in range(len(tokens) - 1, -1, -1):
            if tokens[j] == ASSISTANT:
                anchor = j + 1
                break
        k = len(tokens) - anchor
        target = self.script[k] if 0 <= k < len(self.script) else EOS
        rng = np.random.default_rng(len(tokens))
        logits = rng.standard_normal(VOCAB).astype(np.float32)
        logits[target] += self.peak
        return logits
