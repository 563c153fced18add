"""Held-out raw inputs through the TFLite files as an app calls them, against the SavedModel.

For every distinct English input of a Tatoeba file (``dev.txt``: 2,000, as written; some
hold two sentences), the SavedModel's ``serving_default`` answer is the reference, and for
each TFLite text file of the export (``text_<q>.tflite``):

- ``documented``: the call ``exported/README.md`` shows — ``split_for_tflite``, the
  ``translate_sentences`` signature (every sentence in one batch), ``join_from_tflite``;
  the share identical to the SavedModel (the goal: all of them for float32);
- ``direct``: ``serving_default`` on the raw input, as an app that skips the split does:
  identical share, inputs flagged ``needs_split``, and ``silent``: inputs that differ
  without the flag where the input is not one sentence (text lost in silence: must be 0);
  ``unflagged_differ`` counts one-sentence inputs that differ anyway (float rounding of a
  near-tie, as ``scripts/device_agreement.py`` explains).

With ``--builtin``, the builtin files' reference loop (``runtime.run_tflite_builtin``) on the
same inputs split and joined alike (slow: one interpreter call per token; ``--limit``).

Usage:
    python -m benchmarks.tflite_documents runs/fra --data ../shared/data/fra-eng/dev.txt \
        --json docs/benchmarks/tflite_documents.json
"""
import argparse
import json
import os
import platform
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="a Tatoeba file (English TAB French)")
    parser.add_argument("--export-dir", default="", help="default: RUN_DIR/export")
    parser.add_argument("--limit", type=int, default=0, help="first N inputs only")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--builtin", action="store_true", help="also the builtin files")
    parser.add_argument("--json", default="", help="write the report here")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (a SentencePiece SavedModel's ops)

    from benchmarks.artefact_agreement import builtin_files, compare, text_file, utf8
    from keras_attn.text import documents
    from keras_attn.export import runtime
    from keras_attn.translator import Translator
    from scripts.device_agreement import batched, read_sources

    export_dir = args.export_dir or os.path.join(args.run_dir, "export")
    serve = tf.saved_model.load(os.path.join(export_dir, "saved_model", "translator", "1")
                                ).signatures["serving_default"]
    texts = read_sources(args.data)[: args.limit or None]
    several = [len(documents.split(t).sentences) != 1 for t in texts]

    t0 = time.time()
    reference = batched(lambda b: utf8(serve(text=tf.constant(b))["translation"].numpy()),
                        texts, args.batch_size)
    report = {"run_dir": args.run_dir, "export_dir": export_dir, "data": args.data,
              "inputs": len(texts), "inputs_not_one_sentence": sum(several),
              "machine": platform.processor() or platform.machine(),
              "saved_model_seconds": round(time.time() - t0, 2), "files": {}}

    def measured(fn):
        """``fn``'s agreement with the SavedModel (20 differences kept), and its answers."""
        t0 = time.time()
        got = batched(lambda batch: utf8(fn(batch)), texts, args.batch_size)
        return compare(texts, reference, got, time.time() - t0, 20,
                       ("saved_model", "tflite")), got

    for name in sorted(os.listdir(os.path.join(export_dir, "tflite"))):
        if not (name.startswith("text_") and name.endswith(".tflite")):
            continue
        path = os.path.join(export_dir, "tflite", name)
        direct_runner = runtime.text_interpreter(model_path=path).get_signature_runner(
            runtime.TFLITE_TEXT_SIGNATURE)
        flags = []

        def direct(batch):
            out = direct_runner(text=runtime.text_array(batch))
            flags.extend(out.get("needs_split", [False] * len(batch)))
            return out["translation"]

        entry = {"documented": measured(text_file(path))[0]}
        entry["direct"], got = measured(direct)
        differ = [a != b for a, b in zip(reference, got)]
        entry["direct"].update(
            has_needs_split="needs_split" in direct_runner.get_output_details(),
            flagged=int(sum(flags)),
            flagged_not_one_sentence=int(sum(f and s for f, s in zip(flags, several))),
            silent=int(sum(d and s and not f for d, s, f in zip(differ, several, flags))),
            unflagged_differ=int(sum(d and not f for d, f in zip(differ, flags))))
        report["files"][name] = entry
        print(f"{name}: documented call {entry['documented']['identical']}/{len(texts)}; "
              f"direct {entry['direct']['identical']}/{len(texts)}, flagged "
              f"{entry['direct']['flagged']}, silent losses {entry['direct']['silent']}",
              flush=True)
    if args.builtin:  # the builtin files' loop on every sentence, joined back
        entry = measured(builtin_files(Translator.from_run_dir(args.run_dir),
                                       os.path.join(export_dir, "tflite", "builtin_float32")))[0]
        report["files"]["builtin_float32"] = entry
        print(f"builtin_float32: {entry['identical']}/{len(texts)}", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
