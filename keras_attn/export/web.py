"""The web target (TensorFlow-only): ``keras-attn export RUN --format web``, a static folder
that translates in a browser, offline once loaded (docs/web.md).

The folder holds the builtin TFLite files re-exported for LiteRT.js (the encoder and
``decode_step_v3`` alone: int32 and float32 boundary tensors, no bool), the tokenizer
files, ``rules.json`` (:mod:`keras_attn.text.rules`), the JavaScript that runs the same
rules and the greedy loop around the files (``keras_attn/export/webapp/``: an ES module
apps import, ``keras-attn.js``, and a page, ``index.html``) and LiteRT.js's WebAssembly
files, installed by ``npm ci`` from the lock file beside the JavaScript (versions and
integrity hashes pinned):

    web/index.html  page.js  keras-attn.js  rules.js  tokenizers.js
    web/model/      encoder.tflite  decoder_step.tflite  metadata.json  rules.json  src.model ...
    web/litert/     litert.js  wasm-utils.js  litert_wasm_internal.js/.wasm

Example:
    >>> export_web("exported/run", "/tmp/dates-web")  # keras-attn export exported/run --format web
"""
import hashlib
import json
import os
import shutil
import subprocess

from keras_attn.core import runs
from keras_attn.export.base import check_choice, run_parts, sample_sources
from keras_attn.export.tflite import TFLiteBuiltinExporter

