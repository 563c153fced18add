"""Ops per decoding step in the served graph, beside the time per step.

The SavedModel runs in a ``tf.compat.v1.Session`` as TF Serving loads it; one sentence cut
at ``max_length`` a and b (both below its translation's length); a step costs the
difference of the two runs' traced ops and median milliseconds over ``b - a``.

    python -m benchmarks.step_ops exported/saved_model/translator/1 --text "3 March 2021" \\
        --json research/step_ops.json

With ``--settings FILE`` it measures instead what TF Serving's speed flags change: milliseconds
per sentence at batch 1, 8 and 32 (the batching parameters' ``max_batch_size``) under each
intra-/inter-op thread count and with ``translate_v2_xla`` (``--xla_cpu_compilation_enabled``),
on the first 64 sentences of FILE, every setting in its own session, interleaved. With
``--profile``: where one request on ``--text`` spends its time, per op type and layer.
"""
import argparse
import collections
import functools
import json
import os
import re

import numpy as np

from benchmarks.timing import interleaved, summarize

# "name = OpType(inputs)" in a NodeExecStats' timeline_label.
_OP_TYPE = re.compile(r"=\s*([A-Za-z0-9_]+)\(")


def traced_nodes(run, fetches, feeds):
    """``(op type, NodeExecStats)`` of every node (every loop iteration's) one run executed."""
    import tensorflow as tf

    metadata = tf.compat.v1.RunMetadata()
    run(fetches, feeds, run_metadata=metadata, options=tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE))
    for node in (n for device in metadata.step_stats.dev_stats for n in device.node_stats):
        found = _OP_TYPE.search(node.timeline_label)
        if found and node.node_name != "_SOURCE":
            yield found.group(1), node


def profile(path, text, signature="serving_default", threads=1, runs=10):
    """``--profile``: ms a request of ``signature`` (every output fetched, as TF Serving does)
    on ``text`` per op type and per scope (a node's layer, in or outside the loop)."""
    sess, meta, _ = _session(path, threads)
    fetches, feeds = _request(sess, meta.signature_def[signature], text)
    sess.run(fetches, feeds)  # the first run's one-off costs
    by_type, by_scope = collections.defaultdict(lambda: np.zeros(2)), collections.Counter()
    for _ in range(runs):
        for op, node in traced_nodes(sess.run, fetches, feeds):
            ms = node.all_end_rel_micros / 1000 / runs
            by_type[op] += (1 / runs, ms)  # (count, ms) a request
            rest = node.node_name.split("while/")[-1].split("/")  # the loop's scopes dropped
            parts = [p for p in rest if "PartitionedCall" not in p]
            where = "loop" if "while/" in node.node_name else "outside"
            by_scope[f"{where}: {'/'.join(parts[:2])}"] += ms
    return {"signature": signature, "text": text, "threads": threads, "by_type": {
        op: {"count": round(c), "ms": round(float(ms), 3)}
        for op, (c, ms) in sorted(by_type.items(), key=lambda item: -item[1][1])},
            "by_scope": {k: round(ms, 3) for k, ms in by_scope.most_common()}}


def _request(sess, sig, text, max_length=None):
    """``sig``'s every output and the feeds of one request on ``text`` cut at ``max_length``."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.export.runtime import option_inputs, text_array

    tensor = sess.graph.get_tensor_by_name
    inputs = {k: tensor(v.name) for k, v in sig.inputs.items()}
    options = option_inputs(DecodingOptions(max_length=max_length or None),
                            accepted=set(inputs) - {"text"})
    return ({k: tensor(v.name) for k, v in sig.outputs.items()},
            {inputs["text"]: text_array([text]), **{inputs[k]: v for k, v in options.items()}})


def _session(path, threads, inter=None):
    """The SavedModel in a TF1 session as TF Serving loads it, and ``run(texts, signature)``."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)

    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.export.runtime import option_inputs, text_array

    tf.compat.v1.disable_eager_execution()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                      inter_op_parallelism_threads=inter or threads)
    sess = tf.compat.v1.Session(graph=tf.Graph(), config=config)
    meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)

    @functools.lru_cache(maxsize=None)
    def tensors(signature):  # looked up once per signature, not per request
        sig, tensor = meta.signature_def[signature], sess.graph.get_tensor_by_name
        return ({k: tensor(v.name) for k, v in sig.inputs.items()},
                tensor(sig.outputs["translations"].name))

    def run(texts, signature, **options):
        inputs, translations = tensors(signature)
        values = option_inputs(DecodingOptions(**options), accepted=set(inputs) - {"text"})
        return sess.run(translations, {inputs["text"]: text_array(texts),
                                       **{inputs[k]: v for k, v in values.items()}})

    return sess, meta, run


# TF Serving's speed settings: (--tensorflow_intra_op_parallelism, ..._inter_op_..., signature).
SETTINGS = {"intra 1, inter 1": (1, 1, "translate_v2"), "intra 1, inter 2": (1, 2, "translate_v2"),
            "intra 2, inter 1": (2, 1, "translate_v2"), "intra 2, inter 2": (2, 2, "translate_v2"),
            "intra 2, inter 2, XLA": (2, 2, "translate_v2_xla")}


