"""``keras-attn``: train, translate, evaluate and export from the command line.

Examples::

    keras-attn train                                  # dates task, defaults, ./runs/dates
    keras-attn train --task tatoeba --data ../shared/data/fra-eng --output runs/fra
    keras-attn translate runs/dates "3 March 2021"    # or lines on stdin
    keras-attn evaluate runs/dates --split test
    keras-attn export runs/dates
    keras-attn export runs/dates --format ctranslate2 --quantization int8

The parser imports neither TensorFlow nor Keras (the options and their defaults come from
:mod:`keras_attn.config`), so ``--help`` answers at once; each command imports what it runs.
TensorFlow's C++ log lines are hidden unless ``--verbose`` is given or
``TF_CPP_MIN_LOG_LEVEL`` is set; long work draws a progress bar when stderr is a terminal.
"""
import argparse
import dataclasses
import functools
import importlib
import os
import re
import sys
import tempfile

import time

from keras_attn.config import TASK_DEFAULTS, TrainConfig, parse_duration

BACKENDS = ("tensorflow", "jax", "torch")
SUBWORD_TOKENIZERS = ("sentencepiece", "wordpiece")

# A C++ log line ("I0000 00:00:1795461471.834732    4177 port.cc:153] oneDNN custom ...")
# or absl's notice before them. TensorFlow writes some while it loads, before its log level
# applies, so they are dropped from stderr around the import.
_CPP_LOG_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
                           r"|WARNING: All log messages before absl::InitializeLog\(\)")


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


