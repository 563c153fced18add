"""PositionalEncoding against the sinusoid formula (Vaswani et al. 2017, 3.5; D2L 11.6.3)
and LearnedPositionalEmbedding against its own ``embeddings`` weight."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.layers import (DotProductAttention, LearnedPositionalEmbedding,
                               PositionalEncoding)

LAYERS = {
    "sinusoidal": lambda max_len=16, dropout=0.0, **kw: PositionalEncoding(max_len, dropout, **kw),
    "learned": lambda max_len=16, dropout=0.0, **kw: LearnedPositionalEmbedding(max_len, dropout,
                                                                                 **kw),
}


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def sinusoid(length, d, start=0):
    """P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d)), float64."""
    p = np.zeros((length, d))
    for i in range(start, start + length):
        for col in range(d):
            j = col // 2
            angle = i / 10000 ** (2 * j / d)
            p[i - start, col] = np.sin(angle) if col % 2 == 0 else np.cos(angle)
    return p


def position_terms(name, last_position):
    """Roundings of ``x + P[i]`` for positions up to ``last_position`` (``terms`` of
    lc.tolerance). Learned: the add. Sinusoidal: the angle i / 10000^(2j/d) may be
    computed in float32 (a power and a division, a few eps relative: about 3 * i eps
    absolute), sin/cos pass an angle's absolute error on and round once, then the add."""
    return 1 if name == "learned" else 3 * (last_position + 1) + 2


def expected(layer, x, start=0):
    """``x + P[start:start+L]`` from the formula or from the layer's ``embeddings``."""
    length, d = x.shape[1], x.shape[2]
    if isinstance(layer, LearnedPositionalEmbedding):
        table = layer.embeddings.numpy()[start:start + length]
    else:
        table = sinusoid(length, d, start)
    return x + table[None]


# ---------------------------------------------------------------------------------- values

@pytest.mark.parametrize("d", [8, 7, 1])
@pytest.mark.parametrize("length", [1, 6])
def test_sinusoidal_matches_formula(length, d):
    x = rand(2, length, d)
    layer = PositionalEncoding(max_len=16)
    lc.assert_close(layer(x), expected(layer, x), terms=position_terms("sinusoidal", length))
    # On zeros the output is the table itself: row 0 is [0, 1, 0, 1, ...].
    table = lc.as_numpy(layer(np.zeros((1, length, d), "float32")))[0]
    lc.assert_close(table[0], np.array([0.0 if c % 2 == 0 else 1.0 for c in range(d)]),
                    terms=position_terms("sinusoidal", 0))


def test_sinusoidal_known_values():
    """Hand-computed: d=4 -> frequencies 1 and 1/100; position 3."""
    table = lc.as_numpy(PositionalEncoding(max_len=10)(np.zeros((1, 5, 4), "float32")))[0]
    lc.assert_close(table[3], np.array([np.sin(3), np.cos(3), np.sin(0.03), np.cos(0.03)]),
                    terms=position_terms("sinusoidal", 3))


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("start", [0, 3, 10])
def test_start_index_offsets_positions(name, start):
    layer = LAYERS[name](max_len=16)
    x = rand(2, 6, 8)
    layer(x)  # build
    out = lc.as_numpy(layer(x, start_index=start))
    lc.assert_close(out, expected(layer, x, start), terms=position_terms(name, start + 5))
    # Step-by-step decoding: position `start` alone equals row `start` of the whole sequence.
    whole = lc.as_numpy(layer(np.zeros((1, 16, 8), "float32")))
    step = lc.as_numpy(layer(np.zeros((1, 1, 8), "float32"), start_index=start))
    lc.assert_close(step[0, 0], whole[0, start], terms=position_terms(name, 15))


@pytest.mark.parametrize("name", list(LAYERS))
def test_tensor_start_index_under_xla(name):
    """Cached decoding passes the step as a tensor inside a compiled loop."""
    layer = LAYERS[name](max_len=16)
    x = rand(2, 1, 8)
    layer(x)
    fn = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
    for start in (0, 5, 15):
        lc.assert_close(fn(x, tf.constant(start)), expected(layer, x, start),
                        terms=position_terms(name, start))


def test_learned_embedding_adds_its_weight():
    layer = LearnedPositionalEmbedding(max_len=12)
    x = rand(3, 5, 4)
    layer(x)
    assert [w.path.split("/")[-1] for w in layer.trainable_weights] == ["embeddings"]
    assert layer.embeddings.shape == (12, 4)
    layer.embeddings.assign(rand(12, 4, seed=3))  # not the initial values: a real check
    lc.assert_close(layer(x), x + rand(12, 4, seed=3)[None, :5],
                    terms=position_terms("learned", 4))


def test_sinusoidal_has_no_trainable_weights():
    layer = PositionalEncoding(max_len=8)
    layer(rand(1, 3, 4))
    assert layer.trainable_weights == []


