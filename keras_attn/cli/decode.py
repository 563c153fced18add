"""``keras-attn translate`` and ``keras-attn evaluate``: a trained run's decoder, on
sentences or on a split."""
import argparse
import functools
import sys

from keras_attn.cli.console import add_verbose, progress_bar
from keras_attn.config import TrainConfig

# The decoding options of `keras-attn translate` besides --beam-size (API.md, "Decoding
# options per request"); None (not given) leaves the Translator's default.
OPTION_FLAGS = {
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


def add_parsers(sub):
    """The ``translate`` and ``evaluate`` parsers, by name."""
    p = translate = sub.add_parser(
        "translate", help="translate sentences with a trained run",
        description="Translate sentences (arguments, or lines of stdin) with a trained run.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("sentences", nargs="*", help="sentences (default: lines of stdin)")
    p.add_argument("--beam-size", type=int, default=1,
                   help="beams of the beam search; 1 is greedy decoding (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.6,
                   help="length penalty of the beam search (default: %(default)s)")
    for name, (kind, help_text) in OPTION_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=help_text)
    p.add_argument("--return-alignments", action="store_true", default=None,
                   help="print word alignments (Pharaoh i-j: source word i, target word j) "
                        "under each translation (default: off)")
    add_verbose(p, argparse.SUPPRESS)
    p = evaluate = sub.add_parser(
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
    add_verbose(p, argparse.SUPPRESS)
    return {"translate": translate, "evaluate": evaluate}


def run_translate(args):
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    options = {name: getattr(args, name) for name in (*OPTION_FLAGS, "return_alignments")
               if getattr(args, name) is not None}
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
