"""Multi-head attention with parallel heads (one matmul per projection, heads by reshape)."""
import functools
import math

import keras
import tensorflow as tf
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers._masking import attention_mask, attention_output_spec
from keras_attn.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention.

    ``MultiHead(Q, K, V) = Concat(head_1..head_h) W_o`` with
    ``head_i = softmax(Q W_q^i (K W_k^i)^T / sqrt(d_h)) V W_v^i``; the heads are computed in
    parallel by splitting the ``num_hiddens`` outputs of one projection into
    ``num_heads`` groups of ``num_hiddens / num_heads``.

    Args:
        num_hiddens: model width; each projection maps to ``num_hiddens`` features.
        num_heads: number of heads; must divide ``num_hiddens``.
        dropout: rate applied to the attention weights while training.
        use_bias: whether the four projections have biases.

    Sub-layers: ``W_q``, ``W_k``, ``W_v``, ``W_o`` (Dense, kernels ``(in, num_hiddens)``).

    With static shapes whose attention scores exceed 16 MiB, the heads are attended in
    chunks of examples (or of heads) that fit the CPU's cache (:func:`attention_chunks`);
    the results are those of one chunk.

    Call arguments:
        queries ``(B, Q, dq)``, keys ``(B, K, dk)``, values ``(B, K, dv)``.
        valid_lens: optional int ``(B,)`` or ``(B, Q)``. mask: optional bool ``(B, K)`` or
        ``(B, Q, K)`` applied to every head. use_causal_mask: query i sees keys <= i.
        return_attention_scores: also return weights ``(B, H, Q, K)`` (before dropout).

    Returns: ``(B, Q, num_hiddens)``, or ``(output, weights)``.

    Example:
        >>> mha = MultiHeadAttention(num_hiddens=100, num_heads=5)
        >>> mha(np.ones((2, 4, 100)), np.ones((2, 6, 100)), np.ones((2, 6, 100))).shape
        (2, 4, 100)

    References: Vaswani et al. 2017, section 3.2.2; D2L 11.5.
    """

    def __init__(self, num_hiddens, num_heads, dropout=0.0, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.num_heads = _checks.check_positive_int("num_heads", num_heads)
        if num_hiddens % num_heads:
            raise ValueError(
                "`num_hiddens` must be divisible by `num_heads`. "
                f"Received: num_hiddens={num_hiddens}, num_heads={num_heads}"
            )
        self.dropout = _checks.check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.head_dim = num_hiddens // num_heads
        self.supports_masking = True

    def build(self, queries_shape, keys_shape=None, values_shape=None, *args, **kwargs):
        keys_shape = keys_shape or queries_shape
        values_shape = values_shape or keys_shape
        kw = dict(use_bias=self.use_bias, dtype=self.dtype_policy)
        self.W_q = keras.layers.Dense(self.num_hiddens, name="W_q", **kw)
        self.W_k = keras.layers.Dense(self.num_hiddens, name="W_k", **kw)
        self.W_v = keras.layers.Dense(self.num_hiddens, name="W_v", **kw)
        self.W_o = keras.layers.Dense(self.num_hiddens, name="W_o", **kw)
        self.W_q.build(queries_shape)
        self.W_k.build(keys_shape)
        self.W_v.build(values_shape)
        self.W_o.build(tuple(queries_shape[:-1]) + (self.num_hiddens,))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def split_heads(self, x):
        """``(B, L, num_hiddens)`` -> ``(B, L, H, d_h)`` (a reshape, no copy)."""
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, self.head_dim))

    def project_key_value(self, keys, values):
        """Projected, head-split keys and values ``(B, K, H, d_h)``: what a decoder caches."""
        return self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))

    def attend(self, queries, k, v, keep=None, valid_lens=None, training=None):
        """Attention of raw ``queries`` over projected ``k``, ``v`` ``(B, K, H, d_h)``.

        ``keep`` is a bool mask broadcastable to ``(B, Q, K)`` (the same for every head).
        Returns ``(output (B, Q, num_hiddens), weights (B, H, Q, K))``.
        """
        q = self.split_heads(self.W_q(queries))  # (B, Q, H, dh)
        q = q * ops.cast(1.0 / math.sqrt(self.head_dim), q.dtype)
        if queries.shape[1] == 1 and valid_lens is None and (keep is None
                                                            or len(keep.shape) in (2, 3)):
            # One query (a decoding step): matrix-vector products as multiply + sum, and the
            # softmax over the keys axis, all in the cache's (B, K, H, dh) layout. The
            # general path below would transpose every layer's whole key/value cache at
            # every step; transposing the scores for a last-axis softmax costs more than the
            # softmax itself at this size (oneDNN's per-op overhead).
            f32 = "float32"  # accumulate in float32, as the matmul does
            scores = ops.sum(ops.cast(k, f32) * ops.cast(q, f32), axis=-1)  # (B, K, H)
            scores = ops.cast(ops.cast(scores, q.dtype), f32)  # the general path's rounding
            if keep is not None:  # (B, 1, K) or (B, K) -> (B, K, 1)
                keep = ops.expand_dims(keep[:, 0, :] if len(keep.shape) == 3 else keep, -1)
            weights = ops.cast(_softmax_over_keys(scores, keep), q.dtype)  # (B, K, H)
            w = ops.cast(self.dropout_layer(weights, training=training), f32)
            context = ops.sum(ops.cast(v, f32) * ops.expand_dims(w, -1), axis=1,
                              keepdims=True)  # (B, K, H, 1) x (B, K, H, dh) -> (B, 1, H, dh)
            context = ops.cast(context, q.dtype)
            weights = ops.expand_dims(ops.transpose(weights, (0, 2, 1)), 2)  # (B, H, 1, K)
            shape = ops.shape(context)
            context = ops.reshape(context, (shape[0], shape[1], self.num_hiddens))
        else:
            context, weights = self._attend_heads(q, k, v, keep, valid_lens, training)
        return self.W_o(context), weights

    def _attend_heads(self, q, k, v, keep, valid_lens, training):
        """Every head at once: ``(B, Q, H, dh)`` queries over ``(B, K, H, dh)`` keys/values.

        Batched matmuls over ``(B, H)`` after one transpose per input (the einsums over
        ``(B, Q, H, dh)`` they replace transposed scores-sized tensors in the backward
        pass). Large scores are attended in chunks of examples or of heads
        (:func:`attention_chunks`): each chunk's scores, softmax, dropout and their
        gradients stay in the CPU's cache instead of going through memory once per pass.
        Returns ``(context (B, Q, num_hiddens), weights (B, H, Q, K))``.
        """
        heads, head_dim = self.num_heads, self.head_dim
        batch, num_q, num_k = q.shape[0], q.shape[1], k.shape[1]
        shape = ops.shape(q)
        keep = attn_ops.keep_mask(_Shaped((batch, heads, num_q, num_k)), ops.shape(k)[1],
                                  valid_lens, None if keep is None else _per_head(keep))
        # (B, L, H, dh) -> (B, H, L, dh): batched matmuls over (B, H)
        qt, kt, vt = (ops.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
        rows = attention_chunks(batch, heads, num_q, num_k)
        if len(rows) == 1:
            context, weights = self._attend_chunk(qt, kt, vt, keep, training)
        else:
            # Chunks of whole examples, or of `group` heads of one example: view (B, H) as
            # (B*H / group, group) and split the first axis (the reshapes move nothing).
            group = min(rows[0], heads)
            units = [n // group for n in rows]
            if group < heads:
                qt, kt, vt = (ops.reshape(x, (-1, group, x.shape[2], head_dim))
                              for x in (qt, kt, vt))
            if keep is not None and keep.shape[0] != 1:
                if keep.shape[0] is None:  # a mask of unknown batch on static queries
                    keep = tf.broadcast_to(keep, tf.concat([[batch], tf.shape(keep)[1:]], 0))
            contexts, weights, start = [], [], 0
            for q_c, k_c, v_c, n in zip(*(tf.split(x, units) for x in (qt, kt, vt)), units):
                keep_c = keep
                if keep is not None and keep.shape[0] != 1:  # this chunk's examples
                    first = start * group // heads
                    keep_c = keep[first:first + max(n * group // heads, 1)]
                c, w = self._attend_chunk(q_c, k_c, v_c, keep_c, training)
                contexts.append(c)
                weights.append(w)
                start += n
            context, weights = tf.concat(contexts, 0), tf.concat(weights, 0)
            context = ops.reshape(context, (-1, heads, num_q, head_dim))
            weights = ops.reshape(weights, (-1, heads, num_q, num_k))
        context = ops.transpose(context, (0, 2, 1, 3))  # (B, Q, H, dh)
        return ops.reshape(context, (shape[0], shape[1], self.num_hiddens)), weights

    def _attend_chunk(self, qt, kt, vt, keep, training):
        """Softmax attention of ``(E, G, Q, dh)`` over ``(E, G, K, dh)``; ``keep`` broadcasts
        to ``(E, G, Q, K)``. Returns ``(context (E, G, Q, dh), weights (E, G, Q, K))``."""
        scores = tf.matmul(qt, kt, transpose_b=True)
        weights = attn_ops.masked_softmax(scores, mask=keep)
        context = tf.matmul(self.dropout_layer(weights, training=training), vt)
        return context, weights

    def call(self, queries, keys, values, valid_lens=None, mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False,
             queries_mask=None, keys_mask=None, values_mask=None):
        _checks.check_qkv(queries, keys, values)
        keep = attention_mask(queries, keys, mask, queries_mask, keys_mask, values_mask,
                              use_causal_mask)
        k, v = self.project_key_value(keys, values)
        output, weights = self.attend(queries, k, v, keep, valid_lens, training)
        return (output, weights) if return_attention_scores else output

    def compute_mask(self, queries, keys=None, values=None, valid_lens=None, mask=None, **kwargs):
        # Keras calls compute_mask(queries, previous_mask), never with `queries_mask`: the
        # output has the queries' positions, so it carries the queries' Keras mask (as
        # keras.layers.MultiHeadAttention does).
        queries_mask = kwargs.get("queries_mask")
        return getattr(queries, "_keras_mask", None) if queries_mask is None else queries_mask

    def compute_output_shape(self, queries_shape, *args, **kwargs):
        return tuple(queries_shape[:-1]) + (self.num_hiddens,)

    def compute_output_spec(self, queries, keys, values, valid_lens=None, mask=None,
                            return_attention_scores=False, **kwargs):
        return attention_output_spec(self, queries, keys, values, return_attention_scores,
                                     heads=self.num_heads)

    def get_config(self):
        return {**super().get_config(), "num_hiddens": self.num_hiddens,
                "num_heads": self.num_heads, "dropout": self.dropout,
                "use_bias": self.use_bias}


_CHUNK_BYTES = 1 << 21  # float32 scores per chunk
_CHUNK_ABOVE = 1 << 24  # chunk only scores larger than this in all


def attention_chunks(batch, heads, num_queries, num_keys, chunk_bytes=None,
                     min_total_bytes=None):
    """How many rows of the ``(batch * heads)`` axis each attention chunk takes.

    Scores of more than ``min_total_bytes`` in all (float32; default 16 MiB, half the L3
    cache of the 2-core CPU this was measured on) are cut into chunks of at most
    ``chunk_bytes`` (default 2 MiB, the best of 1-8 MiB measured); a chunk is either
    whole examples (a multiple of ``heads`` rows) or a divisor of ``heads`` rows of one
    example, so a per-example mask slices along with it. ``bench.py``'s MHA rows (B=16,
    d=512, 8 heads, fwd+bwd, ours / Keras, three runs each): L=256 (32 MiB of scores)
    0.879 in chunks vs 0.896 in one; L=128 (8 MiB) 0.871 vs 0.855. In a layer-only A/B,
    L=512 (128 MiB): 252 ms in chunks vs 264 in one (docs/benchmarks/NOTES.md).
    ``[None]`` (one chunk of every row) when a size is not static; one chunk when a GPU
    is visible and ``min_total_bytes`` is not given.

    Example:
        >>> len(attention_chunks(16, 8, 512, 512))  # 1 MiB of scores per row: 2 per chunk
        64
        >>> attention_chunks(16, 8, 128, 128)  # 8 MiB in all: one chunk
        [128]
    """
    if None in (batch, num_queries, num_keys):
        return [None]
    if min_total_bytes is None and _gpu_visible():
        return [batch * heads]  # a CPU cache optimisation: on a GPU it only adds launches
    chunk_bytes = _CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    min_total_bytes = _CHUNK_ABOVE if min_total_bytes is None else min_total_bytes
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
def _gpu_visible():
    return bool(tf.config.list_logical_devices("GPU"))


class _Shaped:
    """A static shape to check masks against, without a tensor of that shape."""

    def __init__(self, shape):
        self.shape = shape


def _per_head(keep):
    """A ``(B, Q, K)`` keep mask as ``(B, 1, Q, K)``: the same for every head."""
    return ops.expand_dims(keep, 1) if len(keep.shape) == 3 else keep


def _softmax_over_keys(scores, keep=None):
    """:func:`keras_attn.ops.masked_softmax` over axis 1 of float32 ``(B, K, H)`` scores.

    ``keep``: bool ``(B or 1, K, 1)`` or None. Masked keys get exactly 0, a row with no
    valid key all zeros.
    """
    if keep is not None:
        scores = ops.where(keep, scores, attn_ops.large_negative("float32"))
    # tf.reduce_max: ops.max refuses an empty axis (a source of length 0 is legal here)
    e = ops.exp(scores - tf.reduce_max(scores, axis=1, keepdims=True))
    if keep is not None:
        e = ops.where(keep, e, ops.zeros_like(e))
    total = ops.sum(e, axis=1, keepdims=True)
    # 0 / 1 on rows with no valid key (DivNoNan would do, but is not a TFLite builtin op)
    return e / ops.where(total > 0, total, ops.ones_like(total))
