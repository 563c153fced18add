"""``keras-attn export``: a run as SavedModel and TFLite files, or for CTranslate2."""
import argparse
import functools

from keras_attn.cli.console import add_verbose


def add_parser(sub):
    p = sub.add_parser(
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
