"""Additive (Bahdanau) attention."""
import keras
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers._masking import AttentionMaskMixin, attention_mask, call_outputs
from keras_attn.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attn")
class AdditiveAttention(AttentionMaskMixin, keras.layers.Layer):
    """Additive attention: score ``a(q, k) = w_v^T tanh(W_q q + W_k k)``.

    Queries and keys may have different feature sizes.

    Args:
        num_hiddens: size of the hidden layer of the scoring MLP.
        dropout: rate applied to the attention weights while training.

    Sub-layers: ``W_q``, ``W_k`` (Dense ``num_hiddens``, no bias), ``w_v`` (Dense 1, no bias).

    Call arguments:
        queries: ``(B, Q, q)``. keys: ``(B, K, k)``. values: ``(B, K, v)``.
        valid_lens: optional int ``(B,)`` or ``(B, Q)``. mask: optional bool ``(B, K)`` or
        ``(B, Q, K)``. return_attention_scores: also return ``(B, Q, K)`` weights.
        cache: optional ``W_k keys`` from :meth:`compute_cache`, used instead of projecting
        ``keys`` again (returned last, unchanged).

    Returns: ``(B, Q, v)``, or ``(output, weights)``; with ``cache``, ``(..., cache)``.

    Example:
        >>> att = AdditiveAttention(num_hiddens=8)
        >>> att(np.random.rand(2, 1, 20), np.ones((2, 10, 2)), values, valid_lens=np.array([2, 6]))

    References: Bahdanau et al. 2015; D2L 11.3.2.2.
    """

    def __init__(self, num_hiddens, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.supports_masking = True

    def build(self, queries_shape, keys_shape=None, values_shape=None, *args, **kwargs):
        keys_shape = keys_shape or queries_shape
        kw = dict(use_bias=False, dtype=self.dtype_policy)
        self.W_q = keras.layers.Dense(self.num_hiddens, name="W_q", **kw)
        self.W_k = keras.layers.Dense(self.num_hiddens, name="W_k", **kw)
        self.w_v = keras.layers.Dense(1, name="w_v", **kw)
        self.W_q.build(queries_shape)
        self.W_k.build(keys_shape)
        self.w_v.build(tuple(queries_shape[:-1]) + (self.num_hiddens,))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, queries, keys, values, valid_lens=None, mask=None,
             return_attention_scores=False, training=None, cache=None,
             queries_mask=None, keys_mask=None, values_mask=None):
        _checks.check_qkv(queries, keys, values)
        keep = attention_mask(queries, keys, mask, queries_mask, keys_mask, values_mask)
        projected_keys = self.compute_cache(keys) if cache is None else cache  # (B, K, h)
        features = ops.tanh(ops.expand_dims(self.W_q(queries), 2)
                            + ops.expand_dims(projected_keys, 1))  # (B, Q, K, h)
        scores = ops.squeeze(self.w_v(features), -1)  # (B, Q, K)
        weights = attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=keep)
        output = ops.matmul(self.dropout_layer(weights, training=training), values)
        return call_outputs(output, weights if return_attention_scores else None, cache)

    def compute_cache(self, keys):
        """``W_k keys`` ``(B, K, num_hiddens)``: pass it as ``cache`` to score the same keys
        again without projecting them (every step of a decoder)."""
        return self.W_k(keys)

    def get_config(self):
        return {**super().get_config(), "num_hiddens": self.num_hiddens,
                "dropout": self.dropout}
