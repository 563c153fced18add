"""One serving engine alone in its process, the child the ``serve`` section starts per round:
seconds per pass for each batch size, and one pass's outputs.

The spec (``benchmarks.serve._run_engine``'s): ``engine``, ``path``, ``signature``, ``inputs``
(a JSON file), ``batches``, ``repeats``, ``warmup``, ``threads``, ``clock``, ``ct2_options``.

    python -m benchmarks.serve_engine SPEC.json RESULT.json
"""
import json
import os
import sys
import time

import numpy as np

from benchmarks.timing import CLOCKS


def _tensorflow(threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    if threads:  # `threads` for each op; ops one at a time, as CTranslate2's inter_threads=1
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _saved_model(spec, inputs):
    tf = _tensorflow(spec["threads"])
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the graph uses)

    signature = tf.saved_model.load(spec["path"]).signatures[spec["signature"]]
    if spec["engine"] == "saved_model_translate_ids":
        source = np.asarray(inputs["source_ids"], np.int32)

        def run(lo, hi):
            rows = source[lo:hi]
            rows = rows[:, : max(int((rows != 0).sum(axis=1).max()), 1)]
            tokens = signature(source=tf.constant(rows))["tokens"].numpy()
            return [[int(t) for t in row if t != 0] for row in tokens.tolist()]
    elif spec["engine"] in ("saved_model_translate", "saved_model_translate_xla"):
        # every option at its default
        from keras_attn.decoding.options import DecodingOptions
        from keras_attn.export.runtime import option_inputs

        sentences = inputs["sentences"]
        dtypes = {k: s.dtype for k, s in signature.structured_input_signature[1].items()}
        options = {k: tf.constant(v, dtypes[k])
                   for k, v in option_inputs(DecodingOptions(), dtypes).items()}

        def run(lo, hi):
            out = signature(text=tf.constant(sentences[lo:hi]), **options)["translations"]
            return [s.decode("utf-8", "replace") for s in out.numpy()[:, 0]]
    else:
        sentences = inputs["sentences"]

        def run(lo, hi):
            out = signature(text=tf.constant(sentences[lo:hi]))["translation"].numpy()
            return [s.decode("utf-8", "replace") for s in out]
    return run


def _tflite(spec, inputs):
    _tensorflow(spec["threads"])
    import tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    runner = InterpreterWithCustomOps(
        model_path=spec["path"], num_threads=spec["threads"] or None,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS,
    ).get_signature_runner(spec["signature"])
    sentences = [s.encode("utf-8") for s in inputs["tflite_sentences"]]

    def run(lo, hi):
        out = runner(text=np.array(sentences[lo:hi], object))["translation"]
        return [s.decode("utf-8", "replace") for s in out]
    return run


def _ctranslate2(spec, inputs):
    import ctranslate2

    translator = ctranslate2.Translator(spec["path"], device="cpu",
                                        intra_threads=spec["threads"], inter_threads=1)
    tokens, options = inputs["ct2_tokens"], spec["ct2_options"]

    def run(lo, hi):
        results = translator.translate_batch(tokens[lo:hi], **options)
        return [list(r.hypotheses[0]) for r in results]
    return run


LOADERS = {"saved_model": _saved_model, "tflite": _tflite, "ctranslate2": _ctranslate2}


def load_engine(spec, inputs):
    """``run(lo, hi)``: the engine's outputs for sentences ``lo:hi`` (one batch)."""
    for prefix, load in LOADERS.items():
        if spec["engine"].startswith(prefix):
            return load(spec, inputs)
    raise ValueError(f"unknown engine {spec['engine']!r}")


def measure(spec):
    with open(spec["inputs"], encoding="utf-8") as f:
        inputs = json.load(f)
    n = len(inputs["sentences"])
    now = CLOCKS[spec["clock"]]
    t0 = time.perf_counter()
    run = load_engine(spec, inputs)
    load_s = time.perf_counter() - t0

    def one_pass(b):
        out = []
        for lo in range(0, n, b):
            out.extend(run(lo, min(lo + b, n)))
        return out

    result = {"engine": spec["engine"], "load_seconds": round(load_s, 3), "batches": {}}
    for b in spec["batches"]:
        for _ in range(spec["warmup"]):
            one_pass(b)
        seconds = []
        for _ in range(spec["repeats"]):
            t0 = now()
            one_pass(b)
            seconds.append(now() - t0)
        result["batches"][str(b)] = seconds
    result["outputs"] = one_pass(max(spec["batches"]))
    return result


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    result = measure(spec)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
