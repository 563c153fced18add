"""Section ``backends``: the training step and cached greedy decoding, ours against keras_hub
on the same Keras backend, for TensorFlow, JAX and PyTorch.

Keras fixes its backend at import, so :func:`bench_backends` starts one subprocess per
backend (``KERAS_BACKEND`` set; ``python -m benchmarks.backends``), which builds both
models and times, interleaved in the same rounds:

* the training step of the ``train`` section's target setting (d 256, 4 heads, FFN 1024,
  2+2 layers, vocab 8000, batch 32, lengths 64, dropout 0.1, Adam, float32):
  ``train_on_batch`` after ``compile(jit_compile="auto")`` on both sides, so each backend
  compiles as it does for every Keras user (jitted on JAX, not on TensorFlow or torch on
  a CPU);
* cached greedy decoding of the ``decode`` section's setting (64 tokens, batch 8, source
  length 32, random weights, the end id never produced): ours
  (``keras_attn.decoding.greedy_decode_fixed``, i.e. ``greedy_search`` without its final
  trim, which a jitted function cannot do) and keras_hub's ``GreedySampler`` over the
  ``TransformerDecoder`` self- and cross-attention caches
  (:class:`benchmarks.references.KerasHubDecoding`), both wrapped as keras_hub's
  ``generate`` wraps its sampler: ``tf.function`` on TensorFlow, ``jax.jit`` of a
  stateless call on JAX, eager under ``torch.no_grad`` on torch.

The child writes its raw times as JSON; the parent turns them into rows: medians, the
spread (min-max) over repeats and the ratio ours / keras_hub (with the min-max of the
ratios of each round's pair).
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.references import QUICK_SEQ2SEQ, SEQ2SEQ, KerasHubDecoding, seq2seq_models
from benchmarks.timing import interleaved, log, summarize

BACKENDS = ("tensorflow", "jax", "torch")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECODERS = {"tensorflow": "tf.function", "jax": "jax.jit (stateless, as keras_hub's generate)",
            "torch": "eager, torch.no_grad"}


def sizes(quick):
    """(config, train batch, train length, decode batch, decoded tokens, source length)."""
    if quick:
        return dict(QUICK_SEQ2SEQ), 4, 16, 2, 16, 8
    return dict(SEQ2SEQ), 32, 64, 8, 64, 32


# --- the parent: one subprocess per backend ----------------------------------------------------
def bench_backends(args, peak):
    from benchmarks.common import seq2seq_train_flops

    cfg, batch, length, dec_batch, n, src_len = sizes(args.quick)
    flops = seq2seq_train_flops(batch, length, length, cfg["d"], cfg["ffn"], cfg["layers"],
                                cfg["vocab"])
    rows = []
    for backend in args.backends:
        raw = run_child(backend, args)
        if not raw.get("available", True):
            log(f"  {backend}: not available: {raw['reason'].splitlines()[-1][:200]}")
            rows.append(raw)
            continue
        row = backend_row(raw, batch * length, n, flops, peak["gflops"])
        rows.append(row)
        t, d = row["train"], row["decode"]
        log(f"  {backend:10s} train ours {t['ours_tokens_per_s']:7d} tok/s keras_hub "
            f"{t['keras_hub_tokens_per_s']:7d} tok/s (x{t['speedup']:.3f})  decode ours "
            f"{d['ours_ms_per_token']:.3f} keras_hub {d['keras_hub_ms_per_token']:.3f} "
            f"ms/token ({d['ratio']:.3f})")
    return {"config": {
        "train": dict(cfg, batch=batch, src_len=length, tgt_len=length, dropout=0.1,
                      optimizer="Adam", policy="float32", step="train_on_batch after "
                      "compile(jit_compile='auto') on both sides (jitted on JAX)"),
        "decode": dict(cfg, batch=dec_batch, tokens=n, src_len=src_len, weights="random",
                       end_id="never produced", ours="greedy_decode_fixed(use_cache=True)",
                       keras_hub="GreedySampler over TransformerDecoder caches",
                       compiled="; ".join(f"{k}: {v}" for k, v in DECODERS.items())),
        "repeats": args.repeats, "ratio": "ours / keras_hub of the medians; (min-max) of "
        "the ratio within each round's pair"},
        "train_gflop_per_step": round(flops / 1e9, 2), "rows": rows}


def run_child(backend, args):
    """Raw times of one backend's subprocess, or ``{"available": False, "reason": ...}``."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    if backend == "jax" and args.threads == 1:  # the one thread count XLA_FLAGS can set
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    with tempfile.TemporaryDirectory(prefix="keras_attn_bench_backend_") as tmp:
        out = os.path.join(tmp, "times.json")
        cmd = [sys.executable, "-m", "benchmarks.backends", "--out", out,
               "--repeats", str(args.repeats), "--warmup", str(args.warmup),
               "--clock", args.clock, "--threads", str(args.threads)]
        log(f"  [{backend}] {' '.join(cmd[1:])}")
        proc = subprocess.run(cmd + (["--quick"] if args.quick else []), env=env, cwd=REPO,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode or not os.path.exists(out):
            return {"backend": backend, "available": False,
                    "reason": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}
        with open(out) as f:
            return json.load(f)


def backend_row(raw, tokens_per_step, num_tokens, flops, peak_gflops):
    """Medians, min-max spreads and ratios of one child's times (seconds per call)."""
    t = raw["times"]
    stats = {k: summarize(v) for k, v in t.items()}
    train = {"jit": raw["train_jit"]}
    for side in ("ours", "keras_hub"):
        s = stats[f"train_{side}"]
        train[side] = s
        train[f"{side}_tokens_per_s"] = round(tokens_per_step / s["median_ms"] * 1e3)
        train[f"{side}_tokens_per_s_range"] = [round(tokens_per_step / s["max_ms"] * 1e3),
                                               round(tokens_per_step / s["min_ms"] * 1e3)]
        train[f"{side}_mfu_pct"] = round(100 * flops / s["median_ms"] * 1e3 / 1e9
                                         / peak_gflops, 1)
    train["speedup"] = round(train["ours_tokens_per_s"] / train["keras_hub_tokens_per_s"], 3)
    train["speedup_range"] = _pair_range(t["train_keras_hub"], t["train_ours"])
    decode = {"compiled": DECODERS[raw["backend"]]}
    for side in ("ours", "keras_hub"):
        s = stats[f"decode_{side}"]
        decode[side] = s
        decode[f"{side}_ms_per_token"] = round(s["median_ms"] / num_tokens, 3)
        decode[f"{side}_ms_per_token_range"] = [round(s["min_ms"] / num_tokens, 3),
                                                round(s["max_ms"] / num_tokens, 3)]
    decode["ratio"] = round(decode["ours_ms_per_token"] / decode["keras_hub_ms_per_token"], 3)
    decode["ratio_range"] = _pair_range(t["decode_ours"], t["decode_keras_hub"])
    return {"backend": raw["backend"], "available": True, "versions": raw["versions"],
            "threads": raw["threads"], "train": train, "decode": decode}


def _pair_range(numerator, denominator):
    """Min and max over the rounds of ``numerator[r] / denominator[r]``."""
    r = np.asarray(numerator) / np.asarray(denominator)
    return [round(float(r.min()), 3), round(float(r.max()), 3)]


# --- the child: this process's backend ----------------------------------------------------------
def compiled(fn, model):
    """``fn(source)`` compiled as keras_hub's ``generate`` compiles its sampler loop."""
    import keras

    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    if backend == "jax":
        import jax

        variables = model.trainable_variables + model.non_trainable_variables

        @jax.jit
        def stateless(values, source):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(source)

        return lambda source: stateless([v.value for v in variables], source)
    import torch

    def eager(source):
        with torch.no_grad():
            return fn(source)

    return eager


def set_threads(backend, threads):
    """TensorFlow's or torch's thread count (JAX: ``XLA_FLAGS``, set by the parent)."""
    if not threads:
        return
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    elif backend == "torch":
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)


