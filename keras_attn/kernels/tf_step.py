"""TensorFlow only: the kernels of a cached, one-position decoding step.

What the attention, FFN, LayerNorms and output projection run on TensorFlow with a fast
cache layout (:mod:`keras_attn.kernels.kv_cache`) or one position per row
(:mod:`keras_attn.layers._step`); ``tests/kernels/test_fastpath.py`` checks them against the
layers' own calls. Heads-first caches make a step's scores and context two batched
matmuls with no transpose; a ``GrowingCache`` grows by concat (plain graphs only), a
``HeadsFirstCache`` is a ``max_len`` buffer written with ``tensor_scatter_nd_update``.
Every op is one that oneDNN's rewrite leaves alone (research/NOTES.md, "Decoding
step").
"""
import weakref

import tensorflow as tf

from keras_attn.kernels import masks as attn_ops
from keras_attn.kernels.kv_cache import GrowingCache, HeadsFirstCache
from keras_attn.kernels.numerics import large_negative
from keras_attn.kernels.tf_attention import Shaped


_FILL = large_negative("float32")  # the softmax is computed in float32


def empty_cache(batch, heads, max_len, head_dim, dtype, growing):
    """A self-attention cache: a :class:`GrowingCache` ``(B, H, 0, d_h)`` whose static
    length is declared unknown (so a loop may carry it as it grows), or a
    :class:`HeadsFirstCache` of zeros ``(B, H, max_len, d_h)``."""
    if growing:
        empty = tf.zeros(tf.stack([batch, heads, 0, head_dim]), dtype)
        zeros = tf.compat.v1.placeholder_with_default(empty, (None, heads, None, head_dim))
        return GrowingCache(zeros, zeros)
    zeros = tf.zeros(tf.stack([batch, heads, max_len, head_dim]), dtype)
    return HeadsFirstCache(zeros, zeros)


def heads_first(x, heads, parts=1):
    """``(B, L, parts * d)`` projections -> ``parts`` tensors ``(B, H, L, d_h)`` (a list),
    by a row gather rather than a float ``Transpose`` (whose oneDNN kernel costs far more
    than the copy on one sentence); a reshape when ``L`` is 1."""
    head_dim = x.shape[-1] // (parts * heads)
    if x.shape[1] == 1 and parts == 1:
        return [tf.reshape(x, (-1, heads, 1, head_dim))]
    if x.shape[1] == 1:
        return tf.unstack(tf.reshape(x, (-1, parts, heads, 1, head_dim)), axis=1)
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    # Integer transpose of the row numbers: (L, parts, H) order -> (parts, H, L).
    rows = tf.reshape(tf.range(length * parts * heads), (length, parts * heads))
    x = tf.gather(tf.reshape(x, (batch, -1, head_dim)), tf.reshape(tf.transpose(rows), (-1,)),
                  axis=1)
    return tf.unstack(tf.reshape(x, (batch, parts, heads, -1, head_dim)), axis=1)


def heads_last(x):
    """``(B, H, L, d_h)`` -> ``(B, L, H * d_h)``, by a row gather (a reshape when L is 1)."""
    heads, head_dim = x.shape[1], x.shape[-1]
    if x.shape[2] == 1:
        return tf.reshape(x, (-1, 1, heads * head_dim))
    batch, length = tf.shape(x)[0], tf.shape(x)[2]
    rows = tf.reshape(tf.transpose(tf.reshape(tf.range(heads * length), (heads, length))), (-1,))
    x = tf.gather(tf.reshape(x, (batch, -1, head_dim)), rows, axis=1)
    return tf.reshape(x, (batch, -1, heads * head_dim))


_INVARIANTS = weakref.WeakKeyDictionary()  # graph -> {(fn, ids): (tensors, result)}


def loop_invariant(fn, *tensors):
    """``fn(*tensors)``, built once in the graph that holds ``tensors`` when that is not the
    graph being traced: a decoding step traced inside a loop
    (``keras_attn.decoding.step.DecodingStep``) then derives the concatenated W_q/W_k/W_v
    kernels once per call instead of at every step."""
    graphs = {getattr(t, "graph", None) for t in tensors}
    if tf.executing_eagerly() or len(graphs) != 1 or None in graphs:
        return fn(*tensors)
    (graph,) = graphs
    if graph is tf.compat.v1.get_default_graph():
        return fn(*tensors)
    memo = _INVARIANTS.setdefault(graph, {})
    key = (fn,) + tuple(id(t) for t in tensors)
    if key not in memo:  # the memo holds the tensors: their ids are not reused
        with graph.as_default():
            memo[key] = (tensors, fn(*tensors))
    return memo[key][1]


def linear(x, kernel, bias=None, transpose_kernel=False, activation=None):
    """``activation(x @ kernel + bias)`` for ``(B, L, d)`` as one ``BatchMatMulV3`` on
    ``(B * L, d)``. ``transpose_kernel``: ``kernel`` is ``(n, d)`` (tied embeddings)."""
    n = kernel.shape[0] if transpose_kernel else kernel.shape[-1]
    y = batch_matmul(tf.reshape(x, (-1, x.shape[-1])), tf.cast(kernel, x.dtype),
                     adj_y=transpose_kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, tf.cast(bias, x.dtype))
    if activation is not None:
        y = activation(y)
    if x.shape[1] == 1:
        return tf.reshape(y, (-1, 1, n))
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [n]], axis=0))


