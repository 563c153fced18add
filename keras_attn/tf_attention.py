"""TensorFlow only: the fast path of multi-head attention behind :mod:`keras_attn.fastpath`.

Reference: ``MultiHeadAttention._compute_attention`` (einsums and
``keras_attn.ops.masked_softmax``) and its cached call; ``tests/test_fastpath.py`` checks
that both agree. All heads are attended as batched matmuls over ``(B, H)``; scores larger
than the CPU's cache are attended in chunks (:func:`attention_chunks`), which a GPU does not
need (:func:`gpu_visible`).

Decoding (:func:`cached_attention`, :func:`linear`, :func:`empty_cache`): the key/value
caches are heads-first ``(B, H, L, d_h)``, so a step's scores and context are two batched
matmuls that read the cache once, with no transpose; in a TensorFlow graph that XLA does
not compile the self-attention cache grows by the step's positions (a concat copies the
``t`` cached positions; a write into a preallocated buffer inside a loop copies the whole
buffer), eagerly, under XLA and inside :func:`preallocated_cache` (TFLite) it is a
``max_len`` buffer written with ``tensor_scatter_nd_update``. Every op of a step is one that
TensorFlow's oneDNN rewrite leaves alone (``BatchMatMulV3``, the softmax in its elementwise
ops, row gathers instead of float ``Transpose``): oneDNN's kernels parallelise every call,
a fixed cost that dominates on one sentence (docs/benchmarks/NOTES.md, "Decoding step").
"""
import contextlib
import functools
import math
import weakref

import tensorflow as tf

from keras_attn import ops as attn_ops
from keras_attn import tf_ops
from keras_attn.numerics import large_negative


# --- multi-head attention ----------------------------------------------------------------------
def multi_head_attention(q, k, v, keep, valid_lens, dropout, gpu=None):
    """Scaled dot-product attention of every head; reference: ``MultiHeadAttention``'s
    ``_compute_attention`` (einsums and ``keras_attn.ops.masked_softmax``).

    Args:
        q: ``(B, Q, H, dh)`` queries, already scaled by ``1 / sqrt(dh)``.
        k, v: ``(B, K, H, dh)``.
        keep: bool ``(B|1, Q|1, K)`` or None. valid_lens: int ``(B,)``/``(B, Q)`` or None.
        dropout: callable applied to the weights before they weight the values.
        gpu: whether a GPU runs this (default: whether TensorFlow sees one); decides the
            chunking (:func:`attention_chunks`).

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
    if keep is not None and len(keep.shape) == 3:
        keep = tf.expand_dims(keep, 1)  # (B|1, 1, Q|1, K): the same for every head
    keep = attn_ops.keep_mask(_Shaped((batch, heads, num_q, num_k)), tf.shape(k)[1],
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


class _Shaped:
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

    Scores of more than ``min_total_bytes`` in all (float32; default :data:`CHUNK_ABOVE`,
    16 MiB) are cut into chunks of at most ``chunk_bytes`` (default :data:`CHUNK_BYTES`,
    2 MiB); a chunk is either whole examples (a
    multiple of ``heads`` rows) or a divisor of ``heads`` rows of one example, so a
    per-example mask slices along with it. ``[None]`` (one chunk of every row) when a size
    is not static. On a GPU (``gpu=True``, or by default when TensorFlow sees one) one
    chunk: chunks save CPU cache traffic and would only add kernel launches there.

    Example:
        >>> len(attention_chunks(16, 8, 512, 512, gpu=False))  # 1 MiB per row: 2 a chunk
        64
        >>> attention_chunks(16, 8, 128, 128, gpu=False)  # 8 MiB in all: one chunk
        [128]
    """
    if None in (batch, num_queries, num_keys):
        return [None]
    if gpu is None:
        gpu = gpu_visible()
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


# --- decoding: the cached step's kernels ---------------------------------------------------
_preallocated = False
_FILL = large_negative("float32")  # the softmax is computed in float32


@contextlib.contextmanager
def preallocated_cache():
    """Trace decoding with ``max_len`` key/value buffers in a plain graph too: for TFLite,
    whose interpreter re-plans its memory whenever a loop variable changes shape (the
    TFLite exporter traces inside this block)."""
    global _preallocated
    previous, _preallocated = _preallocated, True
    try:
        yield
    finally:
        _preallocated = previous


