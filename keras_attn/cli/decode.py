"""``keras-attn translate`` and ``keras-attn evaluate``, and the decoding options' flags
(one per :data:`keras_attn.decoding.options.OPTIONS` entry, shared with ``score``; an
earlier name in :data:`ALIASES` still works, with a warning).
"""
import argparse
import functools
import json
import sys

from keras_attn.cli.console import add_corpus_flags, add_verbose, corpus_config, progress_bar
from keras_attn.decoding.options import LENGTH_PENALTY

FLAG_TYPES = {"int32": int, "float32": float, "string": str}
# Earlier flag names that still set their option: option name -> the old flag.
ALIASES = {"length_penalty": "--alpha"}


class _Alias(argparse.Action):
    """Stores the value under the option's name; given by its earlier name, also warns."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string != self.option_strings[0]:
            print(f"keras-attn: warning: {option_string} is deprecated; it is "
                  f"{self.option_strings[0]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def flag(name):
    """The command-line flag of decoding option ``name`` (``"--beam-size"``)."""
    return "--" + name.replace("_", "-")


def default_text(value):
    """How a help text writes a default: ``None`` is the artefact's, ``""`` is none."""
    if value is None:
        return "the artefact's"
    return "none" if value == "" else str(value)


def _on_off(name):
    def parse(text):
        if text not in ("on", "off"):
            raise argparse.ArgumentTypeError(f"{flag(name)} takes on or off. Received: {text}")
        return text == "on"
    return parse


def _glossary_file(path):
    """A ``--glossary`` file's pairs (``argparse`` names the flag when it cannot be read)."""
    from keras_attn.text import glossary

    try:
        return glossary.read_tsv(path)
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_option_flags(parser, names=None, skip=()):
    """A flag per option of ``keras_attn.decoding.options.OPTIONS`` (``names``: only
    these), its help and default from the declaration; booleans are switches (``on`` /
    ``off`` where the artefact decides the default), a glossary a ``FILE.tsv``. Every flag
    defaults to None (not given: the artefact's or the Translator's default)."""
    from keras_attn.decoding.options import OPTIONS

    for name, opt in OPTIONS.items():
        if name in skip or (names is not None and name not in names):
            continue
        help_text = opt.help
        if "(default:" not in help_text:  # some declarations say it themselves
            shown = {"bool": "off", "glossary": "none"}.get(opt.dtype)
            help_text += f" (default: {shown or default_text(opt.default)})"
        flags = [flag(name)]
        if name in ALIASES:
            flags.append(ALIASES[name])
            help_text += f"; {ALIASES[name]}: its earlier name, deprecated"
        help_text = help_text.replace("%", "%%")
        if opt.dtype == "glossary":
            parser.add_argument(*flags, dest=name, type=_glossary_file, default=None,
                                metavar="FILE.tsv", help=help_text.replace(
                                    " (default: none)", "; one source<TAB>target pair a "
                                    "line (default: none)"))
        elif opt.dtype == "bool" and opt.default is None:
            parser.add_argument(*flags, dest=name, type=_on_off(name), default=None,
                                metavar="on|off", help=help_text)
        elif opt.dtype == "bool":
            parser.add_argument(*flags, dest=name, action="store_true", default=None,
                                help=help_text)
        else:
            parser.add_argument(*flags, dest=name, type=FLAG_TYPES[opt.dtype], default=None,
                                action=_Alias, metavar=name.upper(), help=help_text)


def option_values(args, skip=()):
    """The decoding options given on the command line, by name."""
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
                    "own whitespace. Every flag applies to every input mode.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("sentences", nargs="*",
                   help="texts, each any number of sentences (default: lines of stdin)")
    p.add_argument("--file", default=None,
                   help="translate this whole file as one document (paragraphs, blank lines "
                        "and indentation kept) and print the translation (default: none)")
    p.add_argument("--confidence", action="store_true",
                   help="print each translation's confidence first (the calibrated "
                        "probability that it is acceptable), a tab, then the translation "
                        "(default: off)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per text: source and hypotheses (translation, "
                        "score, confidence, truncated, alignment or sentences) (default: off)")
    add_option_flags(p)
    add_verbose(p, argparse.SUPPRESS)
    p = evaluate = sub.add_parser(
        "evaluate", help="score a run on a split (JSON)",
        description="Score a run on a split: exact match (dates) or BLEU and chrF (tatoeba). "
                    "Prints one JSON object.")
    p.add_argument("run_dir", help="run directory (from keras-attn train)")
    p.add_argument("--split", choices=["train", "valid", "test"], default="test",
                   help="split of the run's data (default: %(default)s)")
    add_option_flags(p, names=("beam_size", "length_penalty"))
    p.add_argument("--limit", type=int, default=0,
                   help="score the first N pairs only (default: 0, all)")
    add_corpus_flags(p)
    add_verbose(p, argparse.SUPPRESS)
    return {"translate": translate, "evaluate": evaluate}


