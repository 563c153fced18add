"""``keras-attn train``: options, the checks argparse cannot make, and the run."""
import argparse
import dataclasses
import os
import subprocess
import sys
import time

from keras_attn.cli.console import add_verbose
from keras_attn.core.config import TASK_DEFAULTS, TrainConfig, parse_duration

BACKENDS = ("tensorflow", "jax", "torch")
# The language options (``TrainConfig`` fields of a text task; the dates task's are fixed).
LANGUAGE_OPTIONS = ("source_lang", "target_lang", "columns", "target_data", "source_name",
                    "target_name")
SUBWORD_TOKENIZERS = ("sentencepiece", "wordpiece")
# --export: the TFLite quantizations each exports beside the SavedModel.
EXPORTS = {"all": ("float32", "int8"), "saved_model": ()}

# Options whose default depends on --task: (name, type, what it sets).
TASK_OPTIONS = [
    ("num-hiddens", int, "model width (d_model; the GRU size for bahdanau)"),
    ("ffn-num-hiddens", int, "hidden width of the position-wise feed-forward layers"),
    ("num-heads", int, "attention heads"),
    ("num-layers", int, "layers in the encoder and in the decoder"),
    ("num-decoder-layers", int, "layers in the decoder when they differ from the encoder's "
                                "(0: --num-layers)"),
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
    ("num-valid", int, "validation pairs (tatoeba: the most source sentences held out for "
                       "validation, and for the test without dev.txt; each at most 10 %% of "
                       "the corpus)"),
    ("num-test", int, "test pairs (dates; tatoeba tests on dev.txt or on held-out sentences)"),
]


def select_backend(argv):
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


def _task_default(name):
    """``"default: 128 for dates, 256 for tatoeba"``, or ``"default: 4"`` when one for all."""
    values = {task: defaults.get(name, getattr(TrainConfig, name))
              for task, defaults in TASK_DEFAULTS.items()}
    if len(set(values.values())) == 1:
        return f"default: {next(iter(values.values()))}"
    return "default: " + ", ".join(f"{value} for {task}" for task, value in values.items())


def _duration(text):
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _language(flag):
    """An argparse type: a BCP 47 tag (its case normalised), or the check's message."""
    from keras_attn.core.languages import check_language_code

    def parse(value):
        try:
            return check_language_code(value, flag)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _choice(default, *others):
    """An argparse type for a choice whose default is stored as "" (``config.json``'s
    value): ``default`` (its name on the command line) and "" give "", ``others`` are kept."""
    def parse(value):
        if value in (default, ""):
            return ""
        if value in others:
            return value
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join((default, *others))})")

    return parse


