"""``keras-attn serve`` under load, beside LibreTranslate serving the same weights.

Each server runs in its own process, loaded by ``wrk`` (keep-alive connections, one
held-out sentence a request): ``--warmup`` seconds at 16 connections, then ``--duration``
seconds at each ``--clients`` count; per point requests/s, latency percentiles, failures
and the largest resident memory. Servers: ``libretranslate`` (``--anchor`` run by
``--anchor-python``), ``ctranslate2`` and ``savedmodel``, each ``NAME[:flag=value,...]``
(``keras-attn serve`` flags; ``xla=``: a bare flag); repeats interleaved, engines alone too.

    python -m benchmarks.serve_load RUN_DIR --data DEV_FILE \\
        --anchor ANCHOR.py --anchor-python LT_VENV/bin/python --repeats 3
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchmarks.artefact_agreement import read_sources
from benchmarks.results import add_output_args, run_and_write
from benchmarks.timing import cpu_info, spread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SERVERS = ["libretranslate", "ctranslate2", "savedmodel"]
SENTENCES = 1000  # held-out inputs, at most
OFFLINE_SECONDS = 10.0  # each engine alone, a repeat
# keras-attn serve as installed alone: jax (a test extra, 100 MB in TF's lite module) absent.
SERVER_INSTALL = ("import runpy, sys; sys.modules['jax'] = None; "
                  "runpy.run_module('keras_attn.cli', run_name='__main__', alter_sys=True)")

WRK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_load.lua")


# --- the servers ----------------------------------------------------------------------------
class MemorySampler(threading.Thread):
    """``(seconds since start, RSS bytes)`` of ``pid`` and its descendants every ``every``
    seconds: ``timed``."""

    def __init__(self, pid, every=1.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.timed, self.start_time = pid, every, [], time.monotonic()
        self._halt = threading.Event()

    def run(self):
        import psutil

        while not self._halt.is_set():
            total = 0
            with contextlib.suppress(psutil.NoSuchProcess):
                parent = psutil.Process(self.pid)
                for process in [parent, *parent.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        total += process.memory_info().rss
            self.timed.append((time.monotonic() - self.start_time, total))
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()


def parse_spec(spec):
    """``"name:key=value,key=value"`` -> ``(name, {key: value})``."""
    name, _, rest = spec.partition(":")
    if name not in DEFAULT_SERVERS:
        raise ValueError(f"unknown server {name!r} (one of {DEFAULT_SERVERS})")
    return name, dict(item.split("=", 1) for item in rest.split(",") if item)


class Server:
    """A server in its own process (context manager): ``url``, ``languages``, ``pid``."""

    def __init__(self, spec, paths, args, memory_every=1.0):
        self.spec, self.memory_every = spec, memory_every
        self.name, self.options = parse_spec(spec)
        with socket.socket() as s:  # a free port
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ)
        if self.name == "libretranslate":
            if not (args.anchor and args.anchor_python):
                raise ValueError("the libretranslate server needs --anchor and --anchor-python")
            self.workdir = tempfile.mkdtemp(prefix="lt_anchor_")
            self.env["ARGOS_BEAM_SIZE"] = "1"  # greedy, as ours by default
            self.args = [args.anchor_python, args.anchor, "serve", paths["ctranslate2"],
                         "--port", str(self.port), "--workdir", self.workdir,
                         "--threads", self.options.get("threads", "2")]
        else:
            self.workdir = None
            cli = ["-m", "keras_attn.cli"] if args.with_test_extras else ["-c", SERVER_INSTALL]
            self.args = [sys.executable, *cli, "serve", paths[self.name],
                         "--engine", self.name, "--port", str(self.port), "--queue-size",
                         "4096", "--timeout", "600", "--char-limit", "-1"]
            for key, value in self.options.items():  # xla= (no value): a bare flag
                self.args += ["--" + key.replace("_", "-")] + ([value] if value else [])

    def __enter__(self):
        self.logfile = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=self.logfile,
                                     stderr=subprocess.STDOUT, env=self.env)
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                self.logfile.seek(0)
                raise RuntimeError(f"{self.spec} ended:\n" +
                                   self.logfile.read().decode()[-3000:])
            try:
                with urllib.request.urlopen(self.url + "/languages", timeout=10) as response:
                    self.languages = json.loads(response.read())
                break
            except OSError:
                if time.monotonic() - started > 600:
                    raise
                time.sleep(0.5)
        self.startup_s = time.monotonic() - started
        self.memory = MemorySampler(self.proc.pid, self.memory_every)
        self.memory.start()
        return self

    def __exit__(self, *exc):
        self.memory.stop()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logfile.close()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def body(self, sentence):
        """One request's JSON body: the first language into another of its targets."""
        source = self.languages[0]
        target = next(t for t in source["targets"] if t != source["code"])
        return json.dumps({"q": sentence, "source": source["code"], "target": target},
                          ensure_ascii=False)


