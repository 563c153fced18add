"""Running :mod:`keras_attn.export.conversion` s beside the exporting process
(TensorFlow-only): :class:`ConversionPool` (worker processes, or this one) and
:class:`Staging` (what the TFLite exporters of one export share).

Most of a TFLite conversion runs on one core, so on two cores the files convert in a worker
while the exporting process traces and saves the SavedModel. A worker is
``python -m keras_attn.export.conversion``, fed a job a line: no ``multiprocessing``, so a
script that exports needs no ``if __name__ == "__main__"`` guard.

Example:
    >>> with Staging(ConversionPool("auto", jobs=2), "export") as staging:
    ...     path = staging.once(key, lambda folder: stage(functions, variables, folder),
    ...                         "encoder")
    ...     futures = staging.start("builtin_float32", {"encoder": Conversion(path, keys)})
    ...     seconds = futures["encoder"].result()["seconds"]
"""
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from keras_attn.export.conversion import REPLY, run_conversion

# What a worker process needs beside the exporting process, in bytes: TensorFlow and the
# conversion of the English-French recipe's text file (its peak, measured).
WORKER_MEMORY = 2.5e9


def default_workers(jobs, cpus=None, available=None):
    """Worker processes for ``jobs`` conversions: one per core but the exporting process's
    (it traces and saves the SavedModel meanwhile; a third process on two cores only slows
    both), as many as the free memory holds (:data:`WORKER_MEMORY` each), none on one core.

    Example:
        >>> default_workers(4, cpus=2, available=16e9)
        1
        >>> default_workers(4, cpus=1, available=16e9)
        0
    """
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    available = _available_memory() if available is None else available
    return max(0, min(jobs, cpus - 1, int(available // WORKER_MEMORY)))


def _available_memory():
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 8e9  # no /proc: as a laptop


class _Worker:
    """One ``python -m keras_attn.export.conversion`` process: a job a line on its stdin, an
    answer a line on its stdout, its log in ``log_path``."""

    def __init__(self, log_path):
        # The package this process runs first on the path: the worker runs the same code.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path,
                   TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3"))
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "keras_attn.export.conversion"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)

    def run(self, conversion, output):
        job = dict(dataclasses.asdict(conversion), output=output)
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(REPLY):
                answer = json.loads(line[len(REPLY):])
                if "error" in answer:
                    raise ValueError(answer["error"])
                return answer
        raise RuntimeError(f"a TFLite conversion process ended before converting "
                           f"{conversion.name} (exit code {self.process.wait()}); its log: "
                           f"{_tail(self.log_path)}")

    def close(self, kill=False):
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def _tail(path, size=2000):
    try:
        with open(path, "rb") as f:
            f.seek(max(os.path.getsize(path) - size, 0))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(none)"


class ConversionPool:
    """Runs :class:`Conversion` s in ``workers`` processes, or in this one (``workers=0``:
    each when its result is asked, in the order asked).

    Args:
        workers: processes; ``"auto"``: :func:`default_workers` for ``jobs``.
        jobs: the conversions expected (sizes ``"auto"``).
        log_dir: where the workers' logs go (default: a temporary folder, removed on close).

    Example:
        >>> with ConversionPool("auto", jobs=4) as pool:
        ...     futures = [pool.submit(c, f"{i}.tflite") for i, c in enumerate(conversions)]
        ...     seconds = [f.result()["seconds"] for f in futures]
    """

    def __init__(self, workers="auto", jobs=1, log_dir=None):
        if workers == "auto":
            workers = default_workers(jobs)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"`workers` must be 'auto' or an integer >= 0 (0: convert in "
                             f"this process). Received: workers={workers!r}")
        self.workers = workers
        self._own_dir = log_dir is None
        self.log_dir = tempfile.mkdtemp(prefix="keras-attn-conversion-") if log_dir is None \
            else log_dir
        self._executor = (concurrent.futures.ThreadPoolExecutor(workers) if workers else None)
        self._local = threading.local()
        self._started = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, conversion, output):
        """A future of :func:`run_conversion`'s answer (the flatbuffer is at ``output``)."""
        if self._executor is None:
            return _Deferred(lambda: run_conversion(conversion, output))
        return self._executor.submit(self._in_worker, conversion, output)

    def _in_worker(self, conversion, output):
        worker = getattr(self._local, "worker", None)
        if worker is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the conversion pool is closed")
                log = os.path.join(self.log_dir, f"worker-{len(self._started)}.log")
                worker = self._local.worker = _Worker(log)
                self._started.append(worker)
        return worker.run(conversion, output)

    def close(self, kill=False):
        """Stop the workers (``kill``: at once, their jobs abandoned)."""
        if self._executor is not None:
            self._executor.shutdown(wait=not kill, cancel_futures=kill)
        with self._lock:
            self._closed = True
        for worker in self._started:
            worker.close(kill)
        if self._own_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close(kill=kind is not None)


class _Deferred:
    """A future computed in this process when its result is first asked."""

    def __init__(self, compute):
        self._compute, self._done, self._value, self._error = compute, False, None, None

    def result(self):
        if not self._done:
            try:
                self._value = self._compute()
            except Exception as e:  # kept: asked again, it raises again
                self._error = e
            self._done = True
        if self._error is not None:
            raise self._error
        return self._value


class Staging:
    """What the TFLite exporters of one export share: the SavedModels staged (one per traced
    module, whatever the quantization), the conversions started, and the pool running them.

    Args:
        pool: a :class:`ConversionPool` (default: conversions in this process); closed with
            the staging.
        folder: the folder to stage in (default: the system's temporary folder); a
            ``.stage-*`` folder is made in it and removed on close.

    Example:
        >>> with Staging(ConversionPool("auto", jobs=4), "export") as staging:
        ...     path = staging.once(key, lambda folder: stage(functions, vars, folder), "encoder")
        ...     futures = staging.start("builtin_float32", {"encoder": Conversion(path, keys)})
    """

    def __init__(self, pool=None, folder=None):
        self.pool = ConversionPool(0) if pool is None else pool
        self.folder = tempfile.mkdtemp(prefix=".stage-", dir=folder)
        self.seconds = {}  # {name of once(): the seconds its tracing and staging took}
        self._staged, self._started = {}, {}

    def once(self, key, make, name):
        """``make(folder)`` for ``key`` (tracing and staging in a new folder), made once; its
        seconds in :attr:`seconds` under ``name``."""
        if key not in self._staged:
            began = time.monotonic()
            self._staged[key] = make(tempfile.mkdtemp(dir=self.folder))
            self.seconds[name] = round(time.monotonic() - began, 2)
        return self._staged[key]

    def start(self, name, conversions):
        """Submit ``{file: Conversion}`` for ``name`` once; ``{file: future}`` of
        :func:`run_conversion`'s answers."""
        if name not in self._started:
            self._started[name] = {
                file: self.pool.submit(conversion,
                                       os.path.join(self.folder, f"{name}.{file}.tflite"))
                for file, conversion in conversions.items()}
        return self._started[name]

    def started(self, name):
        """``{file: future}`` of :meth:`start` for ``name`` ({} if none was started)."""
        return self._started.get(name, {})

    def close(self, kill=False):
        """Stop the pool (``kill``: its unfinished conversions abandoned), remove the folder."""
        self.pool.close(kill)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close(kill=kind is not None)