def fused_projection(x, layers, use_bias):
    """``[layer(x) for layer in layers]`` for Dense layers of the same input (a
    self-attention's W_q, W_k, W_v; ``x`` in their compute dtype): one :func:`linear` with
    the kernels (and biases) side by side, concatenated once per call."""
    kernel = loop_invariant(_side_by_side, *(tf.convert_to_tensor(l.kernel) for l in layers))
    bias = (loop_invariant(_side_by_side, *(tf.convert_to_tensor(l.bias) for l in layers))
            if use_bias else None)
    return tf.split(linear(x, kernel, bias), len(layers), axis=-1)


def _side_by_side(*tensors):
    return tf.concat(tensors, axis=-1)  # kernels (d, n) or biases (n,)


def layer_norm(x, gamma, beta, epsilon, dtype=None):
    """``keras.ops.layer_normalization`` over the last axis with its arithmetic (float32 at
    least, the result cast to ``dtype``, default ``x``'s), in the 10 ops it needs."""
    dtype = x.dtype if dtype is None else tf.as_dtype(dtype)
    if x.dtype in (tf.float16, tf.bfloat16):
        x = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * tf.cast(gamma, x.dtype)
    return tf.cast(x * inv + (tf.cast(beta, x.dtype) - mean * inv), dtype)


def batch_matmul(x, y, adj_y=False):
    """``tf.matmul`` as ``BatchMatMulV3`` (a TFLite builtin), which TensorFlow's oneDNN
    rewrite leaves to Eigen; other dtypes (float16: no CPU kernel) go through ``tf.matmul``."""
    if x.dtype != tf.float32:
        return tf.matmul(x, y, adjoint_b=adj_y)
    return tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=x.dtype, adj_y=adj_y)


def _softmax(x):
    """Softmax over the last axis in the elementwise ops it is made of: TensorFlow rewrites
    ``Softmax`` to oneDNN's kernel, whose fixed cost per call dwarfs a step's scores."""
    e = tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True))
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def cached_attention(q, k, v, cache, index, heads, keep=None, valid_lens=None, causal=False,
                     dropout=None):
    """Attention of queries over a heads-first key/value cache (the cached call of
    ``MultiHeadAttention``).

    Args:
        q: ``(B, Q, d)`` projected queries, already scaled by ``1 / sqrt(d_h)``.
        k, v: ``(B, Q, d)`` this call's projected keys and values, written at
            ``index..index+Q-1``; None (and ``index`` None) for a cross-attention's cache.
        cache: a ``HeadsFirstCache`` ``(B, H, L, d_h)`` or ``GrowingCache``.
        index: int or scalar tensor, the position of the first query, or None.
        heads: H. keep: bool ``(B|1, Q|1, K)`` or None (padding of the keys).
        valid_lens: int ``(B,)`` / ``(B, Q)`` or None (D2L semantics).
        causal: the query at position p sees keys <= p.
        dropout: callable on the weights, or None.
    Returns: ``(context (B, Q, d), weights (B, H, Q, K), cache)``, the cache of the same layout.
    """
    if not isinstance(cache, (HeadsFirstCache, GrowingCache)):
        raise ValueError("`cache` must be a HeadsFirstCache or a GrowingCache "
                         f"(keras_attn.kernels.kv_cache). Received: {type(cache).__name__}")
    (q,) = heads_first(q, heads)  # (B, H, Q, dh)
    k_cache, v_cache = cache
    growing = isinstance(cache, GrowingCache)
    if index is not None:
        (k,), (v,) = heads_first(k, heads), heads_first(v, heads)
        if growing:  # (B, H, t + Q, dh)
            k_cache = tf.concat([k_cache, k], axis=2)
            v_cache = tf.concat([v_cache, v], axis=2)
        else:  # (B, H, max_len, dh), positions index.. written
            where = _positions(tf.shape(k), tf.cast(index, tf.int32))
            k_cache = tf.tensor_scatter_nd_update(k_cache, where, k)
            v_cache = tf.tensor_scatter_nd_update(v_cache, where, v)
    scores = tf.cast(batch_matmul(q, k_cache, adj_y=True), tf.float32)  # (B, H, Q, K)
    if keep is not None or valid_lens is not None:  # (B|1, 1, Q|1, K): every head
        keep = attn_ops.keep_mask(Shaped(tuple(scores.shape)), tf.shape(scores)[3],
                                  valid_lens, keep)
    if causal and not (growing and q.shape[2] == 1):  # (growing: every key precedes it)
        num_q, num_k = tf.shape(scores)[2], tf.shape(scores)[3]
        mask = attn_ops.causal_mask(num_q, num_k, start=None if growing else index)
        keep = mask if keep is None else tf.logical_and(keep, mask)
    if keep is None:
        weights = _softmax(scores)
    else:
        weights = tf.where(keep, _softmax(tf.where(keep, scores, _FILL)), 0.0)
    weights = tf.cast(weights, q.dtype)
    attended = weights if dropout is None else dropout(weights)
    context = batch_matmul(attended, v_cache)  # (B, H, Q, dh)
    return heads_last(context), weights, type(cache)(k_cache, v_cache)


def _positions(shape, index):
    """Scatter indices ``(B, H, Q, 3)`` = ``[b, h, index + q]`` for a ``(B, H, Q, d_h)``
    update."""
    grid = tf.meshgrid(tf.range(shape[0]), tf.range(shape[1]), index + tf.range(shape[2]),
                       indexing="ij")
    return tf.stack(grid, axis=-1)
