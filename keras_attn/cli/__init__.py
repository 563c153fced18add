"""``keras-attn``: train, translate, evaluate and export from the command line.

Examples::

    keras-attn train                                  # dates task, defaults, ./runs/dates
    keras-attn train --task tatoeba --data fra-eng --output runs/fra
    keras-attn translate runs/dates "3 March 2021"    # or lines on stdin
    keras-attn evaluate runs/dates --split test       # one JSON object
    keras-attn score runs/dates --source "3 March 2021" --target 2021-03-03
    keras-attn calibrate runs/dates
    keras-attn export runs/dates --format ctranslate2 --quantization int8
    keras-attn serve exported --port 5000             # LibreTranslate's API over HTTP

The parser imports neither TensorFlow nor Keras, so ``--help`` answers at once; each
command (one module each, :data:`COMMANDS`) imports what it runs.

May import: every other package (it is the top); nothing imports it.
"""
import argparse
import sys
import time

from keras_attn import __version__
from keras_attn.cli import calibrate, decode, export, score, serve, settings, train
from keras_attn.cli.console import add_verbose, progress_bar, quiet_tensorflow

__all__ = ["main", "build_parser", "progress_bar", "COMMANDS"]

COMMANDS = {"train": train.run, "translate": decode.run_translate,
            "evaluate": decode.run_evaluate, "export": export.run, "score": score.run,
            "serve": serve.run, "calibrate": calibrate.run}


def _parsers():
    """The ``keras-attn`` parser and its subcommand parsers by name."""
    parser = argparse.ArgumentParser(prog="keras-attn", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit (default: off)")
    add_verbose(parser, False)
    # settings.Parser: a command's settings read their environment variables by one rule
    sub = parser.add_subparsers(dest="command", required=True, parser_class=settings.Parser)
    return parser, {"train": train.add_parser(sub), **decode.add_parsers(sub),
                    "export": export.add_parser(sub), "score": score.add_parser(sub),
                    "serve": serve.add_parser(sub), "calibrate": calibrate.add_parser(sub)}


def build_parser():
    """The ``keras-attn`` argument parser (builds without importing TensorFlow or Keras)."""
    return _parsers()[0]


def main(argv=None):
    """Run ``keras-attn`` with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    start = time.monotonic()  # a --time-budget counts from the start of the command
    argv = sys.argv[1:] if argv is None else list(argv)
    if next((a for a in argv if not a.startswith("-")), None) == "train":
        train.select_backend(argv)
    parser, commands = _parsers()
    args = parser.parse_args(argv)
    args.started = start
    if args.command == "train":
        train.check_args(commands["train"], args)
    engine = serve.ENGINES.get(getattr(args, "engine", None))
    if engine is None or "tensorflow" in engine.quiet_imports:  # CTranslate2's server: no TF
        quiet_tensorflow(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError, OSError, UnicodeDecodeError) as e:
        print(f"keras-attn {args.command}: error: {e}", file=sys.stderr)
        return 1
