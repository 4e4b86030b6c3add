"""Text generation: the loop that feeds a conversation and samples its logits.

    gen = model.generator()
    for chunk in gen.generate("The capital of France is", max_tokens=16):
        print(chunk.text, end="", flush=True)

`generate` returns a `Stream`: an iterator of `Chunk`s produced as tokens
come (the work happens inside `next()`, so closing the stream or breaking out
of the loop stops it). Each sampled token gives one chunk whose `text` is the
newly completed text (never a partial UTF-8 character, never any part of a
stop string); the last chunk has `token=None`, the rest of the text and the
`finish_reason` ("stop": EOS or a stop string; "length": `max_tokens` or the
end of the conversation's context). `stream.stats` holds the timings.

The loop per token is: [grammar mask] -> native sample -> [grammar consume]
-> detokenize -> stop strings -> yield -> `conversation.forward([token])`. The
prompt is prefilled in one forward.

Sampling on the GPU (docs/generation.md): on a model whose backend samples
(`model.device_sampling`, wgpu+rs), each forward is `_core.forward_sample`: the
logits stay on the device, a kernel draws the token (mask, temperature, top-k,
top-p, min-p, the sampler's own RNG stream), only the token comes back, and the
next forward's embedding reads it from the device. Logit bias, penalties and
logprobs need the logits on the host: those generations sample on the CPU
(`stats.sampled_on` says which; `Generator(model, device_sampling=False)` forces
the host).

Structured output (`constraint=`, a cyb_llm.text.structured.Constraint): each step
the grammar's allowed-token bitset goes to the native sampler, which applies it
(right after the logit bias) before the penalties, temperature, top-k, top-p
and min-p, so greedy and sampled decoding only draw tokens the grammar allows;
the drawn token advances the grammar, and the generation stops ("stop") as
soon as the grammar is complete.
When a conversation is reused, only the tokens after the part already in its
KV cache are forwarded (what `cyb-llm chat` relies on).

`create_chat_completion` wraps this in OpenAI-shaped dicts.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .. import _core
from ..errors import InvalidConfig
from ..ids import common_prefix, token_bytes, token_id_array
from .sampling import SamplingParams
from .structured import Constraint, constraint_of, grammar_text
from .toolcalls import (ToolCallStream, check_tool_choice, forced_tools, template_messages, template_takes_tools,
                        tool_call_grammar, tool_names, with_tool_prompt)

_perf = time.perf_counter


@dataclass
class Chunk:
    """One step of a generation."""

    text: str                       # text completed by this step ("" while a character or stop string is pending)
    token: int | None = None        # the sampled token id; None on the final chunk
    logprob: float | None = None    # log-probability of `token` under the model (raw logits), when requested
    top_logprobs: list[tuple[int, float]] | None = None  # (id, logprob), most likely first, when requested
    finish_reason: str | None = None  # "stop" | "length" on the final chunk


@dataclass
class GenerationStats:
    """Timings of one generation (milliseconds). Decode times exclude the time the
    consumer of the stream spends between chunks."""

    load_ms: float | None = None    # the model's load time
    prompt_tokens: int = 0
    cached_tokens: int = 0          # prompt tokens already in the conversation's KV cache (not recomputed)
    prefill_ms: float = 0.0         # forward of the new prompt tokens
    completion_tokens: int = 0      # sampled tokens, EOS excluded
    decode_steps: int = 0           # forwards of sampled tokens
    decode_ms: float = 0.0          # everything after the prefill: sampling, Python, forwards
    forward_ms: float = 0.0         # inside conversation.forward during decode
    sample_ms: float = 0.0          # inside the native sampler (with the grammar mask's application)
    mask_ms: float = 0.0            # structured output: the grammar's mask computation and token consumption
    python_ms: float = 0.0          # the rest: detokenize, stop strings, logprobs, chunk objects
    finish_reason: str | None = None
    seed: int | None = None         # the sampler's seed (drawn at random when none was given)
    sampled_on: str = "host"        # "device": drawn on the GPU (forward_sample); "host": the CPU sampler

    @property
    def step_ms(self) -> float:
        """Mean time per generated token (sample + Python + forward)."""
        return self.decode_ms / self.completion_tokens if self.completion_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.completion_tokens / self.decode_ms if self.decode_ms > 0 else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        new = self.prompt_tokens - self.cached_tokens
        return 1000.0 * new / self.prefill_ms if self.prefill_ms > 0 else 0.0

    @property
    def python_overhead(self) -> float:
        """Python time per token as a fraction of one decode forward (the issue wants < 0.05)."""
        if not self.completion_tokens or not self.decode_steps or self.forward_ms <= 0:
            return 0.0
        return (self.python_ms / self.completion_tokens) / (self.forward_ms / self.decode_steps)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("step_ms", "tokens_per_s", "prefill_tokens_per_s", "python_overhead"):
            d[name] = getattr(self, name)
        return d


class Stream:
    """Iterator of `Chunk`s for one generation; `close()` (or leaving a `with`
    block, or dropping it) stops the work. `stats` fills in as it runs."""

    def __init__(self, run: Iterator[Chunk], stats: GenerationStats, prompt_ids: list[int]):
        self._run = run
        self.stats = stats
        self.prompt_ids = prompt_ids
        self.tokens: list[int] = []
        self.text = ""
        self.finish_reason: str | None = None

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> Chunk:
        chunk = next(self._run)
        if chunk.token is not None:
            self.tokens.append(chunk.token)
        self.text += chunk.text
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        return chunk

    def read(self) -> str:
        """Runs to the end; returns the whole text."""
        for _ in self:
            pass
        return self.text

    def close(self) -> None:
        self._run.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Generator:
    """Generation over one model. Keeps one conversation of its own for calls
    that pass none, so consecutive generations reuse the common prompt prefix.

    Threads: a conversation has one owner at a time (a forward on a conversation
    that another thread is running raises InvalidConfig(field="conversation"),
    docs/errors.md "Guarantees"). Give each thread its own Generator, or pass each
    generation its own conversation; different conversations of one model run
    concurrently."""

    def __init__(self, model: Any, device_sampling: bool = True):
        self.model = model
        self.device_sampling = bool(device_sampling)  # False: always sample on the host
        self._own_conversation: Any = None
        self._own_busy = False

    # --- prompt -----------------------------------------------------------
    def encode_prompt(self, prompt: str | Sequence[Mapping[str, Any]] | Sequence[int],
                      tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Token ids of a prompt: a string (raw completion, the tokenizer's special
        tokens added), a list of chat messages (rendered by the model's chat
        template with the generation prompt, and `tools` (OpenAI function tools)
        when given, then encoded without adding special tokens, as HF
        apply_chat_template(tokenize=True) does) or a list of ids."""
        if isinstance(prompt, str):
            ids = self.model.tokenizer.encode(prompt, add_special_tokens=True)
        elif isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
            chat = getattr(self.model, "chat", None)
            if chat is None:
                raise InvalidConfig(field="chat_template",
                                    reason=f"model {getattr(self.model, 'name', '?')!r} has no chat template; "
                                           "pass a string prompt for raw completion")
            if tools and not template_takes_tools(chat.source):
                prompt = with_tool_prompt(prompt, tools)   # the template would leave them out
            text = chat.render(template_messages(prompt), add_generation_prompt=True,
                               **({"tools": list(tools)} if tools else {}))
            ids = self.model.tokenizer.encode(text, add_special_tokens=False)
        elif isinstance(prompt, (Sequence, np.ndarray)) and not isinstance(prompt, (bytes, bytearray)):
            # token ids: checked as Conversation.forward checks them (no coercion, within the vocab)
            ids = token_id_array(prompt, getattr(self.model, "vocab_size", None)).tolist()
        else:
            raise TypeError("prompt must be a string, a list of chat messages or a list of token ids, "
                            f"got {type(prompt).__name__}")
        if not ids:
            raise InvalidConfig(field="prompt", reason="empty prompt: nothing to generate from")
        return list(ids)

    # --- generation -------------------------------------------------------
    def generate(self, prompt_or_messages: Any, max_tokens: int | None = None,
                 sampling: SamplingParams | Mapping[str, Any] | None = None,
                 stop: str | Sequence[str] | None = None, conversation: Any = None,
                 logprobs: bool = False, top_logprobs: int = 0,
                 tools: Sequence[Mapping[str, Any]] | None = None, constraint: Any = None) -> Stream:
        """Starts a generation; see the module docstring. `sampling` is a
        SamplingParams, a dict of overrides of the model's defaults, or None
        (the model's defaults, `SamplingParams.from_model`). `max_tokens=None`
        runs until EOS, a stop string or the end of the context. Errors in the
        request (empty prompt, negative max_tokens, a prompt longer than the
        context, a logit_bias id outside the vocab, a grammar that does not
        compile) raise here, before any work. `tools`: see `encode_prompt`.
        `constraint`: a cyb_llm.text.structured.Constraint (structured output) or None."""
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0):
            raise InvalidConfig(field="max_tokens", reason=f"must be an integer >= 0 or None, got {max_tokens!r}")
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= 20:
            raise InvalidConfig(field="top_logprobs", reason=f"must be an integer in [0, 20], got {top_logprobs!r}")
        if sampling is None:
            params = SamplingParams.from_model(self.model)
        elif isinstance(sampling, SamplingParams):
            params = sampling
        elif isinstance(sampling, Mapping):
            params = SamplingParams.from_model(self.model, **sampling)
        else:
            raise InvalidConfig(field="sampling", reason="must be a SamplingParams, a dict or None")
        if stop is not None:
            params = params.replace(stop=list(params.stop) + SamplingParams(stop=stop).stop)
        vocab = getattr(self.model, "vocab_size", None)
        if params.logit_bias and vocab is not None and max(params.logit_bias) >= vocab:
            raise InvalidConfig(field="logit_bias", reason=f"token id {max(params.logit_bias)} is outside the "
                                                           f"vocab of {vocab}")
        matcher = constraint.matcher() if constraint is not None else None
        ids = self.encode_prompt(prompt_or_messages, tools=tools)

        own = conversation is None
        if own:
            if self._own_conversation is None:
                self._own_conversation = self.model.new_conversation()
            conv = self._own_conversation
        else:
            conv = conversation
        if len(ids) > conv.max_context:
            raise InvalidConfig(field="prompt", reason=f"the prompt has {len(ids)} tokens, more than the "
                                                       f"conversation's context of {conv.max_context}")
        stats = GenerationStats(load_ms=(getattr(self.model, "timings", None) or {}).get("load_ms"),
                                prompt_tokens=len(ids))
        run = self._run(conv, own, ids, params, max_tokens, bool(logprobs) or top_logprobs > 0, top_logprobs, stats,
                        matcher)
        return Stream(run, stats, ids)

    def _run(self, conv: Any, own: bool, ids: list[int], params: SamplingParams, max_tokens: int | None,
             want_logprobs: bool, top_k: int, stats: GenerationStats, matcher: Any = None) -> Iterator[Chunk]:
        model = self.model
        eos = model.eos_token_ids
        stops = params.stop
        if own:
            if self._own_busy:  # another stream of this generator is open: use a fresh conversation
                conv, own = model.new_conversation(), False
            else:
                self._own_busy = True
        inflight = 0  # overlapped steps submitted whose draws were not taken (below)
        try:
            if max_tokens == 0:
                stats.finish_reason = "length"
                yield Chunk("", finish_reason="length")
                return
            sampler = params.sampler()
            stats.seed = sampler.seed
            sampler.accept_many(ids)
            decoder = model.tokenizer.stream_decoder(skip_special_tokens=True)

            on_device = self._on_device(conv, sampler, want_logprobs)
            stats.sampled_on = "device" if on_device else "host"
            own_s = fwd_s = smp_s = msk_s = 0.0

            def left() -> int:
                """How many tokens this generation may still draw (the next one included)."""
                room = conv.max_context - conv.position
                return room if max_tokens is None else min(room, max_tokens - stats.completion_tokens)

            def device_step(step_ids: list[int] | None, last: int = -1) -> int:
                """forward + draw on the device (step_ids None: `last`, the token drawn last; a
                conversation that batches its steps (the server's slots) is given it, others read it
                from the device)."""
                nonlocal msk_s
                allowed = None
                if matcher is not None:
                    t = _perf()
                    allowed = matcher.fill(left())
                    msk_s += _perf() - t
                batched = getattr(conv, "forward_sample", None)
                if batched is not None:
                    return batched(step_ids if step_ids is not None else [last], sampler, allowed)
                return _core.forward_sample(model._native, conv._native, step_ids, sampler, allowed)

            # Prefill: only what the KV cache does not hold yet.
            t0 = _perf()
            cached = _cache_prefix(conv, ids)
            _set_cache_tokens(conv, None)  # unknown until the forward returns
            if on_device:
                next_token = device_step(ids[cached:])
            else:
                logits = conv.forward(ids[cached:])
            cache = list(ids)
            _set_cache_tokens(conv, cache)
            stats.cached_tokens = cached
            stats.prefill_ms = (_perf() - t0) * 1000.0

            held = ""      # released text that may be the start of a stop string
            finish = None
            done = False   # the grammar (structured output) is complete
            # Overlapped decode (device draws, no grammar, a native conversation): the step that
            # forwards a token is submitted before that token is read back (its embedding reads
            # the draw on the device), so the host records and submits step k+1 while the device
            # runs step k, and detokenizes token k while step k runs. Steps submitted for tokens
            # the stream does not go on from (EOS, a stop string, the consumer closing the
            # stream) are rolled back (finally below). Draws and text are those of the serial loop.
            overlap = on_device and matcher is None and getattr(conv, "forward_sample", None) is None

            def wanted(made: int) -> bool:
                """Whether a step forwarding the token after `made` completion tokens can be used."""
                return (max_tokens is None or made + 1 < max_tokens) and conv.position < conv.max_context

            if overlap and wanted(0):
                _core.forward_sample_submit(model._native, conv._native, None, sampler)
                inflight = 1
            while True:
                t_step = t_masked = _perf()
                if on_device:
                    token = next_token  # drawn with the forward (its time is forward time)
                else:
                    allowed = None
                    if matcher is not None:
                        allowed = matcher.fill(left())
                        t_masked = _perf()
                        msk_s += t_masked - t_step
                    token = sampler.sample(logits, allowed=allowed)
                t_sampled = _perf()
                smp_s += t_sampled - t_masked
                if token in eos:
                    finish = "stop"
                    own_s += t_sampled - t_step
                    break
                if matcher is not None:
                    matcher.consume(token)
                    msk_s += _perf() - t_sampled
                stats.completion_tokens += 1
                chunk = Chunk("", token)
                if want_logprobs:
                    lp, top_ids, top_lps = _core.top_logprobs(logits, token, top_k)
                    chunk.logprob = float(lp)
                    chunk.top_logprobs = list(zip(top_ids.tolist(), top_lps.tolist())) if top_k else []
                delta = decoder.push(token)
                if stops:
                    text, held, hit = _cut_stop(held + delta, stops)
                    chunk.text = text
                    if hit:
                        finish = "stop"
                        own_s += _perf() - t_step
                        yield chunk
                        break
                else:
                    chunk.text = delta
                done = matcher is not None and matcher.stopped
                end = (max_tokens is not None and stats.completion_tokens >= max_tokens) \
                    or conv.position - inflight >= conv.max_context
                own_s += _perf() - t_step
                stats.decode_ms = own_s * 1000.0
                yield chunk
                if done or end:
                    finish = "stop" if done else "length"
                    break
                t_resume = _perf()
                m0 = msk_s
                if inflight:  # the step forwarding `token` runs; submit the next one, then read this one's draw
                    if wanted(stats.completion_tokens):
                        _core.forward_sample_submit(model._native, conv._native, None, sampler)
                        inflight += 1
                    n, inflight = inflight, 0  # a take that raises has rolled every pending step back
                    next_token = _core.forward_sample_take(model._native, conv._native, sampler)
                    inflight = n - 1
                elif on_device:
                    next_token = device_step(None, token)  # the embedding reads `token` on the device
                else:
                    logits = conv.forward([token])
                t_done = _perf() - (msk_s - m0)  # the grammar's time is mask time
                cache.append(token)
                fwd_s += t_done - t_resume
                own_s += t_done - t_resume + (msk_s - m0)
                stats.decode_steps += 1

            tail = ""
            if finish == "length" or (finish == "stop" and (token in eos or done)):
                tail = held + decoder.flush()
                if stops:
                    tail, _, _ = _cut_stop(tail, stops, final=True)
            stats.decode_ms = own_s * 1000.0
            stats.forward_ms = fwd_s * 1000.0
            stats.sample_ms = smp_s * 1000.0
            stats.mask_ms = msk_s * 1000.0
            stats.python_ms = max(0.0, (own_s - fwd_s - smp_s - msk_s) * 1000.0)
            stats.finish_reason = finish
            yield Chunk(tail, finish_reason=finish)
        finally:
            if inflight:  # steps submitted for tokens the stream did not go on from
                conv.truncate(conv.position - inflight)
            if own:
                self._own_busy = False

    def _on_device(self, conv: Any, sampler: Any, want_logprobs: bool) -> bool:
        """Whether this generation draws its tokens on the device (module docstring)."""
        native = getattr(self.model, "_native", None)
        return (self.device_sampling and not want_logprobs
                and (hasattr(conv, "_native") or hasattr(conv, "forward_sample"))
                and bool(getattr(native, "device_sampling", False)) and _core.device_sampling_ok(sampler))