WEBAPP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "webapp")
APP_FILES = ("index.html", "page.js", "keras-attn.js", "rules.js", "tokenizers.js")
# LiteRT.js's WebAssembly builds: plain (browsers with relaxed SIMD) and compat (the others).
WASM = {"plain": "litert_wasm_internal", "compat": "litert_wasm_compat_internal"}
WASM_CHOICES = {"plain": ("plain",), "all": ("plain", "compat")}
CACHE = os.environ.get("KERAS_ATTN_WEB_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "keras_attn", "web")


def litert_modules(log=print):
    """The ``node_modules`` folder of LiteRT.js as ``webapp/package-lock.json`` pins it:
    installed once with ``npm ci`` into a cache folder named by the lock's hash
    (``KERAS_ATTN_WEB_CACHE``; npm checks every package's integrity hash)."""
    with open(os.path.join(WEBAPP, "package-lock.json"), "rb") as f:
        lock = f.read()
    folder = os.path.join(CACHE, hashlib.sha256(lock).hexdigest()[:16])
    modules = os.path.join(folder, "node_modules")
    if os.path.exists(os.path.join(folder, ".installed")):
        return modules
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the web export needs npm to install LiteRT.js (pinned in "
                           f"{WEBAPP}/package-lock.json): install Node.js and npm "
                           "(Debian: apt-get install npm)")
    os.makedirs(folder, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(WEBAPP, name), os.path.join(folder, name))
    log(f"  installing LiteRT.js (npm ci) into {folder}")
    done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                          cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci failed in {folder}: {done.stderr.strip()[-2000:]}")
    open(os.path.join(folder, ".installed"), "w").close()
    return modules


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def copy_litert(modules, folder, variants):
    """LiteRT.js's ES module (its one bare import made relative), its WebAssembly utils
    and the ``variants`` of :data:`WASM` into ``folder``; ``{file: sha256}``."""
    core = os.path.join(modules, "@litertjs", "core")
    with open(os.path.join(core, "package.json"), encoding="utf-8") as f:
        version = json.load(f)["version"]
    os.makedirs(folder)
    sources = {"litert.js": os.path.join(core, "dist", "index.js"),
               "wasm-utils.js": os.path.join(modules, "@litertjs", "wasm-utils", "dist",
                                             "index.js")}
    for variant in variants:
        for ext in (".js", ".wasm"):
            sources[WASM[variant] + ext] = os.path.join(core, "wasm", WASM[variant] + ext)
    for name, source in sources.items():
        if name.endswith(".js") and not name.startswith("litert_wasm"):
            with open(source, encoding="utf-8") as f:
                text = f.read()
            bare = 'from "@litertjs/wasm-utils"'
            if name == "litert.js":
                if bare not in text:
                    raise RuntimeError(f"LiteRT.js {version} no longer imports "
                                       "@litertjs/wasm-utils as expected")
                text = text.replace(bare, 'from "./wasm-utils.js"')
            # No source map is shipped: the browser would ask for it.
            text = "\n".join(line for line in text.split("\n")
                             if not line.startswith("//# sourceMappingURL="))
            runs.atomic_write_bytes(os.path.join(folder, name), text.encode("utf-8"))
        else:
            shutil.copy(source, os.path.join(folder, name))
    return version, {name: _sha256(os.path.join(folder, name)) for name in sorted(sources)}


class WebExporter(TFLiteBuiltinExporter):
    """A static web folder (module docstring): the builtin files with ``decode_step_v3``
    alone, the tokenizers, the rules, the JavaScript and LiteRT.js.

    Args:
        quantization: ``"float32"`` or ``"int8"`` (dynamic-range weights).
        overwrite, passthrough: :class:`TFLiteBuiltinExporter`'s.
        wasm: ``"plain"`` (the WebAssembly build for browsers with relaxed SIMD, about 9 MB)
            or ``"all"`` (also the compat build for the others, 9 MB more).

    Example:
        >>> WebExporter().export(translator, "web")
    """

    format = "web"
    target = "web"
    aligned_only = True

    def __init__(self, quantization="float32", overwrite=False, passthrough=None,
                 wasm="plain"):
        super().__init__(check_choice("quantization", quantization, ("float32", "int8")),
                         overwrite=overwrite, passthrough=passthrough)
        self.wasm = check_choice("wasm", wasm, tuple(WASM_CHOICES))

    def options(self):
        return {"target": self.target, "quantization": self.quantization, "wasm": self.wasm}

    def supports(self, parts):
        for side in ("src", "tgt"):
            if _tokenizer_kind(getattr(parts, f"{side}_tokenizer")) is None:
                return ("the web target runs character and SentencePiece tokenizers only "
                        f"(keras_attn/export/webapp/tokenizers.js): this run's {side} "
                        "tokenizer is WordPiece")
        reason = super().supports(parts)
        return reason.replace("builtin target", "web target") if reason else None

    def write(self, parts, path):
        from keras_attn.decoding.options import OPTIONS
        from keras_attn.export.builtin_runtime import FIXED_OPTIONS, LOOP_OPTIONS
        from keras_attn.text.rules import RULES_FILE, rules_data

        model = os.path.join(path, "model")
        report = super().write(parts, model)
        meta = report["metadata"]
        version, hashes = copy_litert(litert_modules(), os.path.join(path, "litert"),
                                      WASM_CHOICES[self.wasm])
        meta["web"] = {
            "tokenizers": {side: {"kind": _tokenizer_kind(getattr(parts, f"{side}_tokenizer")),
                                  "file": meta[f"{side}_vocab"]} for side in ("src", "tgt")},
            "options": {name: opt.default for name, opt in OPTIONS.items()},
            "loop_options": list(LOOP_OPTIONS), "fixed_options": FIXED_OPTIONS,
            "wasm": list(WASM_CHOICES[self.wasm]), "litert": version}
        runs.write_json(os.path.join(model, "metadata.json"), meta)
        runs.write_json(os.path.join(model, RULES_FILE), rules_data())
        for name in APP_FILES:
            shutil.copy(os.path.join(WEBAPP, name), os.path.join(path, name))
        report["litert"] = {"version": version, "sha256": hashes}
        report["runtime"] = ("LiteRT.js in the browser: keras-attn.js (this folder) runs the "
                             "rules and the greedy loop; keras_attn.export.builtin_runtime."
                             "BuiltinTextRuntime is the same in Python")
        return report

    def check(self, parts, path, samples):
        """The folder's files, run by the Python twin of its JavaScript."""
        from keras_attn.export.builtin_runtime import BuiltinTextRuntime

        out = BuiltinTextRuntime(os.path.join(path, "model")).translate(samples)
        if out["translation"].shape != (len(samples),):
            raise RuntimeError(f"the web export's files returned {out}")

    def run_samples(self, path, translator, sources, passthrough=None):
        """The sources translated by the folder's files through the Python twin of its
        JavaScript (``BuiltinTextRuntime``), spans passed through as the export says."""
        from keras_attn.export.builtin_runtime import BuiltinTextRuntime

        out = BuiltinTextRuntime(os.path.join(path, "model")).translate(sources, passthrough)
        return {"translation": [t.decode("utf-8") for t in out["translation"]]}


def _tokenizer_kind(tokenizer):
    """``"characters"``, ``"sentencepiece"`` or None (no JavaScript twin: WordPiece)."""
    if getattr(tokenizer, "proto", None) is not None:
        return "sentencepiece"
    return "characters" if getattr(tokenizer, "char_level", False) else None


def default_dir(run_dir):
    """``RUN_DIR/export/web``."""
    return os.path.join(runs.paths(run_dir)["export"], "web")


def export_web(run_dir, export_dir=None, overwrite=False, log=print, quantization="float32",
               passthrough="auto", wasm="plain"):
    """Write a run's Transformer as a static web folder (:class:`WebExporter`), checked
    against ``Translator`` on the run's sample sentences.

    Args:
        run_dir: a run directory of a Transformer with character or SentencePiece tokenizers.
        export_dir: the folder to write (default :func:`default_dir`).
        passthrough: ``"auto"``, ``"on"`` or ``"off"`` (or a bool), as ``export_run``'s.
        overwrite, quantization, wasm: :class:`WebExporter`'s.

    Returns:
        The report dict (also ``export_dir/model/export_report.json``).
    """
    switch = {"auto": None, "on": True, "off": False}
    exporter = WebExporter(quantization, overwrite, switch.get(passthrough, passthrough), wasm)
    translator, parts = run_parts(run_dir)
    path = os.path.abspath(export_dir or default_dir(run_dir))
    log(f"exporting {run_dir} -> {path} (web, {quantization})")
    sources = sample_sources(run_dir)
    report = exporter.export(parts, path, samples=sources)
    passthrough = exporter.passes_through(parts)
    want = translator.translate(sources, passthrough=passthrough)
    got = exporter.run_samples(path, translator, sources, passthrough)["translation"]
    same = sum(a == b for a, b in zip(want, got))
    report["samples"] = {"sources": sources, "translator": want, "web_files": got,
                         "agreement": same / max(len(sources), 1)}
    report["run_dir"] = os.path.abspath(run_dir)
    runs.write_json(os.path.join(path, "model", "export_report.json"), report)
    log(f"  {same} of {len(sources)} sample translations equal Translator's; "
        f"{report['total_bytes'] / 1e6:.1f} MB\n"
        f"  serve it with any static file server, e.g.\n"
        f"  python -m http.server --bind 127.0.0.1 --directory {path} 8000\n"
        f"  and open http://127.0.0.1:8000/ (window.kerasAttn.translate(texts) on the page; "
        f"apps import keras-attn.js)")
    if quantization == "float32" and same != len(sources):
        raise RuntimeError(f"the web files translate {len(sources) - same} of "
                           f"{len(sources)} samples differently from Translator: {report['samples']}")
    return report
