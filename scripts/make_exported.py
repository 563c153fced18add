#!/usr/bin/env python
"""Regenerate ``exported/``: the default dates model, trained and exported reproducibly.

    python scripts/make_exported.py                 # trains runs/exported-dates, then exports
    python scripts/make_exported.py --run-dir DIR   # exports an existing default run

Writes ``exported/saved_model/translator/1/`` (TF Serving layout), ``exported/tflite/``
(text-to-text and builtin-ops targets, float32 and int8), ``exported/export_report.json``,
``exported/metrics.json``, ``exported/MODEL_CARD.md`` and ``exported/run/`` (a minimal run
directory for ``keras-attn translate exported/run ...``). The training is the README's main
job (``keras-attn train`` with defaults, seed 0), so the artefacts are reproducible up to
floating-point non-determinism of multi-threaded CPU kernels.
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CARD = """# Model card: keras_attn default dates translator

- **Task**: date normalisation — dates as people write them in English and French, in
  {num_formats} formats ("3 March 2021", "le 3 mars 2021", "03/03/2021", "Wed, 3 Mar 2021", …),
  to ISO 8601 ("2021-03-03"). Numeric dates are day-first. Years 1900–2099.
- **Data**: generated in code by `keras_attn.data.dates_splits` (seed {seed}):
  {num_train} train, {num_valid} valid, {num_test} test pairs, disjoint by source string.
- **Model**: `keras_attn.models.transformer_seq2seq`, post-norm, d={num_hiddens},
  FFN {ffn_num_hiddens}, {num_heads} heads, {num_layers}+{num_layers} layers, dropout {dropout};
  character vocabularies (source {src_vocab_size}, target {tgt_vocab_size} ids).
- **Training**: Adam (0.9, 0.98, 1e-9), Noam schedule (warmup {warmup}), label smoothing
  {label_smoothing}, batch {batch_size}, {epochs} epochs, {train_seconds} s on the machine that made it.
- **Results (test split, greedy)**: exact match {exact_match:.2%} on {num_sentences} dates.
- **Confidence**: every translation's calibrated probability of being exactly right, from a
  logistic calibrator fitted on the validation split (`run/calibration.json`,
  docs/confidence.md); inputs that are not dates get a confidence near 0.
- **Artefacts**: SavedModel `saved_model/translator/1` (signatures `serving_default`:
  strings -> strings + scores + confidences, `translate`, `translate_v2`, `score`, `translate_ids`), TFLite `tflite/text_*.tflite` (one file,
  strings in, strings out) and `tflite/builtin_*/` (encoder + one-step decoder, builtin ops
  only). See `README.md` here for serving and `export_report.json` for ops and sizes.
- **Limits**: inputs outside the formats above (other languages, month-first numeric dates,
  years outside 1900–2099) are not supported; characters outside printable ASCII and French
  letters map to `[UNK]`.
- **Regenerate**: `python scripts/make_exported.py`.
"""


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
    card = CARD.format(num_formats=len(data.DATE_FORMATS), **config,
                       **{k: metrics[k] for k in ("exact_match", "num_sentences", "train_seconds")})
    runs.atomic_write_text(os.path.join(args.out, "MODEL_CARD.md"), card)
    print(json.dumps({k: v for k, v in metrics.items() if k != "samples"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
