"""Export a training run to every TensorFlow target, with one report (TensorFlow-only).

``export_run`` writes, under ``RUN_DIR/export`` (or ``export_dir``)::

    saved_model/translator/1/              TF Serving layout <base>/<model_name>/<version>/
    saved_model/translator/1.report.json   signatures, non-core ops, file sizes
    tflite/text_float32.tflite             strings in -> strings out (tensorflow-text ops)
    tflite/text_int8.tflite                (dynamic-range int8 weights)
    tflite/builtin_float32/                encoder.tflite + decoder_step.tflite (builtin
    tflite/builtin_int8/                    ops only) + metadata.json + tokenizer files
    export_report.json                     all of the above + sample translations

Every artefact is run on the run's sample sentences and compared with the SavedModel (a
text target on the raw strings, a builtin target on ``Translator.encode``'s ids):
``samples.agreement_with_saved_model`` is the share of equal outputs. A float32 file that
does not give the SavedModel's output on every sample fails the export
(:func:`check_agreement`, :class:`ExportCheckError`, after the report is written).
"""
import json
import os
import shlex
import time

from keras_attn.core import runs
from keras_attn.export.base import QUANTIZATIONS, now, run_parts, sample_sources, versions
from keras_attn.export.saved_model import MODEL_NAME, SERVING_DOCKER, SavedModelExporter
from keras_attn.export.tflite import TFLiteBuiltinExporter, TFLiteTextExporter

MEASURED_ON = {"translation": "raw text: the file vs serving_default",
               "ids": "Translator.encode ids: the loop vs translate_ids"}


class ExportCheckError(RuntimeError):
    """An exported artefact does not decode as the SavedModel (:func:`check_agreement`)."""


def export_run(run_dir, export_dir=None, version=1, overwrite=False, beam_size=1,
               quantizations=("float32", "int8"), log=print, request_signature=True,
               passthrough="auto", deadline=None):
    """Export a training run: the layout of the module docstring under ``export_dir``
    (builtin files only for Transformers), and how to serve it printed.

    Args:
        run_dir: a run directory. export_dir: output folder (default ``RUN_DIR/export``).
        version, overwrite, beam_size, request_signature: :class:`SavedModelExporter`'s.
        quantizations: TFLite variants (of ``QUANTIZATIONS``); ``()``: the SavedModel alone.
        passthrough: ``"auto"``, ``"on"`` or ``"off"`` (or a bool): the SavedModel's
            ``serving_default`` passes spans through.
        deadline: ``time.monotonic()`` by which the export should end: a quantized file is
            left out (``report["left_out"]``) when its float32 twin took longer than is left.

    Returns:
        The combined report dict (also ``export_dir/export_report.json``).

    Example:
        >>> export_run("runs/dates")          # CLI: keras-attn export runs/dates
    """
    # Every option is checked (by the exporters' constructors) before any work.
    switch = {"auto": None, "on": True, "off": False}
    if not isinstance(passthrough, bool) and passthrough not in switch:
        raise ValueError(f"`passthrough` must be one of {tuple(switch)} or a bool. "
                         f"Received: passthrough={passthrough!r}")
    passthrough = switch.get(passthrough, passthrough)
    saved = SavedModelExporter(MODEL_NAME, version, beam_size, overwrite=overwrite,
                               request_signature=request_signature, passthrough=passthrough)
    if isinstance(quantizations, str):
        raise ValueError(f"`quantizations` must be a list drawn from {QUANTIZATIONS}. "
                         f"Received: quantizations={quantizations!r}")
    candidates = ([TFLiteTextExporter(q, beam_size, overwrite=overwrite,
                                      request_signature=request_signature,
                                      passthrough=passthrough)
                   for q in quantizations]
                  + [TFLiteBuiltinExporter(q, overwrite=overwrite, passthrough=passthrough)
                     for q in quantizations])
    translator, parts = run_parts(run_dir)
    tflite = [e for e in candidates if e.supports(parts) is None]
    shared = {}  # the text targets' traced modules, one per model
    for exporter in tflite:
        if isinstance(exporter, TFLiteTextExporter):
            exporter.module_cache = shared
    export_dir = os.path.abspath(export_dir or runs.paths(run_dir)["export"])
    saved_base = os.path.join(export_dir, "saved_model")
    tflite_dir = os.path.join(export_dir, "tflite")
    if not overwrite:
        existing = [p for p in [saved.destination(saved_base)]
                    + [e.path_in(tflite_dir) for e in tflite] if os.path.exists(p)]
        if existing:
            raise FileExistsError(f"{', '.join(existing)} already exist(s); pass "
                                  "overwrite=True (CLI: --overwrite) or another --version")
    report = {"run_dir": os.path.abspath(run_dir), "export_dir": export_dir,
              "created": now(), "versions": versions(), "languages": parts.languages}
    log(f"exporting {run_dir} -> {export_dir}")
    report["saved_model"] = saved.export(parts, saved_base)
    log(f"  SavedModel: {report['saved_model']['path']}")
    report["tflite"], report["left_out"], took = {}, [], {}
    # float32 first: under a deadline, each quantized file's estimate is its twin's time.
    for exporter in sorted(tflite, key=lambda e: e.quantization != "float32"):
        twin = took.get(f"{exporter.target}_float32")
        if deadline is not None and twin is not None and time.monotonic() + twin > deadline:
            report["left_out"].append(exporter.key)
            continue
        began = time.monotonic()
        rep = report["tflite"][exporter.key] = exporter.export(parts, exporter.path_in(tflite_dir))
        took[exporter.key] = time.monotonic() - began
        log(f"  TFLite {exporter.key}: {rep['path']} ({rep['total_bytes'] / 1e6:.2f} MB)")
    tflite = [e for e in tflite if e.key in report["tflite"]]
    report["samples"] = compare_samples(translator, saved, report, tflite,
                                        sample_sources(run_dir))
    report["warnings"] = [f"{key}: {w}" for key, rep in
                          [("saved_model", report["saved_model"]), *report["tflite"].items()]
                          for w in rep.get("warnings", [])]
    check = report["samples"]["check"] = check_agreement(report["samples"], tflite,
                                                          translator.normalize)
    n = len(report["samples"]["sources"])
    for key, agree in report["samples"]["agreement_with_saved_model"].items():
        log(f"  {key}: {agree:.0%} of {n} sample translations equal the SavedModel's "
            f"({report['samples']['agreement_measured_on'][key]}): {check[key]}")
    for warning in report["warnings"]:
        log(f"  warning: {warning}")
    runs.write_json(os.path.join(export_dir, "export_report.json"), report)
    failed = {key: verdict for key, verdict in check.items() if verdict.startswith("FAILED")}
    if failed:
        raise ExportCheckError(
            "exported artefacts decode differently from the SavedModel: " + "; ".join(
                f"{key} {verdict}" for key, verdict in failed.items())
            + f" (the translations: {os.path.join(export_dir, 'export_report.json')})")
    _log_serving(report, saved_base, log)
    return report


