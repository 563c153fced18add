"""Masked token loss and accuracy against NumPy on tiny padded batches.

Reference (written here): with target distribution ``q = (1 - eps) * one_hot(y) + eps / V``
the token loss is ``-sum_k q_k log softmax(z)_k``; the batch loss is its mean over the
non-padding tokens (id 0) only.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.training.losses import (MaskedAccuracy, MaskedSparseCategoricalCrossentropy,
                               masked_cross_entropy)

V = 5
Y = np.array([[3, 1, 4, 0], [2, 0, 0, 0]], "int32")  # 4 real tokens, 4 padding
LOGITS = np.random.default_rng(0).standard_normal((2, 4, V)).astype("float32") * 2


def np_loss(y, logits, eps=0.0, pad=0):
    z = np.asarray(logits, np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    q = (1 - eps) * np.eye(V)[y] + eps / V
    per_token = -(q * log_p).sum(-1)
    real = y != pad
    return per_token[real].sum() / real.sum() if real.any() else 0.0


def np_accuracy(y, logits):
    real = y != 0
    return (np.asarray(logits).argmax(-1) == y)[real].sum(), real.sum()


def f(x):
    return float(keras.ops.convert_to_numpy(x))


def loss_terms(y):
    """Roundings of the float32 loss (``terms`` of lc.tolerance): per token a log-softmax
    over V (max, subtract, exp, the sum over V, log, subtract) and the target's sum over
    V; then the mean over the batch's positions."""
    return 2 * V + 5 + np.size(y)


def loss_scale(logits):
    """What the loss's roundings are relative to: the largest log-probability summed,
    |log softmax(z)_k| <= max(z) - min(z) + log(V)."""
    z = np.asarray(logits, np.float64)
    return float(np.ptp(z, -1).max() + np.log(z.shape[-1])) if z.size else 0.0


def assert_loss(actual, expected, y, logits):
    lc.assert_close(f(actual), expected, terms=loss_terms(y), scale=loss_scale(logits))


JIT = pytest.mark.parametrize("jit", [True, False], ids=["xla-kernels", "tf-ops"])


@JIT
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_matches_numpy(eps, jit):
    expected = np_loss(Y, LOGITS, eps)
    assert_loss(masked_cross_entropy(Y, LOGITS, label_smoothing=eps, jit_compile=jit), expected,
                Y, LOGITS)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=eps, jit_compile=jit)
    assert_loss(loss(Y, LOGITS), expected, Y, LOGITS)
    # Padding logits do not matter; real ones do.
    junk = LOGITS.copy()
    junk[Y == 0] = 50.0
    assert_loss(loss(Y, junk), expected, Y, LOGITS)  # the real tokens' logits
    junk[0, 0, 0] = 50.0
    assert f(loss(Y, junk)) > expected + 1


def test_loss_hand_values():
    """Uniform logits: -log(1/V) per token, smoothed or not; a confident right answer: ~0."""
    zeros = np.zeros((2, 4, V))
    assert_loss(masked_cross_entropy(Y, zeros), np.log(V), Y, zeros)
    assert_loss(masked_cross_entropy(Y, zeros, 0.1), np.log(V), Y, zeros)
    # Two tokens, logits favour the right one by log(3): p = 3/(3 + V - 1) each.
    y = np.array([[1, 2, 0]], "int32")
    z = np.zeros((1, 3, V), "float32")
    z[0, 0, 1] = z[0, 1, 2] = np.log(3.0)
    assert_loss(masked_cross_entropy(y, z), -np.log(3 / (3 + V - 1)), y, z)
    # Smoothing 0.1: 0.9 * -log(3/7) + 0.1 * mean_k(-log p_k), p = (3/7, 1/7 x 4).
    smoothed = 0.9 * -np.log(3 / 7) + 0.1 * (-np.log(3 / 7) - 4 * np.log(1 / 7)) / V
    assert_loss(masked_cross_entropy(y, z, 0.1), smoothed, y, z)


def test_loss_is_mean_over_real_tokens_not_positions():
    """Appending padding (more positions, same tokens) leaves the loss unchanged."""
    padded_y = np.pad(Y, ((0, 0), (0, 3)))
    padded_logits = np.pad(LOGITS, ((0, 0), (0, 3), (0, 0)), constant_values=7.0)
    assert_loss(masked_cross_entropy(padded_y, padded_logits),
                f(masked_cross_entropy(Y, LOGITS)), padded_y, LOGITS)


@JIT
def test_all_padding_batch_gives_zero_loss_and_finite_gradient(jit):
    y = np.zeros((2, 3), "int32")
    logits = tf.constant(LOGITS[:, :3])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = MaskedSparseCategoricalCrossentropy(0.1, jit_compile=jit)(y, logits)
    grad = tape.gradient(loss, logits).numpy()
    assert f(loss) == 0.0
    assert np.all(np.isfinite(grad)) and not grad.any()


