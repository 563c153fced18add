"""Section ``mha`` (TensorFlow): ``MultiHeadAttention`` vs ``keras.layers.MultiHeadAttention``
and the layer's matmuls alone, forward and forward+backward, with and without XLA."""
import functools

import tensorflow as tf

from benchmarks.common import mha_flops, mha_matmul_floor, profiles
from benchmarks.timing import interleaved, log, ratio, summarize


def bench_mha(args, peak):
    import keras

    from keras_attn.layers import MultiHeadAttention

    batch, d, heads = (2, 64, 8) if args.quick else (16, 512, 8)
    lengths = args.mha_lengths or ([16, 32] if args.quick else [64, 128, 256, 512])
    rows = []
    for length in lengths:
        x = tf.random.normal((batch, length, d), seed=0)
        ours = MultiHeadAttention(d, heads, use_bias=True)  # Keras's MHA has biases too
        theirs = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=d // heads)
        ours(x, x, x)
        theirs(x, x)

        calls = {"ours": lambda t: ours(t, t, t), "keras": lambda t: theirs(t, t)}
        layers = {"ours": ours, "keras": theirs}
        for jit in (False, True):
            for backward in (False, True):
                fns = {name: functools.partial(tf.function(
                    _with_grads(call, layers[name]) if backward else call, jit_compile=jit), x)
                    for name, call in calls.items()}
                # The same matmuls and nothing else: the best any layer could do.
                fns["matmuls_only"] = functools.partial(tf.function(
                    mha_matmul_floor(batch, length, d, heads, backward), jit_compile=jit), x)
                times = interleaved(fns, args.repeats, args.warmup, args.clock)
                stats = {k: summarize(v) for k, v in times.items()}
                flops = mha_flops(batch, length, d, backward)
                row = {"L": length, "jit": jit,
                       "mode": "forward+backward" if backward else "forward",
                       "ours": stats["ours"], "keras": stats["keras"],
                       "ratio": ratio(stats["ours"], stats["keras"]), "gflop": flops / 1e9,
                       "matmuls_only": stats["matmuls_only"],
                       "matmuls_only_ratio": ratio(stats["matmuls_only"], stats["keras"]),
                       "profile": profiles(args, {k: fns[k] for k in calls})}
                for k in ("ours", "keras", "matmuls_only"):
                    g = flops / stats[k]["median_ms"] * 1e3 / 1e9
                    row[f"{k}_gflops"] = round(g, 1)
                    row[f"{k}_pct_peak"] = round(100 * g / peak["gflops"], 1)
                rows.append(row)
                log(f"  mha L={length:4d} jit={jit!s:5} {row['mode']:16s} ours "
                    f"{stats['ours']['median_ms']:8.2f} ms keras {stats['keras']['median_ms']:8.2f}"
                    f" ms  ratio {row['ratio']:.3f}  {row['ours_gflops']:.0f} vs "
                    f"{row['keras_gflops']:.0f} GFLOP/s  (matmuls alone "
                    f"{stats['matmuls_only']['median_ms']:.2f} ms, "
                    f"{row['matmuls_only_ratio']:.3f})")
    at_256 = [r["ratio"] for r in rows
              if r["L"] == 256 and not r["jit"] and r["mode"] == "forward+backward"]
    return {"target_met": (at_256[0] <= 0.8) if at_256 else None,
            "config": {"batch": batch, "d": d, "heads": heads, "lengths": lengths,
                       "dropout": 0.0, "attention": "self (q = k = v)",
                       "ours": "MultiHeadAttention(d, 8, use_bias=True)",
                       "keras": "keras.layers.MultiHeadAttention(num_heads=8, key_dim=d/8)",
                       "matmuls_only": "benchmarks.common.mha_matmul_floor: the layer's "
                                       "matmuls alone (same FLOPs), a floor for any layer"},
            "target": "forward+backward at L=256: ours <= 0.8x Keras", "rows": rows}


def _with_grads(call, layer):
    """forward + backward: gradients of sum(y^2) wrt the input and every weight."""
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x)
            loss = tf.reduce_sum(tf.square(tf.cast(y, tf.float32)))
        return tape.gradient(loss, [x] + list(layer.trainable_variables))
    return fn
