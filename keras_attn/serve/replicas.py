"""Copies of the engine that decode batches, one batch each at a time:
:class:`InProcessReplicas` (``--replicas 1``) or :class:`ProcessReplicas` (worker
processes, a dead one replaced). Both have ``size`` (batches decoded at once), ``async
translate(texts, options, confidence)`` and ``close()``.

Example:
    >>> replicas = ProcessReplicas(locate("exported"), size=2, threads=1)
    >>> await replicas.translate(["3 March 2021"], DecodingOptions())
"""
import asyncio
import concurrent.futures
import multiprocessing
from concurrent.futures.process import BrokenProcessPool
import os
import signal
import threading
import time

from keras_attn.serve import engines
from keras_attn.serve.api import check_int

_ENGINE = None  # the engine of a worker process (ProcessReplicas)


class InProcessReplicas:
    """One engine (or anything with ``translate(texts, options, confidence)``) in this
    process, called from a worker thread.

    Example:
        >>> await InProcessReplicas(engine).translate(["3 March 2021"], DecodingOptions())
    """

    size = 1

    def __init__(self, engine):
        self.engine = engine
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine")

    async def translate(self, texts, options, confidence=True):
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, self._call, texts, options, confidence)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _call(self, *args):
        return self.engine.translate(*args)


def _init_worker(artefact, threads, xla=False):
    """A worker process's start: signals left to the parent (it finishes the requests in
    flight, then closes the pool); the engine loaded and run once."""
    global _ENGINE
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] not in ("", "0"):
        for name in engines.ENGINES[artefact.engine].quiet_imports:
            _import_quietly(name)  # its load-time C++ lines ignore the log level
    _ENGINE = engines.load_engine(artefact, threads, xla)
    engines.warm_up(_ENGINE)


def _exit_with_parent(parent, every=1.0):
    """End this worker when its parent is gone (killed before it could close the pool:
    the worker ignores SIGTERM and would otherwise live on, holding a model in memory)."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(0)


def _import_quietly(name):
    """Import ``name`` with file descriptor 2 on /dev/null (a failure still raises)."""
    import importlib

    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        importlib.import_module(name)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _translate(texts, options, confidence):
    return _ENGINE.translate(texts, options, confidence)


class ReplicaLost(Exception):
    """A worker process stopped (killed, out of memory) while it decoded this batch; it is
    being replaced (the server answers 503 with ``retry_after``)."""

    def __init__(self, pid, retry_after=5):
        super().__init__(f"the replica process {pid} decoding this request stopped; another "
                         "is starting: retry")
        self.retry_after = retry_after


class ProcessReplicas:
    """``size`` worker processes (``spawn``), each with its own engine, each in a pool of
    its own: a worker that dies fails only the batch it held, and another is started in its
    place (the others keep decoding).

    Args:
        artefact: a :class:`~keras_attn.serve.locate.Artefact`.
        size: worker processes. threads: intra-op threads of each (0: the engine's default).
        xla: as :func:`~keras_attn.serve.engines.load_engine`'s.
        log: called with a line when a worker is replaced.

    Attributes:
        pids: the workers' process ids, once started. replaced: workers replaced so far.
    """

    def __init__(self, artefact, size, threads=1, xla=False, log=print):
        self.size = check_int("replicas", size, 1)
        self.pids = []
        self.replaced = 0
        self._initargs = (artefact, threads, xla)
        self._log = log
        self._workers = [self._new_worker() for _ in range(size)]
        self._idle = None  # asyncio.Queue of the workers without a batch (made in the loop)
        self._replacing = set()

    def _new_worker(self):
        return concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
            initargs=self._initargs)

    def start(self):
        """Start every worker and wait until each has loaded its engine (a worker answers
        only once its initializer has run); their process ids."""
        self.pids = [worker.submit(os.getpid).result() for worker in self._workers]
        return list(self.pids)

    async def translate(self, texts, options, confidence=True):
        if self._idle is None:
            self._idle = asyncio.Queue()
            for worker in self._workers:
                self._idle.put_nowait(worker)
        while True:
            worker = await self._idle.get()
            try:  # a worker that died while idle refuses at once: the batch goes to another
                future = worker.submit(_translate, texts, options, confidence)
            except BrokenProcessPool:
                self._replace(worker, "holding no batch")
                continue
            break
        try:
            result = await asyncio.wrap_future(future)
        except BrokenProcessPool:
            pid = self._replace(worker, f"while decoding a batch of {len(texts)} texts")
            raise ReplicaLost(pid) from None
        self._idle.put_nowait(worker)
        return result

    def _replace(self, worker, held):
        """Start a worker in the place of ``worker`` (dead) in the background; its pid.
        ``held``: what it held, for the log."""
        index = self._workers.index(worker)
        pid = self.pids[index] if index < len(self.pids) else None
        if worker not in self._replacing:
            self._replacing.add(worker)
            self._log(f"replica process {pid} stopped {held}; starting another in its place")
            asyncio.get_running_loop().create_task(self._restart(worker, index))
        return pid

    async def _restart(self, dead, index, pause=5.0):
        dead.shutdown(wait=False, cancel_futures=True)
        while True:
            worker = self._new_worker()
            try:
                pid = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: worker.submit(os.getpid).result())
            except BrokenProcessPool as e:
                self._log(f"a new replica process failed to start ({e}); trying again")
                worker.shutdown(wait=False, cancel_futures=True)
                await asyncio.sleep(pause)
                continue
            break
        self._workers[index] = worker
        if index < len(self.pids):
            self.pids[index] = pid
        self.replaced += 1
        self._replacing.discard(dead)
        self._log(f"replica process {pid} ready (replacing process {index + 1} of "
                  f"{self.size})")
        self._idle.put_nowait(worker)

    def close(self):
        for worker in self._workers:
            worker.shutdown(wait=True, cancel_futures=True)
