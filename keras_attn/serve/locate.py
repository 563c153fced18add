"""Which artefact ``keras-attn serve PATH`` serves: a run directory or an export directory,
resolved to an exported SavedModel version or a CTranslate2 model directory.

Layouts read (``keras_attn.core.runs``, ``keras_attn.export.rundir``,
``keras_attn.export.ctranslate2``)::

    RUN_DIR/config.json                               a run directory
    RUN_DIR/export/saved_model/translator/<version>/  its SavedModel (keras-attn export)
    RUN_DIR/export/ctranslate2/                       its CTranslate2 model (--format ctranslate2)
    EXPORT_DIR/saved_model/translator/<version>/      an export directory (the committed
    EXPORT_DIR/run/config.json                        ``exported/`` also holds its run)

Imports neither TensorFlow nor CTranslate2: the server's parent process resolves the path
and its replicas load the artefact.

Example:
    >>> locate("exported").path
    '/.../exported/saved_model/translator/1'
    >>> locate("runs/fra30", engine="ctranslate2").path
    '/.../runs/fra30/export/ctranslate2'
"""
import dataclasses
import json
import os
from typing import Optional

ENGINES = ("savedmodel", "ctranslate2")
# The names the exporters write (their modules import TensorFlow or CTranslate2;
# tests/test_translation.py checks these agree with keras_attn.export.saved_model.MODEL_NAME
# and keras_attn.export.ctranslate2_runtime.METADATA).
MODEL_NAME = "translator"
CT2_METADATA = "keras_attn.json"

# LibreTranslate's /languages entries for each task of keras_attn.core.config (code, name).
TASK_LANGUAGES = {
    "tatoeba": (("en", "English"), ("fr", "French")),
    "dates": (("dates", "Dates as people write them"), ("iso", "ISO 8601 dates")),
}
UNKNOWN_LANGUAGES = (("src", "Source"), ("tgt", "Target"))


@dataclasses.dataclass(frozen=True)
class Artefact:
    """What a replica loads and what the HTTP layer tells clients.

    Args:
        engine: ``"savedmodel"`` or ``"ctranslate2"``.
        path: the SavedModel version folder, or the CTranslate2 model directory.
        max_len: the export's longest output (``max_length`` may not exceed it).
        source, target: ``(code, name)`` of the languages (``GET /languages``).
        run_dir: the run directory it was exported from, when known.
    """

    engine: str
    path: str
    max_len: int
    source: tuple = UNKNOWN_LANGUAGES[0]
    target: tuple = UNKNOWN_LANGUAGES[1]
    run_dir: Optional[str] = None


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _latest_version(base):
    """The highest integer version folder of a TF Serving model base (TF Serving's choice)."""
    versions = [int(n) for n in os.listdir(base) if n.isdigit()
                and os.path.exists(os.path.join(base, n, "saved_model.pb"))]
    return os.path.join(base, str(max(versions))) if versions else None


def _saved_model_in(folder):
    """The SavedModel version a folder holds: itself, a model base, or an export directory."""
    if os.path.exists(os.path.join(folder, "saved_model.pb")):
        return folder
    for base in (folder, os.path.join(folder, MODEL_NAME),
                 os.path.join(folder, "saved_model", MODEL_NAME)):
        if os.path.isdir(base):
            found = _latest_version(base)
            if found:
                return found
    return None


def _ct2_in(folder):
    for candidate in (folder, os.path.join(folder, "ctranslate2"),
                      os.path.join(folder, "export", "ctranslate2")):
        if os.path.exists(os.path.join(candidate, CT2_METADATA)):
            return candidate
    return None


def _export_dirs(path):
    """Folders that may hold the artefacts of ``path`` (a run or an export directory)."""
    dirs = [path, os.path.join(path, "export")]
    parent = os.path.dirname(path)
    if os.path.exists(os.path.join(path, "config.json")) and \
            os.path.isdir(os.path.join(parent, "saved_model")) and \
            os.path.basename(path) == "run":  # the committed exported/run inside exported/
        dirs.append(parent)
    return dirs


def _run_dir_of(path, found):
    """The run directory behind ``path`` / the artefact ``found``, if it is here."""
    for candidate in (path, os.path.join(path, "run"), os.path.dirname(path)):
        if os.path.exists(os.path.join(candidate, "config.json")) and \
                not os.path.exists(os.path.join(candidate, CT2_METADATA)):
            return candidate
    for report in (os.path.join(path, "export_report.json"), os.path.join(found, CT2_METADATA)):
        if os.path.exists(report):
            run_dir = _read(report).get("run_dir")
            if run_dir and os.path.exists(os.path.join(run_dir, "config.json")):
                return run_dir
    return None


def languages_of(run_dir):
    """``(source, target)`` ``(code, name)`` pairs of a run's task (unknown: src/tgt)."""
    if run_dir is None:
        return UNKNOWN_LANGUAGES
    task = _read(os.path.join(run_dir, "config.json")).get("task")
    return TASK_LANGUAGES.get(task, UNKNOWN_LANGUAGES)


def locate(path, engine="savedmodel"):
    """Resolve ``path`` to the :class:`Artefact` that ``engine`` serves.

    Args:
        path: a run directory, an export directory, a SavedModel base or version folder,
            or a CTranslate2 model directory.
        engine: ``"savedmodel"`` (the ``translate`` signature) or ``"ctranslate2"``.

    Raises:
        ValueError: an unknown ``engine``.
        FileNotFoundError: no such path, or no artefact of that engine in it (the message
            says which ``keras-attn export`` command writes one).
    """
    if engine not in ENGINES:
        raise ValueError(f"`engine` must be one of {ENGINES}. Received: engine={engine!r}")
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path!r} is not a directory (give a run directory or an "
                                "export directory)")
    finder = _saved_model_in if engine == "savedmodel" else _ct2_in
    found = next((f for f in map(finder, _export_dirs(path)) if f), None)
    if found is None:
        fmt = "" if engine == "savedmodel" else " --format ctranslate2"
        raise FileNotFoundError(
            f"no {engine} artefact in {path!r} (looked for saved_model/{MODEL_NAME}/<version>/"
            f" and ctranslate2/{CT2_METADATA} in it and in its export/); write one with "
            f"`keras-attn export RUN_DIR{fmt}`")
    if engine == "savedmodel":
        report = os.path.join(os.path.dirname(found), os.path.basename(found) + ".report.json")
        max_len = _read(report)["decoding"]["max_len"] if os.path.exists(report) else None
    else:
        max_len = _read(os.path.join(found, CT2_METADATA))["max_len"]
    run_dir = _run_dir_of(path, found)
    if max_len is None and run_dir is not None:
        max_len = _read(os.path.join(run_dir, "config.json"))["max_len"]
    if max_len is None:
        raise FileNotFoundError(f"{found!r} has no {os.path.basename(found)}.report.json "
                                "beside it to read its max_len from")
    source, target = languages_of(run_dir)
    return Artefact(engine, found, int(max_len), source, target, run_dir)