def test_loss_in_float16_logits():
    expected = np_loss(Y, LOGITS)
    loss = masked_cross_entropy(Y, LOGITS.astype("float16"))
    assert keras.backend.standardize_dtype(loss.dtype) == "float32"
    # The logits rounded to float16 (<= eps/2 of the largest each): a log-probability moves
    # by its logit's rounding and its row normalizer's, at most twice that (factor 1: the
    # bound times 2); the float32 arithmetic after it is far below.
    lc.assert_close(f(loss), expected, terms=2, factor=1, dtype="float16",
                    scale=np.abs(LOGITS).max())


def test_custom_pad_id():
    y = np.where(Y == 0, 1, np.where(Y == 1, 0, Y)).astype("int32")  # swap the roles of 0 and 1
    loss = MaskedSparseCategoricalCrossentropy(pad_id=1)
    assert_loss(loss(y, LOGITS), np_loss(y, LOGITS, pad=1), y, LOGITS)


@pytest.mark.parametrize("eps", [-0.1, 1.0, 1.5, float("nan"), "0.1"])
def test_bad_label_smoothing(eps):
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=eps)


def test_masked_accuracy_accumulates():
    rng = np.random.default_rng(1)
    y2 = np.array([[4, 4, 2, 1, 0, 0]], "int32")
    logits2 = rng.standard_normal((1, 6, V)).astype("float32")
    logits2[0, 0, 4] = 10.0  # at least one right, one wrong
    logits2[0, 1, 0] = 10.0
    metric = MaskedAccuracy()
    metric.update_state(Y, LOGITS)
    c1, n1 = np_accuracy(Y, LOGITS)
    # float32 counts are exact; the one division rounds once
    lc.assert_close(f(metric.result()), c1 / n1, terms=1)
    metric.update_state(y2, logits2)
    c2, n2 = np_accuracy(y2, logits2)
    assert n1 + n2 == 8
    lc.assert_close(f(metric.result()), (c1 + c2) / (n1 + n2), terms=1)
    assert 0 < (c1 + c2) < (n1 + n2)  # a value that can tell right from wrong
    metric.reset_state()
    assert f(metric.result()) == 0.0
    metric.update_state(np.zeros((2, 3), "int32"), LOGITS[:, :3])  # all padding
    assert f(metric.result()) == 0.0 and np.isfinite(f(metric.result()))


def test_masked_accuracy_ignores_padding_predictions():
    y = np.array([[1, 2, 0, 0]], "int32")
    z = np.zeros((1, 4, V), "float32")
    z[0, 0, 1] = z[0, 1, 2] = 1.0  # both real tokens right; padding predicts class 0
    metric = MaskedAccuracy()
    metric.update_state(y, z)
    assert f(metric.result()) == 1.0
    z[0, 1, 2] = -1.0  # now predicts 0 at a real token: wrong
    metric.update_state(y, z)
    lc.assert_close(f(metric.result()), 3 / 4, terms=1)


def test_config_round_trip():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, MaskedSparseCategoricalCrossentropy)
    assert restored.get_config() == loss.get_config()
    assert restored.label_smoothing == 0.1 and restored.jit_compile
    plain = MaskedSparseCategoricalCrossentropy(jit_compile=False)
    assert keras.losses.deserialize(keras.losses.serialize(plain)).jit_compile is False
    metric = MaskedAccuracy(name="acc")
    restored = keras.metrics.deserialize(keras.metrics.serialize(metric))
    assert isinstance(restored, MaskedAccuracy) and restored.name == "acc"
    assert restored.get_config() == metric.get_config()


def test_compiled_model_reports_numpy_values():
    """Through ``model.evaluate``: the loss and metric equal the NumPy references."""
    inputs = keras.Input((4,), dtype="int32")
    # A "model" whose output is always LOGITS (batch of 2).
    outputs = keras.layers.Lambda(
        lambda t: keras.ops.cast(t, "float32")[..., None] * 0.0 + LOGITS)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(loss=MaskedSparseCategoricalCrossentropy(0.1), metrics=[MaskedAccuracy()])
    results = model.evaluate(Y, Y, batch_size=2, verbose=0, return_dict=True)
    c, n = np_accuracy(Y, LOGITS)
    assert_loss(results["loss"], np_loss(Y, LOGITS, 0.1), Y, LOGITS)  # one batch of 2
    lc.assert_close(results["masked_accuracy"], c / n, terms=1)


