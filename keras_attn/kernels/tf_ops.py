"""TensorFlow only: the fast paths behind :mod:`keras_attn.kernels.fastpath`, and a slice
update for exported graphs.

Each fast path names its reference (in ``keras.ops``) and a test checks they agree:
:func:`masked_softmax` (gradient written out), :func:`dropout16` (two 16-bit decisions per
32-bit random number), :func:`masked_cross_entropy` (two XLA kernels). This module imports
only ``numerics`` and ``fastpath``, so the reference code may call into it.
:func:`slice_update` avoids ``XlaDynamicUpdateSlice``, which TF Serving refuses without XLA.
"""
import keras
import tensorflow as tf

from keras_attn.kernels import fastpath
from keras_attn.kernels.numerics import large_negative

_FILL = large_negative("float32")  # these kernels work in float32


# --- masked softmax --------------------------------------------------------------------------
def masked_softmax(x, keep):
    """``where(keep, softmax(where(keep, x, fill)), 0)`` with its gradient written out.

    Reference: ``keras_attn.ops.masked_softmax``. The gradient ``w * (g - sum(g * w))`` is
    already 0 where ``keep`` is False, so the selects need no backward pass. Without the
    policy's ``custom_gradients``, autodiff's gradient.

    Args:
        x: float32 scores. keep: bool, broadcasts against ``x``.
    """
    def forward(x):
        weights = softmax(tf.where(keep, x, _FILL))
        return tf.where(keep, weights, tf.constant(0, weights.dtype))

    if not fastpath.current().custom_gradients:
        return forward(x)

    @tf.custom_gradient
    def fn(x):
        weights = forward(x)

        def grad(upstream):
            return weights * (upstream - tf.reduce_sum(upstream * weights, -1, keepdims=True))

        return weights, grad

    return fn(x)


def softmax(x):
    """Softmax over the last axis with TensorFlow's fused kernel (also for a size-1 axis)."""
    return tf.nn.softmax(x, axis=-1)


# --- the slice update of decoding buffers and caches ------------------------------------------
def slice_update(inputs, start_indices, updates):
    """``inputs`` with ``updates`` written at ``start_indices`` (as ``keras.ops.slice_update``)
    from ``range``/``gather``/``where`` only: a spanned axis costs nothing, a size-1 update
    axis is a broadcast, any other axis gathers the update into place.
    """
    inputs = tf.convert_to_tensor(inputs)
    updates = tf.cast(tf.convert_to_tensor(updates), inputs.dtype)
    rank = inputs.shape.rank
    in_shape, up_shape = tf.shape(inputs), tf.shape(updates)
    inside = None
    for axis in range(rank):
        start = start_indices[axis]
        n_in, n_up = inputs.shape[axis], updates.shape[axis]
        if isinstance(start, int) and start == 0 and n_in is not None and n_in == n_up:
            continue
        start = tf.cast(start, tf.int32)
        pos = tf.range(in_shape[axis])
        if n_up != 1:
            index = tf.clip_by_value(pos - start, 0, tf.maximum(up_shape[axis] - 1, 0))
            updates = tf.gather(updates, index, axis=axis)
        axis_inside = tf.logical_and(pos >= start, pos < start + up_shape[axis])
        shape = [1] * rank
        shape[axis] = -1
        axis_inside = tf.reshape(axis_inside, shape)
        inside = axis_inside if inside is None else tf.logical_and(inside, axis_inside)
    if inside is None:
        return tf.broadcast_to(updates, in_shape)
    return tf.where(inside, updates, inputs)


def assert_length_at_most(length, limit, message):
    """A runtime check of a dynamic sequence length (a no-op under XLA)."""
    tf.debugging.assert_less_equal(length, limit, message=message)


# --- dropout ---------------------------------------------------------------------------------
_LEVELS = 1 << 16