def check_agreement(samples, exporters, normalize):
    """``{artefact key: "passed" | "FAILED: ..." | "unchecked: ..."}`` for
    :func:`compare_samples`' ``samples``: a float32 file must give the SavedModel's output on
    every sample; a quantised file passes when its float32 twin does; a text file of a model
    that expects normalised input (``normalize``) is unchecked."""
    agreement = samples["agreement_with_saved_model"]
    by_key = {e.key: e for e in exporters}
    verdicts = {}
    # The float32 files first: a quantised file's verdict reads its twin's.
    for key in sorted(agreement, key=lambda k: by_key[k].quantization != "float32"):
        share, exporter = agreement[key], by_key[key]
        twin = f"{exporter.target}_float32"
        if exporter.agreement_on == "translation" and normalize:
            verdicts[key] = ("unchecked: the file expects normalised input and got the raw "
                             "text")
        elif exporter.quantization == "float32":
            verdicts[key] = ("passed" if share == 1.0 else
                             f"FAILED: {share:.0%} of the samples equal the SavedModel's, "
                             "a float32 file must give all of them")
        elif twin not in verdicts:
            verdicts[key] = f"unchecked: {share:.0%} (no float32 {exporter.target} file beside it)"
        elif verdicts[twin] == "passed":
            verdicts[key] = (f"passed: the float32 {exporter.target} file agrees on every "
                             f"sample, what this one does otherwise is the "
                             f"{exporter.quantization} quantisation's")
        else:
            verdicts[key] = f"unchecked: {share:.0%} (its float32 twin {twin} failed)"
    return verdicts


def compare_samples(translator, saved, report, exporters, sources):
    """Translations of ``sources`` by each artefact and their agreement with the SavedModel
    (each exporter's ``agreement_on``: the text of the raw strings, or the ids)."""
    reference = saved.run_samples(report["saved_model"]["path"], translator, sources)
    translations = {"saved_model": reference["translation"]}
    agreement, measured_on = {}, {}
    # Where serving_default's graph passes spans through, the text files' runtime does too.
    passthrough = bool(report["saved_model"].get("passthrough", False))
    for exporter in exporters:
        out = exporter.run_samples(report["tflite"][exporter.key]["path"], translator, sources,
                                   passthrough=passthrough)
        translations[exporter.key] = out["translation"]
        on = exporter.agreement_on
        same = [a == b for a, b in zip(out[on], reference[on])]
        agreement[exporter.key] = sum(same) / max(len(sources), 1)
        measured_on[exporter.key] = MEASURED_ON[on]
    return {"sources": list(sources), "translations": translations,
            "agreement_with_saved_model": agreement, "agreement_measured_on": measured_on}


def _log_serving(report, saved_base, log):
    base = os.path.join(saved_base, MODEL_NAME)
    non_core = ", ".join(o["op"] for o in report["saved_model"]["non_core_ops"])
    needs = (f"the image's TF-Text build must provide {non_core}" if non_core
             else "core TensorFlow ops only: any recent image")
    example = report["samples"]["sources"][0]
    body = json.dumps({"instances": [{"text": example}]}, ensure_ascii=False)
    log(f"report: {os.path.join(report['export_dir'], 'export_report.json')}\n"
        f"serve it with TF Serving ({needs}):\n"
        f"  {SERVING_DOCKER.format(base=shlex.quote(base), name=MODEL_NAME)}\n"
        f"  curl -d {shlex.quote(body)} http://localhost:8501/v1/models/{MODEL_NAME}:predict\n"
        f"  python scripts/serve_client.py --rest localhost:8501 {shlex.quote(example)}")