def growing_cache():
    """Whether a self-attention cache made now grows by a position per step: in a
    TensorFlow graph that XLA will not compile (the only place a loop may carry a tensor
    whose shape changes), outside :func:`preallocated_cache`."""
    if _preallocated or not tf.inside_function():
        return False
    # TensorFlow's own test for an XLA context (tf.function(jit_compile=True) and the
    # XLA contexts inside it), as its TensorArray and while_loop use.
    from tensorflow.python.ops import control_flow_util

    return not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def empty_cache(batch, heads, max_len, head_dim, dtype):
    """A self-attention ``(k, v)`` cache, heads-first: ``(B, H, 0, d_h)`` whose static
    length is declared unknown (so a loop may carry it as it grows) where
    :func:`growing_cache`, else zeros ``(B, H, max_len, d_h)``."""
    if growing_cache():
        empty = tf.zeros(tf.stack([batch, heads, 0, head_dim]), dtype)
        zeros = tf.compat.v1.placeholder_with_default(empty, (None, heads, None, head_dim))
    else:
        zeros = tf.zeros(tf.stack([batch, heads, max_len, head_dim]), dtype)
    return zeros, zeros


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
    """``fn(*tensors)``, built in the graph that holds ``tensors`` when that is not the
    graph being traced: a decoding step traced inside a loop reads the weights as tensors
    of the graph around it (``steps._Steps``), so what it derives from them alone (the
    concatenated W_q/W_k/W_v kernels) is computed once per call instead of at every step.
    Built once per graph and ``tensors``."""
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
    """``activation(x @ kernel + bias)`` for ``(B, 1, d)`` activations (one position per
    row: a decoding step) as one ``BatchMatMulV3`` on ``(B, d)``: oneDNN's ``MatMul`` and
    the Tensordot reshapes around it cost several times more on one sentence (a
    ``BatchMatMulV3`` broadcasting the kernel over ``(B, 1, d)`` runs B matrix-vector
    products: 2.4x slower at batch 32). The reshapes back and forth sit next to each
    other between two of these (the activation is applied on ``(B, n)``), where Grappler
    folds them. ``transpose_kernel``: ``kernel`` is ``(n, d)`` (tied embeddings)."""
    n = kernel.shape[0] if transpose_kernel else kernel.shape[-1]
    y = batch_matmul(tf.reshape(x, (-1, x.shape[-1])), tf.cast(kernel, x.dtype),
                     adj_y=transpose_kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, tf.cast(bias, x.dtype))
    if activation is not None:
        y = activation(y)
    return tf.reshape(y, (-1, 1, n))


def fused_projection(x, layers, use_bias):
    """``[layer(x) for layer in layers]`` for Dense layers of the same input (a
    self-attention's W_q, W_k, W_v) and ``(B, 1, d)`` activations: one :func:`linear` with
    the kernels (and biases) side by side, concatenated once per call
    (:func:`loop_invariant`)."""
    kernel = loop_invariant(_concat_kernels, *(tf.convert_to_tensor(l.kernel) for l in layers))
    bias = (loop_invariant(_concat_biases, *(tf.convert_to_tensor(l.bias) for l in layers))
            if use_bias else None)
    return tf.split(linear(x, kernel, bias), len(layers), axis=-1)


def _concat_kernels(*kernels):
    return tf.concat(kernels, axis=1)


def _concat_biases(*biases):
    return tf.concat(biases, axis=0)


def layer_norm(x, gamma, beta, epsilon):
    """``keras.ops.layer_normalization`` over the last axis, with its arithmetic (the same
    values), in the 10 ops it needs."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * tf.cast(gamma, x.dtype)
    return x * inv + (tf.cast(beta, x.dtype) - mean * inv)


def batch_matmul(x, y, adj_y=False):
    """``tf.matmul`` as ``BatchMatMulV3``, which TensorFlow's oneDNN rewrite leaves to Eigen:
    on the matrix-vector products of a decoding step about half the time of oneDNN's
    ``BatchMatMulV2`` (a TFLite builtin all the same). Other dtypes (float16: no CPU
    kernel of ``BatchMatMulV3``) go through ``tf.matmul``."""
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
    """Attention of queries over a heads-first key/value cache; reference: the cached call
    of ``MultiHeadAttention`` (``tests/test_fastpath.py``).

    Args:
        q: ``(B, Q, d)`` projected queries, already scaled by ``1 / sqrt(d_h)``.
        k, v: ``(B, Q, d)`` this call's projected keys and values, written into ``cache``
            at positions ``index..index+Q-1``; None (and ``index`` None) when ``cache`` is
            a cross-attention's, attended as it is.
        cache: ``(k, v)`` ``(B, H, L, d_h)`` from :func:`empty_cache` (``L`` unknown: it
            grows) or :func:`project_source`.
        index: int or scalar tensor, the position of the first query, or None.
        heads: H. keep: bool ``(B|1, Q|1, K)`` or None (padding of the keys).
        valid_lens: int ``(B,)`` / ``(B, Q)`` or None (D2L semantics).
        causal: the query at position p sees keys <= p.
        dropout: callable on the weights, or None.

    Returns: ``(context (B, Q, d), weights (B, H, Q, K), cache)``.
    """
    (q,) = heads_first(q, heads)  # (B, H, Q, dh)
    k_cache, v_cache = cache
    growing = k_cache.shape[2] is None
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
        keep = attn_ops.keep_mask(_Shaped(tuple(scores.shape)), tf.shape(scores)[3],
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
    return heads_last(context), weights, (k_cache, v_cache)


def _positions(shape, index):
    """Scatter indices ``(B, H, Q, 3)`` = ``[b, h, index + q]`` for a ``(B, H, Q, d_h)``
    update."""
    grid = tf.meshgrid(tf.range(shape[0]), tf.range(shape[1]), index + tf.range(shape[2]),
                       indexing="ij")
    return tf.stack(grid, axis=-1)