def _cache_prefix(conv: Any, ids: list[int]) -> int:
    """How many leading prompt tokens the conversation's KV cache already holds: the
    common prefix of what it holds and the prompt; what follows it in the cache is
    dropped (Conversation.truncate), or the whole cache when nothing is shared."""
    cache = getattr(conv, "_cyb_cache_tokens", None)
    n = common_prefix(cache, ids) if cache is not None and conv.position == len(cache) else 0
    if n and n < conv.position:
        conv.truncate(n)
    if n == 0 and conv.position != 0:
        conv.reset_kv_cache()
    return n


def _set_cache_tokens(conv: Any, tokens: list[int] | None) -> None:
    try:
        conv._cyb_cache_tokens = tokens
    except AttributeError:  # a native object without a __dict__: no reuse, always a fresh prefill
        pass


def _cut_stop(text: str, stops: Sequence[str], final: bool = False) -> tuple[str, str, bool]:
    """Splits text into (releasable, held back, stop string found). Text up to the
    earliest stop string is released and the rest dropped; otherwise the longest
    tail that could begin a stop string is held back (unless final)."""
    cut = -1
    for s in stops:
        i = text.find(s)
        if i >= 0 and (cut < 0 or i < cut):
            cut = i
    if cut >= 0:
        return text[:cut], "", True
    if final:
        return text, "", False
    keep = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), keep, -1):
            if text.endswith(s[:k]):
                keep = k
                break
    return text[:len(text) - keep], text[len(text) - keep:], False


