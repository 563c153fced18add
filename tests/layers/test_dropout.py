"""Dropout with 16-bit decisions: statistics against the binomial reference, scaling,
gradients, shapes, dtypes, XLA, seeds, serialization and bad arguments.

Reference (written here): each element is dropped independently with probability
``q = round(rate * 65536) / 65536`` and kept ones are scaled by ``1 / (1 - q)``, so with
n elements the number dropped is Binomial(n, q); checks allow 6 standard deviations.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.layers import Dropout
from keras_attn.layers.dropout import dropout16, quantized_rate


def drop_stats(y, x):
    dropped = (y == 0)
    return dropped.mean(), y[~dropped] / x[~dropped]


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.5, 0.9])
def test_drop_fraction_and_scale_match_binomial(rate):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (64, 128, 64)).astype("float32")
    y = Dropout(rate, seed=3)(x, training=True).numpy()
    q = quantized_rate(rate)
    n = x.size
    frac, scale = drop_stats(y, x)
    assert abs(frac - q) <= 6 * np.sqrt(q * (1 - q) / n)
    # 1 / (1 - q) in float32, x times it, y / x: three float32 roundings
    lc.assert_close(scale, np.full(scale.shape, 1 / (1 - q)), terms=3)


def test_quantized_rate():
    assert quantized_rate(0.1) == 6554 / 65536
    assert quantized_rate(0.5) == 0.5
    assert abs(quantized_rate(0.1) - 0.1) < 1 / 65536


def test_expectation_is_preserved():
    x = np.ones((256, 4096), "float32")
    y = Dropout(0.3, seed=1)(x, training=True).numpy()
    # mean of n iid values with mean 1 and variance q / (1 - q)
    q = quantized_rate(0.3)
    assert abs(y.mean() - 1.0) <= 6 * np.sqrt(q / (1 - q) / x.size)


def test_neighbours_are_independent():
    """The two 16-bit halves of one random word decide adjacent elements."""
    x = np.ones((512, 2048), "float32")
    dropped = Dropout(0.5, seed=7)(x, training=True).numpy() == 0
    even, odd = dropped[:, 0::2].ravel(), dropped[:, 1::2].ravel()
    n = even.size
    both = (even & odd).mean()
    assert abs(both - 0.25) <= 6 * np.sqrt(0.25 * 0.75 / n)
    corr = np.corrcoef(even, odd)[0, 1]
    assert abs(corr) <= 6 / np.sqrt(n)
    # rows are not copies of each other either
    assert abs(np.corrcoef(dropped[0], dropped[1])[0, 1]) < 0.2


def test_inference_and_zero_rate_are_identity():
    x = np.random.default_rng(1).standard_normal((3, 5, 8)).astype("float32")
    layer = Dropout(0.5)
    np.testing.assert_array_equal(layer(x).numpy(), x)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
    zero = Dropout(0.0)
    assert zero.seed_generator is None
    np.testing.assert_array_equal(zero(x, training=True).numpy(), x)
    # a rate below half a level is realised as no dropout at all
    np.testing.assert_array_equal(dropout16(tf.constant(x), 1e-6, tf.constant([1, 2])), x)


def test_gradient_is_the_mask_times_scale():
    x = tf.constant(np.random.default_rng(2).uniform(1, 2, (4, 6, 10)).astype("float32"))
    layer = Dropout(0.4, seed=5)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * 3.0)
    grad = tape.gradient(loss, x).numpy()
    q = quantized_rate(0.4)
    expected = np.where(y.numpy() == 0, 0.0, 3.0 / (1 - q))
    lc.assert_close(grad, expected, terms=2)  # 1 / (1 - q) in float32, times 3


@pytest.mark.parametrize("shape", [(3, 5, 7), (1,), (2, 1), (4, 3, 2, 9)])
def test_odd_and_small_shapes(shape):
    x = np.ones(shape, "float32")
    y = Dropout(0.5, seed=2)(x, training=True).numpy()
    assert y.shape == shape
    assert set(np.unique(y)) <= {0.0, 2.0}


def test_dynamic_shapes_and_xla():
    layer = Dropout(0.5, seed=4)
    spec = tf.TensorSpec((None, None, None), tf.float32)

    @tf.function(input_signature=[spec])
    def dynamic(x):
        return layer(x, training=True)

    @tf.function(jit_compile=True)
    def compiled(x):
        return layer(x, training=True)

    for shape in [(2, 3, 4), (2, 3, 5)]:  # even and odd last axis through one trace
        y = dynamic(tf.ones(shape)).numpy()
        assert y.shape == shape and set(np.unique(y)) <= {0.0, 2.0}
    y = compiled(tf.ones((8, 16, 32))).numpy()
    assert set(np.unique(y)) == {0.0, 2.0}
    assert 0.3 < (y == 0).mean() < 0.7


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 5), (3, 5, 7), (1, 1, 1)])
def test_same_seed_same_mask_with_static_or_dynamic_shapes(shape):
    """One stream whatever is known at trace time: eager, partly and fully dynamic agree."""
    x = tf.ones(shape)
    seed = tf.constant([7, 11], tf.int32)
    eager = dropout16(x, 0.5, seed).numpy()
    for spec in [(None, None, shape[2]), (None, shape[1], None), (None, None, None)]:
        fn = tf.function(lambda t: dropout16(t, 0.5, seed),
                         input_signature=[tf.TensorSpec(spec, tf.float32)])
        np.testing.assert_array_equal(fn(x).numpy(), eager)
        # No cond on the parity of the shape: it sat on the training step's critical path.
        ops = {op.type for op in fn.get_concrete_function().graph.get_operations()}
        assert not ops & {"If", "StatelessIf", "Switch", "Merge"}, ops


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_dtypes(dtype):
    x = tf.ones((16, 64), dtype)
    y = Dropout(0.5, seed=1, dtype=dtype)(x, training=True)
    assert y.dtype == x.dtype
    assert set(np.unique(tf.cast(y, "float32").numpy())) == {0.0, 2.0}


def test_mixed_precision_policy():
    layer = Dropout(0.25, seed=1, dtype="mixed_bfloat16")
    y = layer(tf.ones((8, 32)), training=True)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"


def test_seeds():
    x = np.ones((8, 64), "float32")
    a, b = Dropout(0.5, seed=11), Dropout(0.5, seed=11)
    first = a(x, training=True).numpy()
    np.testing.assert_array_equal(first, b(x, training=True).numpy())
    assert not np.array_equal(first, a(x, training=True).numpy())  # the generator advances
    stateless = dropout16(tf.constant(x), 0.5, tf.constant([3, 4]))
    np.testing.assert_array_equal(stateless, dropout16(tf.constant(x), 0.5, tf.constant([3, 4])))


def test_serialization_round_trip():
    layer = Dropout(0.2, seed=9, name="drop")
    restored = Dropout.from_config(layer.get_config())
    assert (restored.rate, restored.seed, restored.name) == (0.2, 9, "drop")
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(again, Dropout) and again.rate == 0.2
    with pytest.raises(ValueError, match="bogus"):
        Dropout.from_config({**layer.get_config(), "bogus": 1})


@pytest.mark.parametrize("rate", [1.0, -0.1, "0.5", True, None])
def test_bad_rate(rate):
    with pytest.raises(ValueError, match="rate"):
        Dropout(rate)


@pytest.mark.parametrize("seed", ["1", 1.5, True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        Dropout(0.1, seed=seed)


def test_masks_propagate():
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 4, mask_zero=True)(inputs)
    y = Dropout(0.1)(x)
    assert y._keras_mask is not None


@pytest.mark.parametrize("op, dtype", [("StatelessRandomUniformFullIntV2", "uint32"),
                                       ("GreaterEqual", "uint16"), ("SelectV2", "float32"),
                                       ("SelectV2", "float16"), ("SelectV2", "bfloat16"),
                                       ("TensorScatterSub", "float32")])
def test_ops_of_the_fast_paths_have_gpu_kernels(op, dtype):
    """No GPU here: check the installed TensorFlow registers GPU kernels for the ops the
    dropout and the loss gradient use, so they are not silently placed on the host."""
    from tensorflow.python.framework import kernels

    registered = [k for k in kernels.get_registered_kernels_for_op(op).kernel
                  if k.device_type == "GPU"]
    if not registered:
        pytest.skip("this TensorFlow build has no GPU kernels at all")
    types = {tf.dtypes.as_dtype(t).name for k in registered for c in k.constraint
             for t in c.allowed_values.list.type}
    assert dtype in types


def test_noise_shape_shares_decisions():
    x = np.ones((64, 5, 32), "float32")
    y = Dropout(0.5, seed=3, noise_shape=(None, 1, None))(x, training=True).numpy()
    assert (y == y[:, :1, :]).all()  # the same decision along axis 1
    assert 0.3 < (y[:, 0] == 0).mean() < 0.7
    spec = tf.TensorSpec((None, None, 32), tf.float32)
    layer = Dropout(0.5, seed=3, noise_shape=(None, 1, None))
    dynamic = tf.function(lambda t: layer(t, training=True), input_signature=[spec])
    y = dynamic(tf.ones((4, 7, 32))).numpy()
    assert (y == y[:, :1, :]).all()
    config = layer.get_config()
    assert Dropout.from_config(config).noise_shape == (None, 1, None)


@pytest.mark.parametrize("noise_shape", [(0, 1), "x", (1.5,), (True,)])
def test_bad_noise_shape(noise_shape):
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=noise_shape)


def test_noise_shape_of_wrong_rank():
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=(1, None))(np.ones((2, 3, 4), "float32"), training=True)
