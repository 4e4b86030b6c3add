"""Slots and scheduling of the server (no web framework here; app.py drives it).

Per text model: `parallel` slots, each owning a Conversation (its KV cache over
the model's shared weights) and a Generator, and one worker thread. A request
takes a free slot (the one whose cached tokens are the longest prefix of its
prompt, so a follow-up turn of a chat skips the prefill of what it repeats) or
waits in a bounded queue; its work is an iterator of OpenAI chunk dicts
(cyb_llm.generate) that the worker thread advances one step at a time, taking
the active requests in turn. So a model runs one forward at a time (its thread
pool runs one job at a time anyway) and the streams of all slots progress
together, one token each per round. The native forward releases the GIL, so
the event loop keeps serving while a forward runs.

Results go back to the event loop through `loop.call_soon_threadsafe`; a
cancelled request (client gone, timeout) is closed by the worker before its
next step, which frees the slot.
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Iterator

from ..generate import Generator

#: What a job's queue receives after its last item.
DONE = object()


class QueueFull(Exception):
    """Every slot is busy and the queue is at its limit."""


class QueueTimeout(Exception):
    """The request waited for a slot past its deadline."""


class Slot:
    def __init__(self, index: int, conversation: Any, generator: Generator):
        self.index = index
        self.conversation = conversation
        self.generator = generator
        self.busy = False
        self.last_used = 0.0

    def prefix_len(self, ids: list[int]) -> int:
        """Prompt tokens this slot's KV cache already holds (generate.py reuses them only when the
        whole cache is a prefix of the prompt, shorter than it)."""
        cache = getattr(self.conversation, "_cyb_cache_tokens", None)
        if cache and len(cache) < len(ids) and ids[:len(cache)] == cache:
            return len(cache)
        return 0


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
        self.slots = [Slot(i, model.new_conversation(ctx), Generator(model)) for i in range(parallel)]
        self.ctx = self.slots[0].conversation.max_context
        self._waiters: collections.deque[tuple[asyncio.Future, list[int]]] = collections.deque()
        self._jobs: list[Job] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=f"cyb-serve-{model_id}", daemon=True)
        self._thread.start()

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

    # --- work (the worker thread) --------------------------------------------
    def submit(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

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

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stop:
                    self._cond.wait()
                if self._stop and not self._jobs:
                    return
                jobs = list(self._jobs)
            for job in jobs:  # one step of every active request per round
                if job.cancelled or self._stop:
                    self._end(job, asyncio.CancelledError())
                    continue
                if job.deadline is not None and time.monotonic() > job.deadline:
                    self._end(job, RequestTimeout())
                    continue
                try:
                    item = next(job.it)
                except StopIteration:
                    self._end(job, DONE)
                except BaseException as e:  # noqa: BLE001 - handed to the request, which answers it
                    self._end(job, e)
                else:
                    job.put(item)

    def close(self, timeout: float | None = 5.0) -> None:
        """Cancels what runs and stops the worker thread."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)


class EncoderEngine:
    """An encoder model: one call at a time (its thread pool runs one job at a time)."""

    def __init__(self, model_id: str, model: Any):
        self.model_id = model_id
        self.model = model
        self.lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self.lock:
            return fn()


__all__ = ["TextEngine", "EncoderEngine", "Slot", "Job", "DONE", "QueueFull", "QueueTimeout", "RequestTimeout"]
