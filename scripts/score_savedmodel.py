#!/usr/bin/env python
"""BLEU and chrF of a run's exported SavedModel on its test split (Tatoeba: dev.txt).

The sentences go through ``serving_default`` as raw text, as a server would receive them,
and are scored by :func:`keras_attn.training.evaluation.evaluate` (sacrebleu, all references; as
written and D2L-normalised), the same scoring as ``metrics.json`` and ``keras-attn
evaluate``, which decode with the Keras model.

Usage:
    python scripts/score_savedmodel.py runs/fra60 --json runs/fra60/savedmodel_metrics.json
"""
import argparse
import json
import os
import sys
import time


class SavedModelTranslator:
    """``translate(sources, beam_size, batch_size)`` through a SavedModel's signature."""

    def __init__(self, path):
        import tensorflow as tf

        self._tf = tf
        self._serve = tf.saved_model.load(path).signatures["serving_default"]

    def translate(self, sources, beam_size=1, batch_size=64):
        if beam_size != 1:
            raise ValueError("the exported graph decodes with the beam it was exported with")
        out = []
        for i in range(0, len(sources), batch_size):
            batch = self._tf.constant(sources[i:i + batch_size], self._tf.string)
            out += [s.decode("utf-8") for s in self._serve(text=batch)["translation"].numpy()]
        return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--export-dir", default="", help="default: RUN_DIR/export")
    parser.add_argument("--version", type=int, default=1, help="SavedModel version (1)")
    parser.add_argument("--json", default="", help="write the scores here")
    args = parser.parse_args(argv)

    from keras_attn.training import evaluation

    from keras_attn.core import runs

    from keras_attn.training import recipes as training
    from keras_attn.core.config import TrainConfig

    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config, log=lambda *a: None, run_dir=args.run_dir)
    path = os.path.join(args.export_dir or os.path.join(args.run_dir, "export"),
                        "saved_model", "translator", str(args.version))
    t0 = time.time()
    result = evaluation.evaluate(SavedModelTranslator(path), splits["test"], config.task, refs)
    result["saved_model"] = path
    result["seconds"] = round(time.time() - t0, 1)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    if args.json:
        runs.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
