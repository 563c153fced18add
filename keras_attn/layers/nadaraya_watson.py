"""Nadaraya–Watson kernel regression as attention pooling."""
import keras
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks


@keras.saving.register_keras_serializable(package="keras_attn")
class NadarayaWatson(keras.layers.Layer):
    """Gaussian-kernel attention pooling ``f(q) = sum_i softmax(-((q - k_i) w)^2 / 2) v_i``.

    Args:
        learnable: if True, the bandwidth ``w`` is a trainable scalar starting at 1.0
            (D2L's parametric pooling); otherwise ``w = 1`` (non-parametric).

    Call arguments:
        queries: ``(Q,)``.
        keys, values: ``(K,)`` shared by every query, or ``(Q, K)`` per query (D2L's
            training setup, where each point attends to all the others).
        valid_lens: optional int ``(Q,)``: query i uses only its first ``valid_lens[i]`` keys.
        mask: optional bool ``(K,)`` or ``(Q, K)``, True = use that key.
        return_attention_scores: also return the weights ``(Q, K)``.

    Returns: ``(Q,)`` predictions, or ``(predictions, weights)``.

    Example:
        >>> nw = NadarayaWatson(learnable=True)
        >>> nw(np.arange(0, 5, 0.1), x_train, y_train).shape   # (50,)

    References: Nadaraya 1964, Watson 1964; D2L 11.2.
    """

    def __init__(self, learnable=False, **kwargs):
        super().__init__(**kwargs)
        self.learnable = bool(learnable)

    def build(self, *args, **kwargs):
        if self.learnable:
            self.w = self.add_weight(name="w", shape=(), initializer="ones", trainable=True)
        self.built = True

    def call(self, queries, keys, values, valid_lens=None, mask=None,
             return_attention_scores=False, training=None):
        queries, keys, values = (ops.convert_to_tensor(t, self.compute_dtype)
                                 for t in (queries, keys, values))
        _checks.check_rank("queries", queries, 1)
        _checks.check_rank("keys", keys, (1, 2))
        _checks.check_rank("values", values, (1, 2))
        if tuple(keys.shape) != tuple(values.shape):
            raise ValueError(
                "`keys` and `values` must have the same shape. Received: keys with "
                f"shape={tuple(keys.shape)}, values with shape={tuple(values.shape)}"
            )
        if len(keys.shape) == 2:
            _checks.check_same_dim("queries", queries, "keys", keys, 0, "number of queries")
        diff = ops.expand_dims(queries, -1) - (keys if len(keys.shape) == 2 else keys[None, :])
        if self.learnable:
            diff = diff * ops.cast(self.w, diff.dtype)
        scores = ops.expand_dims(-(diff ** 2) / 2, 1)  # (Q, 1, K): queries as the batch
        if mask is not None:
            mask = ops.convert_to_tensor(mask, "bool")
            mask = mask[None, :] if len(mask.shape) == 1 else mask
        weights = attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=mask)
        weights = ops.squeeze(weights, 1)  # (Q, K)
        vals = values if len(values.shape) == 2 else values[None, :]
        output = ops.sum(weights * vals, axis=-1)
        return (output, weights) if return_attention_scores else output

    def compute_mask(self, queries, keys=None, values=None, valid_lens=None, mask=None,
                     **kwargs):
        # `mask` selects keys, it is no Keras padding mask: defining compute_mask makes Keras
        # accept it without a "does not support masking" warning; the output gets no mask.
        return None

    def get_config(self):
        return {**super().get_config(), "learnable": self.learnable}
