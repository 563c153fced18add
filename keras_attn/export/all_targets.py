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
import concurrent.futures
import json
import os
import shlex
import time

from keras_attn.core import runs
from keras_attn.export import reuse
from keras_attn.export.base import QUANTIZATIONS, now, run_parts, sample_sources, versions
from keras_attn.export.saved_model import MODEL_NAME, SERVING_DOCKER, SavedModelExporter
from keras_attn.export.tflite import TFLiteBuiltinExporter, TFLiteTextExporter
from keras_attn.export.workers import ConversionPool, Staging

MEASURED_ON = {"translation": "raw text: the file vs serving_default",
               "ids": "Translator.encode ids: the loop vs translate_ids"}


class ExportCheckError(RuntimeError):
    """An exported artefact does not decode as the SavedModel (:func:`check_agreement`)."""


def export_run(run_dir, export_dir=None, version=1, overwrite=False, beam_size=1,
               quantizations=("float32", "int8"), log=print, request_signature=True,
               passthrough="auto", deadline=None, workers="auto", reuse=True):
    """Export a training run: the layout of the module docstring under ``export_dir``
    (builtin files only for Transformers), and how to serve it printed.

    The TFLite files are traced and staged first, then converted in worker processes while
    this process saves and checks the SavedModel (:mod:`keras_attn.export.workers`).

    Args:
        run_dir: a run directory. export_dir: output folder (default ``RUN_DIR/export``).
        version, overwrite, beam_size, request_signature: :class:`SavedModelExporter`'s.
        quantizations: TFLite variants (of ``QUANTIZATIONS``); ``()``: the SavedModel alone.
        passthrough: ``"auto"``, ``"on"`` or ``"off"`` (or a bool): the SavedModel's
            ``serving_default`` passes spans through.
        deadline: ``time.monotonic()`` by which the export should end: a TFLite file not
            converted by then is left out (``report["left_out"]``; in this process, a
            quantized file whose float32 twin took longer than is left).
        workers: conversion processes (``"auto"``: :func:`workers.default_workers`; 0: in
            this process).
        reuse: keep an artefact that an earlier export made from the same run, code and
            settings (its fingerprint in ``export_report.json``; :mod:`reuse`), even
            without ``overwrite``.

    Returns:
        The combined report dict (also ``export_dir/export_report.json``).

    Example:
        >>> export_run("runs/dates")          # CLI: keras-attn export runs/dates
    """
    began, cpu = time.monotonic(), time.process_time()
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
    # float32 first: under a deadline an int8 file is what is left out.
    tflite = sorted((e for e in candidates if e.supports(parts) is None),
                    key=lambda e: e.quantization != "float32")
    export_dir = os.path.abspath(export_dir or runs.paths(run_dir)["export"])
    saved_base = os.path.join(export_dir, "saved_model")
    tflite_dir = os.path.join(export_dir, "tflite")
    paths = {"saved_model": saved.destination(saved_base),
             **{e.key: e.path_in(tflite_dir) for e in tflite}}
    fingerprints = _fingerprints(run_dir, saved, tflite)
    kept = _reused(export_dir, fingerprints, paths) if reuse else {}
    existing = [p for key, p in paths.items() if key not in kept and os.path.exists(p)]
    if existing and not overwrite:
        raise FileExistsError(f"{', '.join(existing)} already exist(s) and were made from "
                              "another run, code or settings; pass overwrite=True (CLI: "
                              "--overwrite) or another --version")
    report = {"run_dir": os.path.abspath(run_dir), "export_dir": export_dir,
              "created": now(), "versions": versions(), "languages": parts.languages,
              "reused": sorted(kept)}
    seconds = {"run_parts": round(time.monotonic() - began, 2)}
    log(f"exporting {run_dir} -> {export_dir}" + (f" (kept from the last export: "
                                                   f"{', '.join(sorted(kept))})" if kept else ""))
    made = [e for e in tflite if e.key not in kept]
    os.makedirs(export_dir, exist_ok=True)
    with Staging(ConversionPool(workers, jobs=2 * len(made)), export_dir) as staging:
        # Cheapest trace first: the builtin files convert while the text graphs are traced.
        for exporter in sorted(made, key=lambda e: e.target != "builtin"):
            exporter.staging = staging
            exporter.start(parts)
        seconds["trace_and_stage"] = dict(staging.seconds)
        report["saved_model"] = kept.get("saved_model") or saved.export(parts, saved_base)
        report["saved_model"]["fingerprint"] = fingerprints["saved_model"]
        log(f"  SavedModel: {report['saved_model']['path']} ({_took(report['saved_model'])})")
        report["tflite"], report["left_out"] = {}, []
        _collect(made, parts, tflite_dir, deadline, staging, report, log)
        if report["left_out"]:
            staging.close(kill=True)  # their conversions abandoned, not awaited
    for exporter in tflite:
        if exporter.key in kept:
            report["tflite"][exporter.key] = kept[exporter.key]
        if exporter.key in report["tflite"]:
            report["tflite"][exporter.key]["fingerprint"] = fingerprints[exporter.key]
    tflite = [e for e in tflite if e.key in report["tflite"]]
    compared = time.monotonic()
    report["samples"] = compare_samples(translator, saved, report, tflite,
                                        sample_sources(run_dir))
    converted = {key: rep["seconds"] for key, rep in report["tflite"].items() if key not in kept}
    seconds.update(
        saved_model=(0.0 if "saved_model" in kept
                     else report["saved_model"].get("seconds", {}).get("total", 0.0)),
        convert={key: round(sum(s.get("convert", {}).values()), 2)
                 for key, s in converted.items()},
        samples=round(time.monotonic() - compared, 2), total=round(time.monotonic() - began, 2),
        cpu=round(time.process_time() - cpu, 2), workers=staging.pool.workers,
        workers_cpu=round(sum(sum(s.get("convert_cpu", {}).values())
                              for s in converted.values()), 2))
    report["seconds"] = seconds
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
    log(f"  export: {seconds['total']:.1f} s in all ({_phases(seconds)})")
    runs.write_json(os.path.join(export_dir, "export_report.json"), report)
    failed = {key: verdict for key, verdict in check.items() if verdict.startswith("FAILED")}
    if failed:
        raise ExportCheckError(
            "exported artefacts decode differently from the SavedModel: " + "; ".join(
                f"{key} {verdict}" for key, verdict in failed.items())
            + f" (the translations: {os.path.join(export_dir, 'export_report.json')})")
    _log_serving(report, saved_base, log)
    return report


