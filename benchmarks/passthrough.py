"""What must not be translated passes through: held-out sentences with a link, an e-mail
address, a number, inline code or an emoji inserted (the kinds in turn), translated by a
run with and without ``passthrough``.

Reported per setting: ``identical`` (the share of spans back byte-identical, per kind and
overall) and ``bleu_around_spans_delta`` (BLEU of the translations with each span removed,
minus the span-less sources'). ``--plain``: the whole file with and without passing through;
``--saved-model``: passing through by its ``--signature`` (``serving_default``, or
``translate_v3`` at ``--beam-size``). Without the corpus: ``"skipped"``.

    python -m benchmarks.passthrough --run-dir RUN [--data DEV] [--n 200] [--plain]
        [--saved-model RUN/export/saved_model/translator/1] [--out results.json]

Example:
    >>> text, span, kind = spans_of(["Hello there."])[0]
    >>> kind, span in text
    ('url', True)
"""
import argparse
import json
import os
import random
import sys

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "..", "shared", "data", "fra-eng", "dev.txt")
KINDS = ("url", "email", "number", "code", "emoji")
EMOJI = ("\U0001f642", "\U0001f44d\U0001f3fd", "\u2764\ufe0f", "\U0001f1eb\U0001f1f7",
         "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f680")


def span_of(kind, k, rng):
    """The ``k``-th span of ``kind``, made up (no real address)."""
    if kind == "url":
        return rng.choice(["https://example.com/p/", "http://www.example.org/a?id=",
                           "https://docs.example.net/v1.2/page#s"]) + str(k)
    if kind == "email":
        return rng.choice(["tom", "mary.smith", "info+news"]) + f"{k}@example.com"
    if kind == "number":
        return rng.choice([f"{k + 1},{rng.randint(100, 999)}", f"{k}.{rng.randint(1, 99)}",
                           f"{rng.randint(0, 23)}:{rng.randint(10, 59)}",
                           f"20{rng.randint(10, 29)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                           str(rng.randint(10, 99999))])
    if kind == "code":
        return rng.choice(["`pip install keras`", "`x = 3`", "`ls -la`", "`git push`",
                           "`print(x)`"])
    return EMOJI[k % len(EMOJI)]


def spans_of(sentences, seed=0):
    """Per sentence ``(text with its span, span, kind)``: kinds in turn, each span at a
    word boundary chosen at random (before the first word up to after the last, glued
    before the final stop when there is one)."""
    rng = random.Random(seed)
    out = []
    for k, sentence in enumerate(sentences):
        kind = KINDS[k % len(KINDS)]
        span = span_of(kind, k, rng)
        words = sentence.split()
        where = rng.randint(0, len(words))
        if where == len(words) and words and words[-1][-1] in ".!?":
            # at the end: before the stop, as a writer puts it ("... at 10:30.")
            last = words[-1]
            words[-1] = last[:-1]
            text = " ".join(words + [span]) + last[-1]
        else:
            text = " ".join(words[:where] + [span] + words[where:])
        out.append((text, span, kind))
    return out


def read_pairs(path, n):
    """``n`` pairs spread evenly over a tab-separated file, one per English sentence (its
    first reference): the file may be sorted by length."""
    first = {}  # English -> its first reference
    with open(path, encoding="utf-8") as f:
        for english, french in (line.rstrip("\n").split("\t")[:2] for line in f if "\t" in line):
            first.setdefault(english, french)
    pairs = list(first.items())
    step = max(1, len(pairs) // max(n, 1))
    return pairs[::step][:n]


def without(translation, span):
    """The translation with the span taken out, the whitespace mended: "a X b" -> "a b",
    "à X." -> "à."."""
    if span not in translation:
        return translation
    before, _, after = translation.partition(span)
    before, after = before.rstrip(" "), after.lstrip(" ")
    glued = not before or not after or after[0] in ".,!?;:\u2026\u202f\xa0)"
    return (before + ("" if glued else " ") + after).strip()


def measure(translate, pairs, seed=0):
    """The report (module docstring) for ``translate(texts, passthrough) -> strings``."""
    import sacrebleu

    sources = [en for en, _ in pairs]
    references = [fr for _, fr in pairs]
    inserted = spans_of(sources, seed)
    texts = [t for t, _, _ in inserted]
    kinds = [k for _, _, k in inserted]
    plain = translate(sources, True)
    report = {"sentences": len(pairs), "spans_per_kind": {k: kinds.count(k) for k in KINDS}}
    for name, passthrough in (("passthrough", True), ("passthrough_off", False)):
        out = translate(texts, passthrough)
        hits = [span in o for (_, span, _), o in zip(inserted, out)]
        stripped = [without(o, span) for (_, span, _), o in zip(inserted, out)]
        plain_ref = plain if passthrough else translate(sources, False)
        bleu_plain = sacrebleu.corpus_bleu(plain_ref, [references]).score
        bleu_stripped = sacrebleu.corpus_bleu(stripped, [references]).score
        report[name] = {
            "identical": round(sum(hits) / len(hits), 4),
            "identical_per_kind": {kind: round(sum(h for h, k in zip(hits, kinds) if k == kind)
                                               / max(1, kinds.count(kind)), 4) for kind in KINDS},
            "bleu_with_spans_vs_without": round(
                sacrebleu.corpus_bleu(stripped, [plain_ref]).score, 2),
            "bleu_reference_without_spans": round(bleu_plain, 2),
            "bleu_reference_around_spans": round(bleu_stripped, 2),
            "bleu_around_spans_delta": round(bleu_stripped - bleu_plain, 2),
            "examples": [{"source": t, "translation": o} for (t, _, _), o in
                         list(zip(inserted, out))[:5]],
        }
    return report


def plain_bleu(translate, path):
    """BLEU and chrF (all references) of the held-out file's sources translated with and
    without passing through, and how many sentences hold a span."""
    from keras_attn.text import spans
    from keras_attn.training.calibration import grouped
    from keras_attn.training.evaluation import corpus_scores

    with open(path, encoding="utf-8") as f:
        pairs = [tuple(line.rstrip("\n").split("\t")[:2]) for line in f if "\t" in line]
    sources, references = grouped(pairs)
    report = {"sentences": len(sources),
              "with_spans": sum(1 for s in sources if spans.find(s))}
    for name, on in (("passthrough", True), ("passthrough_off", False)):
        scores = corpus_scores(translate(sources, on), references)
        report[name] = {"bleu": scores["bleu"], "chrf": scores["chrf"]}
    return report


def saved_model_translate(path, batch_size, fallback, signature="serving_default", beam=1):
    """``translate(texts, passthrough)``: passing through, the SavedModel's ``signature``
    (``translate_v3``: through ``SavedModelEngine``, beam ``beam``); without, ``fallback``."""
    from benchmarks.artefact_agreement import _serving_default, batched
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve.engines import SavedModelEngine

    if signature == "serving_default":
        serve = _serving_default(path)
    else:
        engine = SavedModelEngine(path, signature=signature)
        serve = lambda batch: [h[0]["translation"] for h in engine.translate(  # noqa: E731
            list(batch), DecodingOptions(beam_size=beam), passthrough=True)]
    return lambda texts, on: batched(serve, texts, batch_size) if on else fallback(texts, False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, help="the run directory to translate with")
    parser.add_argument("--data", default=DEFAULT_DATA, help="tab-separated held-out pairs")
    parser.add_argument("--n", type=int, default=200, help="sentences (N/5 spans per kind)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain", action="store_true",
                        help="also the whole --data file's BLEU with and without passing through")
    parser.add_argument("--saved-model", help="passing through with this SavedModel's "
                        "--signature (its graph's pass-through)")
    parser.add_argument("--signature", default="serving_default",
                        choices=["serving_default", "translate_v3"])
    parser.add_argument("--beam-size", type=int, default=1, help="every decoding's beam")
    parser.add_argument("--out", help="write the JSON here too")
    args = parser.parse_args(argv)
    if not os.path.exists(args.data):
        result = {"skipped": f"no held-out corpus at {os.path.abspath(args.data)} (give "
                             "--data: a tab-separated English/French file)"}
        print(json.dumps(result, indent=1))
        print(result["skipped"], file=sys.stderr)
        return result
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    pairs = read_pairs(args.data, args.n)

    def translate(texts, on):
        return translator.translate(texts, beam_size=args.beam_size,
                                    batch_size=args.batch_size, passthrough=on)

    engine = f"Translator, beam {args.beam_size}"
    if args.saved_model:
        translate = saved_model_translate(args.saved_model, args.batch_size, translate,
                                          args.signature, args.beam_size)
        engine = f"SavedModel {args.signature} (off: {engine})"
    result = {"run_dir": os.path.abspath(args.run_dir), "data": os.path.abspath(args.data),
              "engine": engine, **measure(translate, pairs, args.seed)}
    if args.plain:
        result["plain_bleu"] = plain_bleu(translate, args.data)
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
