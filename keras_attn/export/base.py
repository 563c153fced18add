"""The ``Exporter`` base class (TensorFlow-only): options checked once, one ``export()``.

:meth:`Exporter.export` refuses an existing destination, writes the artefact in a
``.tmp-...`` folder beside it (TF Serving ignores it), loads and runs it, and renames it into
place (:func:`publish`): a reader never sees half an artefact, and an error or Ctrl-C leaves
nothing behind.

References: OpenNMT-tf ``opennmt/utils/exporters.py`` (an ``Exporter`` per format).
"""
import dataclasses
import datetime
import os
import shutil
import tempfile
import time

from keras_attn.core import runs

from keras_attn.text import tokenizers as text

QUANTIZATIONS = ("float32", "float16", "int8")
SMOKE_INPUTS = ("", "a")  # what every artefact must translate before it is published
DEFAULT_SAMPLES = ("3 March 2021", "1999-07-04", "le 4 juillet 1999")


@dataclasses.dataclass
class Parts:
    """What an export needs: model, tokenizers, length limit, input normalisation, the
    confidence calibrator (None: uncalibrated) and the languages
    (:func:`keras_attn.core.languages.languages_metadata`'s dict; None: none written)."""
    model: object
    src_tokenizer: object
    tgt_tokenizer: object
    max_len: int
    normalize: bool = False
    calibrator: object = None
    languages: dict = None


def as_parts(translator_or_parts, max_len=None):
    """A :class:`Parts` from a ``Translator``, a :class:`Parts` or a dict of its fields."""
    obj = translator_or_parts
    if (not isinstance(obj, (Parts, dict))
            and all(hasattr(obj, a) for a in ("model", "src_tokenizer", "tgt_tokenizer",
                                              "max_len"))):  # a Translator
        obj = {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(Parts)}
    if isinstance(obj, Parts):
        parts = dataclasses.replace(obj)
    elif isinstance(obj, dict):
        missing = {"model", "src_tokenizer", "tgt_tokenizer"} - set(obj)
        if missing:
            raise ValueError(f"`translator_or_parts` lacks {sorted(missing)}. "
                             f"Received keys: {sorted(obj)}")
        parts = Parts(obj["model"], obj["src_tokenizer"], obj["tgt_tokenizer"],
                      obj.get("max_len") or max_len, bool(obj.get("normalize", False)),
                      obj.get("calibrator"), obj.get("languages"))
    else:
        raise ValueError("`translator_or_parts` must be a keras_attn Translator, an "
                         f"export.Parts or a dict. Received: {type(obj).__name__}")
    if max_len is not None:
        parts.max_len = max_len
    if isinstance(parts.max_len, bool) or not isinstance(parts.max_len, int) or parts.max_len < 2:
        raise ValueError(f"`max_len` must be an integer >= 2 (a token and [END]). "
                         f"Received: max_len={parts.max_len!r}")
    return parts


# --- option checks (each raises ValueError naming the option and the value) ---------------
def check_beam(beam_size, name="beam_size"):
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={beam_size!r}")
    return beam_size


def check_length_penalty(length_penalty):
    if (isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float))
            or length_penalty < 0):
        raise ValueError(f"`length_penalty` (GNMT's alpha) must be a number >= 0. "
                         f"Received: length_penalty={length_penalty!r}")
    return float(length_penalty)


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: "
                         f"{name}={value!r}")
    return value


def check_flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


# --- the template --------------------------------------------------------------------------
class Exporter:
    """One export target. Subclasses check their options in ``__init__`` and implement
    :meth:`write` and :meth:`check` (and :meth:`supports` when some models cannot be held).

    Args:
        overwrite: replace an existing artefact (otherwise ``FileExistsError``).
    """

    format = None  # the report's "format"

    def __init__(self, overwrite=False):
        self.overwrite = check_flag("overwrite", overwrite)

    # -- hooks ---------------------------------------------------------------------------
    def options(self):
        """The options recorded in the report."""
        return {}

    def destination(self, export_dir):
        """The artefact's path for ``export_dir`` (the path itself unless overridden)."""
        return os.path.abspath(os.fspath(export_dir))

    def supports(self, parts):
        """``None`` when this target can hold ``parts.model``, else the reason."""
        return None

    def write(self, parts, path):
        """Write the artefact at ``path`` (not yet visible); return report fields."""
        raise NotImplementedError

    def check(self, parts, path, samples):
        """Load the artefact at ``path`` and run it on ``samples``; raise if it fails.
        May return report fields."""
        raise NotImplementedError

    def settings(self):
        """What makes the artefact besides the run: the class and every option (the
        artefact's fingerprint, :mod:`keras_attn.export.reuse`)."""
        return {"class": type(self).__name__, **{
            k: v for k, v in vars(self).items()
            if k != "overwrite" and not k.startswith("_")
            and isinstance(v, (bool, int, float, str, type(None)))}}

    def finish(self, path, report):
        """Last writes inside the artefact, once the report is complete (default: none)."""

    def published(self, path, report):
        """After the rename (default: nothing)."""

    # -- the template ----------------------------------------------------------------------
    def export(self, translator, export_dir, samples=None):
        """Write, check and publish the artefact for ``translator`` under ``export_dir``.

        Args:
            translator: a ``Translator``, a :class:`Parts` or a dict (:func:`as_parts`).
            export_dir: where it goes (:meth:`destination`).
            samples: sentences the written artefact is run on before it is published.

        Returns:
            The report dict (``path`` is the published artefact).
        """
        parts = as_parts(translator)
        reason = self.supports(parts)
        if reason:
            raise ValueError(reason)
        final = self.destination(export_dir)
        if os.path.exists(final) and not self.overwrite:
            raise FileExistsError(f"{final} already exists; pass overwrite=True (CLI: "
                                  "--overwrite) to replace it, or export another version")
        folder = os.path.dirname(final)
        os.makedirs(folder, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(final) + "-", dir=folder)
        try:
            staged = os.path.join(scratch, os.path.basename(final))
            report = {"format": self.format, "created": now(), "versions": versions(),
                      **self.options()}
            if parts.languages:
                report["languages"] = parts.languages
            began, cpu = time.monotonic(), time.process_time()
            report.update(self.write(parts, staged) or {})
            wrote = time.monotonic()
            report.update(self.check(parts, staged, list(samples or SMOKE_INPUTS)) or {})
            # Wall seconds: writing (tracing, saving, converting), checking, in all; this
            # process's CPU seconds.
            report["seconds"] = dict(report.get("seconds") or {},
                                     write=round(wrote - began, 2),
                                     check=round(time.monotonic() - wrote, 2))
            report["files"] = file_sizes(staged)
            report["total_bytes"] = sum(report["files"].values())
            self.finish(staged, report)
            publish(staged, final, self.overwrite)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        report["path"] = final
        report["seconds"].update(total=round(time.monotonic() - began, 2),
                                 cpu=round(time.process_time() - cpu, 2))
        self.published(final, report)
        return report


