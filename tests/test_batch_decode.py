"""Batched decode (Model.forward_batch): one step of several conversations, each at its own
position, equals each conversation's own one-token forward (docs/runtime.md "Tolerances":
bulk-vs-token in precise mode, bulk-vs-token-fast/smollm2 in the fast mode), on the cpu and
on wgpu+rs; the rows' positions, caches and argmax are each conversation's own."""
from __future__ import annotations

import numpy as np
import pytest

import cyb_llm
from cyb_llm import errors
from placement import wgpu_skip_reason
from tolerances import tolerance

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16], [20]]


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def path(real_model):
    return real_model("smollm2")


def check_batched_equals_one_by_one(m, key, prompts, steps=4):
    batch = [m.new_conversation(64) for _ in prompts]
    alone = [m.new_conversation(64) for _ in prompts]
    for b, a, p in zip(batch, alone, prompts):
        b.forward(p)
        a.forward(p)
    toks = [100 + 50 * i for i in range(len(prompts))]
    for _ in range(steps):
        got = m.forward_batch(batch, toks)
        assert got.shape == (len(prompts), m.vocab_size)
        want = np.stack([a.forward([t]) for a, t in zip(alone, toks)])
        err, tol = rel_err(got, want), tolerance(key)
        assert err <= tol, f"{key}: batched vs one by one {err:.2e} > {tol}"
        assert (got.argmax(-1) == want.argmax(-1)).all()
        toks = [int(i) for i in got.argmax(-1)]
    assert [c.position for c in batch] == [len(p) + steps for p in prompts]


@pytest.mark.parametrize("precise", [True, False], ids=["precise", "fast"])
def test_batched_step_equals_one_by_one_cpu(path, precise):
    m = cyb_llm.load(path, backend="cpu", precise=precise)
    check_batched_equals_one_by_one(m, "bulk-vs-token" if precise else "bulk-vs-token-fast/smollm2", PROMPTS)


def test_batched_step_equals_one_by_one_wgpu(tmp_path_factory):
    """On wgpu+rs (a tiny random qwen2: lavapipe is slow), every op on the device: the per-row
    rope / KV write / attention take row views of the step's activations."""
    if wgpu_skip_reason():
        pytest.skip(wgpu_skip_reason())
    import test_families_tiny as F

    _, tiny = F._build("qwen2", tmp_path_factory)
    m = cyb_llm.load(tiny, backend="wgpu+rs", precise=True)
    check_batched_equals_one_by_one(m, "bulk-vs-token", PROMPTS, steps=3)
    ran = {r["backend"] for r in m.dispatch_records}
    assert ran == {"wgpu+rs"}, f"ops ran on {ran}"


def test_batch_errors_leave_every_conversation_where_it_was(path):
    m = cyb_llm.load(path, backend="cpu")
    a, b = m.new_conversation(8), m.new_conversation(4)
    a.forward([1, 2])
    b.forward([1, 2, 3, 4])  # full
    with pytest.raises(errors.InvalidConfig):
        m.forward_batch([a, a], [5, 6])
    with pytest.raises(errors.ShapeMismatch):
        m.forward_batch([a, b], [5])
    with pytest.raises(errors.ShapeMismatch):
        m.forward_batch([a, b], [5, 6])  # b has no room left
    with pytest.raises(errors.InvalidConfig):
        m.forward_batch([a], [m.vocab_size])
    with pytest.raises(errors.InvalidConfig):
        m.forward_batch([a, cyb_llm.load(path, backend="cpu").new_conversation(8)], [5, 6])
    assert (a.position, b.position) == (2, 4)
    assert m.forward_batch([a], [5]).shape == (1, m.vocab_size) and a.position == 3


def test_truncate_keeps_the_prefix(path):
    m = cyb_llm.load(path, backend="cpu", precise=True)
    c = m.new_conversation(32)
    c.forward([1, 2, 3, 4, 5])
    c.truncate(3)
    assert c.position == 3
    after = c.forward([9])
    fresh = m.new_conversation(32)
    fresh.forward([1, 2, 3])
    np.testing.assert_array_equal(after, fresh.forward([9]))
    with pytest.raises(errors.InvalidConfig):
        c.truncate(5)  # beyond the 4 cached positions
    with pytest.raises(errors.InvalidConfig):
        c.truncate(-1)


