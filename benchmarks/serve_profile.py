"""Where the milliseconds of one ``keras-attn serve`` request go.

One client sends held-out sentences one at a time on one keep-alive connection to a real
server (``python -m keras_attn.cli serve``, as :mod:`benchmarks.serve_load` starts it) and
reads each answer's ``Server-Timing`` header: the client's latency splits into the network
and HTTP layer (client minus the handler's total), the handler's reading and checks
(``read``), the wait for the replica (``queue``), the batch's decoding (``engine``) and the
rest of the handler. The engine's share is then split the same way in this process, on the
same sentences, by timing the calls the engine makes: sentence splitting and tokenizing,
the search (CTranslate2's ``translate_batch`` or the SavedModel signature), CTranslate2's
``score_batch`` for the confidence, detokenizing, and the pipeline's own Python. Each
figure is the median over the requests; the same is measured with ``return_scores`` (the
answer then shows confidences), for the confidence's cost.

Usage:
    python -m benchmarks.serve_profile RUN_DIR --data DEV_FILE --engine ctranslate2

Writes ``NAME.json`` and ``NAME.md`` into ``--out-dir`` (default: a new
``benchmarks/results/<date>-NAME/`` folder).
"""
import argparse
import http.client
import json
import statistics
import sys
import time
import types

from benchmarks import serve_load
from benchmarks.results import add_output_args, run_and_write


def client_timings(server, sentences, fields):
    """Per request: the client's milliseconds and the server's ``Server-Timing`` parts."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    rows = []
    for sentence in sentences:
        body = json.dumps({**json.loads(server.body(sentence)), **fields}).encode()
        started = time.perf_counter()
        connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        elapsed = 1000 * (time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"{response.status} for {sentence!r}")
        parts = dict(p.strip().split(";dur=") for p in
                     response.getheader("Server-Timing").split(","))
        rows.append({"client": elapsed, **{k: float(v) for k, v in parts.items()}})
    connection.close()
    return rows


class Timed:
    """Calls of ``fn`` timed into ``totals[name]`` (seconds)."""

    def __init__(self, fn, name, totals):
        self.fn, self.name, self.totals = fn, name, totals

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.totals[self.name] = self.totals.get(self.name, 0.0) + \
                time.perf_counter() - started


def engine_stages(engine_name, path, threads, sentences):
    """Per case (``plain``: no confidence, ``return_scores``: with it) and sentence the
    engine's milliseconds by stage (module docstring), in this process, one engine for both
    (a second engine's threads would compete with the first's)."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve import engines

    engine = engines.ENGINE_CLASSES[engine_name](path, threads)
    totals = {}
    if engine_name == "ctranslate2":
        ct2 = engine._translator
        ct2.tokenize = Timed(ct2.tokenize, "tokenize", totals)
        ct2.detokenize = Timed(ct2.detokenize, "detokenize", totals)
        inner = ct2.translator
        ct2.translator = types.SimpleNamespace(
            translate_batch=Timed(inner.translate_batch, "search (translate_batch)", totals),
            score_batch=Timed(inner.score_batch, "confidence (score_batch)", totals))
        ct2.calibrator = Timed(ct2.calibrator, "calibrator", totals)
    else:
        engine._signature = Timed(engine._signature, "graph (signature call)", totals)
    options = DecodingOptions()
    cases = {}
    for case, confidence in (("plain", False), ("return_scores", True)):
        for sentence in sentences[:20]:  # warm-up
            engine.translate([sentence], options, confidence)
        rows = cases[case] = []
        for sentence in sentences:
            totals.clear()
            started = time.perf_counter()
            engine.translate([sentence], options, confidence)
            total = time.perf_counter() - started
            rows.append({"engine total": 1000 * total,
                         **{k: 1000 * v for k, v in totals.items()},
                         "pipeline (Python)": 1000 * (total - sum(totals.values()))})
    return cases


def medians(rows):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: round(statistics.median([r.get(k, 0.0) for r in rows]), 3) for k in keys}


def run(args, log=print):
    info = serve_load.machine()
    sentences = serve_load.held_out(args.data, args.requests)
    paths = serve_load.engine_paths(args.path, log)
    spec = args.engine + (":" + args.server_options if args.server_options else "")
    threads = serve_load.server_threads(spec)
    server_args = types.SimpleNamespace(anchor="", anchor_python="")
    results = {"machine": info, "path": args.path, "server": spec, "requests": len(sentences),
               "cases": {}}
    with serve_load.Server(spec, paths, server_args) as server:
        client_timings(server, sentences[:50], {})  # warm-up
        for case, fields in (("plain", {}), ("return_scores", {"return_scores": True})):
            results["cases"][case] = {"http": medians(client_timings(server, sentences, fields))}
    for case, rows in engine_stages(args.engine, paths[args.engine], threads,
                                    sentences).items():
        results["cases"][case]["engine"] = medians(rows)
        log(f"{case}: {results['cases'][case]}")
    return results


def markdown(results):
    m = results["machine"]
    lines = [f"# One request of `keras-attn serve` ({results['server']}), stage by stage", "",
             f"CPU: {m['cpu']}, {m['cores']} cores; load average at start "
             f"{m['load_average_at_start']}. {results['requests']} held-out sentences, one a "
             "request, one client on one keep-alive connection; medians in milliseconds "
             "(the engine's stages measured in the benchmark's process on the same "
             "sentences). `python -m benchmarks.serve_profile`.", ""]
    for case, figures in results["cases"].items():
        http_, eng = figures["http"], figures["engine"]
        rest = http_["total"] - http_.get("read", 0) - http_.get("queue", 0) - \
            http_.get("engine", 0)
        lines += [f"## {case}", "", "| stage | ms | share of the client's |",
                  "| --- | ---: | ---: |"]
        stages = [("client latency", http_["client"]),
                  ("network, HTTP, framework (client - handler total)",
                   http_["client"] - http_["total"]),
                  ("handler: read body, fields, key, limits", http_.get("read", 0)),
                  ("handler: queue (waiting for the replica)", http_.get("queue", 0)),
                  ("handler: engine (the batch, worker thread)", http_.get("engine", 0)),
                  ("handler: the rest (answer built)", rest)]
        stages += [(f"engine, in process: {k}", v) for k, v in eng.items()]
        for name, value in stages:
            lines.append(f"| {name} | {value:.3f} | {100 * value / http_['client']:.1f} % |")
        lines.append("")
    plain, scored = results["cases"]["plain"]["http"], results["cases"]["return_scores"]["http"]
    lines.append(f"The confidence (`return_scores`) adds {scored['client'] - plain['client']:.3f} "
                 f"ms to the median request: "
                 f"{100 * (scored['client'] - plain['client']) / scored['client']:.1f} % of it.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="a run or export directory (as keras-attn serve takes)")
    p.add_argument("--data", required=True, help="a Tatoeba file (English TAB French lines)")
    p.add_argument("--engine", default="ctranslate2", choices=["ctranslate2", "savedmodel"])
    p.add_argument("--server-options", default="",
                   help="keras-attn serve flags as flag=value,... (threads=1)")
    p.add_argument("--requests", type=int, default=500)
    add_output_args(p, "serve_profile")
    return run_and_write(p.parse_args(argv), run, markdown)


if __name__ == "__main__":
    sys.exit(main())