# --- load -----------------------------------------------------------------------------------
def wrk_load(url, bodies_file, clients, duration):
    """``wrk`` with ``clients`` keep-alive connections (one thread) on ``POST url/translate``
    for ``duration`` seconds: requests/s, latency percentiles (ms), failures."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        with open(WRK_SCRIPT, encoding="utf-8") as template:
            script.write(template.read().replace("BODIES_FILE", bodies_file))
        script.flush()
        done = subprocess.run(
            ["wrk", "-t1", f"-c{clients}", f"-d{duration:g}s", "--timeout", "60s", "-s",
             script.name, url + "/translate"], capture_output=True, text=True, check=True)
    line = next(l for l in done.stdout.splitlines() if l.startswith("WRK_JSON "))
    raw = json.loads(line[len("WRK_JSON "):])
    seconds = raw["duration_us"] / 1e6
    failed = raw["connect"] + raw["read"] + raw["write"] + raw["status"] + raw["timeout"]
    return {"clients": clients, "seconds": round(seconds, 2), "requests": raw["requests"],
            "failed": failed, "requests_per_s": round((raw["requests"] - raw["status"])
                                                      / seconds, 1),
            **{k.replace("_us", "_ms"): round(raw[k] / 1000, 2)
               for k in ("p50_us", "p90_us", "p99_us", "mean_us")}}


def measure_server(spec, paths, sentences, args, log):
    """One server: started, warmed up, loaded at each client count, stopped."""
    with Server(spec, paths, args) as server, tempfile.NamedTemporaryFile(
            "w", suffix=".jsonl", encoding="utf-8") as bodies:
        # one JSON body a line, which wrk's script reads in turn
        bodies.writelines(server.body(sentence) + "\n" for sentence in sentences)
        bodies.flush()
        wrk_load(server.url, bodies.name, 16, args.warmup)
        points = []
        for clients in args.clients:
            m = wrk_load(server.url, bodies.name, clients, args.duration)
            log(f"  {spec:<28} {clients:>2} clients: {m['requests_per_s']:>7} req/s, "
                f"p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms, {m['failed']} failed")
            points.append(m)
        samples = [b for _, b in server.memory.timed]
        return {"server": spec, "startup_s": round(server.startup_s, 1), "points": points,
                "rss_mb_max": round(max(samples) / 2**20, 1) if samples else None,
                "rss_mb_end": round(samples[-1] / 2**20, 1) if samples else None}


# --- the engines on their own ---------------------------------------------------------------
def _offline(engine_name, path, threads, sentences_file, duration):
    """The engine alone in a fresh process (``--offline``), ``threads`` intra-op threads:
    sentences/s at batch 32 and one sentence's median ms, printed as a JSON line."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve import engines

    sentences = json.load(open(sentences_file, encoding="utf-8"))
    engine = engines.ENGINES[engine_name](path, int(threads))
    options = DecodingOptions()
    engine.translate(sentences[:32], options, False)  # warm-up
    i, start = 0, time.monotonic()  # i: sentences translated
    while time.monotonic() - start < float(duration):
        engine.translate([sentences[(i + j) % len(sentences)] for j in range(32)], options, False)
        i += 32
    batch32 = i / (time.monotonic() - start)
    one = []
    for sentence in sentences[:200]:
        t0 = time.perf_counter()
        engine.translate([sentence], options, False)
        one.append(time.perf_counter() - t0)
    print(json.dumps({"engine": engine_name, "threads": int(threads),
                      "batch32_sentences_per_s": round(batch32, 1),
                      "batch1_median_ms": round(1000 * statistics.median(one), 2)}))