def add_parser(sub):
    p = sub.add_parser("train", help="train a model (default: Transformer on the dates task)",
                       description="Train a model into a run directory, evaluate it on the "
                                   "test split and export it. Re-running the same command "
                                   "resumes an interrupted run.")
    p.add_argument("--task", choices=list(TASK_DEFAULTS), default="dates",
                   help="dates: date formats to ISO (characters); tatoeba: a language pair "
                        "from parallel text, English to French unless --source-lang and "
                        "--target-lang say otherwise (default: %(default)s)")
    p.add_argument("--data", default="",
                   help="tatoeba corpus: a tab-separated file (Tatoeba's English<TAB>Other"
                        "[<TAB>attribution], or any file whose columns --columns names), a "
                        "folder with train.txt and dev.txt, or a URL such as D2L's "
                        "fra-eng.zip; with --target-data, the source side's plain-text file "
                        "(default: the KERAS_ATTN_DATA environment variable; required for "
                        "--task tatoeba)")
    p.add_argument("--target-data", default=None, metavar="FILE",
                   help="the target side's plain-text file, line by line aligned with "
                        "--data (the source side's); the two must have as many lines "
                        "(default: none, --data holds both sides)")
    p.add_argument("--source-lang", type=_language("--source-lang"), metavar="CODE",
                   help="the language translated from, a BCP 47 tag (ISO 639-1 or 639-3 "
                        "code, optionally a region or script: de, pt-BR, zh-Hant; a 3-letter "
                        "code of a language with a 2-letter one is read as it: fra is fr); "
                        "give --target-lang with it (default: en for tatoeba)")
    p.add_argument("--target-lang", type=_language("--target-lang"), metavar="CODE",
                   help="the language translated into, as --source-lang (default: fr for "
                        "tatoeba)")
    p.add_argument("--columns", default=None, metavar="CODE,CODE",
                   help="the languages of the --data file's tab-separated columns, in order "
                        "(e.g. en,de for Tatoeba's deu.txt); the pair reads its source and "
                        "target columns from it, so one file trains either direction "
                        "(default: English first when the pair has English, as every "
                        "Tatoeba file, else the source first)")
    p.add_argument("--source-name", default=None, metavar="NAME",
                   help="the source language's name that the server and the page show "
                        "(default: the English name of --source-lang, or the code)")
    p.add_argument("--target-name", default=None, metavar="NAME",
                   help="as --source-name, for the target (default: from --target-lang)")
    p.add_argument("--model", choices=["transformer", "bahdanau"],
                   help=f"architecture ({_task_default('model')})")
    p.add_argument("--tokenizer", choices=SUBWORD_TOKENIZERS,
                   help="subword vocabulary of --task tatoeba (default: "
                        f"{TASK_DEFAULTS['tatoeba']['tokenizer']}); the dates task always "
                        "uses characters")
    for name, typ, what in TASK_OPTIONS:
        default = _task_default(name.replace("-", "_"))
        p.add_argument(f"--{name}", type=typ, help=f"{what} ({default})")
    p.add_argument("--tie-embeddings", action="store_true", default=None,
                   help="the decoder's output projection is its embedding, transposed "
                        "(Press and Wolf 2017; section 3.4 of the paper) (default: off)")
    p.add_argument("--norm-first", action="store_true", default=None,
                   help="pre-norm blocks, LayerNorm before each sublayer and after each stack "
                        "(Xiong et al. 2020; the paper's blocks normalise after) "
                        "(default: off)")
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
    p.add_argument("--mixed-precision", type=_choice("float32", "mixed_float16",
                                                     "mixed_bfloat16", "auto"),
                   metavar="{float32,mixed_float16,mixed_bfloat16,auto}", default=None,
                   help="Keras dtype policy of training; auto: mixed_bfloat16 on a CPU with "
                        "native bfloat16 (AMX or AVX512_BF16), float32 elsewhere; the run "
                        "logs and stores the one it took and decodes, evaluates and exports "
                        "in float32 (default: float32 for dates, auto for tatoeba)")
    p.add_argument("--jit-compile", action="store_true",
                   help="XLA-compile the train step (default: off)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the data split, shuffling and weights (default: %(default)s)")
    p.add_argument("--output", default=None, help="run directory (default: runs/<task>)")
    p.add_argument("--no-export", action="store_true",
                   help="skip exporting after training (default: export)")
    p.add_argument("--export", choices=EXPORTS, default="all",
                   help="what is exported after training: all (the SavedModel and the TFLite "
                        "files), or saved_model alone (quicker; `keras-attn export RUN` makes "
                        "the rest later, keeping the SavedModel) (default: %(default)s)")
    p.add_argument("--distribute", type=_choice("none", "mirrored", "multiworker"),
                   metavar="{none,mirrored,multiworker}", default="",
                   help="mirrored: all local GPUs (or --cpu-devices); multiworker: "
                        "MultiWorkerMirroredStrategy from TF_CONFIG (see docs/distributed.md) "
                        "(default: none, one device)")
    p.add_argument("--cpu-devices", type=int, default=0,
                   help="split the CPU into N logical devices, for testing mirrored runs "
                        "(default: 0, no split)")
    p.add_argument("--backend", choices=BACKENDS, default="tensorflow",
                   help="Keras backend that trains the model; the export at the end always "
                        "runs on TensorFlow (default: %(default)s)")
    add_verbose(p, argparse.SUPPRESS)
    return p


