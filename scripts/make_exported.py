#!/usr/bin/env python
"""Regenerate ``exported/``: the default dates model, trained and exported reproducibly.

    python scripts/make_exported.py                 # trains runs/exported-dates, then exports
    python scripts/make_exported.py --run-dir DIR   # exports an existing default run

Writes ``exported/saved_model/translator/1/`` (TF Serving layout), ``exported/tflite/``
(text-to-text and builtin-ops targets, float32 and int8), ``exported/export_report.json``,
``exported/metrics.json``, ``exported/README.md`` (the model card, from
``scripts/exported_card.md``) and ``exported/run/`` (a minimal run
directory for ``keras-attn translate exported/run ...``). The training is the README's main
job (``keras-attn train`` with defaults, seed 0), so the artefacts are reproducible up to
floating-point non-determinism of multi-threaded CPU kernels.
"""
import argparse
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The model card, exported/README.md: this template with the run's figures filled in
# ({{name}}: card_fields). Its examples show this model's answers, which the tests check
# (tests/integration/test_exported_readme.py): a model trained anew may need them updated here.
CARD_TEMPLATE = os.path.join(HERE, "exported_card.md")


def _mb(num_bytes):
    return f"{num_bytes / 1e6:.1f}"


def card_fields(config, metrics, report, num_formats):
    """The values the card's ``{{name}}`` placeholders take: the run's ``config.json`` and
    ``metrics.json``, the export's ``export_report.json``, the number of date formats."""
    tflite = report["tflite"]
    saved = report["saved_model"]

    def names(signatures):
        return ", ".join(f"`{s}`" for s in sorted(signatures))

    def text(value):  # 30000 -> "30,000"
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)

    return {**{k: text(v) for k, v in config.items()},
            **report["versions"],
            "num_formats": text(num_formats),
            "exact_match": f"{metrics['exact_match']:.2%}".replace("%", " %"),
            "num_sentences": text(metrics["num_sentences"]),
            "train_seconds": text(metrics["train_seconds"]),
            "saved_model_signatures": names(saved["signatures"]),
            "saved_model_mb": _mb(sum(saved["files"].values())),
            "text_signatures": names(tflite["text_float32"]["signatures"]),
            "builtin_signatures": names(tflite["builtin_float32"]["signatures"]),
            "text_custom_ops": ", ".join(f"`{op}`" for op in
                                         sorted(tflite["text_float32"]["ops"]["custom"])),
            **{f"{name}_mb": _mb(tflite[name]["total_bytes"]) for name in tflite}}


def render_card(fields, template_path=CARD_TEMPLATE):
    """The card: the template with every ``{{name}}`` replaced; a name without a value is
    an error, so the card never shows a placeholder."""
    with open(template_path, encoding="utf-8") as f:
        template = f.read()
    missing = sorted(set(re.findall(r"{{(\w+)}}", template)) - set(fields))
    if missing:
        raise KeyError(f"the card's template names values it is not given: {missing}")
    return re.sub(r"{{(\w+)}}", lambda m: fields[m.group(1)], template)


def _copy_run(run_dir, out):
    """A minimal run directory (config, vocabularies, model without optimizer state) that
    ``keras-attn translate exported/run ...`` and ``Translator.from_run_dir`` accept."""
    import keras

    from keras_attn.core import runs

    from keras_attn.training import recipes as training

    src = runs.paths(run_dir)
    dst = runs.paths(out)
    if os.path.exists(out) and os.path.samefile(run_dir, out):
        return  # re-exporting the committed run itself: it is already minimal
    os.makedirs(out, exist_ok=True)
    for key in ("config", "src_vocab", "tgt_vocab", "metrics", "calibration"):
        shutil.copyfile(src[key], dst[key])
    model = training.build_model(runs.read_json(src["config"]))
    model.set_weights(keras.models.load_model(src["model"], compile=False).get_weights())
    runs.atomic_save(dst["model"], model.save)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "exported-dates"))
    ap.add_argument("--out", default=os.path.join(ROOT, "exported"))
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from keras_attn import data, export
    from keras_attn.core import runs
    from keras_attn.training import recipes as training

    p = runs.paths(args.run_dir)
    if not os.path.exists(p["model"]):
        training.train(training.TrainConfig(), args.run_dir)
    config = runs.read_json(p["config"])
    metrics = runs.read_json(p["metrics"])
    for sub in ("saved_model", "tflite"):
        shutil.rmtree(os.path.join(args.out, sub), ignore_errors=True)
    export.export_run(args.run_dir, export_dir=args.out, overwrite=True)
    runs.write_json(os.path.join(args.out, "metrics.json"), metrics)
    _copy_run(args.run_dir, os.path.join(args.out, "run"))
    report = runs.read_json(os.path.join(args.out, "export_report.json"))
    card = render_card(card_fields(config, metrics, report, len(data.DATE_FORMATS)))
    runs.atomic_write_text(os.path.join(args.out, "README.md"), card)
    print(json.dumps({k: v for k, v in metrics.items() if k != "samples"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
