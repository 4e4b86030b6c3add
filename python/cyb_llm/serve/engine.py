"""Slots and scheduling of the server (no web framework here; app.py drives it).

Per text model: `parallel` slots, each owning a Conversation (its KV cache over
the model's shared weights) and a Generator. A request takes a free slot (the
one whose cached tokens share the longest prefix with its prompt, so a follow-up
turn of a chat skips the prefill of what it repeats) or waits in a bounded
queue; its work is an iterator of OpenAI chunk dicts (cyb_llm.text.generate) that a
thread of its own advances. The slots' one-token decode forwards meet in a
Batcher, which runs them as one `Model.forward_batch` step (the weights are read
once per step for all active slots; attention per slot over its own cache);
prompt prefills run alone in chunks of PREFILL_CHUNK tokens, with the waiting
slots' decode steps between the chunks. So a model runs one forward at a time
and the streams of all slots progress together. Native forwards release the
GIL, so the event loop keeps serving while one runs.

Results go back to the event loop through `loop.call_soon_threadsafe`; a
cancelled request (client gone, timeout) is stopped by its thread before its
next step, which frees the slot.
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Iterator

from .. import _core
from ..ids import common_prefix

#: Tokens per chunk of a prompt's prefill in the server (between chunks, the other slots decode).
PREFILL_CHUNK = 64

#: What a job's queue receives after its last item.
DONE = object()


class QueueFull(Exception):
    """Every slot is busy and the queue is at its limit."""


class QueueTimeout(Exception):
    """The request waited for a slot past its deadline."""


class Batcher:
    """Runs the one-token forwards of a model's slots together: a thread's step waits until every
    active request thread is waiting too (or `window` seconds passed since the first one came),
    then one of them runs `model.forward_batch` for all waiting conversations and hands each its
    row. Longer forwards (prompt prefills) run alone, between batched steps."""

    def __init__(self, model: Any, window: float = 0.002):
        self.model = model
        self.window = window
        self._cond = threading.Condition()
        self._pending: list[dict] = []
        self._busy = False   # a forward (batched or alone) is running
        self.active = 0      # request threads inside a request
        self.steps = 0       # batched steps run, and the rows they held (for /metrics and tests)
        self.rows = 0
        self.device_rows = 0  # rows whose token was drawn on the device (forward_batch_sample)
        self._holding = False  # the test hook hold(): steps wait for every active thread, no window
        self._hold_need = 0.0  # request threads still to enter before a held step may run
        self._paused = False   # the test hook pause(): no forward at all

    def hold(self, requests: int | None = None) -> None:
        """Test hook (no server option sets it): from now on a step runs only once `requests`
        request threads have entered since this call (None: not until release()) and every active
        request thread waits on a step; no time window. Prefills run meanwhile (they do not wait for
        the held steps). So that many concurrent requests decode in the same steps whatever the
        timing, and a test can stop the decoding at a known point."""
        with self._cond:
            self._holding = True
            self._hold_need = float("inf") if requests is None else float(requests)
            self._cond.notify_all()

    def pause(self) -> None:
        """Test hook (no server option sets it): no forward runs, prefill or step, until release()."""
        with self._cond:
            self._paused = True

    def release(self) -> None:
        """Ends hold() and pause(): back to the time window."""
        with self._cond:
            self._holding = self._paused = False
            self._cond.notify_all()

    def _ready(self, first: float) -> bool:
        if self._paused:
            return False
        if self._holding:
            return self._hold_need <= 0 and len(self._pending) >= self.active
        return len(self._pending) >= self.active or time.monotonic() - first >= self.window

    def enter(self) -> None:
        with self._cond:
            self.active += 1
            if self._holding:
                self._hold_need -= 1

    def leave(self) -> None:
        with self._cond:
            self.active -= 1
            self._cond.notify_all()

    def step(self, conv: Any, token: int, sampler: Any = None, allowed: Any = None) -> Any:
        """The logits of conv's next position after `token`; with a sampler: the next token, drawn
        on the device when every conversation of the step draws there (forward_batch_sample: the
        logits never leave the GPU), else by the sampler on the host from the step's logits."""
        entry = {"conv": conv, "token": token, "sampler": sampler, "allowed": allowed,
                 "done": False, "out": None, "err": None}
        with self._cond:
            self._pending.append(entry)
            self._cond.notify_all()
            first = time.monotonic()
            while not entry["done"]:
                if not self._busy and self._pending and self._ready(first):
                    batch, self._pending = self._pending, []
                    self._busy = True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._busy = False
                        self._cond.notify_all()
                else:
                    self._cond.wait(self.window)
        if entry["err"] is not None:
            raise entry["err"]
        return entry["out"]

    def _run(self, batch: list[dict]) -> None:
        convs, tokens = [e["conv"] for e in batch], [e["token"] for e in batch]
        try:
            if all(e["sampler"] is not None for e in batch):
                out = _core.forward_batch_sample(self.model._native, [c._native for c in convs], tokens,
                                                 [e["sampler"] for e in batch], [e["allowed"] for e in batch])
                self.device_rows += len(batch)
            else:
                logits = self.model.forward_batch(convs, tokens)
                out = [logits[i] if e["sampler"] is None else e["sampler"].sample(logits[i], allowed=e["allowed"])
                       for i, e in enumerate(batch)]
        except BaseException as err:  # noqa: BLE001 - every request of the step gets it
            for e in batch:
                e["err"], e["done"] = err, True
            return
        self.steps += 1
        self.rows += len(batch)
        for i, e in enumerate(batch):
            e["out"], e["done"] = out[i], True

    def alone(self, fn: Callable[[], Any]) -> Any:
        """Runs fn (a longer forward) when no other forward runs and no decode step is waiting (the
        waiting slots' step goes first: a prefill in chunks lets the other streams advance between
        its chunks)."""
        with self._cond:
            while self._paused or self._busy or (self._pending and not self._holding):
                self._cond.wait(self.window)
            self._busy = True
        try:
            return fn()
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


