"""What an export can keep of an earlier one: artefacts made from the same run, code and
settings (TensorFlow-free).

:func:`run_fingerprint` hashes what an artefact is made from: the run's weights, config,
tokenizers and calibrator, the package's source and the versions of TensorFlow, Keras and
tensorflow-text. :func:`artefact_fingerprint` adds one exporter's settings. ``export_run``
records each artefact's fingerprint in ``export_report.json`` and keeps an artefact whose
recorded fingerprint is today's (:func:`reusable`), so ``keras-attn export RUN`` after a
budgeted run makes only the files the budget left out, and exporting an unchanged run
again costs a few seconds.

Example:
    >>> fp = artefact_fingerprint(run_fingerprint("runs/dates"), {"quantization": "int8"})
    >>> reusable(previous_report["tflite"].get("text_int8"), fp)
    True
"""
import functools
import hashlib
import json
import os

from keras_attn.core import runs

# The run's files an artefact is made from (runs.paths names); metrics.json is not one.
RUN_FILES = ("config", "model", "calibration", "src_vocab", "tgt_vocab", "src_model",
             "tgt_model")
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hash_file(digest, path):
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


@functools.lru_cache(maxsize=None)
def code_fingerprint():
    """A hash of every ``.py`` and ``.json`` file of the installed keras_attn and of the
    versions of the libraries that trace and convert (a change to either makes other
    artefacts)."""
    from importlib import metadata

    digest = hashlib.sha256()
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".json")):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, PACKAGE).encode("utf-8"))
                _hash_file(digest, path)
    for package in ("tensorflow", "keras", "tensorflow-text", "ai-edge-litert"):
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = None
        digest.update(f"{package}={version};".encode("utf-8"))
    return digest.hexdigest()


def run_fingerprint(run_dir):
    """A hash of the run's files an artefact is made from (:data:`RUN_FILES`) and of
    :func:`code_fingerprint`."""
    digest = hashlib.sha256(code_fingerprint().encode("utf-8"))
    for key, path in runs.paths(run_dir).items():
        if key in RUN_FILES and os.path.isfile(path):
            digest.update(key.encode("utf-8"))
            _hash_file(digest, path)
    return digest.hexdigest()


def artefact_fingerprint(run, settings):
    """``run`` (:func:`run_fingerprint`) with an exporter's ``settings`` (a JSON-able dict)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(f"{run}\n{text}".encode("utf-8")).hexdigest()


def previous_report(export_dir):
    """The ``export_report.json`` an earlier export left in ``export_dir`` ({} if none or
    unreadable: nothing is then reused)."""
    try:
        report = runs.read_json(os.path.join(export_dir, "export_report.json"))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def reusable(entry, fingerprint):
    """Whether ``entry`` (an artefact's report in an earlier ``export_report.json``) records
    ``fingerprint`` and its artefact is still at its ``path``."""
    return (isinstance(entry, dict) and entry.get("fingerprint") == fingerprint
            and isinstance(entry.get("path"), str) and os.path.exists(entry["path"]))