def check_args(parser, args):
    """Reject options that the chosen task cannot use (an argparse error, exit code 2)."""
    if args.time_budget and args.steps:
        parser.error("--time-budget and --steps both say when training ends; give one. "
                     f"Received: --time-budget {args.time_budget:g}s --steps {args.steps}")
    if args.no_export and args.export != "all":
        parser.error(f"--no-export exports nothing; --export {args.export} says what to "
                     "export: give one")
    if args.tokenizer is not None and args.task != "tatoeba":
        parser.error(f"--tokenizer applies to --task tatoeba only (the {args.task} task uses "
                     f"characters). Received: --task {args.task} --tokenizer {args.tokenizer}")
    language_flags = [f"--{n.replace('_', '-')}" for n in LANGUAGE_OPTIONS
                      if getattr(args, n, None) is not None]
    if language_flags and args.task != "tatoeba":
        parser.error(f"{', '.join(language_flags)} appl{'ies' if len(language_flags) == 1 else 'y'}"
                     f" to --task tatoeba only (the {args.task} task's codes are fixed). "
                     f"Received: --task {args.task} {' '.join(language_flags)}")
    if (args.source_lang is None) != (args.target_lang is None):
        given, missing = (("--source-lang", "--target-lang") if args.target_lang is None
                          else ("--target-lang", "--source-lang"))
        parser.error(f"{given} needs {missing}: a run translates one pair, give both (e.g. "
                     f"--source-lang fr --target-lang en). Received: {given} "
                     f"{args.source_lang or args.target_lang}")
    if args.target_data is not None and args.columns is not None:
        parser.error("--columns names the columns of one tab-separated file; with "
                     "--target-data the two files are the sides (--data: the source). "
                     f"Received: --columns {args.columns} --target-data {args.target_data}")
    if args.task == "tatoeba":
        try:
            config_from_args(args).check_languages()
        except ValueError as e:
            parser.error(str(e))


def config_from_args(args):
    """The :class:`TrainConfig` of the task's defaults with the options given on top."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in TASK_DEFAULTS[args.task].items() if k in names}
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    return TrainConfig(**values)


def _export_elsewhere(run_dir, quantizations):
    """Export a run trained on another backend in a TensorFlow process (no quantization:
    the SavedModel alone)."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    alone = [] if quantizations else ["--format", "saved_model"]
    return subprocess.run([sys.executable, "-m", "keras_attn.cli", "export", run_dir, *alone],
                          env=env).returncode


def run(args):
    from keras_attn.training import recipes as training

    config = config_from_args(args)
    run_dir = args.output or os.path.join("runs", config.task)
    start = getattr(args, "started", None) or time.monotonic()
    quantizations = EXPORTS[args.export]
    metrics = training.train(config, run_dir, distribute=args.distribute,
                             cpu_devices=args.cpu_devices, start=start,
                             export=not args.no_export, quantizations=quantizations)
    if metrics and metrics.get("chief") is False:
        return 0  # a non-chief worker: the chief evaluates and exports
    if not args.no_export:
        _export(args, config, run_dir, start, metrics or {}, quantizations)
    if config.time_budget:
        from keras_attn.core.config import format_duration

        used = time.monotonic() - start
        trained = (metrics or {}).get("train_seconds", 0.0)
        print(f"time budget: {format_duration(used)} used of "
              f"{format_duration(config.time_budget)} ({100 * used / config.time_budget:.1f} %)"
              f" by this process, {format_duration(trained)} of it training "
              f"({100 * trained / config.time_budget:.1f} %)")
    print(f"run directory: {run_dir}")
    return 0 if metrics else 1


def _export(args, config, run_dir, start, metrics, quantizations):
    """Export after training: the TFLite files a budgeted run's time left allows (planned,
    then those converted by the budget's end), their seconds added to metrics.json."""
    import keras

    if keras.backend.backend() != "tensorflow":
        if _export_elsewhere(run_dir, quantizations):
            raise SystemExit(1)
        return
    from keras_attn import export
    from keras_attn.core import runs

    planned = metrics.get("budget", {}).get("after_training", {})
    kwargs = {"quantizations": quantizations}
    if config.time_budget and "quantizations" in planned:
        kwargs = {"quantizations": tuple(planned["quantizations"]),
                  "deadline": start + config.time_budget}
    report = export.export_run(run_dir, **kwargs)
    if not quantizations:
        print(f"the SavedModel alone (--export saved_model): keras-attn export {run_dir} "
              "makes the TFLite files later, keeping it")
    elif set(quantizations) - set(kwargs["quantizations"]) or report.get("left_out"):
        print(f"TFLite files left out for the time budget: keras-attn export {run_dir} makes "
              "them (the SavedModel is kept)")
    if metrics.get("phases"):
        metrics["phases"]["export"] = report.get("seconds", {}).get("total")
        metrics["phases"]["total"] = round(time.monotonic() - start, 1)
        runs.write_json(runs.paths(run_dir)["metrics"], metrics)
        print("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in metrics["phases"].items()
                                     if v is not None))