def read_texts(args, stdin=None):
    """The texts to translate: the ``--file`` as one document, the arguments, or the
    lines of ``stdin``."""
    if args.file is None:
        return args.sentences or [line.rstrip("\n") for line in (stdin or sys.stdin)]
    if args.sentences:
        raise ValueError(f"give --file or texts, not both. Received: --file {args.file} and "
                         f"{len(args.sentences)} text(s)")
    with open(args.file, encoding="utf-8") as f:
        return [f.read()]


def _plain(value):
    """JSON for numpy scalars (``.item()``)."""
    return value.item()


def write_hypotheses(args, texts, results, out=None):
    """Print ``translate_nbest``'s ``results`` as the flags ask: JSON lines (``--json``),
    confidence and translation (``--confidence``), the n-best with scores (more than one
    hypothesis, or alignments), or the translation alone. A ``--file`` document is written
    as it is (its own line ends), a text of the arguments or stdin on a line."""
    out = out or sys.stdout
    end = "" if args.file is not None else "\n"
    for text, hyps in zip(texts, results):
        if args.json:
            out.write(json.dumps({"source": text, "hypotheses": hyps}, ensure_ascii=False,
                                 default=_plain) + "\n")
        elif args.confidence:
            for hyp in hyps:
                out.write(f"{hyp['confidence']:.4f}\t{hyp['translation']}{end}")
        elif len(hyps) == 1 and not args.return_alignments:
            out.write(hyps[0]["translation"] + end)
        else:
            out.write(f"{args.file if args.file is not None else text}\n")
            for rank, hyp in enumerate(hyps, 1):  # n-best: rank, score, translation
                out.write(f"  {rank}\t{hyp['score']:.4f}\t{hyp['translation']}{end}")
                for sentence in hyp.get("sentences", [hyp]):
                    if "alignment" in sentence:
                        out.write(f"   \t\t{sentence['alignment']}\n")


def languages_line(languages, run_dir):
    """``"English (en) -> German (de): runs/en-de"``: what a run translates."""
    source, target = languages["source"], languages["target"]
    return (f"{source['name']} ({source['code']}) -> {target['name']} ({target['code']}): "
            f"{run_dir}")


def run_translate(args):
    from keras_attn.translator import Translator

    texts = read_texts(args)  # first: a missing file fails before the model loads
    translator = Translator.from_run_dir(args.run_dir)
    if sys.stderr.isatty():  # as the progress bar: a pipe or a log file gets no header
        from keras_attn.translation.run import languages

        print(languages_line(languages(args.run_dir), args.run_dir), file=sys.stderr)
    options = option_values(args)
    if args.json or args.confidence or set(options) - {"beam_size", "length_penalty"}:
        write_hypotheses(args, texts, translator.translate_nbest(texts, **options))
        return 0
    # The best translation alone: the batched decoder that draws a progress bar.
    end = "" if args.file is not None else "\n"
    for translation in translator.translate(texts, progress=progress_bar("translating"),
                                            **options):
        sys.stdout.write(translation + end)
    return 0


def run_evaluate(args):
    from keras_attn.training import evaluation
    from keras_attn.training import recipes as training
    from keras_attn.translator import Translator

    beam_size = 1 if args.beam_size is None else args.beam_size
    length_penalty = LENGTH_PENALTY if args.length_penalty is None else args.length_penalty
    if length_penalty < 0:
        raise ValueError(f"--length-penalty must be >= 0. Received: {length_penalty}")
    if beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1. Received: {beam_size}")
    translator = Translator.from_run_dir(args.run_dir)  # first: checks it is a run directory
    config = corpus_config(args)
    # What reading the corpus reports goes to stderr: stdout is the one JSON object.
    splits, refs = training.load_splits(config, functools.partial(print, file=sys.stderr),
                                        run_dir=args.run_dir)
    pairs = splits[args.split]
    if args.limit:
        pairs = pairs[: args.limit]
        refs = refs[: args.limit] if refs else None
    # evaluation.evaluate calls translator.translate; this one reports each batch.
    translator.translate = functools.partial(translator.translate,
                                             progress=progress_bar(f"evaluating {args.split}"))
    result = evaluation.evaluate(translator, pairs, config.task,
                                 refs if args.split == "test" else None,
                                 beam_size=beam_size, length_penalty=length_penalty)
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, default=_plain))
    return 0
