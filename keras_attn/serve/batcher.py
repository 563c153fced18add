"""Requests of concurrent clients decoded together (as TF Serving's ``--enable_batching``).

Requests are grouped by options (glossary and passthrough included) and confidence. A free replica takes
whole requests, up to ``max_batch`` texts, of the group whose oldest request came first,
once it holds ``max_batch`` texts or its oldest waited ``wait_ms``. At most ``queue_size``
requests wait (:class:`QueueFull`: 503); one past its ``timeout`` raises
``asyncio.TimeoutError`` (504) and is never decoded if still waiting.

Example:
    >>> batcher = Batcher(InProcessReplicas(engine), max_batch=32, wait_ms=0)
    >>> batcher.start()                                    # inside the running event loop
    >>> await batcher.submit(["3 March 2021"], DecodingOptions(), timeout=30)
    [[{'translation': '2021-03-03', 'score': -0.83}]]
"""
import asyncio
import collections
import contextlib
import dataclasses
import time
from typing import Optional

from keras_attn.serve.api import check_int


class QueueFull(Exception):
    """The queue holds ``queue_size`` requests already (``retry_after``: seconds)."""

    def __init__(self, queue_size, retry_after):
        super().__init__(f"the server's queue is full ({queue_size} requests waiting); "
                         f"retry after {retry_after} s")
        self.retry_after = retry_after


@dataclasses.dataclass
class _Request:
    texts: list
    options: object
    future: asyncio.Future
    arrived: float
    timing: Optional[dict] = None