def serving_settings(path, texts, repeats=5, batches=(1, 8, 32)):
    """Ms per sentence of ``texts`` at each batch size under each of :data:`SETTINGS`
    (``{setting: {batch: summary}}``), and whether all settings translate alike."""
    runs = {name: _session(path, intra, inter)[2] for name, (intra, inter, _) in SETTINGS.items()}
    result = {}
    for batch in batches:
        chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
        calls = {name: (lambda run=run, sig=SETTINGS[name][2]: [run(c, sig) for c in chunks])
                 for name, run in runs.items()}
        times = interleaved(calls, repeats=repeats)  # the first call compiles (warmup)
        for name, t in times.items():
            result.setdefault(name, {})[str(batch)] = summarize(
                [x / len(texts) for x in t])
    outputs = {name: np.ravel(run(texts[:32], SETTINGS[name][2])) for name, run in runs.items()}
    first = next(iter(outputs.values()))
    return {"ms_per_sentence": result,
            "same_translations": all((o == first).all() for o in outputs.values())}


def measure(path, text, short=4, long=12, signature="translate", repeats=30, threads=2):
    """Ops and ms per decoding step of ``signature`` (module docstring): ``ops_per_step`` (op
    type -> count, non-zero), ``total_per_step``, ``ms_per_step``, ``steps``."""
    sess, meta, _ = _session(path, threads)
    with sess:
        sig = meta.signature_def[signature]
        feeds = lambda max_length: _request(sess, sig, text, max_length)[1]  # noqa: E731
        fetches = _request(sess, sig, text)[0]

        def translation(max_length):
            return np.ravel(sess.run(fetches["translations"], feeds(max_length)))[0]

        # Each cut ends the loop before the translation ends by itself: shorter output.
        full = translation(0)  # the export's maximum
        if not len(translation(short)) < len(translation(long)) < len(full):
            raise ValueError(f"The translation of {text!r} ({full!r}) is not longer than "
                             f"max_length={long} tokens: take a longer text or smaller --steps")
        counts = {n: collections.Counter(op for op, _ in traced_nodes(sess.run, fetches, feeds(n)))
                  for n in (short, long)}
        # The two cuts alternate (benchmarks.timing), so neither always runs first.
        times = interleaved({n: lambda n=n: sess.run(fetches, feeds(n)) for n in (short, long)},
                            repeats=repeats)
    steps = long - short
    per_step = {op: (counts[long][op] - counts[short][op]) / steps
                for op in set(counts[long]) | set(counts[short])}
    per_step = dict(sorted(((op, n) for op, n in per_step.items() if n),
                           key=lambda item: (-item[1], item[0])))
    return {"signature": signature, "steps": [short, long], "threads": threads,
            "ops_per_step": per_step, "total_per_step": sum(per_step.values()),
            "ms_per_step": round(1000 * (np.median(times[long]) - np.median(times[short]))
                                 / steps, 4),
            "ms_per_request": {str(n): summarize(t) for n, t in times.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("saved_model", help="a SavedModel version folder (.../translator/1)")
    ap.add_argument("--text", default="3 March 2021",
                    help="one sentence whose translation is longer than the longer cut")
    ap.add_argument("--steps", default="4,8", help="the two max_length cuts (default 4,8)")
    ap.add_argument("--signature", default="translate")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--settings", metavar="FILE",
                    help="measure TF Serving's speed settings on FILE's sentences instead")
    ap.add_argument("--profile", action="store_true",
                    help="where one request on --text spends its time, by op type and scope")
    args = ap.parse_args(argv)
    if args.profile:
        result = profile(args.saved_model, args.text, args.signature, args.threads)
        for op, entry in list(result["by_type"].items())[:12]:
            print(f"  {entry['ms']:7.3f} ms {entry['count']:5d} {op}")
    elif args.settings:
        with open(args.settings, encoding="utf-8") as f:
            texts = [line.split("\t")[0] for line in f.read().splitlines()[:64]]
        result = serving_settings(args.saved_model, texts, args.repeats)
        for name, by_batch in result["ms_per_sentence"].items():
            print(f"{name:24s}", "  ".join(f"batch {b}: {s['median_ms']:.2f} ms"
                                           for b, s in by_batch.items()))
    else:
        short, long = (int(s) for s in args.steps.split(","))
        if not 0 < short < long:
            ap.error(f"--steps takes two cuts, the first smaller. Received: {args.steps!r}")
        result = measure(args.saved_model, args.text, short, long, args.signature,
                         args.repeats, args.threads)
        print(f"{result['total_per_step']:.0f} ops per step, {result['ms_per_step']} ms per "
              f"step ({args.signature}, {args.threads} threads)")
        for op, n in list(result["ops_per_step"].items())[:12]:
            print(f"  {n:6.1f} {op}")
    result["saved_model"] = os.path.relpath(args.saved_model)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


if __name__ == "__main__":
    main()
