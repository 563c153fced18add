"""``keras-attn score``: how likely a trained run finds given translations (forced decoding,
``Translator.score``; CTranslate2's ``score_batch``)."""
import argparse
import json
import sys

from keras_attn.cli.console import add_verbose
from keras_attn.cli.decode import add_option_flags


def add_parser(sub):
    p = sub.add_parser(
        "score", help="score given translations with a trained run",
        description="Score given translations with a trained run (forced decoding): per pair "
                    "the summed log-probability, the length-normalised score beam search "
                    "ranks by, and each target token's log-probability. Pairs are "
                    "SOURCE<TAB>TARGET lines on stdin, or one pair from --source and "
                    "--target. Prints per pair: log_prob<TAB>score<TAB>confidence<TAB>the "
                    "per-token log-probabilities (space-separated, [END]'s last), or JSON "
                    "lines with --json.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--source", default=None,
                   help="the source sentence, with --target (default: none, pairs from stdin)")
    p.add_argument("--target", default=None,
                   help="its translation to score, with --source (default: none)")
    add_option_flags(p, names=("length_penalty",))
    p.add_argument("--json", action="store_true",
                   help="one JSON object per pair: source, target, tokens, token_ids, "
                        "token_log_probs, log_prob, score, confidence, truncated "
                        "(default: off)")
    add_verbose(p, argparse.SUPPRESS)
    return p


def read_pairs(args, stdin=None):
    """``(sources, targets)`` from ``--source``/``--target`` or TSV lines of ``stdin``."""
    if (args.source is None) != (args.target is None):
        raise ValueError("--source and --target go together. Received: "
                         f"--source {args.source!r} --target {args.target!r}")
    if args.source is not None:
        return [args.source], [args.target]
    sources, targets = [], []
    for number, line in enumerate(stdin or sys.stdin, 1):
        line = line.rstrip("\n").rstrip("\r")
        if not line:
            continue
        if line.count("\t") != 1:
            raise ValueError(f"stdin line {number} must be SOURCE<TAB>TARGET (one tab). "
                             f"Received: {line!r}")
        source, target = line.split("\t")
        sources.append(source)
        targets.append(target)
    return sources, targets


def run(args):
    from keras_attn.translator import Translator

    sources, targets = read_pairs(args)  # first: a bad input fails before the model loads
    translator = Translator.from_run_dir(args.run_dir)
    results = translator.score(sources, targets, length_penalty=args.length_penalty)
    for source, target, result in zip(sources, targets, results):
        if args.json:
            print(json.dumps({"source": source, "target": target, **result},
                             ensure_ascii=False))
        else:
            per_token = " ".join(f"{p:.4f}" for p in result["token_log_probs"])
            print(f"{result['log_prob']:.4f}\t{result['score']:.4f}\t"
                  f"{result['confidence']:.4f}\t{per_token}")
    return 0