@JIT
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_matches_numpy(eps, jit):
    """d loss / d z = (softmax(z) - q) / n on real tokens, 0 on padding (q as above)."""
    z = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(z)
        loss = masked_cross_entropy(Y, z, label_smoothing=eps, jit_compile=jit)
    grad = tape.gradient(loss, z).numpy()
    p = np.exp(LOGITS - LOGITS.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = (1 - eps) * np.eye(V)[Y] + eps / V
    real = (Y != 0)[..., None]
    # the softmax over V (max, exp, sum, divide), minus q, over n
    lc.assert_close(grad, (p - q) * real / real.sum(), terms=V + 5)


@JIT
def test_gradient_agrees_with_finite_differences(jit):
    z = tf.constant(LOGITS.astype("float64"))
    theoretical, numerical = tf.test.compute_gradient(
        lambda t: masked_cross_entropy(Y, tf.cast(t, "float32"), 0.1, jit_compile=jit), [z])
    # Central differences of a float32 loss, step h = 1/1024 (compute_gradient's default):
    # the loss's rounding divided by the 2h between the two evaluations, plus the
    # truncation error h**2.
    h = 1 / 1024
    loss_rounding = lc.tolerance(0.0, terms=loss_terms(Y), scale=loss_scale(LOGITS))
    np.testing.assert_allclose(theoretical[0], numerical[0],
                               atol=loss_rounding / (2 * h) + h ** 2)


def test_gradient_under_xla_and_bfloat16():
    z = tf.constant(LOGITS)

    @tf.function(jit_compile=True)
    def grad(z, eps):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = masked_cross_entropy(Y, tf.cast(z, "bfloat16"), eps)
        return tape.gradient(loss, z)

    with tf.GradientTape() as tape:
        tape.watch(z)
        loss = masked_cross_entropy(Y, tf.cast(z, "bfloat16"), 0.1)
    # The gradient reaching the bfloat16 logits is bfloat16: the two float32 computations
    # round to it once each, so they differ by at most a bfloat16 rounding (factor 1:
    # twice that bound).
    lc.assert_close(grad(z, 0.1), tape.gradient(loss, z), terms=1, factor=1, dtype="bfloat16")


def test_out_of_range_target_ids_raise():
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size"):
        masked_cross_entropy(np.array([[1, V]], "int32"), LOGITS[:1, :2])
    with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
        masked_cross_entropy(np.array([[1, -2]], "int32"), LOGITS[:1, :2])


@JIT
def test_extreme_logits_stay_exact(jit):
    """A label 300 below the best logit: loss 300 + log(1 + ...), not inf; gradient finite."""
    z = np.zeros((1, 2, V), "float32")
    z[0, :, 0] = 300.0
    y = np.array([[2, 0]], "int32")
    zt = tf.constant(z)
    with tf.GradientTape() as tape:
        tape.watch(zt)
        loss = masked_cross_entropy(y, zt, jit_compile=jit)
    assert_loss(loss, 300.0, y, z)
    grad = tape.gradient(loss, zt).numpy()
    lc.assert_close(grad[0, 0], np.array([1, 0, -1, 0, 0]), terms=V + 5)
    assert not grad[0, 1].any()


def test_xla_kernels_and_tf_ops_agree_on_changing_shapes():
    """One traced function, logits shapes changing per call (XLA compiles per shape)."""
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, 50])]

    def value_and_grad(jit):
        @tf.function(input_signature=spec)
        def fn(y, z):
            with tf.GradientTape() as tape:
                tape.watch(z)
                loss = masked_cross_entropy(y, z, 0.1, jit_compile=jit)
            return loss, tape.gradient(loss, z)
        return fn

    fused, plain = value_and_grad(True), value_and_grad(False)
    rng = np.random.default_rng(3)
    for shape in [(3, 7), (2, 1), (5, 4), (1, 0)]:
        y = rng.integers(0, 50, shape).astype("int32")
        z = (rng.standard_normal(shape + (50,)) * 4).astype("float32")
        (a, ga), (b, gb) = fused(y, z), plain(y, z)
        # each side's roundings (50 classes here, not V)
        lc.assert_close(f(a), f(b), terms=2 * (2 * 50 + 5 + y.size), scale=loss_scale(z))
        lc.assert_close(ga, gb, terms=2 * (50 + 5))
        assert ga.shape == shape + (50,)


@pytest.mark.parametrize("jit", [True, False])
def test_jit_compile_puts_the_passes_over_the_logits_in_xla(jit):
    """The fast path is really taken: XLA-marked calls in the graph only with jit_compile."""
    @tf.function
    def fn(y, z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = MaskedSparseCategoricalCrossentropy(jit_compile=jit)(y, z)
        return tape.gradient(loss, z)

    graph = fn.get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                                     tf.TensorSpec([None, None, V])).graph
    funcs = [graph.as_graph_def().library.function]
    marked = [fn for lib in funcs for fn in lib if fn.attr["_XlaMustCompile"].b]
    marked += [n for n in graph.as_graph_def().node if n.attr["_XlaMustCompile"].b]
    assert bool(marked) == jit
