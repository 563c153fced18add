"""The suite's TensorFlow tools: threads, machine, matmul peak, FLOP counts, the MHA matmul
floor and op profiles.

Example:
    >>> configure_threads(1)
    >>> matmul_peak(1024)["gflops"]
"""
import collections
import glob
import os
import platform
import shutil
import statistics
import tempfile

import numpy as np
import tensorflow as tf

from benchmarks.timing import block, cpu_info, gflops, interleaved, log


# --- setup -----------------------------------------------------------------------------
def configure_threads(threads):
    """Intra- and inter-op threads of TensorFlow (0 = its default), before its first op."""
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(int(threads))


def machine_info():
    """CPU model, cores, load average and library versions (for the results file)."""
    import keras

    model, flags = cpu_info()
    if platform.processor() and platform.processor() != platform.machine():
        model = platform.processor()
    model = model or platform.machine()

    info = {"cpu": model, "cpu_count": os.cpu_count(),
            "simd": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni",
                                    "amx_bf16", "amx_tile"}),
            "tensorflow": tf.__version__, "keras": keras.__version__,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


# --- machine peak ---------------------------------------------------------------------
def matmul_peak(n=4096, repeats=7, warmup=2, clock="wall"):
    """float32 GFLOP/s of a ``tf.function`` ``n x n`` matmul (median of ``repeats``)."""
    a = tf.random.normal((n, n), seed=1)
    b = tf.random.normal((n, n), seed=2)
    fn = tf.function(tf.matmul)
    times = interleaved({"matmul": lambda: fn(a, b)}, repeats, warmup, clock)["matmul"]
    return {"n": n, "gflops": gflops(2 * n ** 3, statistics.median(times)),
            "best_gflops": gflops(2 * n ** 3, min(times))}


# --- FLOP counts -----------------------------------------------------------------------------
def mha_flops(batch, length, d_model, backward=False):
    """Self-attention FLOPs: 4 projections ``4*2*B*L*d^2`` plus ``Q K^T`` and ``A V``
    ``2*2*B*L^2*d``; forward + backward counts 3x the forward."""
    forward = 4 * 2 * batch * length * d_model ** 2 + 2 * 2 * batch * length ** 2 * d_model
    return forward * (3 if backward else 1)


def mha_matmul_floor(batch, length, d_model, heads, backward=False, seed=0):
    """Only the matmuls of a self-attention layer, a lower bound on its time: a function of
    ``x (batch, length, d_model)`` running the six matmuls (with ``backward`` the twelve of
    the backward pass too) with the layer's shapes and nothing else: :func:`mha_flops`."""
    b, n, d, h, dh = batch, length, d_model, heads, d_model // heads
    rng = np.random.default_rng(seed)
    w_q, w_k, w_v, w_o = (tf.constant(rng.normal(0, d ** -0.5, (d, d)), tf.float32)
                          for _ in range(4))

    def heads_of(t):  # (b * n, d) -> (b, h, n, dh) by reshape only
        return tf.reshape(t, (b, h, n, dh))

    def rows(t):
        return tf.reshape(t, (b * n, d))

    def floor(x):
        x = rows(x)
        q, k, v = heads_of(x @ w_q), heads_of(x @ w_k), heads_of(x @ w_v)
        scores = tf.matmul(q, k, transpose_b=True)  # (b, h, n, n)
        context = rows(tf.matmul(scores, v))
        y = context @ w_o
        if not backward:
            return y
        dy = y
        d_w_o = tf.matmul(context, dy, transpose_a=True)
        d_context = heads_of(tf.matmul(dy, w_o, transpose_b=True))
        d_scores = tf.matmul(d_context, v, transpose_b=True)
        d_v = rows(tf.matmul(scores, d_context, transpose_a=True))
        d_q = rows(tf.matmul(d_scores, k))
        d_k = rows(tf.matmul(d_scores, q, transpose_a=True))
        d_ws = [tf.matmul(x, g, transpose_a=True) for g in (d_q, d_k, d_v)]
        d_x = tf.add_n([tf.matmul(g, w, transpose_b=True)
                        for g, w in zip((d_q, d_k, d_v), (w_q, w_k, w_v))])
        return [d_x, d_w_o] + d_ws

    return floor


def seq2seq_forward_flops(batch, src_len, tgt_len, d_model, ffn, num_layers, vocab):
    """Forward FLOPs of an encoder-decoder Transformer: the matmuls only (projections,
    full attention, not halved for the causal mask, FFN, output projection)."""
    d, f, S, T = d_model, ffn, src_len, tgt_len
    enc = S * (8 * d * d + 4 * S * d + 4 * d * f)
    dec = T * (8 * d * d + 4 * T * d + 4 * d * d + 4 * S * d + 4 * d * f) + S * 4 * d * d
    return batch * (num_layers * (enc + dec) + T * 2 * d * vocab)


def seq2seq_train_flops(*args, **kwargs):
    """A training step: 3x :func:`seq2seq_forward_flops` (forward, two backward matmuls)."""
    return 3 * seq2seq_forward_flops(*args, **kwargs)


# --- where the time goes -----------------------------------------------------------------------
def op_profile(fn, steps=3):
    """``[(op_type, ms)]`` by time: milliseconds per call of ``fn()`` per TensorFlow op type
    (``tf.profiler`` traces; an op instance counts its median duration times its runs)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    block(fn())
    logdir = tempfile.mkdtemp(prefix="keras_attn_profile_")
    tf.profiler.experimental.start(logdir)
    try:
        for _ in range(steps):
            block(fn())
    finally:
        tf.profiler.experimental.stop()
    durations = collections.defaultdict(list)  # "name:type" -> every event's ms
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    if ":" not in name or "::" in name or name.startswith("$"):
                        continue  # framework events, not op kernels
                    op_type = name.rsplit(":", 1)[1]
                    if op_type and (op_type[0].isupper() or op_type[0] == "_"):
                        durations[name].append(event.duration_ps / 1e9)
    shutil.rmtree(logdir, ignore_errors=True)
    by_type = collections.Counter()
    for name, ms in durations.items():
        by_type[name.rsplit(":", 1)[1].lstrip("_").replace("Mkl", "", 1)] += (
            float(np.median(ms)) * len(ms) / steps)
    return [(k, round(v, 2)) for k, v in by_type.most_common()]


def profiles(args, fns):
    """With ``--profile``: the op types taking most time in each of ``fns`` (name -> ms, %;
    under XLA the compiled cluster is one op)."""
    if not args.profile:
        return None
    out = {}
    for name, fn in fns.items():
        by_type = op_profile(fn, steps=3)
        total = sum(ms for _, ms in by_type) or 1.0
        out[str(name)] = [(op, ms, round(100 * ms / total, 1)) for op, ms in by_type[:12]]
        top = ", ".join(f"{op} {pct}%" for op, _, pct in out[str(name)][:6])
        log(f"    profile {name}: {top}")
    return out
