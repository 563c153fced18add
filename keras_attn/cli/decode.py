"""``keras-attn translate`` and ``keras-attn evaluate``: a trained run's decoder, on
sentences or on a split."""
import argparse
import functools
import sys

from keras_attn.cli.console import add_verbose, progress_bar
from keras_attn.config import TrainConfig
from keras_attn.decoding.options import LENGTH_PENALTY

# The decoding options of `keras-attn translate` besides --beam-size and --alpha (API.md,
# "Decoding options per request"), one flag per declared option; None (not given) leaves
# the Translator's default.
FLAG_TYPES = {"int32": int, "float32": float, "string": str}


def add_option_flags(parser, skip=("beam_size",)):
    """A ``--flag`` per option of ``keras_attn.decoding.options.OPTIONS`` (its help and
    default from the declaration); booleans are switches."""
    from keras_attn.decoding.options import OPTIONS

    for name, opt in OPTIONS.items():
        if name in skip:
            continue
        default = "the artefact's" if opt.default is None else opt.default
        flag = "--" + name.replace("_", "-")
        if opt.dtype == "bool":
            parser.add_argument(flag, action="store_true", default=None,
                                help=f"{opt.help} (default: off)")
        else:
            help_text = f"{opt.help} (default: {default})".replace("%", "%%")
            parser.add_argument(flag, type=FLAG_TYPES[opt.dtype], default=None, help=help_text)


def option_values(args, skip=("beam_size",)):
    """The options given on the command line, by name."""
    from keras_attn.decoding.options import NAMES

    return {name: getattr(args, name) for name in NAMES
            if name not in skip and getattr(args, name, None) is not None}


def add_parsers(sub):
    """The ``translate`` and ``evaluate`` parsers, by name."""
    p = translate = sub.add_parser(
        "translate", help="translate sentences with a trained run",
        description="Translate text with a trained run: arguments, or lines of stdin (a "
                    "paragraph per line), or a whole file (--file). Text of several sentences "
                    "is split into sentences, translated as one batch and joined with its "
                    "own whitespace.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("sentences", nargs="*",
                   help="texts, each any number of sentences (default: lines of stdin)")
    p.add_argument("--file", default=None,
                   help="translate this whole file as one document (paragraphs, blank lines "
                        "and indentation kept) and print the translation (default: none)")
    p.add_argument("--beam-size", type=int, default=1,
                   help="beams of the beam search; 1 is greedy decoding (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=LENGTH_PENALTY,
                   help="length penalty of the beam search (default: %(default)s)")
    p.add_argument("--confidence", action="store_true",
                   help="print each translation's confidence first (the calibrated "
                        "probability that it is acceptable), a tab, then the translation "
                        "(default: off)")
    add_option_flags(p)
    add_verbose(p, argparse.SUPPRESS)
    p = evaluate = sub.add_parser(
        "evaluate", help="score a run on a split",
        description="Score a run on a split: exact match (dates) or BLEU and chrF (tatoeba).")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--split", choices=["train", "valid", "test"], default="test",
                   help="split of the run's data (default: %(default)s)")
    p.add_argument("--beam-size", type=int, default=1,
                   help="beams of the beam search; 1 is greedy decoding (default: %(default)s)")
    p.add_argument("--length-penalty", type=float, default=LENGTH_PENALTY,
                   help="beam search's GNMT length penalty alpha (default: %(default)s)")
    p.add_argument("--limit", type=int, default=0,
                   help="score the first N pairs only (default: 0, all)")
    add_verbose(p, argparse.SUPPRESS)
    return {"translate": translate, "evaluate": evaluate}


def run_translate(args):
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    if args.file is not None:
        if args.sentences:
            raise ValueError("give --file or texts, not both")
        with open(args.file, encoding="utf-8") as f:
            document = f.read()
        options = option_values(args)
        options.setdefault("length_penalty", args.alpha)
        best = translator.translate_nbest([document], beam_size=args.beam_size, **options)
        sys.stdout.write(best[0][0]["translation"])
        return 0
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    options = option_values(args)
    if args.confidence:
        options.setdefault("length_penalty", args.alpha)
        for hyps in translator.translate_nbest(sentences, beam_size=args.beam_size, **options):
            for hyp in hyps:
                print(f"{hyp['confidence']:.4f}\t{hyp['translation']}")
        return 0
    if not options:  # one line per sentence
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


def run_evaluate(args):
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
