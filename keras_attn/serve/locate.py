"""Which artefact ``keras-attn serve PATH`` serves: a run or export directory resolved to
a SavedModel version or a CTranslate2 model directory (each engine's ``find``,
:mod:`keras_attn.serve.engines`). Imports neither TensorFlow nor CTranslate2.

Example:
    >>> locate("exported").path
    '/.../exported/saved_model/translator/1'
    >>> locate("runs/fra30", engine="ctranslate2").path
    '/.../runs/fra30/export/ctranslate2'
"""
import dataclasses
import os
from typing import Optional

from keras_attn.core.languages import (SAVED_MODEL_METADATA, UNKNOWN_LANGUAGES,
                                       config_languages, languages_from_metadata)
from keras_attn.core.runs import read_json
from keras_attn.serve.engines import CT2_METADATA, ENGINES, MODEL_NAME  # noqa: F401


@dataclasses.dataclass(frozen=True)
class Artefact:
    """What a replica loads and what the HTTP layer tells clients.

    Args:
        engine: a name of :data:`~keras_attn.serve.engines.ENGINES`.
        path: the SavedModel version folder, or the CTranslate2 model directory.
        max_len: the export's longest output.
        source, target: ``(code, name)`` of the languages.
        run_dir: the run directory it was exported from, when known.
        web: the web export of the same model (``keras-attn export RUN --format web``),
            where there is one: the page can translate in the browser with it.
    """

    engine: str
    path: str
    max_len: int
    source: tuple = UNKNOWN_LANGUAGES[0]
    target: tuple = UNKNOWN_LANGUAGES[1]
    run_dir: Optional[str] = None
    web: Optional[str] = None


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
    """The run directory behind ``path`` / the artefact ``found``, or None."""
    for candidate in (path, os.path.join(path, "run"), os.path.dirname(path)):
        if os.path.exists(os.path.join(candidate, "config.json")) and \
                not os.path.exists(os.path.join(candidate, CT2_METADATA)):
            return candidate
    for report in (os.path.join(path, "export_report.json"), os.path.join(found, CT2_METADATA)):
        if os.path.exists(report):
            run_dir = read_json(report).get("run_dir")
            if run_dir and os.path.exists(os.path.join(run_dir, "config.json")):
                return run_dir
    return None


def artefact_languages(found):
    """``(source, target)`` ``(code, name)`` pairs of an artefact's own metadata, or None
    when it holds none."""
    metadata = (os.path.join(found, CT2_METADATA), os.path.join(found, SAVED_MODEL_METADATA),
                found.rstrip(os.sep) + ".report.json")
    return next(filter(None, (languages_from_metadata(read_json(meta)) for meta in metadata
                              if os.path.isfile(meta))), None)


def languages_of(run_dir, found=None):
    """``(source, target)`` ``(code, name)`` pairs: the artefact ``found``'s metadata, else
    the run's ``config.json``, else ``src``/``tgt``.

    Example:
        >>> languages_of("exported/run")
        (('dates', 'Dates as people write them'), ('iso', 'ISO 8601 dates'))
    """
    from_artefact = artefact_languages(found) if found is not None else None
    if from_artefact or run_dir is None:
        return from_artefact or UNKNOWN_LANGUAGES
    return config_languages(read_json(os.path.join(run_dir, "config.json")))


def locate(path, engine="savedmodel"):
    """Resolve ``path`` to the :class:`Artefact` that ``engine`` serves.

    Args:
        path: a run directory, an export directory, a SavedModel base or version folder,
            or a CTranslate2 model directory.
        engine: a name of :data:`~keras_attn.serve.engines.ENGINES`.

    Raises:
        ValueError: an unknown ``engine``.
        FileNotFoundError: no artefact of that engine (the message names the export
            command that writes one).
    """
    if engine not in ENGINES:
        raise ValueError(f"`engine` must be one of {tuple(ENGINES)}. Received: engine={engine!r}")
    kind = ENGINES[engine]
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path!r} is not a directory (give a run directory or an "
                                "export directory)")
    found = next((f for f in map(kind.find, _export_dirs(path)) if f), None)
    if found is None:
        raise FileNotFoundError(
            f"no {engine} artefact in {path!r} (looked for {kind.layout} in it and in its "
            f"export/); write one with `keras-attn export RUN_DIR{kind.export_flags}`")
    max_len = kind.max_len(found)
    run_dir = _run_dir_of(path, found)
    if max_len is None and run_dir is not None:
        max_len = read_json(os.path.join(run_dir, "config.json"))["max_len"]
    if max_len is None:
        raise FileNotFoundError(f"{found!r} has no {os.path.basename(found)}.report.json "
                                "beside it to read its max_len from")
    source, target = languages_of(run_dir, found)
    return Artefact(engine, found, int(max_len), source, target, run_dir,
                    web_export(path, found, run_dir))


def web_export(path, found, run_dir=None):
    """The web folder beside the artefact ``found`` (``EXPORT/web``, ``EXPORT`` the folder
    that holds its ``saved_model/`` or ``ctranslate2/``), of ``path`` or of the run: the
    first with ``model/metadata.json``, or None."""
    candidates = [os.path.join(d, "web") for d in _export_dirs(path)]
    parts = os.path.abspath(found).split(os.sep)
    for k, part in enumerate(parts[1:], 1):
        if part == "saved_model" or part.startswith("ctranslate2"):
            candidates.append(os.path.join(os.sep.join(parts[:k]) or os.sep, "web"))
    if run_dir:
        candidates.append(os.path.join(run_dir, "export", "web"))
    return next((os.path.abspath(c) for c in candidates
                 if os.path.isfile(os.path.join(c, "model", "metadata.json"))), None)
