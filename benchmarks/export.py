"""Section ``export`` (TensorFlow): SavedModel vs TFLite (float32, int8) translation latency
per sentence and file sizes, for a trained run."""
import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from benchmarks.timing import interleaved, log, summarize


def bench_export(args, peak):
    try:
        from keras_attn import export
    except ImportError as e:
        return {"available": False, "reason": f"keras_attn.export does not import: {e}"}
    missing = [f for f in ("export_saved_model", "export_tflite", "run_tflite_text")
               if not hasattr(export, f)]
    if missing:
        return {"available": False, "reason": f"keras_attn.export lacks {missing}"}
    if not os.path.exists(os.path.join(args.run_dir, "config.json")):
        return {"available": False, "reason": f"no trained run at {args.run_dir}"}
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    out = tempfile.mkdtemp(prefix="keras_attn_bench_export_")
    try:
        return _time_exports(args, export, translator, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _sentences(run_dir, n):
    """Inputs for the run's task: generated dates, or short English sentences."""
    from keras_attn import data

    with open(os.path.join(run_dir, "config.json")) as f:
        task = json.load(f).get("task")
    if task == "dates":
        return [s for s, _ in data.generate_dates(n, seed=123)]
    english = ["I am cold.", "Where is the station?", "We have to go now.", "He runs.",
               "This book is mine.", "Can you help me?", "It is raining.", "I lost my keys."]
    return (english * n)[:n]


def _time_exports(args, export, translator, out):
    """Export SavedModel + TFLite text float32/int8 into ``out``; time one sentence per call."""
    log(f"  exporting {args.run_dir} -> {out}")
    reports = {"saved_model": export.export_saved_model(translator, os.path.join(out, "sm"))}
    for q in ("float32", "int8"):
        reports[f"tflite_{q}"] = export.export_tflite(
            translator, os.path.join(out, f"text_{q}.tflite"), "text", q)
    sentences = _sentences(args.run_dir, 4 if args.quick else 20)
    if translator.normalize:  # the TFLite text target does not normalise its input
        from keras_attn.text import tokenizers as text
        sentences = [text.normalize_text(s) for s in sentences]
    loaded = tf.saved_model.load(reports["saved_model"]["path"])
    serve = loaded.signatures[export.SERVING_SIGNATURE]
    runners = {f"tflite_{q}": export.text_interpreter(model_path=reports[f"tflite_{q}"]["path"])
               .get_signature_runner(export.TFLITE_TEXT_SIGNATURE) for q in ("float32", "int8")}
    calls = {"saved_model": lambda s: serve(text=tf.constant([s]))["translation"].numpy()[0]}
    for k, r in runners.items():
        calls[k] = (lambda r: lambda s: r(
            text=np.array([s.encode("utf-8")], dtype=object))["translation"][0])(r)
    results = {k: [] for k in calls}
    agree = {k: 0 for k in calls}
    for s in sentences:  # one sentence per call (batch 1): latency
        t = interleaved({k: (lambda c=c: c(s)) for k, c in calls.items()}, args.repeats,
                        1, args.clock)
        ref = calls["saved_model"](s)
        for k in calls:
            results[k].append(summarize(t[k])["median_ms"])
            agree[k] += calls[k](s) == ref
    rows = {}
    for k, v in results.items():
        rows[k] = {"latency_ms_median": round(float(sorted(v)[len(v) // 2]), 2),
                   "latency_ms_mean": round(sum(v) / len(v), 2),
                   "bytes": reports[k]["total_bytes"],
                   "agreement_with_saved_model": agree[k] / len(sentences)}
        log(f"  export {k:16s} {rows[k]['latency_ms_median']:8.2f} ms/sentence  "
            f"{rows[k]['bytes'] / 1e6:6.2f} MB")
    return {"available": True, "run_dir": os.path.abspath(args.run_dir),
            "sentences": len(sentences), "batch": 1, "rows": rows,
            "note": "TFLite text target: tokenizer + greedy WHILE loop + detokenizer in one "
                    "flatbuffer; latency = median over sentences of each sentence's median"}
