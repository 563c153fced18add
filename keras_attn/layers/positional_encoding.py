"""Positional information: the sinusoidal table and learned position embeddings."""
import keras
import numpy as np
from keras import ops

from keras_attn.layers import _checks
from keras_attn.layers.dropout import Dropout


def sinusoidal_table(max_len, num_hiddens):
    """``P[i, 2j] = sin(i / 10000^(2j/d))``, ``P[i, 2j+1] = cos(i / 10000^(2j/d))``; (L, d)."""
    positions = np.arange(max_len, dtype=np.float64)[:, None]
    freqs = np.power(10000.0, np.arange(0, num_hiddens, 2, dtype=np.float64) / num_hiddens)
    angles = positions / freqs  # (L, ceil(d/2))
    table = np.zeros((max_len, num_hiddens))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : num_hiddens // 2])
    return table.astype("float32")


class _PositionBase(keras.layers.Layer):
    """Shared by both position layers: argument checks, the ``max_len`` guard, dropout."""

    def __init__(self, max_len=1000, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.max_len = _checks.check_positive_int("max_len", max_len)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.supports_masking = True

    def _check_length(self, x, start_index):
        _checks.check_rank("inputs", x, 3)
        length = x.shape[1]
        if (length is not None and isinstance(start_index, int)
                and length + start_index > self.max_len):
            raise ValueError(
                f"Sequence length {length + start_index} exceeds the positional table's "
                f"`max_len`. Received: max_len={self.max_len}, inputs with shape={tuple(x.shape)}"
            )
        if length is None:  # only TensorFlow traces with unknown lengths
            from keras_attn.kernels import tf_ops

            tf_ops.assert_length_at_most(
                ops.shape(x)[1] + start_index, self.max_len,
                f"sequence longer than the positional table's max_len={self.max_len}")

    def call(self, inputs, training=None, start_index=0):
        self._check_length(inputs, start_index)
        table = ops.cast(self._table(), inputs.dtype)
        length, width = ops.shape(inputs)[1], ops.shape(table)[1]
        positions = ops.slice(table, (start_index, 0), (length, width))
        return self.dropout_layer(inputs + positions[None], training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        return {**super().get_config(), "max_len": self.max_len, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionalEncoding(_PositionBase):
    """Sinusoidal positional encoding: returns ``dropout(x + P[:L])``.

    Args:
        max_len: the longest sequence the table covers.
        dropout: rate applied to the sum while training.

    Call arguments:
        inputs: ``(B, L, d)``.
        start_index: position of the first element (for step-by-step decoding).

    Example:
        >>> PositionalEncoding(max_len=1000)(np.zeros((1, 60, 32))).shape   # (1, 60, 32)

    References: Vaswani et al. 2017, section 3.5; D2L 11.6.3.
    """

    def build(self, input_shape):
        self.table = ops.convert_to_tensor(sinusoidal_table(self.max_len, input_shape[-1]))
        self.built = True

    def _table(self):
        return self.table


@keras.saving.register_keras_serializable(package="keras_attn")
class LearnedPositionalEmbedding(_PositionBase):
    """Trainable position embeddings added to the inputs: ``dropout(x + E[:L])``.

    Args:
        max_len: number of positions that have an embedding.
        dropout: rate applied to the sum while training.

    Weights: ``embeddings`` ``(max_len, d)``.

    Example:
        >>> LearnedPositionalEmbedding(max_len=128)(np.zeros((2, 10, 16))).shape  # (2, 10, 16)

    References: Gehring et al. 2017; Devlin et al. 2019 (BERT).
    """

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.max_len, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02), trainable=True)
        self.built = True

    def _table(self):
        return self.embeddings
