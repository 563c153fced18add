"""``keras-attn export``: a run to one of :data:`keras_attn.export.EXPORT_TARGETS`."""
import argparse
import functools

from keras_attn.cli.console import add_verbose
from keras_attn.export import DEFAULT_TARGET, EXPORT_TARGETS

def _workers(value):
    """``auto`` or a number of processes (argparse's type of ``--workers``)."""
    if value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be auto or an integer >= 0. Received: {value!r}")
    return number


# The options a target may take (keras_attn.export.ExportTarget.options), as flags.
FLAGS = {"version": dict(type=int, help="SavedModel version"),
         "beam_size": dict(type=int, help="decoding inside the SavedModel/TFLite graphs"),
         "quantization": dict(choices=["float32", "int8"],
                              help="weights (web: dynamic-range int8)"),
         "passthrough": dict(choices=["auto", "on", "off"],
                             help="URLs, e-mail addresses, code, tags, numbers and emoji "
                                  "passed through in serving_default's graph, and a "
                                  "translate_v3 signature that lets a request turn it off "
                                  "(auto: for subword and word models)"),
         "workers": dict(type=_workers, metavar="{auto,N}",
                         help="processes converting the TFLite files beside the export "
                              "(auto: one per core but one, memory allowing; 0: in this "
                              "one)"),
         "wasm": dict(choices=["plain", "all"],
                      help="LiteRT.js WebAssembly builds in the web folder: plain (browsers "
                           "with relaxed SIMD) or all (also the compat build)")}


def _formats(option):
    return [name for name, target in EXPORT_TARGETS.items() if option in target.options]


def add_parser(sub):
    p = sub.add_parser(
        "export", help="export a run as SavedModel and TFLite, or for CTranslate2",
        description="Export a run: " + "; ".join(
            f"--format {name}: {target.writes}" for name, target in EXPORT_TARGETS.items()))
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--format", choices=list(EXPORT_TARGETS), default=DEFAULT_TARGET,
                   help="what to write (default: %(default)s)")
    p.add_argument("--export-dir", default=None, help="output folder (default: the format's)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing exported files (default: off)")
    for option, spec in FLAGS.items():
        formats = _formats(option)
        defaults = {EXPORT_TARGETS[f].options[option] for f in formats}
        p.add_argument("--" + option.replace("_", "-"), default=None, **dict(
            spec, help=f"{spec['help']}, --format {', '.join(formats)} only (default: "
                       f"{', '.join(map(str, sorted(defaults, key=str)))})"))
    add_verbose(p, argparse.SUPPRESS)
    return p


def run(args):
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"export needs the TensorFlow backend (SavedModel, TFLite and the CTranslate2 "
            f"conversion read TensorFlow weights); Keras runs on {keras.backend.backend()}. "
            f"Run: KERAS_BACKEND=tensorflow keras-attn export {args.run_dir} (a run trained "
            "on any backend loads there)")
    target = EXPORT_TARGETS[args.format]
    options = {}
    for option in FLAGS:
        value = getattr(args, option)
        if value is None:
            continue
        if option not in target.options:
            flag = "--" + option.replace("_", "-")
            raise ValueError(f"{flag} applies to --format {', '.join(_formats(option))} only. "
                             f"Received: {flag} {value} with --format {args.format}")
        options[option] = value
    log = functools.partial(print, flush=True)  # each stage shows as soon as it is done
    try:
        export = target.load()
    except ImportError as e:  # an optional extra (CTranslate2)
        raise ValueError(f"--format {args.format}: {e}") from None
    export(args.run_dir, export_dir=args.export_dir, overwrite=args.overwrite, log=log,
           **options)
    return 0