def publish(staged, final, overwrite):
    """Rename the finished file or folder ``staged`` to ``final`` (never half visible)."""
    if os.path.exists(final) and not overwrite:
        raise FileExistsError(f"{final} appeared while exporting")
    if os.path.isfile(staged):
        os.replace(staged, final)  # atomic, also over an existing file
        return
    if os.path.exists(final):
        # Two renames: for a moment there is no `final` (a new version number avoids that).
        old = tempfile.mkdtemp(prefix=".old-" + os.path.basename(final) + "-",
                               dir=os.path.dirname(final))
        replaced = os.path.join(old, "replaced")
        os.rename(final, replaced)
        try:
            os.rename(staged, final)
        except BaseException:
            os.rename(replaced, final)  # put the previous version back
            raise
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(staged, final)
    except OSError as e:  # another exporter won the race
        raise FileExistsError(f"{final} appeared while exporting: {e}") from None


# --- report helpers ------------------------------------------------------------------------
def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def versions():
    import keras
    import tensorflow as tf
    import tensorflow_text

    return {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
            "keras": keras.__version__}


def file_sizes(path):
    """``{relative path: bytes}`` of every file under ``path`` (or of the file itself)."""
    if os.path.isfile(path):
        return {os.path.basename(path): os.path.getsize(path)}
    sizes = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            sizes[os.path.relpath(full, path)] = os.path.getsize(full)
    return dict(sorted(sizes.items()))


def decoding_info(parts, beam_size, length_penalty, normalize):
    """The report's ``decoding`` (``alpha``: ``length_penalty``'s name in older reports)."""
    return {"max_len": parts.max_len, "beam_size": beam_size,
            "length_penalty": length_penalty, "alpha": length_penalty,
            "start_id": text.START_ID, "end_id": text.END_ID, "pad_id": text.PAD_ID,
            "normalize_input": normalize,
            "src_vocab_size": parts.src_tokenizer.vocab_size,
            "tgt_vocab_size": parts.tgt_tokenizer.vocab_size}


def tokenizer_files(parts):
    """``{file name: bytes}`` that rebuild the tokenizers (``src.model`` for SentencePiece,
    else ``src_vocab.txt``; ``keras_attn.text.subword.load_tokenizer`` reads either)."""
    files = {}
    for side, tok in (("src", parts.src_tokenizer), ("tgt", parts.tgt_tokenizer)):
        proto = getattr(tok, "proto", None)
        if proto is not None:
            files[f"{side}.model"] = bytes(proto)
        else:
            files[f"{side}_vocab.txt"] = "".join(t + "\n" for t in tok.vocab).encode("utf-8")
    return files


def write_files(folder, files):
    """Write ``{relative name: bytes}`` under ``folder`` (each file atomically)."""
    for name, content in files.items():
        runs.atomic_write_bytes(os.path.join(folder, name), content)


def run_parts(run_dir):
    """``(translator, parts)`` of a run, its confidence calibrator fitted first where the run
    has none, ``parts.languages`` the run's (:func:`keras_attn.translation.run.languages`)."""
    from keras_attn.training.calibration import calibrate_run
    from keras_attn.translation import run
    from keras_attn.translator import Translator

    if not os.path.exists(runs.paths(run_dir)["calibration"]):
        calibrate_run(run_dir, log=lambda *a: None)
    translator = Translator.from_run_dir(run_dir)
    parts = as_parts(translator)
    parts.languages = run.languages(run_dir)
    return translator, parts


def sample_sources(run_dir, limit=10):
    """Source sentences to check every artefact on: the run's test samples, else dates."""
    path = runs.paths(run_dir)["metrics"]
    if os.path.exists(path):
        samples = runs.read_json(path).get("samples") or []
        sources = [s["source"] for s in samples if isinstance(s, dict) and "source" in s]
        if sources:
            return sources[:limit]
    return list(DEFAULT_SAMPLES)
