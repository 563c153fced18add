"""Two revisions of keras_attn side by side: MHA, the training step and cached decoding.

Each revision's ``keras_attn/`` is extracted (``git archive``) into a temporary folder; the
measurements run in a fresh subprocess per revision and round (Keras and TensorFlow keep
global state), the revisions alternating round by round, so both see the same machine.
Only the public API that both revisions share is used: ``layers.MultiHeadAttention``,
``models.transformer_seq2seq``, ``losses.MaskedSparseCategoricalCrossentropy`` and
``decoding.greedy_search``.

Usage (from the repository root, on a quiet machine):
    python -m benchmarks.revisions --base 25d30d9 --rounds 5 --json docs/benchmarks/revisions.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import json, sys, time
import numpy as np
import tensorflow as tf
import keras
from keras_attn import decoding, layers, models
from keras_attn.training import losses

def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))

S = json.loads(sys.argv[1])
out = {}
keras.utils.set_random_seed(0)
# MultiHeadAttention forward + backward, B 16, d 512, 8 heads, L 256 (the README's row).
mha = layers.MultiHeadAttention(S["mha_d"], 8, use_bias=True)
x = tf.random.normal((S["mha_b"], S["mha_l"], S["mha_d"]))
mha(x, x, x)
@tf.function
def mha_step():
    with tf.GradientTape() as tape:
        y = mha(x, x, x)
    return tape.gradient(y, mha.trainable_variables)
out["mha_fwd_bwd_ms"] = median_ms(mha_step, 3, 10)

# Training step: d 256, FFN 1024, 4 heads, 2+2 layers, vocab 8000, batch 32, length 64.
V, B, L = S["vocab"], S["batch"], S["length"]
model = models.transformer_seq2seq(V, V, S["d"], S["ffn"], 4, 2, 0.1, max_len=128)
model.compile(keras.optimizers.Adam(1e-4), losses.MaskedSparseCategoricalCrossentropy())
rng = np.random.default_rng(0)
xs = {k: rng.integers(4, V, (B, L)).astype("int32") for k in ("source", "target_in")}
ys = rng.integers(4, V, (B, L)).astype("int32")
out["train_step_ms"] = median_ms(lambda: model.train_on_batch(xs, ys), 3, 10)
out["train_tokens_per_s"] = B * L / out["train_step_ms"] * 1e3

# Cached greedy decoding: batch 8, source length 32, up to 64 tokens (END id 3 is never
# chosen: its logit bias is pushed down, so every run decodes 64 steps).
source = rng.integers(4, V, (8, 32)).astype("int32")
last = [v for v in model.weights if v.path.endswith("bias") and v.shape == (V,)][-1]
bias = last.numpy(); bias[3] = -1e4; last.assign(bias)
@tf.function
def greedy():
    return decoding.greedy_search(model, source, max_len=64, start_id=2, end_id=3)
steps = int(greedy().shape[1])
out["decode_steps"] = steps
out["decode_ms_per_token"] = median_ms(greedy, 2, 5) / steps
print("RESULT " + json.dumps(out))
'''


def extract(revision, folder):
    """``keras_attn/`` of ``revision`` into ``folder`` (the working tree for ``WORKTREE``)."""
    if revision == "WORKTREE":
        return os.getcwd()
    archive = subprocess.run(["git", "archive", revision, "keras_attn"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


FULL = dict(mha_b=16, mha_l=256, mha_d=512, vocab=8000, d=256, ffn=1024, batch=32, length=64)
QUICK = dict(mha_b=2, mha_l=16, mha_d=32, vocab=64, d=32, ffn=64, batch=4, length=8)


def run_child(path, threads, sizes):
    env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    if threads:
        env["TF_NUM_INTRAOP_THREADS"] = env["TF_NUM_INTEROP_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sizes)], env=env, capture_output=True,
                          text=True, cwd=tempfile.gettempdir())
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"the benchmark of {path} failed:\n{proc.stderr[-3000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--head", default="WORKTREE", help="default: the working tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--json", default="")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as base_dir, tempfile.TemporaryDirectory() as head_dir:
        paths = {"base": extract(args.base, base_dir), "head": extract(args.head, head_dir)}
        rounds = {"base": [], "head": []}
        for r in range(args.rounds):
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for name in order:
                rounds[name].append(run_child(paths[name], args.threads,
                                              QUICK if args.quick else FULL))
                print(f"round {r + 1} {name}: {rounds[name][-1]}", flush=True)
    keys = ("mha_fwd_bwd_ms", "train_step_ms", "decode_ms_per_token")
    summary = {}
    for key in keys:
        base = [x[key] for x in rounds["base"]]
        head = [x[key] for x in rounds["head"]]
        ratios = [h / b for h, b in zip(head, base)]
        summary[key] = {"base_median": round(statistics.median(base), 3),
                        "head_median": round(statistics.median(head), 3),
                        "head_over_base_median": round(statistics.median(ratios), 3),
                        "head_over_base_min": round(min(ratios), 3),
                        "head_over_base_max": round(max(ratios), 3)}
        print(f"{key:22s} base {summary[key]['base_median']:8.2f}  head "
              f"{summary[key]['head_median']:8.2f}  head/base {summary[key]['head_over_base_median']}"
              f" ({summary[key]['head_over_base_min']}-{summary[key]['head_over_base_max']})")
    report = {"base": args.base, "head": args.head, "rounds": rounds, "summary": summary,
              "sizes": QUICK if args.quick else FULL,
              "threads": args.threads or "default"}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
