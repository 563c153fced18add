"""Finished rows leaving the decoding loop: greedy decoding of a trained run in a
``tf.function`` traced with the kernel policy's ``dynamic_shapes`` (as ``Translator`` does),
with the rows that ended dropped from the step's work (``keras_attn.decoding.compacted``,
``compact=True``) and with every row kept (``compact=False``), side by side.

For each batch size: ``--rounds`` alternating rounds over the same batches of the run's
test sentences (dev.txt for the Tatoeba task), target tokens per second of each round's
time, and the ratio kept/dropped per round (median and range). Both must give the same
tokens (checked).

Example:
    python -m benchmarks.finished_rows runs/fra60v4k --threads 1 \\
        --output docs/benchmarks/finished_rows_t1.json
"""
import argparse
import json
import os
import statistics
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="a trained run directory (keras-attn train)")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default: 1)")
    p.add_argument("--batches", default="1:64,32:8",
                   help="BATCH:COUNT pairs: batch size and how many batches (default: "
                        "%(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="(default: %(default)s)")
    p.add_argument("--output", default="", help="JSON file for the results")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    except RuntimeError:  # TensorFlow already started in this process (a test): its threads
        print(f"--threads {args.threads} not applied: TensorFlow is already initialised")
    from keras_attn import decoding
    from keras_attn.kernels import fastpath
    from keras_attn.core import runs
    from keras_attn.text import tokenizers as text
    from keras_attn.training import recipes as training
    from keras_attn.core.config import TrainConfig
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    sources = [s for s, _ in training.load_splits(config)[0]["test"]]

    def decoder(compact):
        def fn(source):
            sampler = decoding.GreedySampler(translator.max_len, text.START_ID, text.END_ID,
                                             compact=compact)
            with fastpath.using(dynamic_shapes=True):
                out = sampler(translator.model, source)
            return out["tokens"][:, 0], out["lengths"][:, 0]

        return tf.function(fn, input_signature=[tf.TensorSpec([None, None], tf.int32)])

    fns = {"rows_kept": decoder(False), "rows_leave": decoder(True)}
    record = {"run_dir": os.path.abspath(args.run_dir),
              "threads": tf.config.threading.get_intra_op_parallelism_threads() or "default",
              "rounds": args.rounds, "batches": {}}
    for pair in args.batches.split(","):
        batch, count = (int(v) for v in pair.split(":"))
        batches = [translator.encode(sources[i * batch:(i + 1) * batch]) for i in range(count)]
        outs = {name: [fn(b) for b in batches] for name, fn in fns.items()}  # traces, warms
        for kept, left in zip(outs["rows_kept"], outs["rows_leave"]):
            if not (kept[0].numpy() == left[0].numpy()).all():
                raise AssertionError("the two loops gave different tokens")
        tokens = sum(int(lengths.numpy().sum()) for _, lengths in outs["rows_kept"])
        seconds = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                for b in batches:
                    fn(b)[0].numpy()
                seconds[name].append(time.perf_counter() - start)
        ratios = sorted(k / left for k, left in zip(seconds["rows_kept"], seconds["rows_leave"]))
        row = {name: round(tokens / statistics.median(s), 1) for name, s in seconds.items()}
        row.update(target_tokens=tokens, speedup_median=round(statistics.median(ratios), 3),
                   speedup_range=[round(ratios[0], 3), round(ratios[-1], 3)])
        record["batches"][str(batch)] = row
        print(f"batch {batch}: {json.dumps(row)}", flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == "__main__":
    main()
