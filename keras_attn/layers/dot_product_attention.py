"""Scaled dot-product attention."""
import math

import keras
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers._masking import AttentionMaskMixin, attention_mask
from keras_attn.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attn")
class DotProductAttention(AttentionMaskMixin, keras.layers.Layer):
    """Scaled dot-product attention: ``softmax(Q K^T / sqrt(d)) V``.

    Args:
        dropout: rate applied to the attention weights while training.

    Call arguments:
        queries: ``(B, Q, d)``. keys: ``(B, K, d)``. values: ``(B, K, v)``.
        valid_lens: optional int ``(B,)`` or ``(B, Q)``; keys at index >= valid_len ignored.
        mask: optional bool ``(B, K)`` or ``(B, Q, K)``, True = may attend.
        return_attention_scores: also return the weights ``(B, Q, K)`` (before dropout).
        training: dropout is active only when True.

    Returns: ``(B, Q, v)``, or ``(output, weights)``.

    Example:
        >>> att = DotProductAttention(dropout=0.1)
        >>> att(q, k, v, valid_lens=np.array([2, 6])).shape   # (B, Q, v)

    References: Vaswani et al. 2017, section 3.2.1; D2L 11.3.2.
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    def call(self, queries, keys, values, valid_lens=None, mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False,
             queries_mask=None, keys_mask=None, values_mask=None):
        _checks.check_qkv(queries, keys, values, feature_match=True)
        d = ops.shape(queries)[-1]
        scale = 1.0 / math.sqrt(d) if isinstance(d, int) else ops.rsqrt(ops.cast(d, queries.dtype))
        scores = ops.matmul(queries, ops.transpose(keys, (0, 2, 1)))
        scores = scores * ops.cast(scale, queries.dtype)
        keep = attention_mask(queries, keys, mask, queries_mask, keys_mask, values_mask,
                              use_causal_mask)
        weights = attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=keep)
        output = ops.matmul(self.dropout_layer(weights, training=training), values)
        return (output, weights) if return_attention_scores else output

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout}