def test_server_batcher_runs_the_slots_steps_together(path):
    """cyb_llm.serve.engine.Batcher: three request threads decoding at once meet in batched steps,
    and each thread gets its own conversation's row. The batcher is held (Batcher.hold) until the
    three threads have entered, so every step holds the three rows whatever the timing."""
    import threading

    from cyb_llm.serve.engine import Batcher, BatchedConversation

    m = cyb_llm.load(path, backend="cpu", precise=True)
    batcher = Batcher(m)
    prompts = PROMPTS[:3]
    got: dict[int, list] = {}
    barrier = threading.Barrier(len(prompts))

    def run(i: int) -> None:
        conv = BatchedConversation(m.new_conversation(64), batcher)
        conv.forward(prompts[i])
        barrier.wait()
        rows, tok = [], 100 + i
        for _ in range(5):
            logits = conv.forward([tok])
            rows.append(logits)
            tok = int(np.argmax(logits))
        got[i] = rows

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    batcher.hold(len(prompts))
    for _ in threads:
        batcher.enter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        batcher.leave()
    assert sorted(got) == [0, 1, 2]
    assert (batcher.steps, batcher.rows) == (5, 15), (batcher.steps, batcher.rows)
    for i, p in enumerate(prompts):
        alone = m.new_conversation(64)
        alone.forward(p)
        tok = 100 + i
        for logits in got[i]:
            want = alone.forward([tok])
            assert rel_err(logits, want) <= tolerance("bulk-vs-token")
            tok = int(np.argmax(want))


def test_server_prefill_in_chunks_lets_the_other_slots_decode(path):
    """A 256-token prompt's prefill through the server's BatchedConversation runs in chunks with the
    other slot's decode steps between them (one long forward would hold that slot for all of it); the
    prefill's logits equal a plain bulk prefill's within bulk-vs-token. No timing: each chunk waits
    until the decoder's next step is queued, and the batcher's step count is read at each chunk's
    start and end; a step queued during a chunk must run before the next chunk."""
    import threading
    import time

    from cyb_llm.serve.engine import PREFILL_CHUNK, Batcher, BatchedConversation

    m = cyb_llm.load(path, backend="cpu", precise=True)
    batcher = Batcher(m)
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, m.vocab_size, size=4 * PREFILL_CHUNK)]
    chunks: list[tuple[int, int]] = []  # the batcher's steps at each prefill chunk's start and end
    stepping = threading.Event()
    stop = threading.Event()

    def decoder() -> None:
        conv = BatchedConversation(m.new_conversation(512), batcher)
        conv.forward([1, 2, 3])
        tok = 5
        while not stop.is_set():
            tok = int(np.argmax(conv.forward([tok])))
            stepping.set()

    class Chunked:
        """The prefiller's conversation: each forward (one chunk) waits until a decode step is queued."""

        def __init__(self, conv):
            self.conv = conv

        def __getattr__(self, name):
            return getattr(self.conv, name)

        def forward(self, ids, *a):
            start = batcher.steps
            t0 = time.monotonic()
            while not batcher._pending:  # the guard only stops a hang
                assert time.monotonic() - t0 < 60, "the decoder queued no step during a prefill chunk"
                time.sleep(0.001)
            out = self.conv.forward(ids, *a)
            chunks.append((start, batcher.steps))
            return out

    got = {}

    def prefiller() -> None:
        conv = BatchedConversation(Chunked(m.new_conversation(512)), batcher)
        stepping.wait(120)
        try:
            got["logits"] = conv.forward(prompt)
        finally:
            stop.set()

    threads = [threading.Thread(target=decoder), threading.Thread(target=prefiller)]
    for _ in threads:
        batcher.enter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
        batcher.leave()
    assert len(chunks) == len(prompt) // PREFILL_CHUNK, chunks
    # between one chunk's end and the next one's start, the decode step queued during the chunk ran
    assert all(nxt[0] > cur[1] for cur, nxt in zip(chunks, chunks[1:])), chunks
    want = m.new_conversation(512).forward(prompt)
    assert rel_err(got["logits"], want) <= tolerance("bulk-vs-token")
