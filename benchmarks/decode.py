"""Section ``decode`` (TensorFlow): greedy decoding, ours cached / naive and keras_hub's
cached ``TransformerDecoder`` loop, ms/token overall and per step at three positions."""
import tensorflow as tf

from benchmarks.common import profiles
from benchmarks.references import QUICK_SEQ2SEQ, SEQ2SEQ, KerasHubDecoding, seq2seq_models
from benchmarks.timing import interleaved, log, summarize


class KerasHubGreedy(KerasHubDecoding):
    """Cached greedy decoding with keras_hub's ``TransformerDecoder`` caches, as a
    ``tf.while_loop`` (the first step seeds the cross-attention caches, the loop reuses
    them and writes the self-attention caches at the step index)."""

    def step(self, token, index, enc, enc_mask, self_caches, cross_caches, cross_index):
        logits, new_self, new_cross = self.logits(token, index, enc, enc_mask, self_caches,
                                                  cross_caches, cross_index)
        return tf.argmax(tf.nn.log_softmax(logits), -1, output_type=tf.int32), new_self, new_cross

    def decode(self, source):
        enc, enc_mask, cross_caches, token, self_caches = self.seed(source, self.start_id)
        batch = tf.shape(source)[0]
        tokens = tf.tensor_scatter_nd_update(tf.zeros((batch, self.num_tokens), tf.int32),
                                             _column(batch, 0), token)

        def body(i, token, self_caches, tokens):
            token, self_caches, _ = self.step(token, i, enc, enc_mask, self_caches,
                                              cross_caches, None)
            return i + 1, token, self_caches, tf.tensor_scatter_nd_update(
                tokens, _column(batch, i), token)

        return tf.while_loop(lambda i, *_: i < self.num_tokens, body,
                             (tf.constant(1), token, self_caches, tokens))[3]

    def seed(self, source, start=5):
        """Encoder output, its mask and the filled cross-attention caches (outside the loop),
        then the token and self-attention caches of the first step (from ``start``)."""
        enc, enc_mask = self.encode(source)
        self_caches, cross_caches = self.init_caches(tf.shape(source)[0], tf.shape(source)[1])
        token, self_caches, cross_caches = self.step(tf.fill([tf.shape(source)[0]], start), 0,
                                                     enc, enc_mask, self_caches, cross_caches, 0)
        return enc, enc_mask, cross_caches, token, self_caches

    def window(self, seeded, first, steps):
        """``steps`` loop iterations from position ``first``, as ours: fresh self-attention
        caches, cross-attention caches computed beforehand (:meth:`seed`)."""
        enc, enc_mask, cross_caches = seeded[:3]
        self_caches, _ = self.init_caches(tf.shape(enc)[0], tf.shape(enc)[1])

        def body(i, token, self_caches):
            token, self_caches, _ = self.step(token, i, enc, enc_mask, self_caches,
                                              cross_caches, None)
            return i + 1, token, self_caches

        return tf.while_loop(lambda i, *_: i < first + steps, body,
                             (first, tf.fill([tf.shape(enc)[0]], 5), self_caches))[1]


def _column(batch, i):
    """Indices ``[[b, i]]`` for writing a column of a ``(B, T)`` buffer."""
    return tf.stack([tf.range(batch), tf.fill([batch], i)], axis=1)