# --- OpenAI-shaped chat completions --------------------------------------------

def _logprob_entry(tokenizer: Any, token: int, logprob: float, top: list[tuple[int, float]] | None) -> dict:
    def one(t: int, lp: float) -> dict:
        b = token_bytes(tokenizer, t)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(b)}

    entry = one(token, logprob)
    entry["top_logprobs"] = [one(t, lp) for t, lp in (top or [])]
    return entry


def _start(model: Any, prompt: Any, max_tokens: int | None, temperature: float | None, top_p: float | None,
           top_k: int | None, min_p: float | None, repetition_penalty: float | None,
           presence_penalty: float | None, frequency_penalty: float | None, top_logprobs: int, want_lp: bool,
           seed: int | None, stop: Any, generator: Generator | None, conversation: Any,
           tools: Sequence[Mapping[str, Any]] | None = None, logit_bias: Mapping[Any, float] | None = None,
           constraint: Any = None) -> Stream:
    """The Stream behind an OpenAI-shaped completion (both kinds): the model's sampling defaults
    with the non-None overrides, the request's errors raised before any work."""
    params = SamplingParams.from_model(
        model, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
        repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, seed=seed, logit_bias=logit_bias)
    gen = generator or Generator(model)
    return gen.generate(prompt, max_tokens=max_tokens, sampling=params, stop=stop, conversation=conversation,
                        logprobs=want_lp, top_logprobs=top_logprobs, tools=tools, constraint=constraint)