# --- the whole run --------------------------------------------------------------------------
def engine_paths(path, log):
    """The SavedModel and CTranslate2 model of ``path`` (the latter exported if missing)."""
    from keras_attn.serve.locate import locate

    paths = {"savedmodel": locate(path, "savedmodel").path}
    try:
        paths["ctranslate2"] = locate(path, "ctranslate2").path
    except FileNotFoundError:
        from keras_attn.export.ctranslate2 import export_ctranslate2

        run_dir = locate(path).run_dir
        target = os.path.join(tempfile.mkdtemp(prefix="serve_load_"), "ctranslate2")
        log(f"exporting {run_dir} for CTranslate2 into {target}")
        export_ctranslate2(run_dir, target, log=lambda *a: None)
        paths["ctranslate2"] = target
    return paths


def run(args, log=print):
    from keras_attn.serve.server import default_threads
    from keras_attn.text import documents

    info = {"cpu": cpu_info()[0], "cores": len(os.sched_getaffinity(0)),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    # the held-out inputs: distinct one-sentence English sources of --data, in file order
    stripped = dict.fromkeys(s.strip() for s in read_sources(args.data))
    sentences = [s for s in stripped if s and len(documents.split(s).sentences) == 1][:SENTENCES]
    sentences_file = os.path.join(tempfile.mkdtemp(prefix="serve_load_"), "sentences.json")
    with open(sentences_file, "w", encoding="utf-8") as f:
        json.dump(sentences, f)
    paths = engine_paths(args.path, log)
    log(f"{len(sentences)} held-out one-sentence inputs of {args.data}; {info}")
    results = {"machine": info, "path": os.path.abspath(args.path), "paths": paths,
               "data": os.path.abspath(args.data), "sentences": len(sentences),
               "duration_s": args.duration, "warmup_s": args.warmup, "clients": args.clients,
               "generator": "wrk -t1 (keep-alive connections, one sentence a request)",
               "servers": args.servers, "repeats": [],
               "server_install": not args.with_test_extras}
    for repeat in range(args.repeats):
        log(f"repeat {repeat + 1}/{args.repeats}")
        rows = [measure_server(spec, paths, sentences, args, log) for spec in args.servers]
        engines = {}  # (engine, threads) -> its figures alone (_offline, in a fresh process)
        for name, options in map(parse_spec, args.servers):
            if name == "libretranslate":
                continue
            # the threads its server runs with: its --threads, else keras-attn serve's default
            threads = int(options["threads"]) if "threads" in options else default_threads(
                name, int(options.get("replicas", 1)))
            if (name, threads) not in engines:
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.serve_load", "--offline", name,
                     paths[name], str(threads), sentences_file, str(OFFLINE_SECONDS)],
                    cwd=ROOT, capture_output=True, text=True, check=True)
                engines[name, threads] = json.loads(done.stdout.strip().splitlines()[-1])
                log(f"  offline {name} threads {threads}: {engines[name, threads]}")
        results["repeats"].append({"servers": rows, "offline": list(engines.values())})
    results["summary"] = summary(results)
    return results


# --- the report -----------------------------------------------------------------------------
def summary(results):
    """Per server and client count the spread over the repeats; the ratios to
    LibreTranslate's figures per repeat (when it ran), then their spread."""
    def rows(spec):  # the server's row of every repeat
        return [next(r for r in rep["servers"] if r["server"] == spec)
                for rep in results["repeats"]]

    def point(row, clients):  # the row's point at that many clients
        return next((p for p in row["points"] if p["clients"] == clients), None)

    out = {"servers": {}, "ratios": {}, "offline": {}}
    for spec in results["servers"]:
        entry = {"rss_mb_max": spread([r["rss_mb_max"] for r in rows(spec)])}
        for clients in results["clients"]:
            pts = [p for p in (point(r, clients) for r in rows(spec)) if p]
            entry[str(clients)] = {k: spread([p[k] for p in pts]) for k in
                                   ("requests_per_s", "p50_ms", "p99_ms", "failed")}
        out["servers"][spec] = entry
    anchor = next((s for s in results["servers"] if s.startswith("libretranslate")), None)
    for spec in results["servers"]:
        if anchor is None or spec == anchor:
            continue
        pairs = list(zip(rows(spec), rows(anchor)))  # (ours, theirs) per repeat
        ratios = {}
        for clients in results["clients"]:
            both = [(point(o, clients), point(t, clients)) for o, t in pairs]
            for key in ("requests_per_s", "p50_ms"):
                ratios[f"{key}_{clients}"] = spread([o[key] / t[key] for o, t in both
                                                     if o and t and t[key]])
        ratios["rss"] = spread([o["rss_mb_max"] / t["rss_mb_max"] for o, t in pairs])
        out["ratios"][spec] = ratios
    for rep in results["repeats"]:
        for off in rep["offline"]:
            out["offline"].setdefault(f"{off['engine']} threads {off['threads']}", []).append(off)
    out["offline"] = {k: {m: spread([o[m] for o in v]) for m in
                          ("batch32_sentences_per_s", "batch1_median_ms")}
                      for k, v in out["offline"].items()}
    return out


