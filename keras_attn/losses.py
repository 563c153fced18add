"""Masked token-level loss and accuracy for sequence models (padding id 0 ignored)."""
import keras
import tensorflow as tf
from keras import ops

PAD_ID = 0


def masked_cross_entropy(y_true, logits, label_smoothing=0.0, pad_id=PAD_ID, jit_compile=True):
    """Mean over real tokens of the (label-smoothed) cross-entropy, computed in float32.

    With smoothing ``eps`` the target is ``(1 - eps) * one_hot + eps / V``, so the loss per
    token is ``(1 - eps) * (-log p_y) + eps * mean_k(-log p_k)``, i.e.
    ``logsumexp(z) - (1 - eps) * z_y - eps * mean_k(z_k)``.

    The gradient is written out, ``(softmax(z) - q) * weight``, instead of being derived
    through ``log_softmax`` and a one-hot product. With ``jit_compile=True`` (default) the
    forward pass (row max, ``sum(exp(z - max))``, the label's logit) and the gradient are
    two XLA-compiled kernels that read the ``(B, T, V)`` logits twice and write them once:
    on the benchmark model (vocabulary 8000, 2048 tokens) the loss and its gradient take
    ~35 % less time than with separate TensorFlow ops on CPU. XLA compiles once per new
    logits shape (~0.1 s on CPU); ``jit_compile=False`` uses TensorFlow ops only (same
    values to float32 round-off).

    Args:
        y_true: int ``(B, T)``, ``pad_id`` where there is no token; other ids must lie in
            ``[0, V)``.
        logits: ``(B, T, V)``.
        label_smoothing: ``eps`` in [0, 1). pad_id: target id that is ignored.
        jit_compile: fuse the passes over the logits with XLA (see above).
    Returns: scalar; 0 when the batch has no real token.
    """
    y_true = ops.cast(y_true, "int32")
    logits = ops.cast(logits, "float32")
    return _masked_ce(logits, y_true, float(label_smoothing), int(pad_id), bool(jit_compile))


def _ce_forward(flat, labels, eps):
    """Per row: ``logsumexp(z)``, and ``(1 - eps) z_y + eps mean(z)`` (the target's share)."""
    peak = tf.reduce_max(flat, axis=-1, keepdims=True)
    lse = tf.math.log(tf.reduce_sum(tf.exp(flat - peak), axis=-1, keepdims=True)) + peak
    target = tf.gather(flat, labels, batch_dims=1)
    if eps:
        target = (1.0 - eps) * target + eps * tf.reduce_mean(flat, axis=-1)
    return lse, target


def _ce_backward(flat, lse, labels, weight, eps):
    """``(softmax(z) - q) * weight`` with ``q = (1 - eps) one_hot(y) + eps / V``."""
    vocab = tf.shape(flat)[-1]
    dz = tf.exp(flat - lse) * weight
    if eps:
        dz = dz - weight * (eps / tf.cast(vocab, flat.dtype))
    hot = tf.equal(tf.range(vocab)[None, :], labels[:, None])
    return dz - tf.where(hot, weight * (1.0 - eps), tf.zeros_like(weight))


_ce_forward_xla = tf.function(_ce_forward, jit_compile=True, reduce_retracing=True)
_ce_backward_xla = tf.function(_ce_backward, jit_compile=True, reduce_retracing=True)


def _masked_ce(logits, y_true, eps, pad_id, jit_compile=True):
    vocab = tf.shape(logits)[-1]
    labels = tf.reshape(y_true, [-1])
    mask = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
    count = tf.maximum(tf.reduce_sum(mask), 1.0)
    safe = tf.where(tf.not_equal(labels, pad_id), labels, tf.zeros_like(labels))
    tf.debugging.assert_less(safe, vocab, message="target ids must be < the vocabulary size")
    tf.debugging.assert_non_negative(safe, message="target ids must be >= 0")
    forward, backward = ((_ce_forward_xla, _ce_backward_xla) if jit_compile
                         else (_ce_forward, _ce_backward))

    @tf.custom_gradient
    def loss_fn(z):
        flat = tf.reshape(z, [-1, vocab])
        lse, target = forward(flat, safe, eps)
        loss = tf.reduce_sum((lse[:, 0] - target) * mask) / count

        def grad(upstream):
            weight = (upstream * mask / count)[:, None]  # (N, 1)
            return tf.reshape(backward(flat, lse, safe, weight, eps), tf.shape(z))

        return loss, grad

    return loss_fn(logits)


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy from logits, averaged over non-padding tokens.

    Args:
        label_smoothing: ``eps`` in [0, 1) (0.1 in the paper).
        pad_id: target id that is ignored.
        jit_compile: compute the loss and its gradient with two XLA kernels (default; see
            :func:`masked_cross_entropy`), or with TensorFlow ops only.

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
