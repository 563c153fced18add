"""Masking and masked softmax, the numerical core of every attention layer.

All functions use ``keras.ops``: they run on TensorFlow, JAX and PyTorch, eagerly, traced and
under XLA. Masks are boolean with True = "may attend" (keep), as in Keras. On TensorFlow the
masked softmax takes the fast path of :mod:`keras_attn.kernels.tf_ops` while
:mod:`keras_attn.kernels.fastpath` is on.

References: D2L 11.3 (masked softmax), Vaswani et al. 2017, section 3.2.3 (causal mask).
"""
import keras
from keras import ops

from keras_attn.kernels import fastpath
from keras_attn.kernels.numerics import large_negative


def _static_dim(x, axis):
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) <= abs(axis) - (axis < 0):
        return None
    return shape[axis]


def sequence_mask(lengths, maxlen):
    """Boolean mask ``(*lengths.shape, maxlen)``, True where index < length.

    Args:
        lengths: integer tensor of any shape.
        maxlen: int or scalar tensor, the size of the new last axis.

    Example:
        >>> sequence_mask([1, 3], 4)
        [[True, False, False, False], [True, True, True, False]]
    """
    lengths = ops.convert_to_tensor(lengths)
    if "float" in keras.backend.standardize_dtype(lengths.dtype):
        raise ValueError(
            "`lengths` must be an integer tensor. "
            f"Received: lengths with dtype={lengths.dtype}"
        )
    positions = ops.arange(maxlen, dtype="int32")
    return ops.less(positions, ops.expand_dims(ops.cast(lengths, "int32"), -1))


def causal_mask(num_queries, num_keys=None, start=None):
    """Lower-triangular boolean mask ``(Q, K)``: the query at position p may attend keys 0..p.

    Args:
        num_queries, num_keys: sizes (``num_keys`` defaults to ``num_queries``).
        start: position of the first query (int or scalar tensor); default
            ``num_keys - num_queries`` (the last queries of the key sequence).
    """
    num_keys = num_queries if num_keys is None else num_keys
    start = num_keys - num_queries if start is None else ops.cast(start, "int32")
    row = ops.expand_dims(ops.arange(num_queries, dtype="int32"), -1)
    col = ops.expand_dims(ops.arange(num_keys, dtype="int32"), 0)
    return ops.greater_equal(row + start, col)


def valid_lens_to_mask(valid_lens, num_keys, rank):
    """Turn D2L ``valid_lens`` into a bool mask that broadcasts against scores of ``rank``.

    ``valid_lens`` ``(B,)`` masks keys per batch row, ``(B, Q)`` per query. Negative values
    count as 0 (no key), values above ``num_keys`` as all keys.
    """
    valid_lens = ops.convert_to_tensor(valid_lens)
    if len(valid_lens.shape) not in (1, 2):
        raise ValueError(
            "`valid_lens` must have shape (B,) or (B, Q). "
            f"Received: valid_lens with shape={tuple(valid_lens.shape)}"
        )
    return _expand_mask(sequence_mask(valid_lens, num_keys), rank)  # (B, K) or (B, Q, K)


def _expand_mask(mask, rank):
    """Insert axes so a (B, K) / (B, Q, K) mask broadcasts against (B, Q, K) or (B, H, Q, K)."""
    while len(mask.shape) < rank:
        mask = ops.expand_dims(mask, 1)  # (B, 1, K), then (B, 1, Q|1, K)
    return mask


def normalize_mask(mask, rank):
    """Expand a bool mask of shape (B, K), (B, Q, K) or the scores' shape for scores of ``rank``."""
    mask = ops.convert_to_tensor(mask)
    if mask.dtype != "bool":
        mask = ops.cast(mask, "bool")
    if len(mask.shape) not in (2, 3, rank):
        raise ValueError(
            f"`mask` must have shape (B, K), (B, Q, K) or the scores' shape (rank {rank}). "
            f"Received: mask with shape={tuple(mask.shape)}"
        )
    return _expand_mask(mask, rank)


def combine_masks(*masks):
    """Logical AND of the masks that are not None (broadcasting); None if all are None."""
    result = None
    for m in masks:
        if m is None:
            continue
        m = ops.cast(m, "bool") if m.dtype != "bool" else m
        result = m if result is None else ops.logical_and(result, m)
    return result


