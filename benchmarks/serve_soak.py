"""Soak of ``keras-attn serve``: 16 clients for a long run on each engine, the resident
memory of the server's process tree sampled, and a replica killed under load.

Per engine (``--engines``: PATH's SavedModel and CTranslate2 model), a server in its own
process (:class:`benchmarks.serve_load.Server`, ``--replicas 1``) is warmed up with 16
connections for ``--warmup`` s, then loaded by ``wrk`` with ``--clients`` connections for
``--duration`` s (one text a request), its process tree's RSS read every ``--every`` s.
Reported: requests, failed requests, and the mean RSS of the load's last ``--window`` s
against its first's (the goal: within 5 %). Then a server of ``--kill-replicas`` under the
same load for ``--kill-duration`` s has one worker SIGKILLed a third of the way in: the failed
requests against the texts the server logs it held (the goal: no other fails), its
replacement, and a last load of ``--after-duration`` s on all workers (none may fail).

    python -m benchmarks.serve_soak exported --duration 600 --name serve_soak_dates

Inputs: ``--data`` (a Tatoeba file's English column, or one text a line), else generated
dates (the committed ``exported`` model's). Writes ``NAME.json`` and ``NAME.md`` into
``--out-dir`` (default: a new ``research/results/<date>-NAME/`` folder).
"""
import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import types

from benchmarks import serve_load
from benchmarks.results import add_output_args, run_and_write
from benchmarks.timing import cpu_info

ENGINES = ("savedmodel", "ctranslate2")
GOAL = 0.05  # the last window's mean RSS within 5 % of the first's
KILLED = re.compile(r"replica process (\d+) stopped (?:while decoding a batch of (\d+) "
                    r"texts|holding no batch)")
READY = re.compile(r"replicas ready: processes \[([\d, ]+)\]")


def slope_per_minute(samples):
    """Least-squares slope of ``[(seconds, MB)]`` in MB per minute (None under 2 points)."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mm = sum(m for _, m in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return round(60 * sum((t - mt) * (m - mm) for t, m in samples) / var, 3) if var else None


def memory_figures(samples, start, end, window):
    """The RSS samples ``[(seconds, MB)]`` of the load ``[start, end]``: the mean of its
    first and last ``window`` seconds, their ratio, and the slope after the first window."""
    during = [(t, m) for t, m in samples if start <= t <= end]
    first = [m for t, m in during if t <= start + window]
    last = [m for t, m in during if t >= end - window]
    mean = (lambda xs: round(sum(xs) / len(xs), 1) if xs else None)  # noqa: E731
    first_mb, last_mb = mean(first), mean(last)
    change = round(last_mb / first_mb - 1, 4) if first_mb and last_mb else None
    return {"first_window_mean_mb": first_mb, "last_window_mean_mb": last_mb,
            "change": change, "within_goal": change is not None and abs(change) <= GOAL,
            "samples_first": len(first), "samples_last": len(last),
            "max_mb": max((m for _, m in during), default=None),
            "slope_mb_per_min_after_first_window": slope_per_minute(
                [(t, m) for t, m in during if t > start + window])}


def inputs(data, count=1000):
    """One text a request: ``data``'s English column (or lines), else generated dates."""
    if data:
        with open(data, encoding="utf-8") as f:
            texts = [line.rstrip("\n").split("\t")[0] for line in f]
        return [t for t in dict.fromkeys(texts) if t.strip()][:count]
    from keras_attn.data.dates import generate_dates

    return [source for source, _ in generate_dates(count, seed=1)]


def server_log(server):
    """What the server has printed so far (read at offset 0: its writes share the file's
    offset, which must not move)."""
    fd = server.logfile.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")


def _bodies(server, texts):
    path = tempfile.mkstemp(suffix=".jsonl")[1]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(server.body(text) + "\n" for text in texts)
    return path


