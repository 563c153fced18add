"""TensorFlow only: multi-head attention over whole sequences, the fast path of
``MultiHeadAttention._compute_attention`` (``tests/kernels/test_fastpath.py`` checks they agree).

All heads are attended as batched matmuls over ``(B, H)``; scores larger than the CPU's
cache are attended in chunks (:func:`attention_chunks`).
"""
import functools

import tensorflow as tf

from keras_attn.kernels import fastpath
from keras_attn.kernels import masks as attn_ops
from keras_attn.kernels import tf_ops


# --- multi-head attention ----------------------------------------------------------------------
def multi_head_attention(q, k, v, keep, valid_lens, dropout, gpu=None):
    """Scaled dot-product attention of every head.

    Args:
        q: ``(B, Q, H, dh)`` queries, already scaled by ``1 / sqrt(dh)``.
        k, v: ``(B, K, H, dh)``.
        keep: bool ``(B|1, Q|1, K)`` or None. valid_lens: int ``(B,)``/``(B, Q)`` or None.
        dropout: callable applied to the weights before they weight the values.
        gpu: whether a GPU runs this (default: the policy's ``attention_chunks``).
    Returns: ``(context (B, Q, H, dh), weights (B, H, Q, K))``.
    """
    if q.shape[1] == 1 and valid_lens is None:
        return _one_query(q, k, v, keep, dropout)
    return _attend_heads(q, k, v, keep, valid_lens, dropout, gpu)


def _one_query(q, k, v, keep, dropout):
    """One query (a decoding step): matrix-vector products as multiply + sum in the cache's
    ``(B, K, H, dh)`` layout (the general path would transpose every layer's whole
    key/value cache at every step); only the ``(B, H, K)`` scores are transposed, for the
    one masked softmax."""
    f32 = tf.float32  # accumulate in float32, as the matmul does
    scores = tf.reduce_sum(tf.cast(k, f32) * tf.cast(q, f32), axis=-1)  # (B, K, H)
    scores = tf.cast(tf.cast(scores, q.dtype), f32)  # the general path's rounding
    scores = tf.transpose(scores, (0, 2, 1))  # (B, H, K): small, unlike the cache
    if keep is None:
        weights = tf_ops.softmax(scores)
    else:  # (B|1, 1, K): the same for every head
        weights = tf_ops.masked_softmax(scores, keep)
    weights = tf.cast(weights, q.dtype)  # (B, H, K)
    w = tf.transpose(tf.cast(dropout(weights), f32), (0, 2, 1))  # (B, K, H)
    context = tf.reduce_sum(tf.cast(v, f32) * tf.expand_dims(w, -1), axis=1,
                            keepdims=True)  # (B, 1, H, dh)
    return tf.cast(context, q.dtype), tf.expand_dims(weights, 2)  # weights (B, H, 1, K)


def _attend_heads(q, k, v, keep, valid_lens, dropout, gpu):
    """Batched matmuls over ``(B, H)`` after one transpose per input; large scores in chunks
    of examples or of heads, so each chunk's scores, softmax, dropout and their gradients
    stay in the CPU's cache."""
    batch, num_q, heads, head_dim = q.shape
    num_k = k.shape[1]
    # keep (B|1, Q|1, K) -> (B|1, 1, Q|1, K): the same for every head
    keep = attn_ops.keep_mask(Shaped((batch, heads, num_q, num_k)), tf.shape(k)[1],
                              valid_lens, keep)
    qt, kt, vt = (tf.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))  # (B, H, L, dh)
    rows = attention_chunks(batch, heads, num_q, num_k, gpu=gpu)
    if len(rows) == 1:
        context, weights = _attend_chunk(qt, kt, vt, keep, dropout)
    else:
        # Chunks of whole examples, or of `group` heads of one example: view (B, H) as
        # (B*H / group, group) and split the first axis (the reshapes move nothing).
        group = min(rows[0], heads)
        units = [n // group for n in rows]
        if group < heads:
            qt, kt, vt = (tf.reshape(x, (-1, group, x.shape[2], head_dim))
                          for x in (qt, kt, vt))
        if keep is not None and keep.shape[0] is None:  # a mask of unknown batch
            keep = tf.broadcast_to(keep, tf.concat([[batch], tf.shape(keep)[1:]], 0))
        contexts, weights, start = [], [], 0
        for q_c, k_c, v_c, n in zip(*(tf.split(x, units) for x in (qt, kt, vt)), units):
            keep_c = keep
            if keep is not None and keep.shape[0] != 1:  # this chunk's examples
                first = start * group // heads
                keep_c = keep[first:first + max(n * group // heads, 1)]
            c, w = _attend_chunk(q_c, k_c, v_c, keep_c, dropout)
            contexts.append(c)
            weights.append(w)
            start += n
        context = tf.reshape(tf.concat(contexts, 0), (-1, heads, num_q, head_dim))
        weights = tf.reshape(tf.concat(weights, 0), (-1, heads, num_q, num_k))
    return tf.transpose(context, (0, 2, 1, 3)), weights


def _attend_chunk(qt, kt, vt, keep, dropout):
    """``(E, G, Q, dh)`` queries over ``(E, G, K, dh)``; ``keep`` broadcasts to the scores."""
    scores = tf.matmul(qt, kt, transpose_b=True)
    weights = attn_ops.masked_softmax(scores, mask=keep)
    return tf.matmul(dropout(weights), vt), weights


class Shaped:
    """A static shape to check masks against, without a tensor of that shape."""

    def __init__(self, shape):
        self.shape = shape


# The defaults of attention_chunks, read at trace time: set them (e.g. CHUNK_BYTES to a
# smaller CPU's L2 cache) before a model is traced to tune the chunks for another machine.
CHUNK_BYTES = 1 << 21  # float32 scores per chunk
CHUNK_ABOVE = 1 << 24  # chunk only scores larger than this in all


def attention_chunks(batch, heads, num_queries, num_keys, chunk_bytes=None,
                     min_total_bytes=None, gpu=None):
    """How many rows of the ``(batch * heads)`` axis each attention chunk takes.

    Scores of more than ``min_total_bytes`` (float32) are cut into chunks of at most
    ``chunk_bytes``: whole examples, or a divisor of ``heads`` rows of one example, so a
    per-example mask slices along. ``[None]`` when a size is not static; one chunk on a GPU.

    Example:
        >>> len(attention_chunks(16, 8, 512, 512, gpu=False))  # 1 MiB per row: 2 a chunk
        64
        >>> attention_chunks(16, 8, 128, 128, gpu=False)  # 8 MiB in all: one chunk
        [128]
    """
    if None in (batch, num_queries, num_keys):
        return [None]
    if gpu is None:
        chunked = fastpath.current().attention_chunks
        gpu = gpu_visible() if chunked is None else not chunked
    if gpu:
        return [batch * heads]
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    min_total_bytes = CHUNK_ABOVE if min_total_bytes is None else min_total_bytes
    if 4 * batch * heads * num_queries * num_keys <= min_total_bytes:
        return [batch * heads]
    total = batch * heads
    per_row = 4 * num_queries * num_keys
    rows = chunk_bytes // per_row if per_row else total
    if rows >= total:
        return [total]
    if rows >= heads:
        rows -= rows % heads
    else:
        rows = max(d for d in range(1, heads + 1) if heads % d == 0 and d <= max(rows, 1))
    full, rest = divmod(total, rows)
    return [rows] * full + ([rest] if rest else [])


@functools.lru_cache(maxsize=None)
def gpu_visible():
    """Whether TensorFlow sees a GPU (asked once per process)."""
    return bool(tf.config.list_logical_devices("GPU"))