def _fingerprints(run_dir, saved, tflite):
    """``{artefact key: fingerprint}`` (:mod:`keras_attn.export.reuse`)."""
    run = reuse.run_fingerprint(run_dir)
    return {key: reuse.artefact_fingerprint(run, exporter.settings())
            for key, exporter in [("saved_model", saved), *((e.key, e) for e in tflite)]}


def _reused(export_dir, fingerprints, paths):
    """``{artefact key: its earlier report}`` of the artefacts an earlier export made at the
    same paths with today's fingerprints."""
    previous = reuse.previous_report(export_dir)
    entries = {"saved_model": previous.get("saved_model"), **(previous.get("tflite") or {})}
    return {key: dict(entries[key], reused=True) for key in fingerprints
            if reuse.reusable(entries.get(key), fingerprints[key])
            and os.path.abspath(entries[key]["path"]) == paths[key]}


def _collect(exporters, parts, tflite_dir, deadline, staging, report, log):
    """Write each TFLite artefact once its files are converted; under ``deadline`` leave out
    those not converted by then (in this process: a quantized file whose float32 twin took
    longer than is left)."""
    took = {}
    for exporter in exporters:
        futures = staging.started(exporter.key)
        if deadline is not None:
            twin = took.get(f"{exporter.target}_float32")
            if staging.pool.workers:
                waited = concurrent.futures.wait(
                    list(futures.values()), timeout=max(deadline - time.monotonic(), 0.0))
                late = bool(waited.not_done)
            else:
                late = twin is not None and time.monotonic() + twin > deadline
            if late:
                report["left_out"].append(exporter.key)
                continue
        started = time.monotonic()
        rep = report["tflite"][exporter.key] = exporter.export(parts,
                                                               exporter.path_in(tflite_dir))
        took[exporter.key] = time.monotonic() - started
        converting = sum(rep["seconds"].get("convert", {}).values())
        log(f"  TFLite {exporter.key}: {rep['path']} ({rep['total_bytes'] / 1e6:.2f} MB, "
            f"converted in {converting:.1f} s)")


def _took(report):
    """``12.3 s``: an artefact's seconds, or ``kept`` (reused)."""
    if report.get("reused"):
        return "kept"
    return f"{report.get('seconds', {}).get('total', 0.0):.1f} s"


def _phases(seconds):
    """What :func:`export_run` logs of its ``seconds``."""
    staged = [f"{name} {value:.1f} s" for name, value in seconds["trace_and_stage"].items()]
    converted = [f"{key} {value:.1f} s" for key, value in seconds["convert"].items()]
    n = seconds["workers"]
    where = f"in {n} process{'es' if n > 1 else ''} beside this one" if n else "in this process"
    return "; ".join(
        ([f"traced and staged {', '.join(staged)}"] if staged else [])
        + [f"SavedModel {seconds['saved_model']:.1f} s"]
        + ([f"converted {', '.join(converted)} {where}"] if converted else [])
        + [f"samples {seconds['samples']:.1f} s",
           f"CPU {seconds['cpu']:.0f} s here, {seconds['workers_cpu']:.0f} s converting"])


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