def chat_constraint(model: Any, response_format: Mapping[str, Any] | None = None, grammar: str | None = None,
                    tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: Any = None,
                    parallel_tool_calls: bool | None = None) -> Any:
    """The structured-output Constraint of a chat request (None: unconstrained): `response_format`
    or `grammar` (cyb_llm.text.structured); for `tool_choice` "required" / a named function the grammar
    of calls only, for "auto" (with tools, without response_format / grammar) the grammar of text
    or calls (cyb_llm.text.toolcalls.tool_call_grammar). How many calls: "auto" one or more unless
    `parallel_tool_calls` is False; "required" exactly one unless `parallel_tool_calls` is True
    (forced, a small model tends to repeat calls until max_tokens); a named function exactly one.
    InvalidConfig names the field at fault (an invalid schema: "response_format")."""
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise InvalidConfig(field="parallel_tool_calls", reason=f"must be a boolean, got {parallel_tool_calls!r}")
    fns = forced_tools(tool_choice, tools)
    if fns is None:
        if check_tool_choice(tool_choice, tools) == "auto" and tool_names(tools) \
                and grammar_text(response_format, grammar) is None:
            try:
                return Constraint(model, tool_call_grammar(model, [t["function"] for t in tools or []],
                                                           forced=False, parallel=parallel_tool_calls is not False),
                                  "tools")
            except InvalidConfig:   # a parameters schema llguidance cannot compile: the answer is parsed only
                return None
        return constraint_of(model, response_format, grammar)
    if grammar_text(response_format, grammar) is not None:
        field = "grammar" if grammar is not None else "response_format"
        raise InvalidConfig(field=field, reason="cannot be combined with tool_choice 'required' or a named "
                                                "function (the answer is then a tool call)")
    parallel = parallel_tool_calls is True and check_tool_choice(tool_choice, tools) == "required"
    return Constraint(model, tool_call_grammar(model, fns, parallel=parallel), "tool_choice", closing=True)


