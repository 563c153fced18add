"""TensorFlow only: sentence pairs -> tokenized, shifted, bucketed, padded ``tf.data`` batches.

Sequence conventions (the serving graph must do the same: it calls `prepare_source`):
source = tokens + ``[END]``; target_in = ``[START]`` + tokens; target_out = tokens +
``[END]``; with ``max_len``, tokens are cut to ``max_len - 1`` so every sequence has at most
``max_len`` ids. Batches are padded with ``keras_attn.text.tokenizers.PAD_ID``.

References: D2L 10.5.3 (``[START]``/``[END]``, padding), 10.5.4 (batches).
"""
import tensorflow as tf

from keras_attn.text import tokenizers as text

# Bucket boundaries grow geometrically from _FIRST_BUCKET by _BUCKET_GROWTH, up to max_len
# (or _LONGEST when there is none): below the last boundary a sequence is padded by less
# than half its length, and there are few buckets to fill.
_FIRST_BUCKET, _BUCKET_GROWTH, _LONGEST = 8, 1.5, 256


def prepare_source(ids, max_len=None):
    """Source ids: tokens, ragged int32 (B, None) from `Tokenizer.tokenize`, cut to
    `max_len - 1` (None: no cut) -> tokens + `[END]`, ragged int32 (B, None).

    Example:
        >>> prepare_source(tf.ragged.constant([[5, 6, 7]]), max_len=3)   # [[5, 6, 3]]
    """
    if max_len is not None:
        ids = ids[:, : max_len - 1]
    end = tf.fill([ids.nrows(), 1], tf.constant(text.END_ID, ids.dtype))
    return tf.concat([ids, end], axis=1)


def prepare_target(ids, max_len=None):
    """Teacher-forcing pair of ragged int32 tokens (B, None), cut to `max_len - 1`:
    `(target_in, target_out)` = (`[START]` + tokens, tokens + `[END]`), each (B, None).

    Example:
        >>> prepare_target(tf.ragged.constant([[5, 6]]))   # ([[2, 5, 6]], [[5, 6, 3]])
    """
    if max_len is not None:
        ids = ids[:, : max_len - 1]
    start = tf.fill([ids.nrows(), 1], tf.constant(text.START_ID, ids.dtype))
    return tf.concat([start, ids], axis=1), prepare_source(ids)


def _bucket_boundaries(max_len):
    """Geometric bucket boundaries below ``max_len``: 8, 12, 18, 27, 40, 60 for 64."""
    top = max_len if max_len is not None else _LONGEST
    bounds, b = [], _FIRST_BUCKET
    while b < top:
        bounds.append(int(b))
        b = max(int(b) + 1, int(b * _BUCKET_GROWTH))
    return bounds


def make_dataset(pairs, src_tokenizer, tgt_tokenizer, batch_size, shuffle=True, seed=0,
                 max_len=None, bucket=True, cache=True):
    """A `tf.data.Dataset` of tokenized, shifted, padded batches for `model.fit`.

    Elements: `({"source": int32 (B, S), "target_in": int32 (B, T)}, target_out int32
    (B, T))`, with the conventions of the module docstring. With `bucket=True` sequences of
    similar length are batched together (`Dataset.bucket_by_sequence_length`), so some batches
    are smaller. The order is deterministic for a seed; `cardinality()` is the batch count.
    tf.data's autotuning thread is off (`options().autotune.enabled` is False): destroying an
    iterator waited for it, up to a minute.

    Args:
        pairs: list of `(source_text, target_text)`, already normalised.
        src_tokenizer, tgt_tokenizer: the tokenizers of sources and targets.
        batch_size: sequences per batch.
        shuffle, seed: shuffle the whole dataset each epoch, with this seed.
        max_len: cut every sequence to at most this many ids (None: no cut).
        bucket: bucket by length (else plain `padded_batch`).
        cache: cache the tokenized examples in memory.
    Example:
        >>> ds = make_dataset(pairs, en_tok, fr_tok, batch_size=64, max_len=40)
        >>> (x, y) = next(iter(ds)); x["source"].shape   # (64, S)
    References: D2L 10.5.3-10.5.4.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("make_dataset needs at least one pair. Received: pairs=[]")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1. Received: batch_size={batch_size}")
    if max_len is not None and max_len < 2:
        raise ValueError(f"max_len must be >= 2 (a token and [END]). Received: "
                         f"max_len={max_len}")
    sources = tf.constant([s for s, _ in pairs], tf.string)
    targets = tf.constant([t for _, t in pairs], tf.string)

    def encode(src, tgt):
        source = prepare_source(src_tokenizer.tokenize(src), max_len)
        target_in, target_out = prepare_target(tgt_tokenizer.tokenize(tgt), max_len)
        return source, target_in, target_out

    def densify(source, target_in, target_out):
        # Unbatched ragged rows are RaggedTensorSpec(ragged_rank=0); make them plain.
        return ({"source": tf.reshape(source, [-1]), "target_in": tf.reshape(target_in, [-1])},
                tf.reshape(target_out, [-1]))

    ds = tf.data.Dataset.from_tensor_slices((sources, targets))
    ds = ds.batch(1024).map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.unbatch().map(densify, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if cache:
        ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    padding = tf.nest.map_structure(lambda spec: tf.constant(text.PAD_ID, spec.dtype),
                                    ds.element_spec)
    if bucket:
        bounds = _bucket_boundaries(max_len)
        ds = ds.bucket_by_sequence_length(
            element_length_func=lambda x, y: tf.maximum(tf.shape(x["source"])[0], tf.shape(y)[0]),
            bucket_boundaries=bounds, bucket_batch_sizes=[batch_size] * (len(bounds) + 1),
            padding_values=padding)
    else:
        ds = ds.padded_batch(batch_size, padding_values=padding)
    # unbatch() and bucketing hide the number of batches; count them (one pass, which also
    # fills the cache) and state it, so that model.fit knows its epoch length instead of
    # warning "Your input ran out of data" after the first epoch.
    num_batches = ds.reduce(tf.constant(0, tf.int64), lambda count, *_: count + 1)
    ds = ds.apply(tf.data.experimental.assert_cardinality(num_batches))
    # tf.data's autotuning thread sleeps between optimisation rounds, up to a minute, and an
    # iterator's destruction waits for it: a budgeted run's training iterator, dropped while
    # the evaluation traces, held the command that long. AUTOTUNE then takes tf.data's static
    # defaults (a parallel call per core).
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)