def fmt(s, digits=1):
    if s is None:
        return "n/a"
    if s["min"] == s["max"]:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def markdown(results):
    m, s = results["machine"], results["summary"]
    lines = [f"# `keras-attn serve` under load beside LibreTranslate: "
             f"{os.path.basename(results['path'].rstrip('/'))}", "",
             f"CPU: {m['cpu']}, {m['cores']} cores; load average at start "
             f"{m['load_average_at_start']}. {results['sentences']} held-out one-sentence "
             f"inputs, one a request; {results['generator']}; {results['warmup_s']} s warm-up, "
             f"{results['duration_s']} s a point; {len(results['repeats'])} repeats, "
             "interleaved: median (min–max)." + (" keras-attn servers as installed "
             "alone (no jax)." if results.get("server_install") else ""), "",
             "| server | clients | req/s | p50 ms | p99 ms | failed | RSS MB (max) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for spec, entry in s["servers"].items():
        for clients in results["clients"]:
            e = entry[str(clients)]
            lines.append(f"| {spec} | {clients} | {fmt(e['requests_per_s'])} | "
                         f"{fmt(e['p50_ms'], 2)} | {fmt(e['p99_ms'], 1)} | "
                         f"{fmt(e['failed'], 0)} | {fmt(entry['rss_mb_max'], 0)} |")
    if s["ratios"]:
        heads = [f"{k.replace('requests_per_s', 'req/s').replace('p50_ms', 'p50')} clients"
                 for k in next(iter(s["ratios"].values())) if k != "rss"]
        lines += ["", "Ratios to LibreTranslate, per repeat (median, range):", "",
                  "| server | " + " | ".join(heads) + " | RSS |",
                  "| --- |" + " ---: |" * (len(heads) + 1)]
        for spec, ratios in s["ratios"].items():
            lines.append(f"| {spec} | " + " | ".join(fmt(v, 2) for v in ratios.values()) + " |")
        lines.append("")
        for spec, ratios in s["ratios"].items():  # the goal: one client waits no longer
            r = ratios.get("p50_ms_1")
            if r:
                held = ("in every repeat" if r["max"] <= 1 else "in no repeat" if r["min"] > 1
                        else "in some repeats, not all")
                lines.append(f"- {spec}: one client's p50 at most LibreTranslate's: holds {held}.")
    if s["offline"]:
        lines += ["", "The engines alone (no HTTP), as the servers run them:", "",
                  "| engine | batch 32 sentences/s | one sentence, median ms |",
                  "| --- | ---: | ---: |"]
        for key, off in s["offline"].items():
            lines.append(f"| {key} | {fmt(off['batch32_sentences_per_s'])} | "
                         f"{fmt(off['batch1_median_ms'], 2)} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--offline"]:
        return _offline(*argv[1:]) or 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="a run or export directory (as keras-attn serve takes)")
    p.add_argument("--data", required=True, help="a Tatoeba file (English TAB French lines)")
    p.add_argument("--servers", nargs="+", default=DEFAULT_SERVERS,
                   help="servers, each NAME[:flag=value,...] (module docstring)")
    p.add_argument("--anchor", default=os.environ.get("KERAS_ATTN_LT_ANCHOR", ""),
                   help="the LibreTranslate anchor script (default: $KERAS_ATTN_LT_ANCHOR)")
    p.add_argument("--anchor-python", default=os.environ.get("KERAS_ATTN_LT_PYTHON", ""),
                   help="the Python of LibreTranslate's venv (default: $KERAS_ATTN_LT_PYTHON)")
    p.add_argument("--clients", nargs="+", type=int, default=[1, 16])
    p.add_argument("--duration", type=float, default=30.0, help="seconds a point")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds at 16 clients first")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--with-test-extras", action="store_true",
                   help="keras-attn servers may import jax (default: as a server install)")
    add_output_args(p, "serve_load")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        p.error("wrk is not installed (Debian: apt-get install wrk)")
    for spec in args.servers:
        parse_spec(spec)
    return run_and_write(args, run, markdown)


if __name__ == "__main__":
    sys.exit(main())