def bench_decode(args, peak):
    from keras_attn import decoding

    cfg = dict(QUICK_SEQ2SEQ if args.quick else SEQ2SEQ)
    batch, n, src_len, window = (2, 16, 8, 4) if args.quick else (8, 64, 32, 8)
    positions = [window, n // 2, n]
    tf.random.set_seed(0)
    ours, theirs = seq2seq_models(cfg, dropout=0.0, max_len=max(n, src_len, 64))
    source = tf.random.uniform((batch, src_len), 4, cfg["vocab"], dtype=tf.int32, seed=1)
    never = cfg["vocab"]  # an id the model cannot produce: every run decodes n tokens
    spec = [tf.TensorSpec([None, None], tf.int32)]
    hub = KerasHubGreedy(theirs, n, start_id=2)

    def ours_fn(use_cache, jit=False):
        return tf.function(lambda s: decoding.greedy_decode_fixed(
            ours, s, n, 2, never, use_cache=use_cache)["tokens"], input_signature=spec,
            jit_compile=jit)

    fns = {"ours_cached": ours_fn(True), "ours_cached_xla": ours_fn(True, True),
           "keras_hub_cached": tf.function(hub.decode, input_signature=spec),
           "keras_hub_cached_xla": tf.function(hub.decode, input_signature=spec,
                                               jit_compile=True),
           "ours_naive": ours_fn(False)}
    tokens = {k: f(source).numpy() for k, f in fns.items()}
    calls = {k: (lambda f=f: f(source)) for k, f in fns.items()}
    stats = {k: summarize(v) for k, v in
             interleaved(calls, args.repeats, args.warmup, args.clock).items()}
    profile = profiles(args, {k: calls[k] for k in ("ours_cached", "keras_hub_cached")})
    per_token = {k: round(v["median_ms"] / n, 3) for k, v in stats.items()}
    for k, v in per_token.items():
        log(f"  decode {k:22s} {v:7.3f} ms/token")

    # Per-step cost at a position: an 8-step window of the loop ending there.
    encoder, decoder = ours.get_layer("encoder"), ours.get_layer("decoder")
    enc = encoder(source)
    keep = tf.not_equal(source, 0)[:, None, :]

    @tf.function
    def ours_window(first):
        cache = decoder.init_cache(enc, source, n)

        def body(i, cache, token):
            logits, cache = decoder(token, cache=cache, cache_update_index=i)
            return i + 1, cache, tf.argmax(logits[:, 0], -1, output_type=tf.int32)[:, None]

        return tf.while_loop(lambda i, *_: i < first + window, body,
                             (first, cache, tf.fill([batch, 1], 5)))[2]

    @tf.function
    def naive_window(first):
        def body(i, token):
            prefix = tf.fill([batch, i + 1], 5)
            logits = decoder(prefix, enc, enc_outputs_mask=keep[:, 0])[:, -1]
            return i + 1, tf.argmax(logits, -1, output_type=tf.int32)[:, None]

        return tf.while_loop(lambda i, *_: i < first + window, body,
                             (first, tf.fill([batch, 1], 5)))[1]

    seeded = hub.seed(source)
    hub_window = tf.function(lambda first: hub.window(seeded, first, window))
    windows = {"ours_cached": ours_window, "keras_hub_cached": hub_window,
               "ours_naive": naive_window}
    # Every (decoder, position) pair in one interleaved run: a machine whose load drifts
    # does not make later positions look slower.
    fns = {(k, pos): (lambda f=f, first=tf.constant(pos - window): f(first))
           for pos in positions for k, f in windows.items()}
    wt = interleaved(fns, args.repeats * 2, args.warmup, args.clock)
    at = {str(pos): {k: round(summarize(wt[(k, pos)])["median_ms"] / window, 3)
                     for k in windows} for pos in positions}
    for pos in positions:
        log(f"  decode step at {pos:3d}: " + "  ".join(f"{k} {v:.3f} ms"
                                                      for k, v in at[str(pos)].items()))
    first, last = str(positions[0]), str(positions[-1])
    speed = per_token["ours_cached"] / per_token["keras_hub_cached"]
    flat = at[last]["ours_cached"] / at[first]["ours_cached"]
    return {"target_met": bool(speed <= 0.8 and flat <= 1.2),
            "config": dict(cfg, batch=batch, tokens=n, src_len=src_len, window=window,
                           weights="random", end_id="never produced"),
            "total": stats, "ms_per_token": per_token, "profile": profile,
            "identical_tokens_ours_cached_vs_naive": bool(
                (tokens["ours_cached"] == tokens["ours_naive"]).all()
                and (tokens["ours_cached"] == tokens["ours_cached_xla"]).all()),
            "ratio_ours_vs_keras_hub": round(speed, 3),
            "ratio_ours_vs_keras_hub_xla": round(
                per_token["ours_cached_xla"] / per_token["keras_hub_cached_xla"], 3),
            "step_ms_at_position": at,
            "ours_step_ratio_last_vs_first": round(flat, 3),
            "keras_hub_step_ratio_last_vs_first": round(
                at[last]["keras_hub_cached"] / at[first]["keras_hub_cached"], 3),
            "targets": "ours <= 0.8x keras_hub ms/token; ours step at 64 <= 1.2x step at 8"}
