"""Raw text through the SavedModel and through the TFLite text files: are they the same?

Feeds every English sentence of a Tatoeba dev file exactly as it stands (capitals,
punctuation attached, no pre-processing), plus a set of messy inputs, to the exported
SavedModel's ``serving_default`` and to ``text_float32.tflite`` / ``text_int8.tflite``
through the LiteRT interpreter with tensorflow-text's kernels, as a phone app would.

Where float32 differs, it finds the first output token that differs (both outputs
re-tokenized with the target tokenizer) and reports the Keras model's logit margin
between its two best tokens at that step: a near-tie that the two runtimes' rounding can
flip has a margin of the order of 1e-4; a margin above 1e-3 is a bug, not rounding.

Usage:
    python scripts/device_agreement.py runs/fra --data fra-eng/dev.txt \
        --json research/device_agreement.json
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

# The repository root, for `benchmarks` (scripts import benchmarks, never the reverse).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.artefact_agreement import batched, read_sources  # noqa: E402

MESSY = [
    "Hello!", "How are you?", "I'm fine, thanks.", "WHERE IS THE STATION?", "It’s raining.",
    "“Hello,” she said.", "Don’t worry — it’s fine.", "I   have   three   cats.",
    "Tom\tis\there.", "  leading and trailing spaces  ", "I LOVE PARIS!!!", "Café, crème brûlée.",
    "Call me at 555-0199 at 10:30.", "I'm 25 years old.", "Thank you 😀", "", "?", "...",
    "Is it true? Really?", "The quick brown fox jumps over the lazy dog. " * 45,
]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def margin_at(translator, source, prefix):
    """Top-1 minus top-2 logit of the Keras model after ``[START] + prefix``."""
    from keras_attn.text import tokenizers as text

    src = np.asarray(translator.encode([source]))
    tgt = np.array([[text.START_ID] + list(prefix)], "int32")
    logits = np.asarray(translator.model({"source": src, "target_in": tgt}, training=False))
    top = np.sort(logits[0, -1].astype("float64"))[::-1]
    return float(top[0] - top[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="a Tatoeba file (English TAB French)")
    parser.add_argument("--export-dir", default="", help="default: RUN_DIR/export")
    parser.add_argument("--json", default="", help="write the report here")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    args = parser.parse_args(argv)

    import tensorflow as tf

    from keras_attn.text import subword
    from keras_attn.export import runtime
    from keras_attn.translator import Translator

    export_dir = args.export_dir or os.path.join(args.run_dir, "export")
    saved = tf.saved_model.load(os.path.join(export_dir, "saved_model", "translator", "1"))
    serve = saved.signatures["serving_default"]
    sources = read_sources(args.data)
    if args.limit:
        sources = sources[: args.limit]
    groups = {"dev": sources, "messy": MESSY}
    translator = Translator.from_run_dir(args.run_dir)
    _, tgt_tok = subword.run_tokenizers(args.run_dir)

    def saved_model(batch):
        out = serve(text=tf.constant(batch, tf.string))["translation"].numpy()
        return [s.decode("utf-8", "replace") for s in out]

    report = {"run_dir": args.run_dir, "data": args.data, "machine": platform.processor()
              or platform.machine(), "python": sys.version.split()[0], "targets": {}}
    for group, texts in groups.items():
        t0 = time.time()
        reference = batched(saved_model, texts)
        report.setdefault("saved_model_seconds", {})[group] = round(time.time() - t0, 2)
        for quantization in ("float32", "int8"):
            path = os.path.join(export_dir, "tflite", f"text_{quantization}.tflite")
            t0 = time.time()
            got = batched(lambda b: [s.decode("utf-8", "replace") for s in
                                     runtime.run_tflite_text(path, b)["translation"]], texts)
            seconds = time.time() - t0
            differ = [i for i, (a, b) in enumerate(zip(reference, got)) if a != b]
            entry = {"sentences": len(texts), "identical": len(texts) - len(differ),
                     "identical_fraction": round(1 - len(differ) / max(len(texts), 1), 4),
                     "seconds": round(seconds, 2), "differences": []}
            for i in differ[:50 if quantization == "float32" else 10]:
                want = tgt_tok.tokenize(tf.constant([reference[i]]))[0].numpy().tolist()
                have = tgt_tok.tokenize(tf.constant([got[i]]))[0].numpy().tolist()
                step = first_difference(want, have)
                diff = {"source": texts[i][:200], "saved_model": reference[i][:200],
                        "tflite": got[i][:200], "first_differing_step": step}
                if quantization == "float32" and step is not None:
                    diff["logit_margin"] = margin_at(translator, texts[i], want[:step])
                entry["differences"].append(diff)
            margins = [d["logit_margin"] for d in entry["differences"] if "logit_margin" in d]
            if margins:
                entry["max_logit_margin"] = max(margins)
            report["targets"][f"{group}/{quantization}"] = entry
            print(f"{group:5s} text_{quantization}: {entry['identical']}/{len(texts)} identical"
                  + (f", largest margin at a flip {max(margins):.2e}" if margins else ""),
                  flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
