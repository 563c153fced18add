"""Combining the masks an attention layer can receive into one bool (B, [1,] Q, K) mask."""
import keras
from keras import ops

from keras_attn import ops as attn_ops


def attention_mask(queries, keys, mask=None, queries_mask=None, keys_mask=None,
                   values_mask=None, use_causal_mask=False, cache_update_index=None):
    """AND of an explicit ``mask`` and the Keras masks, as ``[B,Q,1] & [B,1,K] & [1,Q,K]``.

    Args:
        queries: ``(B, Q, ...)``; keys: ``(B, K, ...)`` (only their shapes are used).
        mask: explicit bool ``(B, K)`` or ``(B, Q, K)``, True = keep.
        queries_mask: Keras mask ``(B, Q)``; padded queries attend nothing.
        keys_mask, values_mask: Keras masks ``(B, K)`` of key padding.
        use_causal_mask: add the lower-triangular mask (query i sees keys <= i).
        cache_update_index: the first query's position in a key/value cache: the causal mask
            starts there; without one the keys not yet written are masked.
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
    q_len, k_len = ops.shape(queries)[1], ops.shape(keys)[1]
    if use_causal_mask:
        causal = attn_ops.causal_mask(q_len, k_len, start=cache_update_index)
        parts.append(ops.expand_dims(causal, 0))  # (1, Q, K)
    elif cache_update_index is not None:
        written = ops.arange(k_len, dtype="int32") < ops.cast(cache_update_index, "int32") + q_len
        parts.append(written[None, None, :])  # (1, 1, K)
    return attn_ops.combine_masks(*parts)


def call_outputs(output, *extras):
    """``output``, or ``(output, *extras)`` without the None extras: what the attention layers
    and decoders return (``output[, weights][, cache]``)."""
    outputs = (output,) + tuple(e for e in extras if e is not None)
    return outputs if len(outputs) > 1 else output


class AttentionMaskMixin:
    """``compute_mask`` (the output carries the queries' Keras mask, as
    ``keras.layers.MultiHeadAttention``'s), ``compute_output_shape`` (the values' width) and
    ``compute_output_spec`` (which sees ``return_attention_scores``) of the attention layers.
    """

    def compute_mask(self, queries, keys=None, values=None, valid_lens=None, mask=None,
                     **kwargs):
        queries_mask = kwargs.get("queries_mask")
        return getattr(queries, "_keras_mask", None) if queries_mask is None else queries_mask

    def compute_output_shape(self, queries_shape, keys_shape, values_shape, *args, **kwargs):
        return tuple(queries_shape[:-1]) + (values_shape[-1],)

    def compute_output_spec(self, queries, keys=None, values=None, valid_lens=None, mask=None,
                            return_attention_scores=False, cache=None, **kwargs):
        keys = cache[0] if keys is None and cache is not None else keys
        values = keys if values is None else values
        output = keras.KerasTensor(
            self.compute_output_shape(queries.shape, keys.shape, values.shape),
            dtype=self.compute_dtype)
        outputs = [output]
        if return_attention_scores:
            heads = getattr(self, "num_heads", None)
            head_axis = () if heads is None else (heads,)
            shape = (queries.shape[0], *head_axis, queries.shape[1], keys.shape[1])
            outputs.append(keras.KerasTensor(shape, dtype=self.compute_dtype))
        if cache is not None:
            outputs.append(tuple(keras.KerasTensor(c.shape, dtype=c.dtype) for c in cache))
        return tuple(outputs) if len(outputs) > 1 else output