class BatchedConversation:
    """A slot's Conversation whose one-token forwards go through the model's Batcher (the
    Generator decodes through it unchanged); everything else is the conversation's own."""

    def __init__(self, conversation: Any, batcher: Batcher):
        self.conversation = conversation
        self.batcher = batcher

    @property
    def position(self) -> int:
        return self.conversation.position

    @property
    def max_context(self) -> int:
        return self.conversation.max_context

    def forward(self, ids: Any, all_logits: bool = False) -> Any:
        if not all_logits and len(ids) == 1:
            return self.batcher.step(self.conversation, int(ids[0]))
        if all_logits:
            return self.batcher.alone(lambda: self.conversation.forward(ids, True))
        # a prompt's prefill in chunks of PREFILL_CHUNK tokens, the other slots' decode steps between them
        out = None
        for i in range(0, len(ids), PREFILL_CHUNK):
            out = self.batcher.alone(lambda c=ids[i:i + PREFILL_CHUNK]: self.conversation.forward(c))
        return out

    def forward_sample(self, ids: Any, sampler: Any, allowed: Any = None) -> int:
        """forward(ids), then the next token drawn by `sampler` (on the device: the Generator calls
        this when the model samples there, cyb_llm.text.generate); one-token steps go through the Batcher."""
        if len(ids) == 1:
            return self.batcher.step(self.conversation, int(ids[0]), sampler, allowed)
        for i in range(0, len(ids) - PREFILL_CHUNK, PREFILL_CHUNK):  # every chunk but the last
            self.batcher.alone(lambda c=ids[i:i + PREFILL_CHUNK]: self.conversation.forward(c))
        last = ids[(len(ids) - 1) // PREFILL_CHUNK * PREFILL_CHUNK:]
        return self.batcher.alone(lambda: _core.forward_sample(self.batcher.model._native, self.conversation._native,
                                                               last, sampler, allowed))

    def reset_kv_cache(self) -> None:
        self.conversation.reset_kv_cache()

    def truncate(self, position: int) -> None:
        self.conversation.truncate(position)


class Slot:
    def __init__(self, index: int, conversation: Any, generator: Any):
        self.index = index
        self.conversation = conversation
        self.generator = generator
        self.busy = False
        self.last_used = 0.0

    def prefix_len(self, ids: list[int]) -> int:
        """Prompt tokens this slot's KV cache already holds: the common prefix of its cached tokens
        and the prompt (text/generate.py keeps that much and drops the rest)."""
        return common_prefix(getattr(self.conversation, "_cyb_cache_tokens", None), ids)


class Job:
    """One request's run on a slot: `it` is advanced by the worker thread; its items, then DONE
    or the exception that ended it, arrive on `queue` (in the event loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, slot: Slot, it: Iterator[Any], deadline: float | None):
        self.loop = loop
        self.slot = slot
        self.it = it
        self.deadline = deadline
        self.queue: asyncio.Queue = asyncio.Queue()
        self.cancelled = False
        self.finished = threading.Event()

    def cancel(self) -> None:
        self.cancelled = True

    def put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed (shutdown): nobody is listening
            pass


class RequestTimeout(Exception):
    """The request ran past the server's request timeout."""


class TextEngine:
    """The slots and the worker thread of one text model."""

    def __init__(self, model_id: str, model: Any, parallel: int = 1, ctx: int | None = None,
                 max_queue: int = 16, on_tokens: Callable[[str, dict], None] | None = None):
        self.model_id = model_id
        self.model = model
        self.max_queue = max_queue
        self.batcher = Batcher(model)
        self.slots = [Slot(i, BatchedConversation(model.new_conversation(ctx), self.batcher), model.generator())
                      for i in range(parallel)]
        self.ctx = self.slots[0].conversation.max_context
        self._waiters: collections.deque[tuple[asyncio.Future, list[int]]] = collections.deque()
        self._jobs: list[Job] = []
        self._threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._stop = False

    # --- slots (event loop thread only) ------------------------------------
    @property
    def queue_length(self) -> int:
        return sum(1 for f, _ in self._waiters if not f.done())

    @property
    def active_slots(self) -> int:
        return sum(s.busy for s in self.slots)

    def _pick(self, ids: list[int]) -> Slot | None:
        free = [s for s in self.slots if not s.busy]
        if not free:
            return None
        return max(free, key=lambda s: (s.prefix_len(ids), -s.last_used))

    async def acquire(self, ids: list[int], deadline: float | None = None) -> Slot:
        """A free slot for a prompt of `ids`; waits in the queue when none is free. QueueFull when
        the queue is at its limit, QueueTimeout past the deadline."""
        slot = self._pick(ids) if self.queue_length == 0 else None  # no overtaking the queue
        if slot is not None:
            slot.busy = True
            return slot
        if self.queue_length >= self.max_queue:
            raise QueueFull()
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, ids))
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # given a slot just as it gave up
            else:
                fut.cancel()
            if isinstance(e, asyncio.TimeoutError):
                raise QueueTimeout() from None
            raise

    def release(self, slot: Slot) -> None:
        slot.busy = False
        slot.last_used = time.monotonic()
        while self._waiters:
            fut, ids = self._waiters.popleft()
            if fut.done():
                continue
            slot.busy = True
            fut.set_result(slot)
            return

    # --- work (one thread per request) ----------------------------------------
    def submit(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._threads = [t for t in self._threads if t.is_alive()]
            t = threading.Thread(target=self._run, args=(job,), name=f"cyb-serve-{self.model_id}-{job.slot.index}",
                                 daemon=True)
            self._threads.append(t)
        self.batcher.enter()
        t.start()

    def _end(self, job: Job, final: Any) -> None:
        with self._cond:
            self._jobs.remove(job)
        try:
            job.it.close()  # a generator: closing it closes the Stream (its KV cache stays in the slot)
        except Exception:
            pass
        job.put(final)
        job.finished.set()
        try:
            job.loop.call_soon_threadsafe(self.release, job.slot)
        except RuntimeError:
            pass

    def _run(self, job: Job) -> None:
        """Advances one request until it ends; its decode steps batch with the other slots'."""
        try:
            while True:
                if job.cancelled or self._stop:
                    self._end(job, asyncio.CancelledError())
                    return
                if job.deadline is not None and time.monotonic() > job.deadline:
                    self._end(job, RequestTimeout())
                    return
                try:
                    item = next(job.it)
                except StopIteration:
                    self._end(job, DONE)
                    return
                except BaseException as e:  # noqa: BLE001 - handed to the request, which answers it
                    self._end(job, e)
                    return
                job.put(item)
        finally:
            self.batcher.leave()

    def close(self, timeout: float | None = 5.0) -> None:
        """Cancels what runs and waits for the request threads."""
        with self._cond:
            self._stop = True
            threads = list(self._threads)
        end = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if end is None else max(0.0, end - time.monotonic()))


class EncoderEngine:
    """An encoder model: one call at a time (its thread pool runs one job at a time). The slot
    options of text models (parallel, ctx, max_queue) do not apply."""

    def __init__(self, model_id: str, model: Any, **_slot_options: Any):
        self.model_id = model_id
        self.model = model
        self.lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self.lock:
            return fn()


class AudioEngine(EncoderEngine):
    """A speech model (whisper): one transcription at a time, like an encoder."""


class SpeechEngine(EncoderEngine):
    """A text-to-speech model: one sentence at a time (a streamed request takes the lock per
    sentence, so that concurrent requests interleave by sentence)."""


class ImageEngine(EncoderEngine):
    """A diffusion model: one image at a time (a request for n images takes the lock per image)."""


__all__ = ["TextEngine", "EncoderEngine", "AudioEngine", "SpeechEngine", "ImageEngine", "Slot", "Job", "DONE", "QueueFull", "QueueTimeout", "RequestTimeout"]
