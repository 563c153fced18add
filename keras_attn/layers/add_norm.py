"""Residual connection followed by layer normalization."""
import keras

from keras_attn.layers import _checks
from keras_attn.layers._step import layer_norm
from keras_attn.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_attn")
class AddNorm(keras.layers.Layer):
    """``ln(dropout(y) + x)``: the post-norm residual of the paper.

    Args:
        dropout: rate applied to the sub-layer output ``y`` while training.
        epsilon: LayerNorm epsilon (1e-5 as in PyTorch).

    Sub-layers: ``ln`` (``keras.layers.LayerNormalization``, weights ``gamma``, ``beta``).

    Call arguments: ``x`` the residual input, ``y`` the sub-layer output, same shape.

    Example:
        >>> AddNorm(0.5)(np.ones((2, 3, 4)), np.ones((2, 3, 4))).shape   # (2, 3, 4)

    References: Vaswani et al. 2017, section 5.4; D2L 11.7.3.
    """

    def __init__(self, dropout=0.0, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.dropout = _checks.check_rate("dropout", dropout)
        if not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(f"`epsilon` must be a positive float. Received: epsilon={epsilon!r}")
        self.epsilon = float(epsilon)
        self.supports_masking = True

    def build(self, x_shape, y_shape=None):
        self.ln = keras.layers.LayerNormalization(epsilon=self.epsilon, name="ln",
                                                  dtype=self.dtype_policy)
        self.ln.build(x_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, x, y, training=None):
        if tuple(x.shape) != tuple(y.shape) and None not in tuple(x.shape) + tuple(y.shape):
            raise ValueError(
                "`x` and `y` must have the same shape. "
                f"Received: x with shape={tuple(x.shape)}, y with shape={tuple(y.shape)}"
            )
        return layer_norm(self.ln, self.dropout_layer(y, training=training) + x)

    def residual(self, x, sublayer, training=None, norm_first=False):
        """Apply ``sublayer`` with this residual: post-norm ``ln(x + drop(f(x)))`` or
        pre-norm ``x + drop(f(ln(x)))`` (the Annotated Transformer's ``SublayerConnection``)."""
        if norm_first:
            return x + self.dropout_layer(sublayer(layer_norm(self.ln, x)), training=training)
        return self.call(x, sublayer(x), training=training)

    def compute_output_shape(self, x_shape, y_shape=None):
        return x_shape

    def compute_mask(self, x, y=None, mask=None, **kwargs):
        x_mask = kwargs.get("x_mask")
        return getattr(x, "_keras_mask", None) if x_mask is None else x_mask

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout, "epsilon": self.epsilon}
