"""Position-wise feed-forward network."""
import keras

from keras_attn.layers import _checks
from keras_attn.layers._step import dense
from keras_attn.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionWiseFFN(keras.layers.Layer):
    """``dense2(dropout(activation(dense1(x))))``, the same MLP at every position.

    Args:
        ffn_num_hiddens: width of the hidden layer.
        ffn_num_outputs: output width (the model width).
        activation: hidden activation (``"relu"`` as in the paper).
        dropout: rate after the activation while training (as in
            ``torch.nn.TransformerEncoderLayer``).

    Sub-layers: ``dense1``, ``dense2`` (Dense with biases).

    Example:
        >>> PositionWiseFFN(4, 8)(np.ones((2, 3, 4))).shape   # (2, 3, 8)

    References: Vaswani et al. 2017, section 3.3; D2L 11.7.2.
    """

    def __init__(self, ffn_num_hiddens, ffn_num_outputs, activation="relu", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.ffn_num_hiddens = _checks.check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
        self.ffn_num_outputs = _checks.check_positive_int("ffn_num_outputs", ffn_num_outputs)
        self.activation = activation
        self.dropout = _checks.check_rate("dropout", dropout)
        self.supports_masking = True

    def build(self, input_shape):
        self.dense1 = keras.layers.Dense(self.ffn_num_hiddens, activation=self.activation,
                                         name="dense1", dtype=self.dtype_policy)
        self.dense2 = keras.layers.Dense(self.ffn_num_outputs, name="dense2",
                                         dtype=self.dtype_policy)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.dense1.build(input_shape)
        self.dense2.build(tuple(input_shape[:-1]) + (self.ffn_num_hiddens,))
        self.built = True

    def call(self, x, training=None):
        _checks.check_rank("x", x, 3)
        hidden = self.dropout_layer(dense(self.dense1, x), training=training)
        return dense(self.dense2, hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.ffn_num_outputs,)

    def get_config(self):
        return {**super().get_config(), "ffn_num_hiddens": self.ffn_num_hiddens,
                "ffn_num_outputs": self.ffn_num_outputs,
                "activation": keras.activations.serialize(keras.activations.get(self.activation))
                if not isinstance(self.activation, str) else self.activation,
                "dropout": self.dropout}
