"""Copies of the engine that decode batches, one batch each at a time:
:class:`InProcessReplicas` (``--replicas 1``) or :class:`ProcessReplicas` (worker
processes). Both have ``size`` (batches decoded at once) and ``async translate(texts,
options, confidence)``.

Example:
    >>> replicas = ProcessReplicas(locate("exported"), size=2, threads=1)
    >>> await replicas.translate(["3 March 2021"], DecodingOptions())
"""
import asyncio
import concurrent.futures
import multiprocessing
import os
import signal
import threading
import time

from keras_attn.serve import engines
from keras_attn.serve.api import check_int

_ENGINE = None  # the engine of a worker process (ProcessReplicas)


class _Replicas:
    """Calls ``self._call(texts, options, confidence)`` in ``self._pool``."""

    async def translate(self, texts, options, confidence=True):
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, self._call, texts, options, confidence)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


class InProcessReplicas(_Replicas):
    """One engine (or anything with ``translate(texts, options, confidence)``) in this
    process, called from a worker thread.

    Example:
        >>> await InProcessReplicas(engine).translate(["3 March 2021"], DecodingOptions())
    """

    size = 1

    def __init__(self, engine):
        self.engine = engine
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine")

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


def _ready(pause):
    time.sleep(pause)  # holds this worker, so that the other calls find the others
    return os.getpid()


class ProcessReplicas(_Replicas):
    """``size`` worker processes (``spawn``), each with its own engine.

    Args:
        artefact: a :class:`~keras_attn.serve.locate.Artefact`.
        size: worker processes. threads: intra-op threads of each (0: the engine's default).
        xla: as :func:`~keras_attn.serve.engines.load_engine`'s.
    """

    _call = staticmethod(_translate)

    def __init__(self, artefact, size, threads=1, xla=False):
        self.size = check_int("replicas", size, 1)
        self.pids = []  # the workers' process ids, once started
        self._pool = concurrent.futures.ProcessPoolExecutor(
            size, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
            initargs=(artefact, threads, xla))

    def start(self):
        """Start every worker and wait until each has loaded its engine (a worker answers
        only once its initializer has run); their process ids."""
        pids = set()
        while len(pids) < self.size:
            futures = [self._pool.submit(_ready, 0.2) for _ in range(self.size)]
            pids.update(f.result() for f in futures)
        self.pids = sorted(pids)
        return self.pids

