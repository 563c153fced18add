"""``keras-attn``: train, translate, evaluate and export from the command line.

Examples::

    keras-attn train                                  # dates task, defaults, ./runs/dates
    keras-attn train --task tatoeba --data ../shared/data/fra-eng --output runs/fra
    keras-attn translate runs/dates "3 March 2021"    # or lines on stdin
    keras-attn evaluate runs/dates --split test
    keras-attn export runs/dates
    keras-attn export runs/dates --format ctranslate2 --quantization int8
"""
import argparse
import dataclasses
import os
import sys


BACKENDS = ("tensorflow", "jax", "torch")


def _select_backend(argv):
    """Set ``KERAS_BACKEND`` from ``train --backend`` before anything imports Keras."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--backend", choices=BACKENDS)
    known, _ = pre.parse_known_args(argv)
    if known.backend:
        if "keras" in sys.modules:
            import keras

            if keras.backend.backend() != known.backend:
                raise SystemExit(f"keras-attn: error: Keras already runs on "
                                 f"{keras.backend.backend()}; --backend {known.backend} "
                                 "must be chosen before Keras is imported")
        os.environ["KERAS_BACKEND"] = known.backend


def _export_elsewhere(run_dir):
    """Export a run trained on another backend in a TensorFlow process."""
    import subprocess

    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    return subprocess.run([sys.executable, "-m", "keras_attn.cli", "export", run_dir],
                          env=env).returncode


def _train_parser(sub):
    from keras_attn.training import TrainConfig

    p = sub.add_parser("train", help="train a model (default: Transformer on the dates task)")
    p.add_argument("--task", choices=["dates", "tatoeba"], default="dates")
    p.add_argument("--data", default="", help="Tatoeba file, folder (train.txt/dev.txt) or URL")
    p.add_argument("--model", choices=["transformer", "bahdanau"])
    for name, typ in [("num-hiddens", int), ("ffn-num-hiddens", int), ("num-heads", int),
                      ("num-layers", int), ("dropout", float), ("ffn-dropout", float),
                      ("batch-size", int),
                      ("epochs", int), ("warmup", int), ("lr-scale", float),
                      ("label-smoothing", float), ("max-len", int), ("vocab-size", int),
                      ("num-train", int), ("num-valid", int), ("num-test", int)]:
        p.add_argument(f"--{name}", type=typ)
    p.add_argument("--steps", type=int, default=0, help="total training steps (overrides epochs)")
    p.add_argument("--schedule", choices=["noam", "cosine"], default="noam")
    p.add_argument("--peak-lr", type=float, default=TrainConfig.peak_lr)
    p.add_argument("--mixed-precision", choices=["", "mixed_float16", "mixed_bfloat16"],
                   default="")
    p.add_argument("--jit-compile", action="store_true", help="XLA-compile the train step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="run directory (default runs/<task>)")
    p.add_argument("--no-export", action="store_true", help="skip exporting after training")
    p.add_argument("--distribute", choices=["", "mirrored", "multiworker"], default="",
                   help="mirrored: all local GPUs (or --cpu-devices); multiworker: "
                        "MultiWorkerMirroredStrategy from TF_CONFIG (see docs/distributed.md)")
    p.add_argument("--cpu-devices", type=int, default=0,
                   help="split the CPU into N logical devices (testing mirrored runs)")
    p.add_argument("--backend", choices=BACKENDS, default="tensorflow",
                   help="Keras backend that trains the model (default: tensorflow); the "
                        "export at the end always runs on TensorFlow")


def _config_from_args(args):
    from keras_attn.training import TASK_DEFAULTS, TrainConfig

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in TASK_DEFAULTS[args.task].items() if k in names}
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    return TrainConfig(**values)


def cmd_train(args):
    from keras_attn import training

    config = _config_from_args(args)
    run_dir = args.output or os.path.join("runs", config.task)
    metrics = training.train(config, run_dir, distribute=args.distribute,
                             cpu_devices=args.cpu_devices)
    if metrics and metrics.get("chief") is False:
        return 0  # a non-chief worker: the chief evaluates and exports
    if not args.no_export:
        import keras

        if keras.backend.backend() != "tensorflow":
            if _export_elsewhere(run_dir):
                return 1
        else:
            from keras_attn import export

            export.export_run(run_dir)
    print(f"run directory: {run_dir}")
    return 0 if metrics else 1


def cmd_translate(args):
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    for line in translator.translate(sentences, beam_size=args.beam_size, alpha=args.alpha):
        print(line)
    return 0


def cmd_evaluate(args):
    from keras_attn import runs, training
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)  # first: checks it is a run directory
    config = training.TrainConfig(**runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config)
    pairs = splits[args.split]
    if args.limit:
        pairs = pairs[: args.limit]
        refs = refs[: args.limit] if refs else None
    result = training.evaluate(translator, pairs, config.task,
                               refs if args.split == "test" else None, beam_size=args.beam_size)
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(summary)
    return 0


def cmd_export(args):
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"export needs the TensorFlow backend (SavedModel, TFLite and the CTranslate2 "
            f"conversion read TensorFlow weights); Keras runs on {keras.backend.backend()}. "
            f"Run: KERAS_BACKEND=tensorflow keras-attn export {args.run_dir} (a run trained "
            "on any backend loads there)")
    if args.format == "ctranslate2":
        for flag, value in (("--version", args.version), ("--beam-size", args.beam_size)):
            if value is not None:  # CTranslate2 has no versions; decoding is chosen per call
                raise ValueError(f"{flag} applies to --format tf only. Received: {flag} {value}")
        try:
            from keras_attn.export.ctranslate2 import export_ctranslate2
        except ImportError as e:
            raise ValueError(f"--format ctranslate2: {e}") from None
        export_ctranslate2(args.run_dir, export_dir=args.export_dir,
                           quantization=args.quantization or "float32", overwrite=args.overwrite)
        return 0
    if args.quantization is not None:
        raise ValueError("--quantization applies to --format ctranslate2 only (--format tf "
                         f"writes float32 and int8 TFLite files). Received: --quantization "
                         f"{args.quantization}")
    from keras_attn import export

    export.export_run(args.run_dir, export_dir=args.export_dir,
                      version=1 if args.version is None else args.version,
                      overwrite=args.overwrite,
                      beam_size=1 if args.beam_size is None else args.beam_size)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="keras-attn", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    p = sub.add_parser("translate", help="translate sentences with a trained run")
    p.add_argument("run_dir")
    p.add_argument("sentences", nargs="*", help="sentences (default: lines of stdin)")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--alpha", type=float, default=0.6)
    p = sub.add_parser("evaluate", help="score a run on a split")
    p.add_argument("run_dir")
    p.add_argument("--split", choices=["train", "valid", "test"], default="test")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--limit", type=int, default=0)
    p = sub.add_parser("export", help="export a run as SavedModel and TFLite, or for "
                                      "CTranslate2")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=["tf", "ctranslate2"], default="tf",
                   help="tf (default): SavedModel + TFLite under --export-dir (default "
                        "RUN_DIR/export); ctranslate2: a CTranslate2 model directory, "
                        "--export-dir itself (default RUN_DIR/export/ctranslate2[_int8])")
    p.add_argument("--export-dir", default=None)
    p.add_argument("--version", type=int, default=None, help="SavedModel version (tf; 1)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--beam-size", type=int, default=None,
                   help="decoding inside the SavedModel/TFLite graphs (tf; 1)")
    p.add_argument("--quantization", choices=["float32", "int8"], default=None,
                   help="CTranslate2 weights (ctranslate2; float32)")
    return parser


COMMANDS = {"train": cmd_train, "translate": cmd_translate, "evaluate": cmd_evaluate,
            "export": cmd_export}


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        _select_backend(argv)
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError, OSError, UnicodeDecodeError) as e:
        print(f"keras-attn {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