def _usage(s: Stream) -> dict:
    return {"prompt_tokens": s.stats.prompt_tokens, "completion_tokens": s.stats.completion_tokens,
            "total_tokens": s.stats.prompt_tokens + s.stats.completion_tokens}


def create_chat_completion(model: Any, messages: Sequence[Mapping[str, Any]], stream: bool = False,
                           max_tokens: int | None = None, temperature: float | None = None,
                           top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
                           repetition_penalty: float | None = None, presence_penalty: float | None = None,
                           frequency_penalty: float | None = None, logprobs: bool = False,
                           top_logprobs: int = 0, seed: int | None = None,
                           stop: str | Sequence[str] | None = None, generator: Generator | None = None,
                           conversation: Any = None, tools: Sequence[Mapping[str, Any]] | None = None,
                           tool_choice: str | Mapping[str, Any] | None = None,
                           response_format: Mapping[str, Any] | None = None, grammar: str | None = None,
                           logit_bias: Mapping[int, float] | None = None,
                           parallel_tool_calls: bool | None = None) -> dict | Iterator[dict]:
    """An OpenAI-shaped chat completion of `messages` (rendered by the model's chat template).

    Returns a `chat.completion` dict, or with `stream=True` an iterator of `chat.completion.chunk`
    dicts. Extra key: "timings" (GenerationStats.as_dict()), in the last chunk when streaming.

    - `max_tokens`: None runs until EOS, a stop string or the end of the context.
    - `temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty`, `presence_penalty`,
      `frequency_penalty`: None takes the model's default (SamplingParams.from_model);
      `temperature=0` is greedy. `seed`: same seed, same text.
    - `logit_bias`: {token id: bias} added to the logits before sampling (ids as ints or
      decimal strings; -100 all but bans a token, +100 all but forces it).
    - `stop`: a string or a list of strings, never part of the text.
    - `logprobs` / `top_logprobs` (0 to 20): log-probabilities of the model's raw distribution
      (log-softmax of the logits, before sampling) in `choices[0].logprobs.content`.
    - `response_format`: {"type": "text"} (default), {"type": "json_object"} (any JSON object) or
      {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}; `grammar`: a grammar in
      llguidance's Lark syntax. Both constrain decoding through the native sampler's token mask
      (cyb_llm.text.structured); an invalid schema or grammar is InvalidConfig(field=...).
    - `tools` (OpenAI function tools) go to the chat template (or, when it ignores them, to the
      system message: cyb_llm.text.toolcalls.tool_prompt). `tool_choice`: "auto" (the default with
      tools; the answer is constrained to text or calls), "none" (tools left out of the prompt),
      "required" or {"type": "function", "function": {"name": ...}} (the answer is constrained to
      one call, of any tool or of the named one). Call arguments follow the tool's `parameters`
      under OpenAI's strict semantics (no undeclared property). `parallel_tool_calls`: False allows
      one call with "auto"; True allows several with "required" (see chat_constraint). Calls come
      back as `message.tool_calls` (streamed as `delta.tool_calls`) with finish_reason "tool_calls".
    - `generator`, `conversation`: reuse a Generator / a Conversation's KV cache (default: a fresh
      Generator, which keeps a conversation of its own).
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise InvalidConfig(field="messages", reason="must be a non-empty list of {role, content} messages")
    for m in messages:
        if not isinstance(m, Mapping) or "role" not in m:
            raise InvalidConfig(field="messages", reason=f"each message needs a role, got {m!r}")
    names = tool_names(tools)
    if check_tool_choice(tool_choice, tools) == "none":
        tools, names = None, set()
    constraint = chat_constraint(model, response_format, grammar, tools, tool_choice, parallel_tool_calls)
    want_lp = bool(logprobs) or bool(top_logprobs)
    s = _start(model, list(messages), max_tokens, temperature, top_p, top_k, min_p, repetition_penalty,
               presence_penalty, frequency_penalty, int(top_logprobs or 0), want_lp, seed, stop, generator,
               conversation, tools=tools, logit_bias=logit_bias, constraint=constraint)
    ident = "chatcmpl-" + uuid.uuid4().hex[:24]
    created = int(time.time())
    name = getattr(model, "name", "model")
    tok = model.tokenizer

    def chunks() -> Iterator[dict]:
        def wrap(delta: dict, finish: str | None = None, lp: list | None = None) -> dict:
            return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": 0, "delta": delta,
                                 "logprobs": {"content": lp} if lp is not None else None,
                                 "finish_reason": finish}]}

        split = ToolCallStream(names) if names else None
        with s:
            yield wrap({"role": "assistant", "content": ""})
            for c in s:
                lp = [_logprob_entry(tok, c.token, c.logprob, c.top_logprobs)] \
                    if want_lp and c.token is not None else None
                text = split.push(c.text) if split is not None else c.text
                if text or lp:
                    yield wrap({"content": text}, lp=lp)
                if c.finish_reason is not None:
                    finish = c.finish_reason
                    if split is not None:
                        rest, calls = split.finish()
                        if rest:
                            yield wrap({"content": rest})
                        if calls:
                            # cut by max_tokens: the complete calls before the cut come back, "length" says so
                            finish = "length" if finish == "length" else "tool_calls"
                            yield wrap({"tool_calls": [dict(call, index=i) for i, call in enumerate(calls)]})
                    last = wrap({}, finish)
                    last["usage"] = _usage(s)
                    last["timings"] = s.stats.as_dict()
                    yield last

    return chunks() if stream else merge_chat_chunks(chunks())


def merge_chat_chunks(chunks: Iterable[dict]) -> dict:
    """The `chat.completion` dict that a stream of `chat.completion.chunk` dicts of one choice adds
    up to (what create_chat_completion(stream=False) returns; the server folds its streams with it)."""
    head: dict = {}
    text: list[str] = []
    lp: list[dict] | None = None
    calls: list[dict] = []
    finish = None
    extra: dict = {}
    for ch in chunks:
        head = head or ch
        choice = ch["choices"][0]
        delta = choice.get("delta") or {}
        text.append(delta.get("content") or "")
        calls += [{k: v for k, v in c.items() if k != "index"} for c in delta.get("tool_calls") or []]
        if choice.get("logprobs") is not None:
            lp = (lp or []) + list(choice["logprobs"].get("content") or [])
        finish = choice.get("finish_reason") or finish
        extra.update({k: ch[k] for k in ("usage", "timings") if k in ch})
    content = "".join(text)
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if calls:
        message["tool_calls"] = calls
    return {"id": head.get("id"), "object": "chat.completion", "created": head.get("created"),
            "model": head.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": {"content": lp} if lp is not None else None,
                         "finish_reason": finish}],
            **extra}


def create_completion(model: Any, prompt: str | Sequence[int], stream: bool = False, max_tokens: int | None = 16,
                      temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                      min_p: float | None = None, repetition_penalty: float | None = None,
                      presence_penalty: float | None = None, frequency_penalty: float | None = None,
                      logprobs: int | None = None, seed: int | None = None,
                      stop: str | Sequence[str] | None = None, generator: Generator | None = None,
                      conversation: Any = None, response_format: Mapping[str, Any] | None = None,
                      grammar: str | None = None, logit_bias: Mapping[int, float] | None = None) -> dict | Iterator[dict]:
    """An OpenAI-shaped raw completion (`text_completion` dict, or with stream=True an iterator
    of them, one per piece of text): `prompt` (a string, or token ids) is continued without the
    chat template. `max_tokens` defaults to 16 as in OpenAI's API (None: until EOS, a stop string
    or the end of the context). `logprobs=k` gives OpenAI's legacy logprobs object (tokens,
    token_logprobs, top_logprobs with k entries (at most 20), text_offset). `response_format`,
    `grammar`, `logit_bias` and the sampling parameters are those of create_chat_completion;
    "timings" is added as there."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, Mapping) for m in prompt):
        raise InvalidConfig(field="prompt", reason="a list of messages: use create_chat_completion")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)):
        raise InvalidConfig(field="logprobs", reason=f"must be an integer in [0, 20] or None, got {logprobs!r}")
    want_lp = logprobs is not None
    constraint = constraint_of(model, response_format, grammar)
    s = _start(model, prompt, max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
               frequency_penalty, int(logprobs or 0), want_lp, seed, stop, generator, conversation,
               logit_bias=logit_bias, constraint=constraint)
    ident = "cmpl-" + uuid.uuid4().hex[:24]
    created = int(time.time())
    name = getattr(model, "name", "model")
    tok = model.tokenizer
    offset = 0

    def lp_of(chunks: list[Chunk]) -> dict | None:
        nonlocal offset
        if not want_lp:
            return None
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for c in chunks:
            if c.token is None:
                continue
            piece = token_bytes(tok, c.token).decode("utf-8", errors="replace")
            out["tokens"].append(piece)
            out["token_logprobs"].append(c.logprob)
            out["top_logprobs"].append({token_bytes(tok, t).decode("utf-8", errors="replace"): lp
                                        for t, lp in (c.top_logprobs or [])})
            out["text_offset"].append(offset)
            offset += len(piece)
        return out

    def wrap(text: str, finish: str | None, lp: dict | None) -> dict:
        return {"id": ident, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": 0, "text": text, "logprobs": lp, "finish_reason": finish}]}

    def chunks() -> Iterator[dict]:
        with s:
            for c in s:
                if c.text or (want_lp and c.token is not None) or c.finish_reason is not None:
                    out = wrap(c.text, c.finish_reason, lp_of([c]))
                    if c.finish_reason is not None:
                        out["usage"] = _usage(s)
                        out["timings"] = s.stats.as_dict()
                    yield out

    return chunks() if stream else merge_completion_chunks(chunks())


def merge_completion_chunks(chunks: Iterable[dict]) -> dict:
    """The `text_completion` dict that a stream of them (one choice) adds up to."""
    head: dict = {}
    text: list[str] = []
    lp: dict[str, list] | None = None
    finish = None
    extra: dict = {}
    for ch in chunks:
        head = head or ch
        choice = ch["choices"][0]
        text.append(choice.get("text") or "")
        if choice.get("logprobs") is not None:
            lp = lp or {}
            for k, v in choice["logprobs"].items():
                lp.setdefault(k, []).extend(v)
        finish = choice.get("finish_reason") or finish
        extra.update({k: ch[k] for k in ("usage", "timings") if k in ch})
    return {"id": head.get("id"), "object": "text_completion", "created": head.get("created"),
            "model": head.get("model"),
            "choices": [{"index": 0, "text": "".join(text), "logprobs": lp, "finish_reason": finish}], **extra}


__all__ = ["Chunk", "GenerationStats", "Stream", "Generator", "create_chat_completion", "create_completion",
           "chat_constraint",
           "merge_chat_chunks", "merge_completion_chunks", "token_bytes"]
