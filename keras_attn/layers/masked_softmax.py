"""The masked softmax as a layer."""
import keras

from keras_attn import ops as attn_ops


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSoftmax(keras.layers.Layer):
    """Softmax over the last axis with masked keys given exactly zero weight.

    Call arguments: as :func:`keras_attn.ops.masked_softmax`: ``scores`` ``(B, Q, K)`` or
    ``(B, H, Q, K)``, ``valid_lens``, ``mask``; returns weights of the scores' shape.

    Example:
        >>> MaskedSoftmax()(np.random.rand(2, 2, 4), valid_lens=np.array([2, 3]))

    References: D2L 11.3.2.
    """

    def call(self, scores, valid_lens=None, mask=None, training=None):
        return attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=mask)

    def compute_mask(self, scores, mask=None):
        # `mask` is an attention mask, not a Keras padding mask of `scores`: defining
        # compute_mask makes Keras accept it without a "does not support masking" warning;
        # the weights get no mask.
        return None

    def compute_output_shape(self, input_shape):
        return input_shape