def masked_softmax(scores, valid_lens=None, mask=None):
    """Softmax over the last axis that gives exactly 0 to masked keys: weights of the scores'
    shape and dtype (computed in float32); a row with no valid key is all zeros, never NaN.

    Args:
        scores: float ``(B, Q, K)`` or ``(B, H, Q, K)``.
        valid_lens: optional int ``(B,)`` or ``(B, Q)`` (D2L semantics): keys at index
            ``>= valid_len`` are masked. Negative values mask every key.
        mask: optional bool, True = keep: ``(B, K)``, ``(B, Q, K)`` or the scores' shape.
            For 4-D scores a ``(B, K)`` or ``(B, Q, K)`` mask applies to every head.

    Example:
        >>> masked_softmax(np.random.rand(2, 2, 4), valid_lens=[2, 3])  # zeros beyond 2 / 3
    """
    scores = ops.convert_to_tensor(scores)
    rank = len(scores.shape)
    if rank not in (3, 4):
        raise ValueError(
            "`scores` must have rank 3 (B, Q, K) or 4 (B, H, Q, K). "
            f"Received: scores with shape={tuple(scores.shape)}"
        )
    keep = keep_mask(scores, ops.shape(scores)[-1], valid_lens, mask)
    dtype = scores.dtype
    x = ops.cast(scores, "float32")
    if fastpath.enabled():
        from keras_attn.kernels import tf_ops

        weights = tf_ops.softmax(x) if keep is None else tf_ops.masked_softmax(x, keep)
    elif keep is None:
        weights = softmax(x)
    else:
        weights = ops.where(keep, softmax(ops.where(keep, x, large_negative("float32"))), 0.0)
    return ops.cast(weights, dtype)


def softmax(x):
    """Softmax over the last axis, ``exp(x - max) / sum(exp(x - max))``.

    Unlike ``keras.ops.softmax`` it accepts an empty axis (a source of length 0) and a
    size-1 axis without a warning (the first decoding step).
    """
    if _static_dim(x, -1) == 0:
        return x  # nothing to normalise (a graph's unknown empty axis reduces to -inf)
    # No ``initial=`` for the max: Keras's PyTorch backend makes that tensor on the CPU,
    # which fails beside a CUDA ``x``.
    e = ops.exp(x - ops.max(x, axis=-1, keepdims=True))
    return e / ops.sum(e, axis=-1, keepdims=True)


def slice_update(inputs, start_indices, updates):
    """``inputs`` with ``updates`` written at ``start_indices`` (``keras.ops.slice_update``).

    On TensorFlow the update is built from core ops (:func:`keras_attn.kernels.tf_ops.slice_update`)
    so that graphs holding it (decoding loops, key/value caches) run in TF Serving and
    convert to TFLite builtins; elsewhere it is ``keras.ops.slice_update``.
    """
    if keras.backend.backend() == "tensorflow":
        from keras_attn.kernels import tf_ops

        return tf_ops.slice_update(inputs, start_indices, updates)
    return ops.slice_update(inputs, start_indices, ops.cast(updates, inputs.dtype))


def keep_mask(scores, num_keys, valid_lens=None, mask=None):
    """The bool keep mask :func:`masked_softmax` applies: ``valid_lens`` and ``mask`` combined.

    Args:
        scores: the scores, or anything with their static ``.shape``.
        num_keys: int or scalar tensor, the size of the scores' last axis.
        valid_lens, mask: as for :func:`masked_softmax`.
    Returns:
        None when both are None, else a bool tensor that broadcasts against the scores.
    """
    rank = len(scores.shape)
    keep = None
    if valid_lens is not None:
        valid_lens = ops.convert_to_tensor(valid_lens)
        if "int" not in keras.backend.standardize_dtype(valid_lens.dtype):
            raise ValueError(
                "`valid_lens` must be an integer tensor. "
                f"Received: valid_lens with dtype={valid_lens.dtype}"
            )
        check_batch(scores, valid_lens, "valid_lens")
        if len(valid_lens.shape) == 2:
            q_scores, q_lens = _static_dim(scores, -2), valid_lens.shape[1]
            if q_scores is not None and q_lens is not None and q_scores != q_lens:
                raise ValueError(
                    f"`valid_lens` of shape (B, Q) must have Q={q_scores} (the number of "
                    f"queries). Received: valid_lens with shape={tuple(valid_lens.shape)}"
                )
        keep = valid_lens_to_mask(valid_lens, num_keys, rank)
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
        check_batch(scores, mask, "mask")  # before expanding: report the shape received
        mask = normalize_mask(mask, rank)
        keep = combine_masks(keep, mask)
    return keep


def check_batch(reference, other, name, reference_name="scores"):
    """Raise ValueError when the static batch sizes of two tensors differ (broadcast 1 ok)."""
    b_ref, b_other = _static_dim(reference, 0), _static_dim(other, 0)
    if b_ref is not None and b_other is not None and b_ref != b_other and b_other != 1:
        raise ValueError(
            f"`{name}` must have the batch size of `{reference_name}` ({b_ref}). "
            f"Received: {name} with shape={tuple(other.shape)}"
        )