def soak(engine, path, texts, args, log):
    """One engine's long run: its load and memory figures."""
    server_args = types.SimpleNamespace(anchor="", anchor_python="", with_test_extras=False)
    spec = f"{engine}:replicas=1" + (f",threads={args.threads}" if args.threads else "")
    with serve_load.Server(spec, {engine: path}, server_args,
                           memory_every=args.every) as server:
        bodies = _bodies(server, texts)
        serve_load.wrk_load(server.url, bodies, 16, args.warmup)
        start = time.monotonic() - server.memory.start_time
        log(f"  {engine}: {args.clients} clients for {args.duration:g} s (RSS every "
            f"{args.every:g} s)")
        load = serve_load.wrk_load(server.url, bodies, args.clients, args.duration)
        end = time.monotonic() - server.memory.start_time
        os.unlink(bodies)
        startup_s = round(server.startup_s, 1)
    samples = [(round(t, 2), round(b / 2**20, 1)) for t, b in server.memory.timed]
    memory = memory_figures(samples, start, end, min(args.window, (end - start) / 3))
    log(f"  {engine}: {load['requests']} requests, {load['failed']} failed; RSS "
        f"{memory['first_window_mean_mb']} -> {memory['last_window_mean_mb']} MB "
        f"({memory['change']:+.2%})")
    return {"startup_s": startup_s, "load": load, "memory": memory,
            "load_window_s": [round(start, 2), round(end, 2)], "rss_mb": samples}


def kill_one(engine, path, texts, args, log):
    """A server of two replicas under load, one of its workers killed a third of the way:
    the failed requests, what the killed worker held, its replacement."""
    server_args = types.SimpleNamespace(anchor="", anchor_python="", with_test_extras=False)
    spec = f"{engine}:replicas={args.kill_replicas},threads=1"
    with serve_load.Server(spec, {engine: path}, server_args) as server:
        bodies = _bodies(server, texts)
        workers = [int(p) for p in READY.search(server_log(server)).group(1).split(",")]
        serve_load.wrk_load(server.url, bodies, 16, args.warmup)
        loaded = {}
        thread = threading.Thread(target=lambda: loaded.update(serve_load.wrk_load(
            server.url, bodies, args.clients, args.kill_duration)))
        thread.start()
        time.sleep(args.kill_duration / 3)
        os.kill(workers[0], signal.SIGKILL)
        killed_at = time.monotonic()
        thread.join()
        deadline = time.monotonic() + args.replace_timeout
        while "ready (replacing" not in server_log(server) and time.monotonic() < deadline:
            time.sleep(0.5)
        text = server_log(server)
        replaced = re.search(r"replica process (\d+) ready \(replacing", text)
        replaced_s = None
        if replaced:
            replaced_s = round(time.monotonic() - killed_at, 1)  # an upper bound
        after = serve_load.wrk_load(server.url, bodies, args.clients, args.after_duration)
        os.unlink(bodies)
    lost = [int(n or 0) for _, n in KILLED.findall(text)]
    result = {"replicas": args.kill_replicas, "killed_pid": workers[0],
              "killed_after_s": round(args.kill_duration / 3, 1), "load": loaded,
              "lost_texts": sum(lost), "deaths_logged": len(lost),
              "failures_explained": loaded.get("failed", 0) <= sum(lost),
              "replaced": replaced is not None,
              "new_pid": int(replaced.group(1)) if replaced else None,
              "replaced_within_s": replaced_s, "after": after,
              "after_failed": after["failed"]}
    log(f"  {engine} --replicas {args.kill_replicas}: killed {workers[0]}; "
        f"{loaded.get('failed')} failed of {loaded.get('requests')}, "
        f"{sum(lost)} texts held by it; replaced: {result['replaced']}; "
        f"{after['failed']} failed after")
    return result


