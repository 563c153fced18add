"""The web export in headless Chromium against the Python TFLite runtime and the SavedModel:
folder size, load time, milliseconds per sentence, and each runtime's agreement with the
SavedModel's ``serving_default`` (docs/web.md).

The folder is served by a static file server on loopback that is stopped once the page's
model is loaded (``window.kerasAttn.ready``): every translation after that is the browser's
alone. Needs Debian's ``chromium`` and ``chromium-driver`` and selenium (the tests' extra).

    python -m benchmarks.web RUN --data fra-eng/dev.txt [--limit N] [--timed 100] [--json OUT.json]
    python -m benchmarks.web exported/run --data dates --export-dir exported --web-dir WEB

``RUN`` must have been exported (``keras-attn export RUN`` and ``--format web``; the web
folder: ``--web-dir``, default ``RUN/export/web``).
"""
import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import sys
import threading
import time

from benchmarks.results import fresh_dir


@contextlib.contextmanager
def static_server(folder):
    """A plain static file server of ``folder`` on 127.0.0.1 (a free port): its URL.
    ``stop()`` on the yielded object ends it early (the page must then do without)."""
    handler = functools.partial(_QuietHandler, directory=os.fspath(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    class Served:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        stopped = False

        def stop(self):
            if not self.stopped:
                server.shutdown()
                server.server_close()
                self.stopped = True

    served = Served()
    try:
        yield served
    finally:
        served.stop()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript",
                      ".wasm": "application/wasm", ".json": "application/json"}

    def log_message(self, *args):
        pass


def chromium(timeout=120):
    """Headless Chromium through Debian's chromedriver (both on PATH, or
    ``KERAS_ATTN_CHROMIUM`` / ``KERAS_ATTN_CHROMEDRIVER``; no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("KERAS_ATTN_CHROMIUM") or shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    service = Service(os.environ.get("KERAS_ATTN_CHROMEDRIVER") or shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_script_timeout(timeout)
    return driver


class Page:
    """The web folder's page open in ``driver``: :meth:`translate` calls
    ``window.kerasAttn.translate`` and gives back its texts or raises ``PageError``."""

    def __init__(self, driver):
        self.driver = driver

    def call(self, script, *args):
        """Run ``script`` (a function body whose result may be a Promise) in the page:
        ``{"ok": result}`` or ``{"error": message}``."""
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"Promise.resolve((async (...a) => {{ {script} }})(...arguments))"
            ".then(ok => done({ok}), e => done({error: String(e && e.message || e)}));", *args)

    def translate(self, texts, options=None):
        texts = texts if isinstance(texts, str) else list(texts)  # (a str: refused there)
        out = self.call("return window.kerasAttn.translate(a[0], a[1]);", texts, options or {})
        if "error" in out:
            raise PageError(out["error"])
        return out["ok"]


class PageError(RuntimeError):
    """The page's readable message for a translation it refused."""


@contextlib.contextmanager
def open_offline(folder, driver, page="index.html"):
    """``(Page, load seconds)``: ``folder`` served, ``page`` opened until the model is
    loaded, then the server stopped (the page translates with nothing to fetch)."""
    with static_server(folder) as served:
        start = time.perf_counter()
        driver.get(served.url + page)
        loaded = Page(driver).call("await window.kerasAttn.ready; return true;")
        seconds = time.perf_counter() - start
        if "error" in loaded:
            raise PageError(f"the page did not load its model: {loaded['error']}")
        served.stop()
        yield Page(driver), seconds


def folder_bytes(folder):
    """``{"total", "model", "litert", "app"}`` bytes of a web folder."""
    sizes = {"model": 0, "litert": 0, "app": 0}
    for root, _, files in os.walk(folder):
        part = os.path.relpath(root, folder).split(os.sep)[0]
        for name in files:
            sizes[part if part in sizes else "app"] += os.path.getsize(os.path.join(root, name))
    return {"total": sum(sizes.values()), **sizes}


def timed(translate, texts):
    """``(translations, ms per text)`` of ``translate`` over ``texts`` one at a time."""
    start, out = time.perf_counter(), []
    for text in texts:
        out.extend(translate([text]))
    return out, 1000 * (time.perf_counter() - start) / max(len(texts), 1)


def measure(export_dir, web_dir, texts, timed_texts=100, batch_size=64, keep=5, log=print):
    """The module docstring's figures: agreement on ``texts`` (in batches), timings on the
    first ``timed_texts`` one at a time (the text file's runtime is not timed: each call
    reads the file anew)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (a SentencePiece SavedModel's ops)

    from benchmarks.artefact_agreement import batched, compare, utf8
    from keras_attn.export.builtin_runtime import BuiltinTextRuntime
    from keras_attn.export.contract import ARTEFACTS
    from keras_attn.export.runtime import run_tflite_text

    start = time.perf_counter()
    serve = tf.saved_model.load(os.path.join(export_dir, ARTEFACTS["saved_model"]))
    report = {"inputs": len(texts), "timed_inputs": min(timed_texts, len(texts)),
              "folder_bytes": folder_bytes(web_dir),
              "load_seconds": {"saved_model": time.perf_counter() - start}}
    runtimes = {"saved_model": lambda b: utf8(serve.signatures["serving_default"](
        text=tf.constant(b))["translation"])}
    start = time.perf_counter()
    builtin = BuiltinTextRuntime(os.path.join(web_dir, "model"))
    report["load_seconds"]["tflite_builtin"] = time.perf_counter() - start
    runtimes["tflite_builtin"] = lambda b: [t.decode() for t in builtin.translate(b)[
        "translation"]]
    text_file = os.path.join(export_dir, ARTEFACTS["tflite_text_float32"])
    if os.path.isfile(text_file):
        runtimes["tflite_text"] = lambda b: [t.decode() for t in run_tflite_text(
            text_file, b)["translation"]]
    driver = chromium()
    got, ms = {}, {}
    try:
        with open_offline(web_dir, driver) as (page, seconds):
            report["load_seconds"]["chromium"] = seconds
            report["user_agent"] = page.call("return navigator.userAgent;")["ok"]
            runtimes["chromium"] = page.translate
            for name, translate in runtimes.items():
                got[name] = batched(translate, texts, batch_size)
                if name != "tflite_text":
                    _, ms[name] = timed(translate, texts[:timed_texts])
                    log(f"{name}: {ms[name]:.1f} ms per text")
    finally:
        driver.quit()
    report["ms_per_text"] = ms
    report["agreement_with_saved_model"] = {
        name: compare(texts, got["saved_model"], got[name], 0, keep, ("saved_model", name))
        for name in runtimes if name != "saved_model"}
    for name, entry in report["agreement_with_saved_model"].items():
        log(f"{name}: {entry['identical']}/{len(texts)} identical to serving_default")
    return report


def dates_test(run_dir):
    """The sources of a dates run's test split (held out from its training)."""
    from keras_attn.data.dates import dates_splits

    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    splits = dates_splits(config["num_train"], config["num_valid"], config["num_test"],
                          config["seed"])
    return [source for source, _ in splits["test"]]


def main(argv=None):
    from benchmarks.artefact_agreement import read_sources

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="a Tatoeba file (English TAB French), "
                        "or 'dates': the held-out split of a dates run (its config.json)")
    parser.add_argument("--limit", type=int, default=0, help="first N distinct inputs only")
    parser.add_argument("--timed", type=int, default=100,
                        help="the first N inputs timed one at a time (default: 100)")
    parser.add_argument("--export-dir", default="", help="default: RUN_DIR/export")
    parser.add_argument("--web-dir", default="", help="default: EXPORT_DIR/web")
    parser.add_argument("--json", default="", help="default: a new research/results/ folder")
    args = parser.parse_args(argv)
    if args.limit < 0 or args.timed < 0:
        parser.error("--limit and --timed must be >= 0")
    export_dir = args.export_dir or os.path.join(args.run_dir, "export")
    web_dir = args.web_dir or os.path.join(export_dir, "web")
    texts = (dates_test(args.run_dir) if args.data == "dates"
             else read_sources(args.data))[: args.limit or None]
    report = dict(measure(export_dir, web_dir, texts, args.timed), run_dir=args.run_dir,
                  data=args.data)
    path = args.json or os.path.join(fresh_dir("web"), "web.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