def measure(quick, repeats, warmup, clock, threads):
    """This backend's raw times (s): ``train_{ours,keras_hub}``, ``decode_{ours,keras_hub}``."""
    import keras
    import keras_hub

    from keras_attn import decoding
    from keras_attn.training.losses import MaskedSparseCategoricalCrossentropy

    backend = keras.config.backend()
    set_threads(backend, threads)
    cfg, batch, length, dec_batch, n, src_len = sizes(quick)
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)

    # Training step: the `train` section's target setting.
    data = {k: keras.ops.convert_to_tensor(rng.integers(4, cfg["vocab"], (batch, length)),
                                           "int32")
            for k in ("source", "target_in", "target_out")}
    x, y = {"source": data["source"], "target_in": data["target_in"]}, data["target_out"]
    ours, theirs = seq2seq_models(cfg, dropout=0.1, max_len=max(length, 64))
    ours.compile(keras.optimizers.Adam(1e-4), MaskedSparseCategoricalCrossentropy())
    theirs.compile(keras.optimizers.Adam(1e-4),
                   keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))

    # Decoding: the `decode` section's setting; an end id the model cannot produce.
    dec_ours, dec_theirs = seq2seq_models(cfg, dropout=0.0, max_len=max(n, src_len, 64))
    source = keras.ops.convert_to_tensor(rng.integers(4, cfg["vocab"], (dec_batch, src_len)),
                                         "int32")
    never = cfg["vocab"]

    def ours_greedy(s):
        return decoding.greedy_decode_fixed(dec_ours, s, n, 2, never, use_cache=True)["tokens"]

    ours_decode = compiled(ours_greedy, dec_ours)
    hub_decode = compiled(KerasHubDecoding(dec_theirs, n, start_id=2).greedy, dec_theirs)
    for name, fn in (("ours", ours_decode), ("keras_hub", hub_decode)):
        shape = tuple(keras.ops.shape(fn(source)))
        if shape != (dec_batch, n):
            raise RuntimeError(f"{name} decoded shape {shape}, expected {(dec_batch, n)}")

    fns = {"train_ours": lambda: ours.train_on_batch(x, y),
           "train_keras_hub": lambda: theirs.train_on_batch(x, y),
           "decode_ours": lambda: ours_decode(source),
           "decode_keras_hub": lambda: hub_decode(source)}
    times = interleaved(fns, repeats, warmup + 1, clock)
    for k, v in times.items():
        log(f"  [{backend}] {k:18s} {summarize(v)['median_ms']:9.2f} ms")
    lib = importlib.import_module(backend)
    return {"backend": backend, "threads": threads or "default",
            "versions": {backend: lib.__version__, "keras": keras.__version__,
                         "keras_hub": keras_hub.__version__},
            "train_jit": bool(ours.jit_compile), "keras_hub_train_jit": bool(theirs.jit_compile),
            "times": times}


def main(argv=None):
    ap = argparse.ArgumentParser(description="One backend's times for bench.py's 'backends' "
                                             "section (KERAS_BACKEND picks the backend).")
    ap.add_argument("--out", required=True, help="JSON file for the raw times")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--clock", default="wall")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    result = measure(args.quick, args.repeats, args.warmup, args.clock, args.threads)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
