"""keras_attn.layers.nadaraya_watson: ``NadarayaWatson`` against NumPy's
softmax(-((q - k) w)^2 / 2) . v, D2L 11.2's training setup (each point attends to the
others), the learnable bandwidth, masks, config / .keras / XLA, float16 and bad arguments."""
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.layers import NadarayaWatson

np_ = lc.as_numpy


def _nw_data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.random(n) * 5).astype("float32")
    y = (2 * np.sin(x) + x ** 0.8 + rng.normal(0, 0.5, n)).astype("float32")
    return x, y


def np_nadaraya_watson(queries, keys, values, w=1.0):
    keys = keys if keys.ndim == 2 else np.broadcast_to(keys, (len(queries), len(keys)))
    values = values if values.ndim == 2 else np.broadcast_to(values, keys.shape)
    weights = lc.np_softmax_keep(-((queries[:, None] - keys) * w) ** 2 / 2, True)
    return (weights * values).sum(-1), weights


def nw_terms(num_keys):
    """Roundings of Nadaraya-Watson's weights and output (``lc.tolerance``): three
    elementwise steps of the score (difference, times w, square and halve), the softmax
    over ``num_keys``, then the weighted sum over ``num_keys`` values."""
    return 3 + num_keys, 3 + 2 * num_keys


@pytest.mark.parametrize("learnable", [False, True])
def test_nadaraya_watson_shared_keys(learnable):
    x, y = _nw_data()
    queries = np.arange(0, 5, 0.5, dtype="float32")
    out, weights = np_(NadarayaWatson(learnable=learnable)(queries, x, y,
                                                           return_attention_scores=True))
    expected_out, expected_weights = np_nadaraya_watson(queries, x, y)  # w starts at 1.0
    assert out.shape == (10,) and weights.shape == (10, 8)
    w_terms, out_terms = nw_terms(8)
    lc.assert_close(weights, expected_weights, terms=w_terms)
    lc.assert_close(out, expected_out, terms=out_terms)


def test_nadaraya_watson_per_query_keys_d2l_training_setup():
    """D2L 11.2.4: each training point attends to all the other points."""
    x, y = _nw_data()
    n = len(x)
    others = ~np.eye(n, dtype=bool)
    keys, values = x[None].repeat(n, 0)[others].reshape(n, n - 1), \
        y[None].repeat(n, 0)[others].reshape(n, n - 1)
    layer = NadarayaWatson(learnable=True)
    out = np_(layer(x, keys, values))
    terms = nw_terms(n - 1)[1]
    lc.assert_close(out, np_nadaraya_watson(x, keys, values)[0], terms=terms)
    layer.w.assign(2.5)
    out = np_(layer(x, keys, values))
    lc.assert_close(out, np_nadaraya_watson(x, keys, values, 2.5)[0], terms=terms)


def test_nadaraya_watson_learnable_weight():
    x, y = _nw_data()
    layer = NadarayaWatson(learnable=True)
    layer(x, x, y)
    assert [w.path.split("/")[-1] for w in layer.trainable_weights] == ["w"]
    assert float(layer.w.numpy()) == 1.0 and layer.w.shape == ()
    (grad,) = lc.check_grads_finite(lambda: layer(x[:4], x, y) - y[:4], [layer.w])
    assert float(grad) != 0
    # One SGD step moves w; the fixed-bandwidth layer has no weights at all.
    keras.optimizers.SGD(0.01).apply([grad], [layer.w])
    assert float(layer.w.numpy()) != 1.0
    fixed = NadarayaWatson()
    fixed(x, x, y)
    assert fixed.weights == []


def test_nadaraya_watson_mask_and_valid_lens_drop_keys():
    x, y = _nw_data()
    queries = np.array([0.5, 2.0, 4.0], "float32")
    keep = np.array([1, 0, 1, 1, 0, 1, 1, 0], bool)
    layer = NadarayaWatson()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `mask` is not a Keras padding mask: no warning
        got = np_(layer(queries, x, y, mask=keep))
    terms = nw_terms(len(x))[1]
    lc.assert_close(got, np_nadaraya_watson(queries, x[keep], y[keep])[0], terms=terms)
    got = np_(layer(queries, x, y, valid_lens=np.array([3, 8, 5])))
    for i, n in enumerate([3, 8, 5]):
        lc.assert_close(got[i], np_nadaraya_watson(queries[i:i + 1], x[:n], y[:n])[0][0],
                        terms=terms)


@pytest.mark.parametrize("learnable", [False, True])
def test_nadaraya_watson_config_save_load_xla(learnable, tmp_path):
    x, y = _nw_data()
    queries = np.arange(0, 5, 0.5, dtype="float32")
    layer = NadarayaWatson(learnable=learnable, name="nw")
    terms = nw_terms(len(x))[1]
    clone = lc.check_config_round_trip(layer, queries, x, y, terms=terms)
    assert clone.learnable is learnable
    if learnable:
        layer.w.assign(1.7)
    q_in, k_in = keras.Input(batch_shape=(None,)), keras.Input(batch_shape=(None,))
    v_in = keras.Input(batch_shape=(None,))
    model = keras.Model([q_in, k_in, v_in], layer(q_in, k_in, v_in))
    loaded = lc.check_save_load(model, [queries, x, y], tmp_path, terms=terms)
    if learnable:  # a float32 variable is saved and loaded bit for bit
        assert float(loaded.get_layer("nw").w.numpy()) == float(np.float32(1.7))
    lc.check_jit(lambda q, k, v: layer(q, k, v), *(tf.constant(a) for a in (queries, x, y)),
                 terms=terms)


def test_nadaraya_watson_mixed_float16():
    x, y = _nw_data()
    # per query: the kernel's few elementwise roundings, a softmax and a weighted sum over
    # the keys
    lc.check_mixed_float16(lambda: NadarayaWatson(learnable=True), x, x, y,
                           terms=2 * len(x) + 6)


@pytest.mark.parametrize("queries, keys, values, words", [
    (np.zeros(3), np.zeros(4), np.zeros(5), ["keys", "values", "(4,)", "(5,)"]),
    (np.zeros((3, 1)), np.zeros(4), np.zeros(4), ["queries", "(3, 1)"]),
    (np.zeros(3), np.zeros((3, 4, 1)), np.zeros((3, 4, 1)), ["keys", "(3, 4, 1)"]),
    (np.zeros(3), np.zeros((2, 4)), np.zeros((2, 4)), ["queries", "keys", "(2, 4)"]),
])
def test_nadaraya_watson_bad_arguments(queries, keys, values, words):
    with pytest.raises(ValueError) as info:
        NadarayaWatson()(queries.astype("float32"), keys.astype("float32"),
                         values.astype("float32"))
    assert "Received" in str(info.value)
    for word in words:
        assert word in str(info.value)