def _quiet_tensorflow(verbose):
    """Import TensorFlow with its C++ log lines hidden (unless ``verbose``).

    ``TF_CPP_MIN_LOG_LEVEL`` 3 hides the lines TensorFlow writes once loaded (``E0000 ...
    failed call to cuInit``); the ones it writes while loading ignore that level and are
    filtered out of stderr here. A ``TF_CPP_MIN_LOG_LEVEL`` set by the user is kept.
    """
    if verbose or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] in ("", "0"):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            importlib.import_module("tensorflow")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _CPP_LOG_LINE.match(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def progress_bar(label, stream=None, width=30):
    """A ``progress(done, total)`` callable drawing a bar on ``stream`` (default stderr).

    Returns None when the stream is not a terminal (a pipe or a log file gets no bar). Work
    done in one call (``done == total`` at the first report) draws nothing.
    """
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    drawn = False

    def report(done, total):
        nonlocal drawn
        if not drawn and done >= total:
            return
        drawn = True
        filled = width * done // max(total, 1)
        stream.write(f"\r{label} [{'=' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return report


def _export_elsewhere(run_dir):
    """Export a run trained on another backend in a TensorFlow process."""
    import subprocess

    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    return subprocess.run([sys.executable, "-m", "keras_attn.cli", "export", run_dir],
                          env=env).returncode


def _task_default(name):
    """``"default: 128 for dates, 256 for tatoeba"``, or ``"default: 4"`` when one for all."""
    values = {task: defaults.get(name, getattr(TrainConfig, name))
              for task, defaults in TASK_DEFAULTS.items()}
    if len(set(values.values())) == 1:
        return f"default: {next(iter(values.values()))}"
    return "default: " + ", ".join(f"{value} for {task}" for task, value in values.items())


# Options whose default depends on --task: (name, type, what it sets).
_TASK_OPTIONS = [
    ("num-hiddens", int, "model width (d_model; the GRU size for bahdanau)"),
    ("ffn-num-hiddens", int, "hidden width of the position-wise feed-forward layers"),
    ("num-heads", int, "attention heads"),
    ("num-layers", int, "layers in the encoder and in the decoder"),
    ("dropout", float, "dropout on embeddings, attention weights and residual branches"),
    ("ffn-dropout", float, "dropout on the feed-forward hidden layer"),
    ("batch-size", int, "sentence pairs per (global) batch"),
    ("epochs", int, "training epochs"),
    ("warmup", int, "warmup steps of the learning-rate schedule"),
    ("lr-scale", float, "factor on the noam learning rate"),
    ("label-smoothing", float, "label smoothing of the loss"),
    ("max-len", int, "most tokens per sentence, [END] included (longer ones are cut)"),
    ("vocab-size", int, "subword vocabulary size per language (tatoeba)"),
    ("num-train", int, "training pairs (0: the whole corpus)"),
    ("num-valid", int, "validation pairs (tatoeba: held-out English sentences)"),
    ("num-test", int, "test pairs (dates; tatoeba tests on dev.txt or on held-out sentences)"),
]


def _add_verbose(parser, default):
    parser.add_argument("--verbose", action="store_true", default=default,
                        help="show TensorFlow's C++ log lines (default: hidden, unless "
                             "TF_CPP_MIN_LOG_LEVEL is set)")


def _train_parser(sub):
    p = sub.add_parser("train", help="train a model (default: Transformer on the dates task)",
                       description="Train a model into a run directory, evaluate it on the "
                                   "test split and export it. Re-running the same command "
                                   "resumes an interrupted run.")
    p.add_argument("--task", choices=list(TASK_DEFAULTS), default="dates",
                   help="dates: date formats to ISO (characters); tatoeba: English to "
                        "French (default: %(default)s)")
    p.add_argument("--data", default="",
                   help="tatoeba corpus: a file, a folder with train.txt and dev.txt, or a "
                        "URL (default: ../shared/data/fra-eng if it exists, else D2L's "
                        "fra-eng.zip)")
    p.add_argument("--model", choices=["transformer", "bahdanau"],
                   help=f"architecture ({_task_default('model')})")
    p.add_argument("--tokenizer", choices=SUBWORD_TOKENIZERS,
                   help="subword vocabulary of --task tatoeba (default: "
                        f"{TASK_DEFAULTS['tatoeba']['tokenizer']}); the dates task always "
                        "uses characters")
    for name, typ, what in _TASK_OPTIONS:
        default = _task_default(name.replace("-", "_"))
        p.add_argument(f"--{name}", type=typ, help=f"{what} ({default})")
    p.add_argument("--steps", type=int, default=0,
                   help="total training steps, overriding --epochs (default: 0, use --epochs)")
    p.add_argument("--time-budget", type=_duration, default=0.0, metavar="DURATION",
                   help="train for this long instead of --epochs/--steps, e.g. 45m, 1h, "
                        "1.5h: the learning rate warms up, then decays linearly from "
                        "--peak-lr to 0 at the budget's end; evaluation and export happen "
                        "inside it (default: none, train for --epochs)")
    p.add_argument("--schedule", choices=["noam", "cosine"], default="noam",
                   help="learning-rate schedule (default: %(default)s)")
    p.add_argument("--peak-lr", type=float, default=TrainConfig.peak_lr,
                   help="peak learning rate of the cosine schedule (default: %(default)s)")
    p.add_argument("--mixed-precision", choices=["", "mixed_float16", "mixed_bfloat16"],
                   default="", help="Keras dtype policy (default: float32)")
    p.add_argument("--jit-compile", action="store_true",
                   help="XLA-compile the train step (default: off)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the data split, shuffling and weights (default: %(default)s)")
    p.add_argument("--output", default=None, help="run directory (default: runs/<task>)")
    p.add_argument("--no-export", action="store_true",
                   help="skip exporting after training (default: export)")
    p.add_argument("--distribute", choices=["", "mirrored", "multiworker"], default="",
                   help="mirrored: all local GPUs (or --cpu-devices); multiworker: "
                        "MultiWorkerMirroredStrategy from TF_CONFIG (see docs/distributed.md) "
                        "(default: one device)")
    p.add_argument("--cpu-devices", type=int, default=0,
                   help="split the CPU into N logical devices, for testing mirrored runs "
                        "(default: 0, no split)")
    p.add_argument("--backend", choices=BACKENDS, default="tensorflow",
                   help="Keras backend that trains the model; the export at the end always "
                        "runs on TensorFlow (default: %(default)s)")
    _add_verbose(p, argparse.SUPPRESS)
    return p


def _duration(text):
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_train_args(parser, args):
    """Reject options that the chosen task cannot use (an argparse error, exit code 2)."""
    if args.time_budget and args.steps:
        parser.error("--time-budget and --steps both say when training ends; give one. "
                     f"Received: --time-budget {args.time_budget:g}s --steps {args.steps}")
    if args.tokenizer is not None and args.task != "tatoeba":
        parser.error(f"--tokenizer applies to --task tatoeba only (the {args.task} task uses "
                     f"characters). Received: --task {args.task} --tokenizer {args.tokenizer}")


def _config_from_args(args):
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
    start = _START if _START is not None else time.monotonic()
    reserve = None
    if config.time_budget:
        from keras_attn import budget

        reserve = budget.reserve_seconds(config.time_budget, export=not args.no_export)
    metrics = training.train(config, run_dir, distribute=args.distribute,
                             cpu_devices=args.cpu_devices, start=start, reserve=reserve)
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
    if config.time_budget:
        from keras_attn.config import format_duration

        used = time.monotonic() - start
        print(f"time budget: {format_duration(used)} used of "
              f"{format_duration(config.time_budget)} ({100 * used / config.time_budget:.1f} %)"
              " by this process")
    print(f"run directory: {run_dir}")
    return 0 if metrics else 1


def cmd_translate(args):
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    options = {name: getattr(args, name) for name in (*_OPTION_FLAGS, "return_alignments")
               if getattr(args, name) is not None}
    if not options:  # today's output: one line per sentence
        for line in translator.translate(sentences, beam_size=args.beam_size, alpha=args.alpha,
                                         progress=progress_bar("translating")):
            print(line)
        return 0
    options.setdefault("length_penalty", args.alpha)
    results = translator.translate_nbest(sentences, beam_size=args.beam_size, **options)
    n = options.get("num_hypotheses", 1)
    for sentence, hyps in zip(sentences, results):
        if n == 1 and not options.get("return_alignments"):
            print(hyps[0]["translation"])
            continue
        print(sentence)
        for rank, hyp in enumerate(hyps, 1):  # n-best: rank, score, translation
            print(f"  {rank}\t{hyp['score']:.4f}\t{hyp['translation']}")
            if "alignment" in hyp:
                print(f"   \t\t{hyp['alignment']}")
    return 0


# The decoding options of `keras-attn translate` besides --beam-size (API.md, "Decoding
# options per request"); None (not given) leaves the Translator's default.
_OPTION_FLAGS = {
    "num_hypotheses": (int, "n-best: translations printed per sentence, <= --beam-size "
                            "(default: 1)"),
    "length_penalty": (float, "GNMT length penalty alpha of the beam search (default: --alpha)"),
    "max_length": (int, "most target tokens (default: the run's max_len)"),
    "target_prefix": (str, "text the translation must start with (default: none)"),
    "sampling_topk": (int, "1 = argmax; K > 1 samples among the K most likely tokens "
                           "(default: 1)"),
    "sampling_topp": (float, "nucleus sampling threshold in (0, 1] (default: 1.0)"),
    "sampling_temperature": (float, "sampling temperature > 0 (default: 1.0)"),
    "seed": (int, "sampling seed: the same seed gives the same sample (default: 0)"),
}


def cmd_evaluate(args):
    from keras_attn import evaluation, runs, training
    from keras_attn.translator import Translator

    if args.length_penalty < 0:
        raise ValueError(f"--length-penalty must be >= 0. Received: {args.length_penalty}")
    translator = Translator.from_run_dir(args.run_dir)  # first: checks it is a run directory
    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config)
    pairs = splits[args.split]
    if args.limit:
        pairs = pairs[: args.limit]
        refs = refs[: args.limit] if refs else None
    # evaluation.evaluate calls translator.translate; this one reports each batch.
    translator.translate = functools.partial(translator.translate,
                                             progress=progress_bar(f"evaluating {args.split}"))
    result = evaluation.evaluate(translator, pairs, config.task,
                                 refs if args.split == "test" else None,
                                 beam_size=args.beam_size, length_penalty=args.length_penalty)
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
    log = functools.partial(print, flush=True)  # each stage shows as soon as it is done
    if args.format == "ctranslate2":
        for flag, value in (("--version", args.version), ("--beam-size", args.beam_size)):
            if value is not None:  # CTranslate2 has no versions; decoding is chosen per call
                raise ValueError(f"{flag} applies to --format tf only. Received: {flag} {value}")
        try:
            from keras_attn.export.ctranslate2 import export_ctranslate2
        except ImportError as e:
            raise ValueError(f"--format ctranslate2: {e}") from None
        export_ctranslate2(args.run_dir, export_dir=args.export_dir,
                           quantization=args.quantization or "float32", overwrite=args.overwrite,
                           log=log)
        return 0
    if args.quantization is not None:
        raise ValueError("--quantization applies to --format ctranslate2 only (--format tf "
                         f"writes float32 and int8 TFLite files). Received: --quantization "
                         f"{args.quantization}")
    from keras_attn import export

    export.export_run(args.run_dir, export_dir=args.export_dir,
                      version=1 if args.version is None else args.version,
                      overwrite=args.overwrite,
                      beam_size=1 if args.beam_size is None else args.beam_size, log=log)
    return 0


def _parsers():
    """The ``keras-attn`` parser and its subcommand parsers by name."""
    parser = argparse.ArgumentParser(prog="keras-attn", description=__doc__.split("\n")[0])
    _add_verbose(parser, False)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {"train": _train_parser(sub)}
    p = commands["translate"] = sub.add_parser(
        "translate", help="translate sentences with a trained run",
        description="Translate sentences (arguments, or lines of stdin) with a trained run.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("sentences", nargs="*", help="sentences (default: lines of stdin)")
    p.add_argument("--beam-size", type=int, default=1,
                   help="beams of the beam search; 1 is greedy decoding (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.6,
                   help="length penalty of the beam search (default: %(default)s)")
    for name, (kind, help_text) in _OPTION_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=help_text)
    p.add_argument("--return-alignments", action="store_true", default=None,
                   help="print word alignments (Pharaoh i-j: source word i, target word j) "
                        "under each translation (default: off)")
    _add_verbose(p, argparse.SUPPRESS)
    p = commands["evaluate"] = sub.add_parser(
        "evaluate", help="score a run on a split",
        description="Score a run on a split: exact match (dates) or BLEU and chrF (tatoeba).")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--split", choices=["train", "valid", "test"], default="test",
                   help="split of the run's data (default: %(default)s)")
    p.add_argument("--beam-size", type=int, default=1,
                   help="beams of the beam search; 1 is greedy decoding (default: %(default)s)")
    p.add_argument("--length-penalty", type=float, default=0.6,
                   help="beam search's GNMT length penalty alpha (default: %(default)s)")
    p.add_argument("--limit", type=int, default=0,
                   help="score the first N pairs only (default: 0, all)")
    _add_verbose(p, argparse.SUPPRESS)
    p = commands["export"] = sub.add_parser(
        "export", help="export a run as SavedModel and TFLite, or for CTranslate2",
        description="Export a run as SavedModel and TFLite (--format tf), or as a "
                    "CTranslate2 model directory (--format ctranslate2).")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--format", choices=["tf", "ctranslate2"], default="tf",
                   help="tf: SavedModel + TFLite; ctranslate2: a CTranslate2 model directory "
                        "(default: %(default)s)")
    p.add_argument("--export-dir", default=None,
                   help="output folder (default: RUN_DIR/export for tf, "
                        "RUN_DIR/export/ctranslate2[_int8] for ctranslate2)")
    p.add_argument("--version", type=int, default=None,
                   help="SavedModel version, --format tf only (default: 1)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing exported files (default: off)")
    p.add_argument("--beam-size", type=int, default=None,
                   help="decoding inside the SavedModel/TFLite graphs, --format tf only "
                        "(default: 1)")
    p.add_argument("--quantization", choices=["float32", "int8"], default=None,
                   help="CTranslate2 weights, --format ctranslate2 only (default: float32)")
    _add_verbose(p, argparse.SUPPRESS)
    return parser, commands


def build_parser():
    """The ``keras-attn`` argument parser (builds without importing TensorFlow or Keras)."""
    return _parsers()[0]


COMMANDS = {"train": cmd_train, "translate": cmd_translate, "evaluate": cmd_evaluate,
            "export": cmd_export}


# time.monotonic() when main() began: a --time-budget counts from the start of the command.
_START = None


def main(argv=None):
    global _START
    _START = time.monotonic()
    argv = sys.argv[1:] if argv is None else list(argv)
    if next((a for a in argv if not a.startswith("-")), None) == "train":
        _select_backend(argv)
    parser, commands = _parsers()
    args = parser.parse_args(argv)
    if args.command == "train":
        _check_train_args(commands["train"], args)
    _quiet_tensorflow(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError, OSError, UnicodeDecodeError) as e:
        print(f"keras-attn {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
