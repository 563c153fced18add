"""Sentence segmentation against the English "Golden Rules" (tests/data/golden_rules_en.json).

Scores :func:`keras_attn.text.documents.split` (and, when they import, pySBD — the ``bench``
extra — and tensorflow-text's ``StateBasedSentenceBreaker``, the one splitter with a TFLite
kernel) as pySBD's own benchmark does: a case passes when the list of sentences is exactly
the expected one. Also checks that the TF graph (:mod:`keras_attn.export.documents`) gives
the Python split on every case, and times the Python split on a 100,000-character document.
Writes ``docs/benchmarks/segmentation.json`` and ``.md``.

Example:
    $ python benchmarks/segmentation.py            # ours, pySBD if installed
    $ python benchmarks/segmentation.py --tf       # + the TF graph and tensorflow-text
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.results import fresh_dir  # noqa: E402
from keras_attn.text import documents  # noqa: E402

GOLDEN = os.path.join(REPO, "tests", "data", "golden_rules_en.json")


def score(cases, segment):
    """``{"passed": n, "total": n, "share": x, "failed": [ids], "outputs": {id: [...]}}``."""
    failed, outputs = [], {}
    for case in cases:
        got = segment(case["text"])
        if got != case["sentences"]:
            failed.append(case["id"])
            outputs[case["id"]] = got
    passed = len(cases) - len(failed)
    return {"passed": passed, "total": len(cases), "share": round(passed / len(cases), 4),
            "failed": failed, "wrong_outputs": outputs}


def segmenters(with_tf):
    """name -> (text -> list of str, description)."""
    out = {"keras_attn.text.documents": (lambda t: documents.split(t).sentences,
                                    "this package's rule set, Python re")}
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False, char_span=False)
        version = getattr(pysbd, "__version__", None)
        if version is None:
            from importlib.metadata import version as dist_version
            version = dist_version("pysbd")
        out[f"pysbd {version}"] = (lambda t: [s.strip() for s in seg.segment(t)],
                                   "Segmenter(language='en', clean=False), stripped "
                                   "(as pySBD's benchmark)")
    except ImportError:
        print("pysbd is not installed (pip install keras_attn[bench]): skipped")
    if with_tf:
        import tensorflow as tf

        from keras_attn.export.documents import split_tensor
        out["keras_attn.export.documents (TF graph)"] = (
            lambda t: [s.decode("utf-8") for s in split_tensor([t])[0][0].numpy()],
            "the same rules with tf.strings.regex_replace")
        try:
            import tensorflow_text as tft

            breaker = tft.StateBasedSentenceBreaker()
            out[f"tensorflow_text {tft.__version__} StateBasedSentenceBreaker"] = (
                lambda t: [s.decode("utf-8").strip()
                           for s in breaker.break_sentences(tf.constant([t]))[0].numpy()],
                "runs in TFLite (SentenceFragmentsV2 kernel in SELECT_TFTEXT_OPS); stripped")
        except ImportError:
            pass
    return out


# Inputs on which a backtracking regex engine can take quadratic time (a long run of stops,
# of initials, of whitespace): Python's re must stay linear on them (RE2 always is).
ADVERSARIAL = {"100,000 dots": "." * 100_000, "U.S. x 25,000": "U.S." * 25_000,
               "100,000 spaces inside": "a" + " " * 100_000 + "b",
               "'\".\" ' x 25,000": '".\" ' * 25_000,
               "numbered list on one line": " ".join(f"{i % 9 + 1}. Item" for i in range(20_000))}


def best_time(fn, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def time_split(cases, chars=100_000, with_tf=False):
    """Seconds (best of 3) to split a document of ``chars`` characters (the golden texts as
    paragraphs), in Python and (``with_tf``) in the TF graph, and the Python split of each
    :data:`ADVERSARIAL` input."""
    paragraph = " ".join(c["text"] for c in cases)
    text = "\n\n".join([paragraph] * (chars // len(paragraph) + 1))[:chars]
    seconds, segments = best_time(lambda: documents.split(text))
    assert documents.join(*segments) == text
    out = {"characters": len(text), "sentences": len(segments.sentences),
           "python_seconds": round(seconds, 4)}
    if with_tf:
        import tensorflow as tf

        from keras_attn.export.documents import split_tensor

        fn = tf.function(split_tensor, input_signature=[tf.TensorSpec([None], tf.string)])
        fn(tf.constant([text]))  # trace
        out["tf_graph_seconds"] = round(best_time(lambda: fn(tf.constant([text])))[0], 4)
    out["python_adversarial_seconds"] = {
        name: round(best_time(lambda: documents.split(t), repeats=1)[0], 4)
        for name, t in ADVERSARIAL.items()}
    return out


def tatoeba_check(path):
    """On the English side of a Tatoeba file (``eng<TAB>fra`` lines): how many distinct
    sentences split into several, and how many keep a stop followed by whitespace inside
    (what to read by eye: abbreviations kept whole, or a missed boundary)."""
    import re

    english = sorted({line.split("\t")[0] for line in open(path, encoding="utf-8")
                      if "\t" in line})
    split_into_several, kept_with_inner_stop = [], []
    for text in english:
        sentences = documents.split(text).sentences
        if len(sentences) > 1:
            split_into_several.append(sentences)
        elif re.search("[.!?\u2026][\"')]*[ \t]+[^ \t]", text):
            kept_with_inner_stop.append(text)
    shown = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(path))),
                         os.path.basename(path))
    return {"file": shown, "distinct_english": len(english),
            "split_into_several": len(split_into_several),
            "examples_split": split_into_several[:: max(1, len(split_into_several) // 10)][:10],
            "kept_whole_with_inner_stop": len(kept_with_inner_stop),
            "examples_kept": kept_with_inner_stop[:: max(1, len(kept_with_inner_stop) // 10)]
            [:10]}


def markdown(result):
    lines = ["# Sentence segmentation: the English Golden Rules", "",
             f"{result['date']} - {result['machine']}, Python {result['python']}", "",
             f"Cases: {result['set']['name']} ({result['set']['total']} cases; "
             f"{result['set']['source']}; {result['set']['licence']}).", "",
             "A case passes when the sentences equal the expected list exactly.", "",
             "| segmenter | passed | share | failed cases | notes |", "|---|---|---|---|---|"]
    for name, r in result["segmenters"].items():
        lines.append(f"| {name} | {r['passed']}/{r['total']} | {100 * r['share']:.1f} % | "
                     f"{', '.join(map(str, r['failed'])) or '-'} | {r['description']} |")
    names = {c["id"]: c["name"] for c in result["cases"]}
    lines += ["", "Cases keras_attn.text.documents gets wrong:", ""]
    ours = result["segmenters"]["keras_attn.text.documents"]
    for i in ours["failed"]:
        lines.append(f"- {i} ({names[i]}): {ours['wrong_outputs'][i]!r}")
    t = result["split_time"]
    lines += ["", f"Split of a {t['characters']:,}-character document ({t['sentences']:,} "
              f"sentences), best of 3: Python {t['python_seconds']} s"
              + (f", TF graph (tf.function) {t['tf_graph_seconds']} s"
                 if "tf_graph_seconds" in t else "") + ".",
              "", "Python split of inputs that make a backtracking engine slow when a rule "
              "is not anchored: "
              + "; ".join(f"{k} {v} s" for k, v in t["python_adversarial_seconds"].items())
              + ".", ""]
    if "tatoeba" in result:
        t = result["tatoeba"]
        lines += [f"Tatoeba ({t['file']}): of {t['distinct_english']:,} distinct English "
                  f"sentences, {t['split_into_several']:,} split into several (examples: "
                  f"{t['examples_split'][:3]!r}); {t['kept_whole_with_inner_stop']} kept "
                  f"whole although a stop and whitespace are inside (examples: "
                  f"{t['examples_kept'][:5]!r}).", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf", action="store_true",
                        help="also the TF graph split and tensorflow-text's breaker")
    parser.add_argument("--tatoeba", help="a Tatoeba eng<TAB>fra file to check by count, "
                        "e.g. ../shared/data/fra-eng/train.txt")
    parser.add_argument("--out", default="",
                        help="path without extension (.json, .md; default: a new "
                             "benchmarks/results/ folder)")
    args = parser.parse_args(argv)
    args.out = args.out or os.path.join(fresh_dir("segmentation"), "segmentation")
    golden = json.load(open(GOLDEN, encoding="utf-8"))
    cases = golden["cases"]
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "set": {"name": golden["name"], "source": golden["source"],
                "licence": golden["licence"], "total": len(cases)},
        "segmenters": {}, "cases": [{"id": c["id"], "name": c["name"]} for c in cases]}
    for name, (segment, description) in segmenters(args.tf).items():
        result["segmenters"][name] = dict(score(cases, segment), description=description)
        r = result["segmenters"][name]
        print(f"{name}: {r['passed']}/{r['total']} = {100 * r['share']:.1f} % "
              f"(failed {r['failed']})")
    if args.tatoeba:
        result["tatoeba"] = tatoeba_check(args.tatoeba)
        print("tatoeba:", {k: v for k, v in result["tatoeba"].items()
                           if not k.startswith("examples")})
    result["split_time"] = time_split(cases, with_tf=args.tf)
    print("split time:", result["split_time"])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(result))
    return result


if __name__ == "__main__":
    main()