def run(args, log=print):
    texts = inputs(args.data)
    if args.ctranslate2 or "ctranslate2" not in args.engines:
        from keras_attn.serve.locate import locate

        paths = {"ctranslate2": args.ctranslate2} if args.ctranslate2 else {}
        if "savedmodel" in args.engines:
            paths["savedmodel"] = locate(args.path).path
    else:  # PATH's CTranslate2 model, exported to a temporary folder when it has none
        paths = serve_load.engine_paths(args.path, log)
    info = {"cpu": cpu_info()[0], "cores": len(os.sched_getaffinity(0)),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    log(f"{len(texts)} inputs ({args.data or 'generated dates'}); {info}")
    results = {"machine": info, "path": os.path.abspath(args.path), "paths": paths,
               "data": os.path.abspath(args.data) if args.data else None,
               "inputs": len(texts), "clients": args.clients, "duration_s": args.duration,
               "every_s": args.every, "window_s": args.window, "warmup_s": args.warmup,
               "threads": args.threads or "default",
               "goal": GOAL, "engines": {}}
    for engine in args.engines:
        entry = results["engines"][engine] = {"soak": soak(engine, paths[engine], texts,
                                                           args, log)}
        if args.kill_duration > 0:
            entry["kill"] = kill_one(engine, paths[engine], texts, args, log)
    return results


def markdown(r):
    m = r["machine"]
    lines = [
        f"# `keras-attn serve` soak: {os.path.basename(r['path'].rstrip('/'))}, "
        f"{r['duration_s'] / 60:g} minutes an engine", "",
        f"`--replicas 1 --threads {r.get('threads', 'default')}`.",
        f"CPU: {m['cpu']}, {m['cores']} cores; load average at start "
        f"{m['load_average_at_start']}. wrk with {r['clients']} keep-alive connections, one "
        f"text a request ({r['inputs']} inputs), after a {r['warmup_s']:g} s warm-up with 16; "
        f"RSS of the server's process tree every {r['every_s']:g} s; the windows: the load's "
        f"first and last {r['window_s']:g} s (a third of the load when shorter); the goal: "
        f"within {r['goal']:.0%}. `python -m benchmarks.serve_soak`.", "",
        "| engine | requests | failed | req/s | p99 ms | RSS first window | last window | "
        "change | within goal | slope after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for engine, e in r["engines"].items():
        load, mem = e["soak"]["load"], e["soak"]["memory"]
        lines.append(
            f"| {engine} | {load['requests']} | {load['failed']} | {load['requests_per_s']} | "
            f"{load['p99_ms']} | {mem['first_window_mean_mb']} MB | "
            f"{mem['last_window_mean_mb']} MB | {mem['change']:+.2%} | "
            f"{'yes' if mem['within_goal'] else 'no'} | "
            f"{mem['slope_mb_per_min_after_first_window']} MB/min |")
    kills = [(engine, e["kill"]) for engine, e in r["engines"].items() if "kill" in e]
    if kills:
        lines += ["", "A replica killed under load (SIGKILL a third of the way):", "",
                  "| engine | replicas | requests | failed | texts the killed one held | "
                  "failures explained | replaced | failed after |",
                  "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
        for engine, k in kills:
            lines.append(
                f"| {engine} | {k['replicas']} | {k['load'].get('requests')} | "
                f"{k['load'].get('failed')} | {k['lost_texts']} | "
                f"{'yes' if k['failures_explained'] else 'no'} | "
                f"{'yes' if k['replaced'] else 'no'} | {k['after_failed']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="a run or export directory (as keras-attn serve takes)")
    p.add_argument("--data", default="", help="a Tatoeba file, or one text a line "
                   "(default: generated dates, the committed model's inputs)")
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--ctranslate2", default="", help="the CTranslate2 model directory "
                   "(default: PATH's, exported to a temporary folder when it has none)")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load an engine")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--window", type=float, default=60.0,
                   help="seconds of the first and last windows whose mean RSS is compared")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds at 16 clients first")
    p.add_argument("--threads", default="", help="the soak's server's --threads (default: "
                   "keras-attn serve's; the replica test runs 1 a replica)")
    p.add_argument("--kill-duration", type=float, default=60.0,
                   help="seconds of load of the replica test (0: no replica test)")
    p.add_argument("--kill-replicas", type=int, default=2)
    p.add_argument("--after-duration", type=float, default=5.0,
                   help="seconds of load once the killed replica is replaced")
    p.add_argument("--replace-timeout", type=float, default=300.0,
                   help="longest wait for the new worker")
    add_output_args(p, "serve_soak")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        p.error("wrk is not installed (Debian: apt-get install wrk)")
    return run_and_write(args, run, markdown)


if __name__ == "__main__":
    sys.exit(main())
