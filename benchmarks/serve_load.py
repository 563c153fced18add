"""Load test of ``keras-attn serve``: throughput and latency against concurrent clients.

For each engine (SavedModel, CTranslate2) and each layout of the CPU (one replica with
every core's threads, one replica with one thread, one replica per core with one thread
each), a real server is started (``python -m keras_attn.cli serve``, its own process), and
N closed-loop clients (1, 2, 4, 8, 16, 32) each send one held-out sentence per request,
the next as soon as the answer comes, for ``--duration`` seconds. Measured: answered
requests and target tokens a second, p50/p99 latency, failed requests, the mean batch the
server formed (``GET /health``), the server's memory (RSS of the process and its replicas)
over time; and the engine's own offline throughput at batch 32 in the same layout (the
replicas fed batches of 32 back to back, no HTTP), for the ratio.

The load generator is an asyncio ``httpx`` client, not locust: locust runs its users on
gevent (it monkey-patches the process) and spends far more CPU per request; on a 2-core
machine the generator shares the cores with the server, so the lightest client measures
the server best. The clients are spread over processes of 8 (one process driving 32
connections was itself the bottleneck: its mean batch fell to 3). Target tokens are counted after the runs with the run's target
tokenizer (``[END]`` included, as the engines' own benchmark counts them).

Usage:
    python -m benchmarks.serve_load exported --duration 5 --name serve_load
    python -m benchmarks.serve_load /work/runs/fra30 --name serve_load_fra30

Writes ``NAME.json`` and ``NAME.md`` into ``--out-dir`` (default: a new
``benchmarks/results/<date>-NAME/`` folder).
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.results import fresh_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = {"1x2": (1, 2), "1x1": (1, 1), "2x1": (2, 1)}  # replicas x intra-op threads
CLIENTS_PER_GENERATOR = 8


# --- inputs -------------------------------------------------------------------------------
def held_out(run_dir, count, data_root=None):
    """``count`` held-out source sentences of a run: the dates test split, or the English
    side of the Tatoeba dev file (one sentence each, in file order)."""
    config = json.load(open(os.path.join(run_dir, "config.json")))
    if config["task"] == "dates":
        from keras_attn import data

        splits = data.dates_splits(config["num_train"], config["num_valid"],
                                   config["num_test"], seed=config["seed"])
        return [s for s, _ in splits["test"]][:count]
    candidates = [os.path.join(p, "dev.txt") for p in
                  (data_root, config["data"], os.path.join("/work/shared/data", "fra-eng"))
                  if p]
    path = next(p for p in candidates if os.path.exists(p))
    seen, out = set(), []
    for line in open(path, encoding="utf-8"):
        english = line.split("\t")[0].strip()
        if english and english not in seen:
            seen.add(english)
            out.append(english)
    return out[:count]


def target_tokens(run_dir, translations):
    """Target tokens of each translation (the run's target tokenizer, ``[END]`` included)."""
    import tensorflow as tf

    from keras_attn import subword

    _, tgt = subword.run_tokenizers(run_dir)
    if not translations:
        return []
    ids = tgt.tokenize(tf.constant(translations, tf.string))
    lengths = ids.row_lengths().numpy() if hasattr(ids, "row_lengths") else \
        [len(r) for r in ids.numpy()]
    return [int(n) + 1 for n in lengths]


def machine():
    model = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


# --- the server -----------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    """Resident memory of ``pid`` and its descendants (from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry))
            except OSError:
                continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total


class MemorySampler(threading.Thread):
    """RSS of a process tree every ``every`` seconds: ``samples`` [(seconds, bytes)]."""

    def __init__(self, pid, every=1.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self._halt = threading.Event()
        self._start = time.monotonic()

    def run(self):
        while not self._halt.is_set():
            self.samples.append((round(time.monotonic() - self._start, 1), rss_bytes(self.pid)))
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()


class Server:
    """``python -m keras_attn.cli serve`` in its own process (context manager)."""

    def __init__(self, path, engine, replicas, threads, max_batch, wait_ms, log,
                 memory_every=1.0):
        self.port = free_port()
        self.memory_every = memory_every
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.args = [sys.executable, "-m", "keras_attn.cli", "serve", path, "--engine", engine,
                     "--port", str(self.port), "--replicas", str(replicas), "--threads",
                     str(threads), "--max-batch", str(max_batch), "--batch-wait-ms",
                     str(wait_ms), "--queue-size", "4096", "--timeout", "600"]

    def __enter__(self):
        import httpx

        self.logfile = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=self.logfile,
                                     stderr=subprocess.STDOUT)
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                self.logfile.seek(0)
                raise RuntimeError("the server ended:\n" + self.logfile.read().decode()[-3000:])
            try:
                httpx.get(self.url + "/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
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
        self.logfile.close()


def health(url):
    import httpx

    return httpx.get(url + "/health", timeout=10).json()


# --- load -----------------------------------------------------------------------------------
async def closed_loop(url, body, sentences, clients, duration):
    """``clients`` clients, each sending one sentence per request back to back for
    ``duration`` seconds; per answered request ``(latency_s, translation)``, the failures,
    and the seconds from the first request to the last answer."""
    import httpx

    next_index = [0]
    answered, failed = [], []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:
        start = time.monotonic()
        end = start + duration

        async def one_client():
            while time.monotonic() < end:
                sentence = sentences[next_index[0] % len(sentences)]
                next_index[0] += 1
                sent = time.monotonic()
                try:
                    response = await client.post(url + "/translate", json={"q": sentence, **body})
                except httpx.HTTPError as e:
                    failed.append(repr(e))
                    continue
                if response.status_code != 200:
                    failed.append(f"{response.status_code} {response.text[:200]}")
                    continue
                answered.append((time.monotonic() - sent, response.json()["translatedText"]))

        await asyncio.gather(*[one_client() for _ in range(clients)])
        elapsed = time.monotonic() - start
    return answered, failed, elapsed


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _generate(argv):
    """A generator process: ``--generate URL BODY_JSON SENTENCES_JSON CLIENTS DURATION``;
    prints its answers as JSON."""
    url, body, sentences_file, clients, duration = argv
    sentences = json.load(open(sentences_file, encoding="utf-8"))
    answered, failed, elapsed = asyncio.run(closed_loop(url, json.loads(body), sentences,
                                                        int(clients), float(duration)))
    print(json.dumps({"answered": answered, "failed": failed, "elapsed": elapsed}))


def measure_clients(server, body, sentences_file, clients, duration):
    """``clients`` closed-loop clients spread over processes of at most
    :data:`CLIENTS_PER_GENERATOR` each (one asyncio httpx process with 32 connections
    became the bottleneck: 183 requests/s against 455 from four processes of 8, same server)."""
    before = health(server.url)
    sizes = [CLIENTS_PER_GENERATOR] * (clients // CLIENTS_PER_GENERATOR)
    if clients % CLIENTS_PER_GENERATOR:
        sizes.append(clients % CLIENTS_PER_GENERATOR)
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.serve_load", "--generate",
                               server.url, json.dumps(body), sentences_file, str(n),
                               str(duration)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for n in sizes]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    after = health(server.url)
    answered = [tuple(a) for o in outs for a in o["answered"]]
    failed = [f for o in outs for f in o["failed"]]
    elapsed = max(o["elapsed"] for o in outs)
    batches = after["batches"] - before["batches"]
    latencies = [lat for lat, _ in answered]
    return {"clients": clients, "generators": len(sizes), "seconds": round(elapsed, 3),
            "answered": len(answered), "failed": len(failed), "failures": failed[:5],
            "requests_per_s": round(len(answered) / elapsed, 2),
            "p50_ms": round(1000 * percentile(latencies, 0.5), 1) if latencies else None,
            "p99_ms": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
            "mean_batch": round((after["texts"] - before["texts"]) / batches, 2) if batches
            else None, "translations": [t for _, t in answered]}


async def _offline(replicas, sentences, batch, duration):
    from keras_attn.decoding.options import DecodingOptions

    options = DecodingOptions()
    out, cursor = [], [0]
    end = time.monotonic() + duration

    async def feed():
        while time.monotonic() < end:
            i = cursor[0]
            cursor[0] += batch
            texts = [sentences[(i + j) % len(sentences)] for j in range(batch)]
            results = await replicas.translate(texts, options)
            out.extend(hyps[0]["translation"] for hyps in results)

    start = time.monotonic()
    await asyncio.gather(*[feed() for _ in range(replicas.size)])
    return out, time.monotonic() - start


def offline(artefact, replicas, threads, sentences, duration, batch=32):
    """The engine's own throughput in a layout: ``replicas`` worker processes, each fed
    batches of ``batch`` back to back (no HTTP, no batcher)."""
    from keras_attn.serve.replicas import ProcessReplicas

    pool = ProcessReplicas(artefact, replicas, threads)
    try:
        pool.start()
        asyncio.run(_offline(pool, sentences, batch, 1.0))  # warm-up
        translations, elapsed = asyncio.run(_offline(pool, sentences, batch, duration))
    finally:
        pool.close()
    return translations, elapsed


# --- the whole run --------------------------------------------------------------------------
def ctranslate2_dir(path, log):
    """The CTranslate2 model of ``path``, exported into a temporary folder if it has none."""
    from keras_attn.serve.locate import locate

    try:
        return locate(path, "ctranslate2").path
    except FileNotFoundError:
        pass
    from keras_attn.export.ctranslate2 import export_ctranslate2

    run_dir = locate(path).run_dir
    target = os.path.join(tempfile.mkdtemp(prefix="serve_load_"), "ctranslate2")
    log(f"exporting {run_dir} for CTranslate2 into {target}")
    export_ctranslate2(run_dir, target, log=lambda *a: None)
    return target


def run(args, log=print):
    from keras_attn.serve.locate import locate

    info = machine()
    artefact = locate(args.path)
    run_dir = artefact.run_dir
    sentences = held_out(run_dir, args.sentences)
    sentences_file = os.path.join(tempfile.mkdtemp(prefix="serve_load_"), "sentences.json")
    with open(sentences_file, "w", encoding="utf-8") as f:
        json.dump(sentences, f)
    log(f"{len(sentences)} held-out sentences of {run_dir}; {info}")
    paths = {"savedmodel": args.path}
    if "ctranslate2" in args.engines:
        paths["ctranslate2"] = ctranslate2_dir(args.path, log)
    results = {"machine": info, "path": os.path.abspath(args.path), "run_dir": run_dir,
               "duration_s": args.duration, "max_batch": args.max_batch,
               "batch_wait_ms": args.batch_wait_ms, "sentences": len(sentences),
               "generator": "asyncio httpx closed loop", "runs": []}
    for engine in args.engines:
        engine_artefact = locate(paths[engine], engine)
        for layout in args.layouts:
            replicas, threads = LAYOUTS[layout]
            row = {"engine": engine, "layout": layout, "replicas": replicas,
                   "threads": threads}
            log(f"{engine} {layout}: offline batch {args.max_batch}")
            texts, elapsed = offline(engine_artefact, replicas, threads, sentences,
                                     args.duration, args.max_batch)
            row["offline"] = {"seconds": round(elapsed, 3), "translations": texts}
            with Server(paths[engine], engine, replicas, threads, args.max_batch,
                        args.batch_wait_ms, log) as server:
                row["startup_s"] = round(server.startup_s, 1)
                languages = json_get(server.url + "/languages")
                body = {"source": languages[0]["code"], "target": languages[0]["targets"][0]}
                measure_clients(server, body, sentences_file, 2, 2.0)  # warm-up
                row["load"] = []
                for clients in args.clients:
                    m = measure_clients(server, body, sentences_file, clients, args.duration)
                    log(f"  {clients:>2} clients: {m['requests_per_s']} req/s, p50 "
                        f"{m['p50_ms']} ms, p99 {m['p99_ms']} ms, batch {m['mean_batch']}, "
                        f"{m['failed']} failed")
                    row["load"].append(m)
                if args.soak:
                    log(f"  soak: {args.soak_clients} clients for {args.soak} s")
                    row["soak"] = measure_clients(server, body, sentences_file,
                                                  args.soak_clients, args.soak)
                row["memory_mb"] = [(t, round(b / 2**20, 1)) for t, b in server.memory.samples]
            results["runs"].append(row)
    count_tokens(results, run_dir)
    return results


def json_get(url):
    import httpx

    return httpx.get(url, timeout=10).json()


def count_tokens(results, run_dir):
    """Target tokens a second everywhere (after the runs: the tokenizer needs CPU)."""
    for row in results["runs"]:
        for m in row["load"] + ([row["soak"]] if "soak" in row else []):
            m["target_tokens_per_s"] = round(
                sum(target_tokens(run_dir, m.pop("translations"))) / m["seconds"], 1)
        off = row["offline"]
        off["target_tokens_per_s"] = round(
            sum(target_tokens(run_dir, off.pop("translations"))) / off["seconds"], 1)
        at16 = next((m for m in row["load"] if m["clients"] == 16), None)
        if at16:
            row["clients16_over_offline"] = round(
                at16["target_tokens_per_s"] / off["target_tokens_per_s"], 3)
        peak = max(row["load"], key=lambda m: m["target_tokens_per_s"])
        row["peak_tokens_per_s"] = peak["target_tokens_per_s"]
        half = [m for m in row["load"]
                if m["target_tokens_per_s"] <= peak["target_tokens_per_s"] / 2]
        # "half the peak load": the largest client count whose throughput is at most half the
        # peak (closed loop: the load is the client count).
        if half:
            h = max(half, key=lambda m: m["clients"])
            row["p99_over_p50_at_half_peak"] = {"clients": h["clients"],
                                                "ratio": round(h["p99_ms"] / h["p50_ms"], 2)}


def markdown(results):
    m = results["machine"]
    lines = [f"# `keras-attn serve` under load: {os.path.basename(results['path'])}", "",
             f"CPU: {m['cpu']}, {m['cores']} cores; load average at start "
             f"{m['load_average_at_start']}. {results['sentences']} held-out sentences, one "
             f"per request; closed-loop clients ({results['generator']}, 8 clients per "
             "generator process, on the same 2 cores as the server), "
             f"{results['duration_s']} s per point; server `--max-batch "
             f"{results['max_batch']} --batch-wait-ms {results['batch_wait_ms']}`. Layout: "
             "replicas x intra-op threads. Target tokens include `[END]`.", "",
             "| engine | layout | clients | req/s | target tok/s | p50 ms | p99 ms | mean batch "
             "| failed |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in results["runs"]:
        for r in row["load"]:
            lines.append(f"| {row['engine']} | {row['layout']} | {r['clients']} | "
                         f"{r['requests_per_s']} | {r['target_tokens_per_s']} | {r['p50_ms']} | "
                         f"{r['p99_ms']} | {r['mean_batch']} | {r['failed']} |")
    lines += ["", "| engine | layout | offline batch-32 tok/s | 16 clients / offline | peak "
              "tok/s | p99/p50 at half peak (clients) | memory MB start → end (max) |",
              "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for row in results["runs"]:
        mem = [b for _, b in row["memory_mb"]]
        half = row.get("p99_over_p50_at_half_peak")
        half_text = f"{half['ratio']} ({half['clients']})" if half else "n/a"
        mem_text = f"{mem[0]} → {mem[-1]} ({max(mem)})" if mem else ""
        lines.append(
            f"| {row['engine']} | {row['layout']} | {row['offline']['target_tokens_per_s']} | "
            f"{row.get('clients16_over_offline')} | {row['peak_tokens_per_s']} | "
            f"{half_text} | {mem_text} |")
    by = {(r["engine"], r["layout"]): r for r in results["runs"]}
    notes = []
    for engine in ("savedmodel", "ctranslate2"):
        if (engine, "2x1") in by and (engine, "1x1") in by:
            two, one = by[(engine, "2x1")], by[(engine, "1x1")]
            notes.append(f"{engine}: peak on 2 cores (2x1) / 1 core (1x1) = "
                         f"{two['peak_tokens_per_s'] / one['peak_tokens_per_s']:.2f}")
    for layout in LAYOUTS:
        if ("savedmodel", layout) in by and ("ctranslate2", layout) in by:
            a = next((r for r in by[("savedmodel", layout)]["load"] if r["clients"] == 16), None)
            b = next((r for r in by[("ctranslate2", layout)]["load"] if r["clients"] == 16), None)
            if a and b:
                notes.append(f"{layout}, 16 clients: SavedModel / CTranslate2 = "
                             f"{a['target_tokens_per_s'] / b['target_tokens_per_s']:.2f}")
    for row in results["runs"]:
        if "soak" in row:
            s = row["soak"]
            notes.append(f"soak {row['engine']} {row['layout']}: {s['clients']} clients for "
                         f"{s['seconds']:.0f} s, {s['target_tokens_per_s']} tok/s, "
                         f"{s['failed']} failed")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--generate"]:
        return _generate(argv[1:]) or 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="a run or export directory (as keras-attn serve takes)")
    p.add_argument("--engines", nargs="+", default=["savedmodel", "ctranslate2"],
                   choices=["savedmodel", "ctranslate2"])
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    p.add_argument("--clients", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--duration", type=float, default=5.0, help="seconds per point")
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    p.add_argument("--soak", type=float, default=0.0,
                   help="seconds of extra load at the end of each server's run (memory)")
    p.add_argument("--soak-clients", type=int, default=16)
    p.add_argument("--name", default="serve_load")
    p.add_argument("--out-dir", default="",
                   help="folder for NAME.json and NAME.md (default: a new "
                        "benchmarks/results/ folder)")
    args = p.parse_args(argv)
    results = run(args, log=lambda m: print(m, flush=True))
    write_results(results, markdown, args.out_dir or fresh_dir(args.name), args.name)
    return 0


def write_results(results, markdown, out_dir, name):
    """``out_dir/NAME.json`` and ``NAME.md`` (``markdown(results)``), and the table printed."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