def _uniform16(shape, seed, static_dims=None):
    """uint16 uniforms of ``shape`` from ``ceil(n / 2)`` uint32 draws (the same numbers whatever
    the shape); ``static_dims``: an even static axis spares the slice (no ``cond`` on a
    dynamic parity on the training step's critical path).
    """
    n = tf.reduce_prod(shape)
    even = static_dims is not None and any(d is not None and d % 2 == 0 for d in static_dims)
    bits = tf.random.stateless_uniform([n // 2 if even else (n + 1) // 2], seed, minval=None,
                                       maxval=None, dtype=tf.uint32)
    halves = tf.bitcast(bits, tf.uint16)
    return tf.reshape(halves if even else tf.reshape(halves, [-1])[:n], shape)


def _draw_seed(seed):
    """A stateless-RNG seed: int32 ``(2,)``, advancing ``seed`` if it is a SeedGenerator."""
    if isinstance(seed, keras.random.SeedGenerator):
        seed = seed.next()
    seed = tf.convert_to_tensor(seed)
    if seed.dtype != tf.int32:  # SeedGenerator state is int64; XLA wants int32 seeds
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return seed


def dropout16(x, threshold, seed, dims):
    """``x`` zeroed where a 16-bit uniform falls below ``threshold``, the rest scaled by
    ``65536 / (65536 - threshold)``. Reference: ``keras_attn.layers.dropout.dropout16``.

    Args:
        x: float tensor. threshold: int in ``(0, 65536)``. seed: a ``SeedGenerator`` or an
            int ``(2,)`` tensor. dims: the noise shape as a list (None = that axis of ``x``).
    """
    seed = _draw_seed(seed)
    x = tf.convert_to_tensor(x)
    # A static shape keeps the random numbers independent of ``x``: the executor can draw
    # them while the ops producing ``x`` still run.
    if None not in dims:
        shape = tf.constant(dims, tf.int32)
    else:
        dynamic = tf.shape(x)
        shape = tf.stack([dynamic[i] if d is None else d for i, d in enumerate(dims)])
    keep = _uniform16(shape, seed, dims) >= tf.constant(threshold, tf.uint16)
    scale = _LEVELS / (_LEVELS - threshold)
    # mask = scale or 0: one select; the multiply is the only op on the gradient path.
    mask = tf.where(keep, tf.constant(scale, x.dtype), tf.constant(0, x.dtype))
    return x * mask


# --- the loss ------------------------------------------------------------------------------
def _ce_forward(flat, labels, eps):
    """Per row: ``logsumexp(z)``, and ``(1 - eps) z_y + eps mean(z)`` (the target's share)."""
    peak = tf.reduce_max(flat, axis=-1, keepdims=True)
    lse = tf.math.log(tf.reduce_sum(tf.exp(flat - peak), axis=-1, keepdims=True)) + peak
    target = tf.gather(flat, labels, batch_dims=1)
    if eps:
        target = (1.0 - eps) * target + eps * tf.reduce_mean(flat, axis=-1)
    return lse, target


def _ce_backward(flat, lse, labels, weight, eps):
    """``(softmax(z) - q) * weight`` with ``q = (1 - eps) one_hot(y) + eps / V``."""
    vocab = tf.shape(flat)[-1]
    dz = tf.exp(flat - lse) * weight
    if eps:
        dz = dz - weight * (eps / tf.cast(vocab, flat.dtype))
    hot = tf.equal(tf.range(vocab)[None, :], labels[:, None])
    return dz - tf.where(hot, weight * (1.0 - eps), tf.zeros_like(weight))


_ce_forward_xla = tf.function(_ce_forward, jit_compile=True, reduce_retracing=True)
_ce_backward_xla = tf.function(_ce_backward, jit_compile=True, reduce_retracing=True)


def masked_cross_entropy(logits, y_true, eps, pad_id, jit_compile=True):
    """Mean label-smoothed cross-entropy over the real tokens, gradient written out.

    Reference: ``keras_attn.training.losses.masked_cross_entropy``. With ``jit_compile`` the
    forward pass and the gradient ``(softmax(z) - q) * weight`` are two XLA kernels.

    Args:
        logits: float32 ``(B, T, V)``. y_true: int32 ``(B, T)``. eps: label smoothing.
        pad_id: ignored target id. jit_compile: use the XLA kernels.
    """
    vocab = tf.shape(logits)[-1]
    labels = tf.reshape(y_true, [-1])
    mask = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
    count = tf.maximum(tf.reduce_sum(mask), 1.0)
    safe = tf.where(tf.not_equal(labels, pad_id), labels, tf.zeros_like(labels))
    tf.debugging.assert_less(safe, vocab, message="target ids must be < the vocabulary size")
    tf.debugging.assert_non_negative(safe, message="target ids must be >= 0")
    forward, backward = ((_ce_forward_xla, _ce_backward_xla) if jit_compile
                         else (_ce_forward, _ce_backward))

    @tf.custom_gradient
    def loss_fn(z):
        flat = tf.reshape(z, [-1, vocab])
        lse, target = forward(flat, safe, eps)
        loss = tf.reduce_sum((lse[:, 0] - target) * mask) / count

        def grad(upstream):
            weight = (upstream * mask / count)[:, None]  # (N, 1)
            return tf.reshape(backward(flat, lse, safe, weight, eps), tf.shape(z))

        return loss, grad

    return loss_fn(logits)


# --- recurrent loops ---------------------------------------------------------------------------
def scan(body, states, xs, y_like):
    """``keras.ops.scan(body, states, xs)`` as ``tf.scan``, whose loop has
    ``maximum_iterations``, so its gradient compiles under XLA.

    Args:
        body: ``body(states, x) -> (states, ys)``. states: nested tensors. xs: a tensor
            ``(T, ...)`` or a tuple of them.
        y_like: tensors shaped like one step's ``ys`` (``tf.scan`` carries them).
    Returns: ``(final states, stacked ys)``.
    """
    def step(carry, x):
        return body(carry[0], x)

    if tf.nest.flatten(xs)[0].shape[0] == 0:
        return states, tf.nest.map_structure(lambda y: y[None][:0], y_like)
    all_states, ys = tf.scan(step, xs, (states, y_like))
    return tf.nest.map_structure(lambda t: t[-1], all_states), ys


def pad_to_one_step(tokens):
    """``(B, L)`` ids padded with 0 to at least one step (a GRU cannot run over none)."""
    return tf.pad(tokens, [[0, 0], [0, tf.maximum(1 - tf.shape(tokens)[1], 0)]])
