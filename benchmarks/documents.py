"""Paragraphs and long documents through a trained English->French run.

Two measurements (issue 40's goals):
1. ``--paragraphs`` groups of 4 consecutive held-out sentences (dev.txt) sent as one
   paragraph, against the same sentences translated one by one and joined (the first
   reference of each, joined alike, is the reference): corpus BLEU and chrF of both, and of
   the paragraph decoded as one sentence (what every artefact did before documents were
   split), with the number of paragraph outputs cut at ``max_len``.
2. A document of at least ``--chars`` characters (dev sentences in paragraphs of 5, blank
   lines between) translated whole by ``Translator.translate``: seconds, sentences, and
   whether the output keeps the paragraphs.

Usage:
    python -m benchmarks.documents /work/runs/fra30 --json docs/benchmarks/documents.json
"""
import argparse
import json
import sys
import time

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--paragraphs", type=int, default=500)
    parser.add_argument("--chars", type=int, default=100_000)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)

    from keras_attn.text import documents

    from keras_attn.training import evaluation

    from keras_attn.core import runs

    from keras_attn.training import recipes as training
    from keras_attn.core.config import TrainConfig
    from keras_attn.translation import pipeline
    from keras_attn.translator import Translator

    tr = Translator.from_run_dir(args.run_dir)
    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config)
    sources = [s for s, _ in splits["test"]]
    rng = np.random.default_rng(0)
    starts = rng.choice(len(sources) - 4, size=args.paragraphs, replace=False)
    groups = [list(range(i, i + 4)) for i in starts]
    paragraphs = [" ".join(sources[i] for i in g) for g in groups]
    references = [[" ".join(refs[i][0] for i in g)] for g in groups]

    singles = tr.translate(sources)
    one_by_one = [" ".join(singles[i] for i in g) for g in groups]
    t0 = time.time()
    as_paragraphs = tr.translate(paragraphs)
    paragraph_seconds = time.time() - t0
    whole = [h[0]["translation"] for h in pipeline.translate_sentences(
        tr, paragraphs, 128, tr.options())]  # the paragraph as one sentence
    cut = sum(n > tr.max_len - 1 for n in tr.source_lengths(paragraphs))
    record = {"run_dir": args.run_dir, "paragraphs": args.paragraphs,
              "one_by_one": evaluation.corpus_scores(one_by_one, references),
              "as_paragraphs": evaluation.corpus_scores(as_paragraphs, references),
              "paragraph_as_one_sentence": evaluation.corpus_scores(whole, references),
              "paragraphs_over_max_len": int(cut),
              "paragraph_seconds": round(paragraph_seconds, 2)}

    blocks, text = [], ""
    i = 0
    while len(text) < args.chars:
        blocks.append(" ".join(sources[(i + k) % len(sources)] for k in range(5)))
        i += 5
        text = "\n\n".join(blocks)
    t0 = time.time()
    (out,) = tr.translate([text])
    record["document"] = {"characters": len(text),
                          "sentences": len(documents.split(text).sentences),
                          "paragraphs": len(blocks),
                          "output_paragraphs": len(out.split("\n\n")),
                          "output_characters": len(out),
                          "seconds": round(time.time() - t0, 2)}
    print(json.dumps(record, indent=1, ensure_ascii=False))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
