#!/usr/bin/env python
"""Benchmark: cached vs naive greedy decoding (issue 5).

Greedy decoding of 64 tokens, batch 8, d=256, FFN 1024, 4 heads, 2+2 layers, vocab 8000,
random weights (``end_id`` is never produced, so every run decodes all 64 tokens).
Reports the median wall time of whole decodes (``tf.function``, and XLA for the cached
path) and the time of one decoding step at positions 8, 32 and 64.

    python scripts/bench_decoding.py --out docs/benchmarks/decoding.json
"""
import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from keras_attn import decoding, models  # noqa: E402


def median_ms(fn, *args, repeats=7, warmup=2):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args)
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--src-len", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default="docs/benchmarks/decoding.json")
    args = ap.parse_args()
    vocab, n = 8000, args.tokens
    tf.random.set_seed(0)
    model = models.transformer_seq2seq(vocab, vocab, 256, 1024, 4, 2, dropout=0.0, max_len=256)
    source = tf.random.uniform((args.batch, args.src_len), 4, vocab, dtype=tf.int32)
    never = vocab  # an id the model cannot produce: every run decodes n tokens
    spec = [tf.TensorSpec([None, None], tf.int32)]

    def decoder_fn(use_cache, jit=False):
        return tf.function(lambda s: decoding.greedy_decode_fixed(
            model, s, n, 2, never, use_cache=use_cache)["tokens"],
            input_signature=spec, jit_compile=jit)

    results = {"config": dict(batch=args.batch, tokens=n, src_len=args.src_len, d=256,
                              ffn=1024, heads=4, layers="2+2", vocab=vocab),
               "machine": platform.processor() or platform.machine(),
               "cpu_count": os.cpu_count(), "tensorflow": tf.__version__}
    fns = {"cached": decoder_fn(True), "naive": decoder_fn(False),
           "cached_xla": decoder_fn(True, jit=True)}
    totals = {name: median_ms(fn, source, repeats=args.repeats) for name, fn in fns.items()}
    tokens = {name: fn(source).numpy() for name, fn in fns.items()}
    results["identical_tokens"] = bool((tokens["cached"] == tokens["naive"]).all()
                                       and (tokens["cached"] == tokens["cached_xla"]).all())
    results["total_ms"] = {k: round(v, 1) for k, v in totals.items()}
    results["ms_per_token"] = {k: round(v / n, 3) for k, v in totals.items()}
    results["speedup_cached_vs_naive"] = round(totals["naive"] / totals["cached"], 2)

    # Per-token cost at a position: time an 8-step window of the decoding loop ending at
    # that position (cached: reading/writing the fixed max_len buffers; naive: re-running
    # the decoder on the prefix), minus nothing -- the loop overhead is part of the cost.
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    enc = encoder(source)
    cross = decoder.cross_key_values(enc)
    keep = tf.not_equal(source, 0)[:, None, :]
    window = 8

    @tf.function
    def cached_window(first):
        cache = decoder.init_cache(args.batch, n)

        def body(i, cache, token):
            logits, cache, _ = decoder.call_step(token, i, cache, cross, keep)
            return i + 1, cache, tf.argmax(logits, -1, output_type=tf.int32)[:, None]

        return tf.while_loop(lambda i, *_: i < first + window, body,
                             (first, cache, tf.fill([args.batch, 1], 5)))[2]

    @tf.function
    def naive_window(first):
        def body(i, token):
            prefix = tf.fill([args.batch, i + 1], 5)
            logits = decoder(prefix, enc, enc_outputs_mask=keep[:, 0])[:, -1]
            return i + 1, tf.argmax(logits, -1, output_type=tf.int32)[:, None]

        return tf.while_loop(lambda i, *_: i < first + window, body,
                             (first, tf.fill([args.batch, 1], 5)))[1]

    per_position = {}
    for pos in (8, 32, 64):
        first = tf.constant(min(pos, n) - window)
        per_position[str(pos)] = {
            "cached_ms": round(median_ms(cached_window, first, repeats=args.repeats * 3) / window, 3),
            "naive_ms": round(median_ms(naive_window, first, repeats=args.repeats * 3) / window, 3)}
    results["step_ms_at_position"] = per_position
    results["cached_step_ratio_64_vs_8"] = round(
        per_position["64"]["cached_ms"] / per_position["8"]["cached_ms"], 3)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
