"""Memory soak of ``keras-attn serve``: N clients for a long run, the server's RSS sampled.

A real server is started (``python -m keras_attn.cli serve PATH``, its own process, as
:mod:`benchmarks.serve_load` starts it: ``--engine E --replicas R --threads T``), warmed up
with 16 connections for 10 s, then ``wrk`` with ``--clients`` keep-alive connections sends
one held-out sentence a request for ``--duration`` seconds
(:func:`benchmarks.serve_load.wrk_load`). The RSS of the server's process tree is read
every ``--every`` seconds from its start. Reported: RSS at the start (the server answering),
after the warm-up (the first sample ``--warmup`` seconds into the load), at the end, the
maximum, and the least-squares slope in MB per minute of the samples after the warm-up (a
leak shows as a steady slope); requests served and failed, requests a second, p50/p99
latency.

Usage:
    python -m benchmarks.serve_soak exported --data DEV_FILE --duration 600 --clients 16 \
        --every 10 --name serve_soak_dates_10min

Writes ``NAME.json`` and ``NAME.md`` into ``--out-dir`` (default: a new
``benchmarks/results/<date>-NAME/`` folder).
"""
import argparse
import os
import sys
import time
import types

from benchmarks import serve_load
from benchmarks.results import add_output_args, run_and_write


def slope_per_minute(samples):
    """Least-squares slope of ``[(seconds, MB)]`` in MB per minute (None under 2 points)."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mm = sum(m for _, m in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return round(60 * sum((t - mt) * (m - mm) for t, m in samples) / var, 3) if var else None


def run(args, log=print):
    info = serve_load.machine()
    sentences = serve_load.held_out(args.data, args.sentences)
    paths = serve_load.engine_paths(args.path, log)
    log(f"{len(sentences)} held-out sentences of {args.data}; {info}")
    spec = f"{args.engine}:replicas={args.replicas},threads={args.threads}"
    server_args = types.SimpleNamespace(anchor="", anchor_python="")
    with serve_load.Server(spec, paths, server_args, memory_every=args.every) as server:
        bodies = serve_load.write_bodies(server, sentences)
        serve_load.wrk_load(server.url, bodies, 16, 10)  # warm-up
        load_start = time.monotonic() - server.memory._start
        log(f"soak: {args.clients} clients for {args.duration} s (RSS every {args.every} s)")
        soak = serve_load.wrk_load(server.url, bodies, args.clients, args.duration)
        load_end = time.monotonic() - server.memory._start
        startup_s = round(server.startup_s, 1)
        os.unlink(bodies)
    samples = [(t, round(b / 2**20, 1)) for t, b in server.memory.samples]
    during = [(t, m) for t, m in samples if load_start <= t <= load_end]
    after_warmup = [(t, m) for t, m in during if t >= load_start + args.warmup]
    mb = [m for _, m in samples]
    memory = {
        "start_mb": samples[0][1] if samples else None,
        "load_start_mb": during[0][1] if during else None,
        "after_warmup_mb": after_warmup[0][1] if after_warmup else None,
        "after_warmup_at_s": after_warmup[0][0] if after_warmup else None,
        "end_mb": during[-1][1] if during else None,
        "max_mb": max(mb) if mb else None,
        "slope_mb_per_min_after_warmup": slope_per_minute(after_warmup),
        "growth_after_warmup_mb": round(after_warmup[-1][1] - after_warmup[0][1], 1)
        if after_warmup else None,
    }
    return {"machine": info, "path": os.path.abspath(args.path), "engine": args.engine,
            "replicas": args.replicas, "threads": args.threads, "sentences": len(sentences),
            "clients": args.clients, "duration_s": args.duration, "every_s": args.every,
            "warmup_s": args.warmup, "startup_s": startup_s,
            "load_window_s": [load_start, load_end], "soak": soak, "memory": memory,
            "memory_mb": samples}


def markdown(r):
    m, s, mem = r["machine"], r["soak"], r["memory"]
    lines = [
        f"# `keras-attn serve` memory soak: {os.path.basename(r['path'])}, "
        f"{r['duration_s'] / 60:g} minutes", "",
        f"CPU: {m['cpu']}, {m['cores']} cores; load average at start "
        f"{m['load_average_at_start']}. `--engine {r['engine']} --replicas {r['replicas']} "
        f"--threads {r['threads']}`; wrk with {r['clients']} keep-alive connections for "
        f"{s['seconds']:.0f} s after a 10 s warm-up with 16, "
        f"{r['sentences']} held-out sentences, one per request. RSS of the server's process "
        f"tree every {r['every_s']:g} s from its start; \"after warm-up\": the first sample "
        f"{r['warmup_s']:g} s into the load; the slope: least squares over the samples after "
        "it. `python -m benchmarks.serve_soak`.", "",
        "| RSS start | after warm-up | end | max | slope after warm-up | growth after warm-up |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {mem['start_mb']} MB | {mem['after_warmup_mb']} MB | {mem['end_mb']} MB | "
        f"{mem['max_mb']} MB | {mem['slope_mb_per_min_after_warmup']} MB/min | "
        f"{mem['growth_after_warmup_mb']} MB |", "",
        "| requests | failed | req/s | p50 ms | p99 ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {s['requests']} | {s['failed']} | {s['requests_per_s']} | {s['p50_ms']} | "
        f"{s['p99_ms']} |",
        "", "RSS (MB) at each minute of the load (the first sample from then on):", ""]
    start, end = r["load_window_s"]
    columns = []
    for k in range(int(r["duration_s"] // 60) + 1):
        near = [m for t, m in r["memory_mb"] if start + 60 * k <= t <= end]
        if near:
            columns.append((str(k), str(near[0])))
    columns.append(("end", str(mem["end_mb"])))
    lines += ["| minute | " + " | ".join(c for c, _ in columns) + " |",
              "| --- | " + " | ".join("---:" for _ in columns) + " |",
              "| RSS | " + " | ".join(v for _, v in columns) + " |"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="a run or export directory (as keras-attn serve takes)")
    p.add_argument("--data", required=True, help="a Tatoeba file (English TAB French lines)")
    p.add_argument("--engine", default="savedmodel", choices=["savedmodel", "ctranslate2"])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds of load before the slope is measured")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sentences", type=int, default=1000)
    add_output_args(p, "serve_soak")
    return run_and_write(p.parse_args(argv), run, markdown)


if __name__ == "__main__":
    sys.exit(main())
