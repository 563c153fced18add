"""Masked token-level loss and accuracy for sequence models (padding id 0 ignored)."""
import keras
from keras import ops

from keras_attn.kernels import fastpath

PAD_ID = 0


def masked_cross_entropy(y_true, logits, label_smoothing=0.0, pad_id=PAD_ID, jit_compile=True):
    """Mean over real tokens of the (label-smoothed) cross-entropy, computed in float32.

    With smoothing ``eps`` the per-token loss is ``(1 - eps) * (-log p_y) + eps *
    mean_k(-log p_k)``. On TensorFlow's fast path the loss and its gradient are written out
    (:func:`keras_attn.kernels.tf_ops.masked_cross_entropy`).

    Args:
        y_true: int ``(B, T)``, ``pad_id`` where there is no token; other ids in ``[0, V)``.
        logits: ``(B, T, V)``.
        label_smoothing: ``eps`` in [0, 1). pad_id: target id that is ignored.
        jit_compile: fuse the fast path's passes over the logits with XLA.
    Returns: scalar; 0 when the batch has no real token.
    """
    y_true = ops.cast(y_true, "int32")
    logits = ops.cast(logits, "float32")
    eps, pad_id = float(label_smoothing), int(pad_id)
    if fastpath.enabled():
        from keras_attn.kernels import tf_ops

        return tf_ops.masked_cross_entropy(logits, y_true, eps, pad_id, bool(jit_compile))
    real = ops.not_equal(y_true, pad_id)
    mask = ops.cast(real, "float32")
    labels = ops.where(real, y_true, ops.zeros_like(y_true))
    log_probs = ops.log_softmax(logits, axis=-1)
    nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)
    if eps:
        nll = (1.0 - eps) * nll - eps * ops.mean(log_probs, axis=-1)
    return ops.sum(nll * mask) / ops.maximum(ops.sum(mask), 1.0)


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy from logits, averaged over non-padding tokens.

    Args:
        label_smoothing: ``eps`` in [0, 1) (0.1 in the paper).
        pad_id: target id that is ignored.
        jit_compile: on the fast path, XLA kernels (default) or TensorFlow ops only.
    Example:
        >>> model.compile("adam", loss=MaskedSparseCategoricalCrossentropy(0.1))
    """

    def __init__(self, label_smoothing=0.0, pad_id=PAD_ID, jit_compile=True,
                 name="masked_sparse_ce", **kwargs):
        if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float))
                or not 0 <= label_smoothing < 1):
            raise ValueError("`label_smoothing` must be in [0, 1). "
                             f"Received: label_smoothing={label_smoothing!r}")
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)
        self.jit_compile = bool(jit_compile)

    def call(self, y_true, y_pred):
        return masked_cross_entropy(y_true, y_pred, self.label_smoothing, self.pad_id,
                                    self.jit_compile)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing,
                "pad_id": self.pad_id, "jit_compile": self.jit_compile}


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedAccuracy(keras.metrics.Metric):
    """Token accuracy over non-padding positions, accumulated over batches.

    Example:
        >>> model.compile("adam", loss=..., metrics=[MaskedAccuracy()])
    """

    def __init__(self, pad_id=PAD_ID, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.correct = self.add_weight(name="correct", initializer="zeros")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        pred = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        self.correct.assign_add(ops.sum(ops.cast(ops.equal(pred, y_true), "float32") * mask))
        self.count.assign_add(ops.sum(mask))

    def result(self):
        return self.correct / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
