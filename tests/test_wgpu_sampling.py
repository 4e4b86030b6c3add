"""Sampling on the GPU (wgpu+rs, shaders/wgsl/sample.wgsl; docs/generation.md, "Sampling on the GPU").

The oracle is the CPU sampler (csrc/sampling/sampler.cc), itself checked against the HF
logits processors in tests/test_sampling.py. At the kernel level (`_core.wgpu_sample_rows`,
one workgroup per row of synthetic logits): greedy always gives the CPU's token (ties by the
lowest id, masked rows, -inf rows), and sampled draws give the CPU's token for the same seed
on `device-sampling-agree` of 10,000 varied draws, each differing draw a near-tie
(`device-sampling-tie`); two successive draws per sampler check that the kernel takes the
host's uniform exactly when the CPU sampler would (one candidate left: no draw). At the model
level: generation on wgpu+rs (a tiny random llama with a byte-level tokenizer, precise mode)
draws on the device (`stats.sampled_on`, the dispatch record `sample` on wgpu+rs) and gives the
CPU backend's text for the same seed, with and without a JSON-schema constraint; logit bias,
penalties and logprobs fall back to the host sampler.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from placement import assert_ran_on, wgpu_skip_reason
from tolerances import count, tolerance

REASON = wgpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

from cyb_llm import _core  # noqa: E402
from cyb_llm.errors import InvalidConfig  # noqa: E402

TIE = tolerance("device-sampling-tie")

# Varied policies; top_k=1 and min_p=1 leave one candidate (the CPU takes no uniform then).
CONFIGS = [
    dict(temperature=1.0),
    dict(temperature=0.7),
    dict(temperature=1.3, top_k=5),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    dict(temperature=1.0, top_p=0.5),
    dict(temperature=0.6, top_p=0.9),
    dict(temperature=0.9, min_p=0.1),
    dict(temperature=1.0, top_k=1),
    dict(temperature=0.5, min_p=1.0),
    dict(temperature=1.0, top_k=3, top_p=0.3),
    dict(temperature=2.0, top_p=0.0),
]


def _logits(rng, rows, n):
    """Rows of several shapes: smooth, peaked, integer-valued (many exact ties), some -inf."""
    x = rng.normal(size=(rows, n)).astype(np.float32)
    kind = np.arange(rows) % 4
    x[kind == 1] *= 8.0
    x[kind == 2] = np.round(x[kind == 2] * 2.0)
    neg = kind == 3
    x[neg] *= 3.0
    x[neg] = np.where(rng.random(size=x[neg].shape) < 0.3, -np.inf, x[neg])
    return x


def _near_tie(cfg, seed, row, a, b, mask=None):
    """Whether a differing draw (CPU token a, kernel token b) lies within rounding of a boundary."""
    s = _core.Sampler(seed=seed, **cfg)
    u = s.peek_uniform()
    proc = np.asarray(_core.Sampler(seed=seed, **cfg).process(row, allowed=mask), np.float64)
    p = np.asarray(_core.Sampler(seed=seed, **cfg).probs(row, allowed=mask), np.float64)
    scale = np.max(np.abs(proc[np.isfinite(proc)])) if np.isfinite(proc).any() else 1.0
    if np.isfinite(proc[a]) and np.isfinite(proc[b]) and abs(proc[a] - proc[b]) <= TIE * scale:
        return True
    keep = np.flatnonzero(p > 0)
    order = keep if not (cfg.get("top_k") or cfg.get("top_p", 1.0) < 1.0) else \
        sorted(keep, key=lambda i: (-proc[i], i))
    cum = np.cumsum(p[order])
    return bool(np.min(np.abs(cum - u)) <= TIE)


def _compare(logits, cfgs, seeds, masks=None, draws=1):
    """Kernel vs CPU sampler, `draws` successive draws per sampler; (agreements, differing draws)."""
    rows = len(cfgs)
    gpu = [_core.Sampler(seed=s, **c) for s, c in zip(seeds, cfgs)]
    cpu = [_core.Sampler(seed=s, **c) for s, c in zip(seeds, cfgs)]
    agree, differ = 0, []
    for d in range(draws):
        block = logits[d * rows:(d + 1) * rows]
        mblock = None if masks is None else masks[d * rows:(d + 1) * rows]
        g = _core.wgpu_sample_rows(block, gpu, mblock)
        for r in range(rows):
            m = None if mblock is None else mblock[r]
            c = cpu[r].sample(block[r], allowed=m)
            if c == g[r]:
                agree += 1
            else:
                differ.append((r, d, c, g[r]))
    return agree, differ


def _pack(bits):
    """[rows, words * 32] booleans -> [rows, words] uint32 bitsets (bit t % 32 of word t // 32)."""
    out = np.zeros((bits.shape[0], bits.shape[1] // 32), np.uint32)
    for b in range(32):
        out |= bits[:, b::32].astype(np.uint32) << np.uint32(b)
    return out


def test_greedy_equals_cpu_with_ties_masks_and_inf():
    rng = np.random.default_rng(1)
    for n in (77, 260, 5000):  # 5000: the 256-thread kernel
        rows = 600 if n < 5000 else 24
        x = _logits(rng, rows, n)
        x[::7] = np.round(x[::7] / 4.0)  # coarse values: long runs of equal logits
        x[5] = -np.inf  # every logit -inf: the argmax is token 0
        words = (n + 31) // 32
        bits = rng.random(size=(rows, words * 32)) < 0.1
        bits[::2] = True  # every other row: all allowed
        bits[:, 0] = True  # never empty
        masks = _pack(bits)
        masks[3] = 0
        masks[3, words - 1] = 1 << ((n - 1) % 32)  # only the last token allowed
        masks[7] = 0
        masks[7, 0] = 1 << 3
        x[7] = -np.inf  # only token 3 allowed and every logit -inf: the lowest allowed id, not 0
        seeds = list(range(rows))
        for m in (None, masks):
            agree, differ = _compare(x, [dict(temperature=0.0)] * rows, seeds, m)
            assert not differ, f"n={n}: greedy differs from the CPU sampler on {differ[:5]}"
            assert agree == rows


def test_sampled_draws_match_cpu_on_10k():
    agree_min, total = count("device-sampling-agree")
    rng = np.random.default_rng(2)
    rows, draws, n = total // 2, 2, 96
    x = _logits(rng, rows * draws, n)
    cfgs = [CONFIGS[r % len(CONFIGS)] for r in range(rows)]
    seeds = [int(s) for s in rng.integers(0, 2**63, size=rows)]
    agree, differ = _compare(x, cfgs, seeds, draws=draws)
    assert agree + len(differ) == total
    assert agree >= agree_min, f"{agree}/{total} draws agree; differing: {differ[:10]}"
    for r, d, a, b in differ:  # every difference is a near-tie
        assert _near_tie(cfgs[r], seeds[r], x[d * rows + r], a, b), (cfgs[r], r, d, a, b)
    print(f"device sampling: {agree}/{total} draws equal to the CPU sampler's")


def test_masked_sampling_equals_cpu():
    rng = np.random.default_rng(3)
    rows, n = 1200, 200
    words = (n + 31) // 32
    x = _logits(rng, rows, n)
    density = np.array([0.02, 0.3, 1.0, 0.6])[np.arange(rows) % 4][:, None]
    bits = rng.random(size=(rows, words * 32)) < density
    bits[np.arange(rows), rng.integers(0, n, size=rows)] = True  # never empty
    bits[:, n:] = rng.random(size=(rows, words * 32 - n)) < 0.5  # bits past the vocab are ignored
    masks = _pack(bits)
    cfgs = [CONFIGS[r % len(CONFIGS)] for r in range(rows)]
    seeds = list(range(rows))
    agree, differ = _compare(x, cfgs, seeds, masks)
    for r, d, a, b in differ:
        assert _near_tie(cfgs[r], seeds[r], x[r], a, b, masks[r]), (cfgs[r], r, a, b)
    agree_min, total = count("device-sampling-agree")
    assert agree * total >= agree_min * rows, f"{agree}/{rows} masked draws agree; differing: {differ[:10]}"
    # only allowed tokens were drawn
    g = _core.wgpu_sample_rows(x, [_core.Sampler(seed=s, **c) for s, c in zip(seeds, cfgs)], masks)
    assert all(bits[r, t] for r, t in enumerate(g))


def test_kernel_errors_are_the_cpu_samplers():
    x = np.zeros((1, 40), np.float32)
    with pytest.raises(InvalidConfig) as e:
        _core.wgpu_sample_rows(x, [_core.Sampler(temperature=0.7)], np.zeros((1, 2), np.uint32))
    assert e.value.field == "allowed"
    x[0, 9] = np.nan
    with pytest.raises(InvalidConfig) as e:
        _core.wgpu_sample_rows(x, [_core.Sampler(temperature=0.7)])
    assert e.value.field == "logits" and "token 9" in str(e.value)
    for s in (_core.Sampler(temperature=0.7, logit_bias={1: 2.0}), _core.Sampler(repetition_penalty=1.1)):
        assert not _core.device_sampling_ok(s)
        with pytest.raises(InvalidConfig) as e:
            _core.wgpu_sample_rows(np.zeros((1, 40), np.float32), [s])
        assert e.value.field == "sampler"
    assert _core.device_sampling_ok(_core.Sampler(repetition_penalty=1.3, penalty_last_n=0))


# ------------------------------------------------------------ whole generations

@pytest.fixture(scope="module")
def byte_llama(tmp_path_factory):
    """A tiny random llama (tests/test_families_tiny.py's shapes) with a byte-level BPE tokenizer
    (bytes 0..255, special tokens 256..510, EOS 511), so that llguidance can constrain it to JSON."""
    import test_families_tiny as F
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from cyb_llm.convert import import_model
    from cyb_llm.ids import _bytes_to_unicode

    kwargs = dict(F.BASE, eos_token_id=511, bos_token_id=None)
    torch.manual_seed(7)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if "norm" in name else 0.0) + F.INIT_STD * torch.randn_like(p))
    d = tmp_path_factory.mktemp("byte_llama")
    model.save_pretrained(d, safe_serialization=True)
    vocab = dict(_bytes_to_unicode())  # the byte-level alphabet: char -> byte
    specials = [f"<|x{i}|>" for i in range(256, 511)] + ["<|endoftext|>"]
    vocab.update({t: 256 + i for i, t in enumerate(specials)})
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tok.save(str(d / "tokenizer.json"))
    out = str(d / "byte_llama.model")
    import_model(str(d), out, progress=False)
    return out


def _models(path):
    import cyb_llm

    return cyb_llm.load(path, backend="cpu", precise=True), cyb_llm.load(path, backend="wgpu+rs", precise=True)


def _run(model, prompt, sampling, gen=None, **kw):
    from cyb_llm.text.generate import Generator

    s = (gen or Generator(model)).generate(prompt, max_tokens=40, sampling=sampling, **kw)
    chunks = list(s)
    return [c.token for c in chunks if c.token is not None], "".join(c.text for c in chunks), s.stats


def test_generation_on_device_equals_cpu(byte_llama):
    from cyb_llm.text.sampling import SamplingParams

    cpu, gpu = _models(byte_llama)
    assert gpu.device_sampling and not cpu.device_sampling
    for sp in (SamplingParams.greedy(), SamplingParams(temperature=0.9, top_k=50, top_p=0.95, seed=11),
               SamplingParams(temperature=1.2, min_p=0.02, seed=5)):
        a_ids, a_text, a_st = _run(cpu, "Once upon", sp)
        b_ids, b_text, b_st = _run(gpu, "Once upon", sp)
        assert a_st.sampled_on == "host" and b_st.sampled_on == "device"
        assert b_ids == a_ids and b_text == a_text, sp
        assert len(a_ids) >= 10
    recs = [r for r in gpu.dispatch_records if r["op"] == "sample"]
    assert recs and all(r["backend"] == "wgpu+rs" and not r["fallback"] for r in recs)
    assert sum(r["count"] for r in recs) >= 30  # one draw per generated token, on the GPU
    assert_ran_on(gpu, "wgpu+rs", "device sampling")


def test_json_schema_on_device_equals_cpu(byte_llama):
    from cyb_llm.text.sampling import SamplingParams
    from cyb_llm.text.structured import constraint_of

    cpu, gpu = _models(byte_llama)
    rf = {"type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                         "age": {"type": "integer"}}, "required": ["name", "age"]}}}
    for sp in (SamplingParams.greedy(), SamplingParams(temperature=0.8, top_k=40, seed=3),
               SamplingParams(temperature=1.0, top_p=0.9, seed=4)):
        a = _run(cpu, "A person:", sp, constraint=constraint_of(cpu, response_format=rf))
        b = _run(gpu, "A person:", sp, constraint=constraint_of(gpu, response_format=rf))
        assert b[2].sampled_on == "device"
        assert b[0] == a[0] and b[1] == a[1], (sp, a[1], b[1])
        assert a[1].startswith("{")
    assert_ran_on(gpu, "wgpu+rs", "structured output on the device")


def test_host_fallbacks_give_the_same_text(byte_llama):
    from cyb_llm.text.generate import Generator
    from cyb_llm.text.sampling import SamplingParams

    cpu, gpu = _models(byte_llama)
    cases = [(SamplingParams(temperature=0.8, seed=1, logit_bias={65: 3.0}), {}),
             (SamplingParams(temperature=0.8, seed=2, repetition_penalty=1.3), {}),
             (SamplingParams(temperature=0.8, seed=3), {"logprobs": True})]
    for sp, kw in cases:
        a = _run(cpu, "Hello", sp, **kw)
        b = _run(gpu, "Hello", sp, **kw)
        assert b[2].sampled_on == "host", (sp, kw)
        assert b[0] == a[0]
    forced = _run(gpu, "Hello", SamplingParams(temperature=0.8, seed=9), gen=Generator(gpu, device_sampling=False))
    assert forced[2].sampled_on == "host"
    assert forced[0] == _run(gpu, "Hello", SamplingParams(temperature=0.8, seed=9))[0]


def test_forward_sample_refused_where_the_backend_cannot(byte_llama):
    cpu, _ = _models(byte_llama)
    conv = cpu.new_conversation(32)
    with pytest.raises(InvalidConfig) as e:
        _core.forward_sample(cpu._native, conv._native, [1, 2, 3], _core.Sampler(temperature=0.0))
    assert e.value.field == "backend" and conv.position == 0


def test_device_token_needs_a_device_draw(byte_llama):
    _, gpu = _models(byte_llama)
    conv = gpu.new_conversation(32)
    s = _core.Sampler(temperature=0.0)
    with pytest.raises(InvalidConfig) as e:
        _core.forward_sample(gpu._native, conv._native, None, s)
    assert e.value.field == "ids"
    t = _core.forward_sample(gpu._native, conv._native, [1, 2, 3], s)
    assert t == int(np.argmax(gpu.new_conversation(32).forward([1, 2, 3])))
    conv.forward([t])  # a host forward: the device token is gone
    with pytest.raises(InvalidConfig):
        _core.forward_sample(gpu._native, conv._native, None, s)


@pytest.mark.parametrize("cfg", [dict(temperature=0.0), dict(temperature=0.9, top_k=50, top_p=0.95),
                                 dict(temperature=1.0, top_k=1)])
def test_submitted_steps_draw_what_serial_steps_draw(byte_llama, cfg):
    """forward_sample_submit / forward_sample_take with the next step submitted before the last
    draw is read (chained: the kernel picks the uniform the host stream would have given it) draw
    the tokens of serial forward_sample calls with the same seed, and leave the same position."""
    _, gpu = _models(byte_llama)
    serial, conv = [], gpu.new_conversation(64)
    s = _core.Sampler(seed=5, **cfg)
    serial.append(_core.forward_sample(gpu._native, conv._native, [1, 2, 3], s))
    for _ in range(20):
        serial.append(_core.forward_sample(gpu._native, conv._native, None, s))
    c2, s2 = gpu.new_conversation(64), _core.Sampler(seed=5, **cfg)
    _core.forward_sample_submit(gpu._native, c2._native, [1, 2, 3], s2)
    got = []
    for _ in range(20):
        _core.forward_sample_submit(gpu._native, c2._native, None, s2)  # before the draw it embeds is read
        assert _core.pending_draws(c2._native) == 2
        got.append(_core.forward_sample_take(gpu._native, c2._native, s2))
    got.append(_core.forward_sample_take(gpu._native, c2._native, s2))
    assert got == serial and c2.position == conv.position == 23


def test_submitted_steps_misuse_and_roll_back(byte_llama):
    _, gpu = _models(byte_llama)
    s = _core.Sampler(temperature=0.0)
    conv = gpu.new_conversation(64)
    with pytest.raises(InvalidConfig) as e:
        _core.forward_sample_take(gpu._native, conv._native, s)
    assert e.value.field == "conversation"
    _core.forward_sample_submit(gpu._native, conv._native, [1, 2, 3], s)
    _core.forward_sample_submit(gpu._native, conv._native, None, s)
    with pytest.raises(InvalidConfig) as e:  # a third before a take
        _core.forward_sample_submit(gpu._native, conv._native, None, s)
    assert e.value.field == "conversation"
    with pytest.raises(InvalidConfig):  # the serial call while draws are pending
        _core.forward_sample(gpu._native, conv._native, None, s)
    first = _core.forward_sample_take(gpu._native, conv._native, s)
    assert conv.position == 4
    conv.truncate(3)  # drops the step forwarding `first` and its pending draw
    assert _core.pending_draws(conv._native) == 0 and conv.position == 3
    with pytest.raises(InvalidConfig) as e:  # nothing of this conversation is on the device now
        _core.forward_sample(gpu._native, conv._native, None, s)
    assert e.value.field == "ids"
    again = _core.forward_sample(gpu._native, conv._native, [first], s)  # the stale draw is discarded first
    ref = gpu.new_conversation(64)
    ref.forward([1, 2, 3])
    assert again == int(np.argmax(ref.forward([first]))) and conv.position == 4


def test_closed_or_stopped_streams_leave_the_serial_position(byte_llama):
    """The overlapped loop submits steps ahead; a consumer closing the stream after k tokens, and
    a stop string, leave the conversation holding what the serial loop would have forwarded (the
    prompt and every yielded token but the last), and the next generation reuses that cache."""
    from cyb_llm.text.generate import Generator
    from cyb_llm.text.sampling import SamplingParams

    cpu, gpu = _models(byte_llama)
    positions = {}
    for model in (gpu, cpu):
        gen = Generator(model)
        s = gen.generate("Once upon", max_tokens=30, sampling=SamplingParams(temperature=0.9, seed=2))
        got = []
        for c in s:
            got.append(c.token)
            if len(got) == 5:
                break
        s.close()
        positions[model is gpu] = (gen._own_conversation.position, len(s.prompt_ids), got)
    assert positions[True] == positions[False]
    pos, prompt, _ = positions[True]
    assert pos == prompt + 4
    text = _run(gpu, "Once upon", SamplingParams.greedy())[1]
    stop = text[6:9]
    a = _run(cpu, "Once upon", SamplingParams.greedy(), stop=[stop])
    b = _run(gpu, "Once upon", SamplingParams.greedy(), stop=[stop])
    assert a[:2] == b[:2] and b[2].sampled_on == "device" and len(b[1]) < len(text)
    # the next request through the same generator reuses a consistent cache
    g1 = Generator(gpu)
    _run(gpu, "Once upon", SamplingParams.greedy(), gen=g1, stop=[stop])
    reused = _run(gpu, "Once upon", SamplingParams.greedy(), gen=g1)
    assert reused[2].cached_tokens > 0
    assert reused[:2] == _run(gpu, "Once upon", SamplingParams.greedy())[:2]


def test_threads_overlap_their_steps(byte_llama):
    """Generations on two threads (own conversations, one model): each thread's wait for its step
    holds no lock (the other records and submits meanwhile) and each draws what it draws alone."""
    from cyb_llm.text.generate import Generator
    from cyb_llm.text.sampling import SamplingParams

    _, gpu = _models(byte_llama)
    cases = [("Once upon", SamplingParams(temperature=0.9, top_k=50, seed=11)), ("Hello", SamplingParams.greedy()),
             ("A person:", SamplingParams(temperature=1.1, min_p=0.02, seed=4))]
    alone = [_run(gpu, p, sp)[:2] for p, sp in cases]
    got: list = [None] * len(cases)
    barrier = threading.Barrier(len(cases))

    def one(i):
        gen = Generator(gpu)
        barrier.wait()
        got[i] = _run(gpu, cases[i][0], cases[i][1], gen=gen)[:2]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == alone


def test_server_slots_draw_on_the_device(byte_llama):
    """`cyb-llm serve` on wgpu+rs with 3 slots: concurrent completions (greedy, seeded sampling, a
    JSON schema) draw every batched decode step's tokens on the device (forward_batch_sample, the
    grammar's mask uploaded and applied there) and answer what the same server on the CPU backend
    answers."""
    import httpx
    from test_serve import serving_app

    from cyb_llm.serve import create_app

    cpu, gpu = _models(byte_llama)
    rf = {"type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                         "age": {"type": "integer"}}, "required": ["name", "age"]}}}
    bodies = [{"model": "m", "prompt": "Once upon", "max_tokens": 24, "temperature": 0},
              {"model": "m", "prompt": "Hello", "max_tokens": 24, "temperature": 0.9, "top_k": 50, "seed": 11},
              {"model": "m", "prompt": "A person:", "max_tokens": 40, "temperature": 0.8, "seed": 3,
               "response_format": rf}]

    def serve(model):
        app = create_app({"m": model}, parallel=3, ctx=128)
        # the three requests decode in the same steps whatever the timing (Batcher.hold), so
        # that each step's rows carry three different samplers
        app.state.engines["m"].batcher.hold(len(bodies))
        got: list = [None] * len(bodies)

        def one(i: int) -> None:
            got[i] = httpx.post(f"{url}/v1/completions", json=bodies[i], timeout=180).json()

        with serving_app(app) as url:
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(240)
        assert all("choices" in g for g in got), got
        return [g["choices"][0]["text"] for g in got], app.state.engines["m"].batcher

    want, host = serve(cpu)
    got, dev = serve(gpu)
    assert got == want
    assert host.device_rows == 0 and dev.device_rows == dev.rows > 0
    assert dev.rows > dev.steps  # the slots' rows were drawn together, each with its own sampler
    assert got[2].startswith("{") and got[2] != got[1]  # the schema constrained the third
    assert_ran_on(gpu, "wgpu+rs", "the server's device draws")
