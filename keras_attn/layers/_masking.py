"""Combining the masks an attention layer can receive into one bool (B, [1,] Q, K) mask."""
import keras
from keras import ops

from keras_attn import ops as attn_ops


def attention_mask(queries, keys, mask=None, queries_mask=None, keys_mask=None,
                   values_mask=None, use_causal_mask=False):
    """AND of an explicit ``mask`` and the Keras masks, as ``[B,Q,1] & [B,1,K] & [1,Q,K]``.

    Args:
        queries: ``(B, Q, ...)``; keys: ``(B, K, ...)`` (only their shapes are used).
        mask: explicit bool ``(B, K)`` or ``(B, Q, K)``, True = keep.
        queries_mask: Keras mask ``(B, Q)``; padded queries attend nothing (zero weights).
        keys_mask, values_mask: Keras masks ``(B, K)`` of key padding.
        use_causal_mask: add the lower-triangular mask (query i sees keys <= i).

    Returns: bool ``(B, Q, K)`` (or broadcastable), or None when nothing is masked.
    """
    parts = []
    if mask is not None:
        mask = ops.cast(mask, "bool")
        if len(mask.shape) == 2:
            mask = ops.expand_dims(mask, 1)
        elif len(mask.shape) != 3:
            raise ValueError(
                "`mask` must have shape (B, K) or (B, Q, K). "
                f"Received: mask with shape={tuple(mask.shape)}"
            )
        attn_ops.check_batch(queries, mask, "mask", "queries")
        parts.append(mask)
    if queries_mask is not None:
        parts.append(ops.expand_dims(ops.cast(queries_mask, "bool"), -1))  # (B, Q, 1)
    for m in (keys_mask, values_mask):
        if m is not None:
            parts.append(ops.expand_dims(ops.cast(m, "bool"), 1))  # (B, 1, K)
    if use_causal_mask:
        q_len, k_len = ops.shape(queries)[1], ops.shape(keys)[1]
        parts.append(ops.expand_dims(attn_ops.causal_mask(q_len, k_len), 0))  # (1, Q, K)
    return attn_ops.combine_masks(*parts)


def attention_output_spec(layer, queries, keys, values, return_attention_scores,
                          heads=None):
    """Symbolic outputs of an attention layer: ``output`` and, when asked, the weights
    ``(B, Q, K)`` or ``(B, heads, Q, K)``. ``compute_output_shape`` alone cannot see
    ``return_attention_scores`` (functional models)."""
    output = keras.KerasTensor(
        layer.compute_output_shape(queries.shape, keys.shape, values.shape),
        dtype=layer.compute_dtype)
    if not return_attention_scores:
        return output
    head_axis = () if heads is None else (heads,)
    shape = (queries.shape[0], *head_axis, queries.shape[1], keys.shape[1])
    return output, keras.KerasTensor(shape, dtype=layer.compute_dtype)
