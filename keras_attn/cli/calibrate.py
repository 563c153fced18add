"""``keras-attn calibrate``: fit a trained run's confidence calibrator on its validation
split (``keras_attn.training.calibration``; training does it at its end, this is for runs trained
before, or to fit again)."""
import argparse

from keras_attn.cli.console import add_corpus_flags, add_verbose, corpus_config


def add_parser(sub):
    p = sub.add_parser(
        "calibrate", help="fit a run's confidence calibrator on its validation split",
        description="Fit the calibrator that turns a hypothesis's signals (its tokens' "
                    "log-probabilities, lengths, unknown source words) into its confidence, "
                    "the probability that it is acceptable (dates: exact; text: sentence chrF "
                    ">= 50), on the run's validation split, and save it as "
                    "RUN_DIR/calibration.json. Training does this at its end; exports read it.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--batch-size", type=int, default=256,
                   help="sentences per decoder call (default: %(default)s)")
    add_corpus_flags(p)
    add_verbose(p, argparse.SUPPRESS)
    return p


def run(args):
    from keras_attn.training.calibration import calibrate_run

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1. Received: {args.batch_size}")
    calibrate_run(args.run_dir, batch_size=args.batch_size, config=corpus_config(args))
    return 0