def test_keras_mask_passes_through():
    tokens = np.array([[4, 2, 0, 0], [1, 2, 3, 5]])
    embedding = keras.layers.Embedding(8, 6, mask_zero=True)
    for name in LAYERS:
        y = LAYERS[name]()(embedding(tokens))
        np.testing.assert_array_equal(lc.as_numpy(y._keras_mask), tokens != 0)
    # And in a model, the mask reaches an attention layer: padded keys get zero weight.
    token_input = keras.Input((None,), dtype="int32")
    x = PositionalEncoding(16)(embedding(token_input))
    _, weights = DotProductAttention()(x, x, x, return_attention_scores=True)
    weights = lc.as_numpy(keras.Model(token_input, weights)(tokens))
    assert np.all(weights[0, :2, 2:] == 0) and np.all(weights[0, :2, :2] > 0)


# ---------------------------------------------------------- gradients, dropout, round trip

def test_learned_embedding_gradients():
    layer = LearnedPositionalEmbedding(max_len=10)
    x = tf.constant(rand(2, 4, 3))
    layer(x)
    (grad,) = lc.check_grads_finite(lambda: layer(x), layer.trainable_weights)
    grad = tf.convert_to_tensor(grad).numpy()
    assert np.all(grad[4:] == 0) and np.all(grad[:4] != 0)  # only the positions used


@pytest.mark.parametrize("name", list(LAYERS))
def test_gradient_to_inputs(name):
    x = tf.constant(rand(2, 4, 6))
    lc.check_grads_finite(lambda: LAYERS[name]()(x), [x])


@pytest.mark.parametrize("name", list(LAYERS))
def test_dropout_only_when_training(name):
    lc.check_dropout(lambda rate: LAYERS[name](dropout=rate), rand(2, 5, 8),
                     terms=position_terms(name, 4))


@pytest.mark.parametrize("name", list(LAYERS))
def test_config_round_trip(name):
    clone = lc.check_config_round_trip(LAYERS[name](max_len=20, dropout=0.3, name="pos"),
                                       rand(2, 5, 8), terms=position_terms(name, 4))
    assert (clone.max_len, clone.dropout) == (20, 0.3)


@pytest.mark.parametrize("name", list(LAYERS))
def test_functional_model_unknown_length_save_load_xla(name, tmp_path):
    layer = LAYERS[name](max_len=32, dropout=0.1)
    terms = position_terms(name, 31)
    model = lc.check_functional_model(layer, [((None, 8), "float32")],
                                      [(rand(2, 5, 8),), (rand(3, 32, 8, seed=1),)], terms=terms)
    loaded = lc.check_save_load(model, rand(2, 7, 8, seed=2), tmp_path, terms=terms)
    lc.check_jit(loaded, tf.constant(rand(2, 9, 8, seed=3)), terms=terms)
    lc.check_jit(lambda x: layer(x, start_index=4), tf.constant(rand(1, 3, 8)), terms=terms)


@pytest.mark.parametrize("name", list(LAYERS))
def test_under_xla_with_unknown_length(name):
    layer = LAYERS[name]()
    layer(rand(1, 2, 8))
    fn = tf.function(layer, jit_compile=True,
                     input_signature=[tf.TensorSpec((None, None, 8), tf.float32)])
    for length in (3, 16):
        x = rand(2, length, 8)
        lc.assert_close(fn(x), expected(layer, x), terms=position_terms(name, length - 1))


@pytest.mark.parametrize("name", list(LAYERS))
def test_mixed_float16(name):
    # x and the table rounded to float16, then their sum: three roundings, no sums
    out = lc.check_mixed_float16(lambda: LAYERS[name](), rand(2, 5, 8), terms=3)
    layer = LAYERS[name]()
    x = rand(2, 5, 8)
    if name == "sinusoidal":
        # float16 x, float16 P and their float16 sum: three roundings of <= eps/2 of the
        # value each, no sums, so factor 1 is already twice the bound
        lc.assert_close(out, expected(layer, x), terms=3, factor=1, dtype="float16")


# ----------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("kwargs, words", [
    ({"max_len": 0}, ["max_len=0"]),
    ({"max_len": -5}, ["max_len=-5"]),
    ({"max_len": 2.5}, ["max_len=2.5"]),
    ({"dropout": -0.1}, ["dropout=-0.1"]),
    ({"dropout": 1.0}, ["dropout=1.0"]),
    ({"dropout": 2}, ["dropout=2"]),
])
def test_bad_constructor_arguments(name, kwargs, words):
    with pytest.raises(ValueError) as info:
        LAYERS[name](**kwargs)
    assert "Received" in str(info.value)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("length, start", [(9, 0), (20, 0), (5, 4), (1, 8)])
def test_sequence_longer_than_max_len(name, length, start):
    layer = LAYERS[name](max_len=8)
    layer(rand(1, 8, 4))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len") as info:
        layer(rand(1, length, 4), start_index=start)
    assert "max_len=8" in str(info.value)


@pytest.mark.parametrize("name", list(LAYERS))
def test_sequence_longer_than_max_len_in_functional_model(name):
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, LAYERS[name](max_len=8)(inputs))
    model(rand(1, 8, 4))
    with pytest.raises(ValueError, match="max_len=8"):
        model(rand(1, 9, 4))


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("shape", [(4, 8), (1, 2, 3, 8)])
def test_inputs_of_wrong_rank(name, shape):
    with pytest.raises(ValueError, match=r"inputs.*Received.*" + re_shape(shape)):
        LAYERS[name]()(rand(*shape))


def re_shape(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")
