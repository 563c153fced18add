"""Interleaved timing and its summaries, on any Keras backend (imports no framework).
Clocks: ``"wall"`` (``time.perf_counter``) or ``"cpu"`` (``time.process_time``, steadier
on a loaded machine with one thread).

Example:
    >>> times = interleaved({"ours": f, "theirs": g}, repeats=9, warmup=2, clock="cpu")
    >>> summarize(times["ours"])["median_ms"]
"""
import contextlib
import time

import numpy as np

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def log(*args):
    print(*args, flush=True)


def cpu_info():
    """``(model name, set of CPU flags)`` from /proc/cpuinfo (``("", set())`` without it)."""
    model, flags = "", set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return model, flags


def block(out):
    """Wait for ``out`` (any nest of TensorFlow, JAX or torch tensors) to be computed."""
    if isinstance(out, (dict, list, tuple)):
        for t in (out.values() if isinstance(out, dict) else out):
            block(t)
    elif hasattr(out, "block_until_ready"):  # JAX dispatches asynchronously
        out.block_until_ready()
    elif hasattr(out, "detach"):  # torch: a copy to the host waits for the device
        out.detach().cpu()
    elif hasattr(out, "numpy"):  # TensorFlow
        out.numpy()
    return out


def interleaved(fns, repeats=7, warmup=2, clock="wall"):
    """Time the callables of ``fns`` (name -> zero-argument callable) in alternation.

    Each gets ``warmup`` untimed calls (tracing, compilation, caches), then the names are
    cycled ``repeats`` times, the order reversed on every other round so that neither
    side always runs first. Returns name -> list of seconds.
    """
    if clock not in CLOCKS:
        raise ValueError(f"`clock` must be one of {sorted(CLOCKS)}. Received: clock={clock!r}")
    for fn in fns.values():
        for _ in range(warmup):
            block(fn())
    names, now = list(fns), CLOCKS[clock]
    times = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            t0 = now()
            block(fns[name]())  # its outputs fetched
            times[name].append(now() - t0)
    return times


def summarize(seconds):
    """Median, min, max and interquartile range (ms) of a list of seconds."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {"median_ms": round(float(np.median(ms)), 3), "min_ms": round(float(ms.min()), 3),
            "max_ms": round(float(ms.max()), 3),
            "iqr_ms": round(float(np.percentile(ms, 75) - np.percentile(ms, 25)), 3),
            "repeats": int(ms.size)}


def spread(values, digits=2):
    """``{"median", "min", "max"}`` of ``values`` (Nones left out), or None when empty."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(float(np.median(values)), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}


def ratio(ours, theirs):
    """Median time of ``ours`` over ``theirs`` (summaries): < 1, ours is faster."""
    return round(ours["median_ms"] / theirs["median_ms"], 3)


def gflops(flops, seconds):
    return round(flops / seconds / 1e9, 1)