class Batcher:
    """Groups requests by decoding options and sends batches to free replicas.

    Args:
        replicas: ``InProcessReplicas`` / ``ProcessReplicas`` (``size``, ``translate``).
        max_batch: most texts in one batch.
        wait_ms: longest wait of a request for others to join its batch (milliseconds).
        queue_size: most requests waiting; more raise :class:`QueueFull`.

    Attributes:
        waiting: requests waiting for a replica. in_flight: batches being decoded.
    """

    def __init__(self, replicas, max_batch=32, wait_ms=0.0, queue_size=256):
        self.replicas = replicas
        self.max_batch = check_int("max_batch", max_batch, 1)
        if isinstance(wait_ms, bool) or not isinstance(wait_ms, (int, float)) or wait_ms < 0:
            raise ValueError(f"`batch_wait_ms` must be a number >= 0. Received: "
                             f"batch_wait_ms={wait_ms!r}")
        self.wait = wait_ms / 1000.0
        self.queue_size = check_int("queue_size", queue_size, 1)
        self._groups = collections.OrderedDict()  # (options, confidence) -> deque of _Request
        self.waiting = 0
        self.in_flight = 0
        self._arrived = None  # asyncio.Event: a request came
        self._free = None     # asyncio.Semaphore: replicas without a batch
        self._task = None
        self._batch_tasks = set()
        self._seconds_per_batch = 0.05  # running mean, for Retry-After
        self.on_batch = None  # called with (texts, seconds) after each batch (metrics)

    # --- the clients' side ----------------------------------------------------------------
    def start(self):
        """Start dispatching (call inside the running event loop)."""
        self._arrived = asyncio.Event()
        self._free = asyncio.Semaphore(self.replicas.size)
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self):
        """Stop dispatching once the batches in flight are done (shutdown)."""
        if self._batch_tasks:
            await asyncio.gather(*self._batch_tasks, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def swap(self, replicas):
        """Send the next batches to ``replicas`` (a new version's, of the same ``size``);
        returns once the batches sent to the replicas before are answered (their requests
        are answered by the old replicas, none fails)."""
        if replicas.size != self.replicas.size:
            raise ValueError(f"`replicas` must have the size of the replicas they replace "
                             f"({self.replicas.size}). Received: size={replicas.size}")
        before, old = set(self._batch_tasks), self._free
        self.replicas, self._free = replicas, asyncio.Semaphore(replicas.size)
        if old is not None:
            old.release()  # wakes the dispatcher if it waits for the old replicas' permits
        if before:
            await asyncio.gather(*before, return_exceptions=True)

    def retry_after(self):
        """Seconds until the queue has room again, by the recent batch time (at least 1)."""
        batches = self.waiting / max(self.replicas.size, 1)
        return max(1, int(batches * self._seconds_per_batch + 0.999))

    async def submit(self, texts, options, timeout=None, confidence=True, timing=None,
                     passthrough=None):
        """Per text of ``texts``, its hypotheses, decoded with other clients' requests.
        ``timing``: a dict that receives the seconds waited (``"queue"``) and decoded
        (``"engine"``). ``passthrough``: given, it replaces ``options.passthrough``.

        Raises:
            QueueFull: ``queue_size`` requests are waiting already.
            asyncio.TimeoutError: no answer within ``timeout`` seconds.
            ValueError: the engine refused the options.
        """
        if self.waiting >= self.queue_size:
            raise QueueFull(self.queue_size, self.retry_after())
        future = asyncio.get_running_loop().create_future()
        if passthrough is not None:
            options = dataclasses.replace(options, passthrough=bool(passthrough))
        key = (options, bool(confidence))
        self._groups.setdefault(key, collections.deque()).append(
            _Request(list(texts), options, future, time.monotonic(), timing))
        self.waiting += 1
        self._arrived.set()
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            if future.cancelled() or not future.done():
                self._drop(key, future)

    def _drop(self, key, future):
        """Take a request that timed out out of its group (if it is still waiting)."""
        group = self._groups.get(key, ())
        for request in [r for r in group if r.future is future]:
            group.remove(request)
            self.waiting -= 1
        if key in self._groups and not group:
            del self._groups[key]

    # --- the replicas' side ---------------------------------------------------------------
    async def _dispatch(self):
        while True:
            free = self._free  # the permits of the replicas serving now (swap makes new ones)
            await free.acquire()  # a replica is free: fill it
            while not self._groups:
                self._arrived.clear()
                await self._arrived.wait()
            key = min(self._groups, key=lambda k: self._groups[k][0].arrived)
            await self._wait_for_batch(key)
            if free is not self._free:  # swapped meanwhile: this permit was the old ones'
                free.release()
                continue
            requests = self._take(key)
            if not requests:
                free.release()
                continue
            task = asyncio.get_running_loop().create_task(
                self._run(key, requests, self.replicas, free))
            self._batch_tasks.add(task)
            task.add_done_callback(self._batch_tasks.discard)

    async def _wait_for_batch(self, key):
        """Until the group holds ``max_batch`` texts or its oldest request waited
        ``wait_ms`` (or the group is gone: every request timed out)."""
        while True:
            group = self._groups.get(key)
            if not group or sum(len(r.texts) for r in group) >= self.max_batch:
                return
            left = group[0].arrived + self.wait - time.monotonic()
            if left <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                return

    def _take(self, key):
        """Whole requests of the group, up to ``max_batch`` texts (at least one request)."""
        group = self._groups.get(key)
        taken, count = [], 0
        while group and (not taken or count + len(group[0].texts) <= self.max_batch):
            request = group.popleft()
            self.waiting -= 1
            if request.future.done():  # timed out meanwhile
                continue
            taken.append(request)
            count += len(request.texts)
        if group is not None and not group:
            del self._groups[key]
        return taken

    async def _run(self, key, requests, replicas, free):
        texts = [t for r in requests for t in r.texts]
        self.in_flight += 1
        started = time.monotonic()
        try:
            results = await replicas.translate(texts, *key)
        except Exception as e:  # noqa: BLE001  (every request of the batch gets it)
            for r in requests:
                if not r.future.done():
                    r.future.set_exception(e)
        else:
            i = 0
            for r in requests:
                if not r.future.done():
                    r.future.set_result(results[i: i + len(r.texts)])
                i += len(r.texts)
        finally:
            self.in_flight -= 1
            elapsed = time.monotonic() - started
            for r in requests:
                if r.timing is not None:
                    r.timing.update(queue=started - r.arrived, engine=elapsed)
            self._seconds_per_batch = 0.8 * self._seconds_per_batch + 0.2 * elapsed
            if self.on_batch is not None:
                self.on_batch(len(texts), elapsed)
            free.release()
