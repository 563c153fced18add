"""What every attention layer (``DotProductAttention``, ``AdditiveAttention``,
``MultiHeadAttention``) is checked for, and the NumPy references the checks compare with.

Each layer's own test module runs :class:`AttentionLayerChecks` on it (a subclass naming
the layer) next to its own tests; :func:`check_matches_numpy_forward_pass` and
:func:`check_constructor_error` serve tests that only some layers get.

NumPy references are written from the formulas with each layer's own weights:
  dot product  softmax(Q K^T / sqrt(d)) V
  additive     softmax(w_v^T tanh(W_q q + W_k k)) V
  multi-head   Concat(head_1..head_h) W_o, head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i
"""
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.support import layer_checks as lc
from keras_attn.layers import AdditiveAttention, DotProductAttention, MultiHeadAttention

B, Q, K, D, V = 2, 3, 5, 4, 6  # batch, queries, keys, query/key features, value features
HIDDEN, HEADS = 8, 2
# mixed_bfloat16 attention computes in float32 and rounds to bfloat16 between its stages:
# inputs, projections, scores, weights, context, output. Each rounding is <= eps_bf16 / 2
# of its value, so the 6 stages with a factor of 2 (the projections' sums may cancel)
# bound what a bfloat16 run differs from float32 by, relative to the output's magnitude.
BF16_STAGES, BF16_FACTOR = 6, 2


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype("float32")


def np_(x):
    return lc.as_numpy(x)


QUERIES, KEYS, VALUES = rand(B, Q, D, seed=1), rand(B, K, D, seed=2), rand(B, K, V, seed=3)

LAYERS = {
    "dot": lambda dropout=0.0, **kw: DotProductAttention(dropout=dropout, **kw),
    "additive": lambda dropout=0.0, **kw: AdditiveAttention(HIDDEN, dropout=dropout, **kw),
    "mha": lambda dropout=0.0, **kw: MultiHeadAttention(HIDDEN, HEADS, dropout=dropout, **kw),
}


def reference(layer, q, k, v, keep=None):
    """NumPy forward pass of ``layer`` from its own weights; ``keep`` broadcasts to (B,Q,K)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    keep = np.ones((q.shape[0], q.shape[1], k.shape[1]), bool) if keep is None else keep
    if isinstance(layer, MultiHeadAttention):
        return lc.np_multi_head_attention(layer, q, k, v, keep)
    if isinstance(layer, DotProductAttention):
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    else:  # additive: w_v^T tanh(W_q q + W_k k), each (B, Q, K, h) feature vector scored
        features = np.tanh(lc.dense_np(layer.W_q, q)[:, :, None]
                           + lc.dense_np(layer.W_k, k)[:, None])
        scores = lc.dense_np(layer.w_v, features)[..., 0]
    weights = lc.np_softmax_keep(scores, keep)
    return weights @ v, weights


def call(layer, *args, **kwargs):
    return np_(layer(*args, return_attention_scores=True, **kwargs))


def attention_terms(name, in_size=D, num_keys=K, hidden=HIDDEN, heads=HEADS):
    """Roundings of the attention weights and of the output (``terms`` of
    ``lc.tolerance``): the score's reductions (dot: ``in_size`` features; additive: the
    ``in_size``-wide projections, then w_v over ``hidden``; multi-head: the projections,
    then a head's ``hidden / heads``), the softmax over ``num_keys``, the weighted sum over
    ``num_keys`` values, and for multi-head the value projection and W_o over ``hidden``.
    ``in_size``: the largest input feature size."""
    score = {"dot": in_size, "additive": in_size + hidden,
             "mha": in_size + hidden // heads}[name.split("+")[0]]
    weights = score + num_keys
    output = weights + num_keys + (in_size + hidden if name.startswith("mha") else 0)
    return weights, output


# ---------------------------------------------------------------------------------- masks

LENS = np.array([4, 0])  # (B,), a row with no key
LENS_BQ = np.array([[1, 3, 5], [2, 0, 9]])  # (B, Q), 9 > K
MASK_BK = np.array([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1]], bool)
MASK_BQK = rand(B, Q, K, seed=9) > 0
CAUSAL = np.tril(np.ones((Q, K), bool), k=K - Q)[None]  # queries are the last K positions

MASK_CASES = {
    # name: (call kwargs, keep (broadcasts to B, Q, K), layers it applies to)
    "none": ({}, None, LAYERS),
    "valid_lens (B,)": ({"valid_lens": LENS}, lc.np_keep_from_valid_lens(LENS, K), LAYERS),
    "valid_lens (B,Q)": ({"valid_lens": LENS_BQ}, lc.np_keep_from_valid_lens(LENS_BQ, K), LAYERS),
    "mask (B,K)": ({"mask": MASK_BK}, MASK_BK[:, None], LAYERS),
    "mask (B,Q,K)": ({"mask": MASK_BQK}, MASK_BQK, LAYERS),
    "causal": ({"use_causal_mask": True}, CAUSAL, ("dot", "mha")),
    "causal AND valid_lens": ({"use_causal_mask": True, "valid_lens": np.array([2, 5])},
                              CAUSAL & lc.np_keep_from_valid_lens([2, 5], K), ("dot", "mha")),
}
# the cases every layer takes, and those only layers with ``use_causal_mask`` take
COMMON_CASES = [c for c, (_, _, names) in MASK_CASES.items() if names is LAYERS]
CAUSAL_CASES = [c for c, (_, _, names) in MASK_CASES.items() if names is not LAYERS]


def check_matches_numpy_forward_pass(name, case):
    """Layer ``name``'s output and weights under mask case ``case`` equal NumPy's."""
    kwargs, keep, _ = MASK_CASES[case]
    values = VALUES if name != "mha" else rand(B, K, 7, seed=3)  # MHA: any value size
    layer = LAYERS[name]()
    output, weights = call(layer, QUERIES, KEYS, values, **kwargs)
    expected_output, expected_weights = reference(layer, QUERIES, KEYS, values, keep)
    w_terms, out_terms = attention_terms(name, max(D, values.shape[-1]))
    lc.assert_close(weights, expected_weights, terms=w_terms)
    lc.assert_close(output, expected_output, terms=out_terms)


def check_d2l_worked_example(name, query_size):
    """D2L 11.3: identical keys give uniform weights over the valid keys, so the output is
    the mean of the first 2 (resp. 6) value rows whatever the weights."""
    queries = np.random.default_rng(0).normal(0, 1, (2, 1, query_size)).astype("float32")
    keys = np.ones((2, 10, 2), "float32")
    values = np.repeat(np.arange(40, dtype="float32").reshape(1, 10, 4), 2, axis=0)
    layer = (AdditiveAttention(num_hiddens=8, dropout=0.1) if name == "additive"
             else DotProductAttention(dropout=0.5))
    output, weights = call(layer, queries, keys, values, valid_lens=np.array([2, 6]),
                           training=False)
    w_terms, out_terms = attention_terms(name, query_size, num_keys=10)
    lc.assert_close(output, np.array([[[2, 3, 4, 5]], [[10, 11, 12, 13]]]), terms=out_terms)
    assert weights.shape == (2, 1, 10)
    lc.assert_close(weights[0, 0], np.array([0.5] * 2 + [0] * 8), terms=w_terms)
    lc.assert_close(weights[1, 0], np.array([1 / 6] * 6 + [0] * 4), terms=w_terms)


# Chunked attention (large static shapes): forced here by shrinking the chunk size. Three
# examples of 3 queries x 5 keys (60 bytes of float32 scores per head) and 4 heads.
CHUNK_B, CHUNK_HEADS = 3, 4
CHUNK_CASES = {  # chunk bytes: rows of the (B*H) axis per chunk
    60: [1] * 12,  # one head of one example
    120: [2] * 6,  # half the heads of one example
    240: [4] * 3,  # one example
    500: [8, 4],  # two examples, then the last one
}


def key_tokens():
    """Two padded key sequences (id 0 = padding) and their lengths."""
    return np.array([[3, 1, 4, 0, 0], [5, 9, 2, 6, 5]], "int32"), np.array([3, 5])


MASKED_ONLY = {  # a mask and the keys it hides from every query: changing those is harmless
    "valid_lens": ({"valid_lens": np.array([2, 4])}, np.arange(K) >= np.array([[2], [4]])),
    "mask (B,K)": ({"mask": MASK_BK}, ~MASK_BK),
    "mask (B,Q,K)": ({"mask": MASK_BQK & MASK_BK[:, None]}, ~MASK_BK),
}

# ----------------------------------------------------------------------------------- errors

BAD_RATES = (-0.1, 1.0, 1.5)
CALL_ERRORS = {
    # name: (queries, keys, values, call kwargs, words the message must contain)
    "queries rank": (rand(B, D), KEYS, VALUES, {}, ["queries", f"({B}, {D})"]),
    "keys rank": (QUERIES, rand(B, 1, K, D), VALUES, {}, ["keys", f"({B}, 1, {K}, {D})"]),
    "values rank": (QUERIES, KEYS, rand(B, K), {}, ["values", f"({B}, {K})"]),
    "keys batch": (QUERIES, rand(3, K, D), VALUES, {}, ["keys", f"(3, {K}, {D})"]),
    "values batch": (QUERIES, KEYS, rand(3, K, V), {}, ["values", f"(3, {K}, {V})"]),
    "valid_lens batch": (QUERIES, KEYS, VALUES, {"valid_lens": np.array([1, 2, 3])},
                         ["valid_lens", "(3,)"]),
    "keys/values length": (QUERIES, KEYS, rand(B, K + 1, V), {},
                           ["keys", "values", f"({B}, {K + 1}, {V})"]),
    "valid_lens rank": (QUERIES, KEYS, VALUES, {"valid_lens": np.ones((B, Q, 1), "int32")},
                        ["valid_lens", f"({B}, {Q}, 1)"]),
    "float valid_lens": (QUERIES, KEYS, VALUES, {"valid_lens": np.array([1.0, 2.0], "float32")},
                         ["valid_lens", "float32"]),
}


def check_constructor_error(make, words):
    """``make()`` raises a ValueError whose message says "Received" and holds ``words``."""
    with pytest.raises(ValueError) as info:
        make()
    assert "Received" in str(info.value)
    for word in words:
        assert word in str(info.value)


@functools.lru_cache(maxsize=None)
def cached_layer(name, value_size=V):
    """One built layer per name for all of a property test's examples."""
    keras.utils.set_random_seed(1)
    layer = LAYERS[name]() if name != "mha+bias" else MultiHeadAttention(HIDDEN, HEADS,
                                                                        use_bias=True)
    layer(QUERIES, KEYS, VALUES[..., :value_size])
    return layer


class AttentionLayerChecks:
    """The checks every attention layer gets; a subclass sets ``name`` (a key of LAYERS)."""

    name = None

    @pytest.mark.parametrize("case", COMMON_CASES)
    def test_matches_numpy_forward_pass(self, case):
        check_matches_numpy_forward_pass(self.name, case)

    @pytest.mark.parametrize("attention", ["self", "cross", "cross, both padded"])
    def test_keras_mask_matches_valid_lens_and_bool_masks(self, attention):
        """Keras masks from Embedding(mask_zero=True) in a functional model give, at the real
        query positions, what valid_lens and bool (B, K) / (B, Q, K) masks give; padded queries
        attend nothing (zero weights), as in keras.layers.MultiHeadAttention."""
        name = self.name
        tokens, lens = key_tokens()
        query_tokens = np.array([[2, 7, 0], [1, 0, 0]], "int32")  # Q != K, its own padding
        embedding = keras.layers.Embedding(10, D, mask_zero=True)
        layer = LAYERS[name]()
        token_input = keras.Input((None,), dtype="int32")
        x = embedding(token_input)
        if attention == "self":
            inputs, queries_in, arrays = token_input, x, tokens
            queries, real = embedding(tokens), tokens != 0
        elif attention == "cross":
            inputs = [keras.Input((None, D)), token_input]
            queries_in, arrays = inputs[0], [QUERIES, tokens]
            queries, real = QUERIES, np.ones((B, Q), bool)
        else:
            inputs = [keras.Input((None,), dtype="int32"), token_input]
            queries_in, arrays = embedding(inputs[0]), [query_tokens, tokens]
            queries, real = embedding(query_tokens), query_tokens != 0
        model = keras.Model(inputs, layer(queries_in, x, x, return_attention_scores=True))
        out_keras, w_keras = np_(model(arrays))

        emb = embedding(tokens)
        keep_bk = np.arange(K) < lens[:, None]
        explicit = {
            "valid_lens": call(layer, queries, emb, emb, valid_lens=lens),
            "mask (B,K)": call(layer, queries, emb, emb, mask=keep_bk),
            "mask (B,Q,K)": call(layer, queries, emb, emb,
                                 mask=np.broadcast_to(keep_bk[:, None], (B, real.shape[1], K))),
        }
        if name == "mha":  # (B, H, Q, K) -> (B, Q, H, K), so [real] picks query positions
            w_keras = w_keras.transpose(0, 2, 1, 3)
        w_terms, out_terms = attention_terms(name)
        for form, (output, weights) in explicit.items():
            weights = weights if name != "mha" else weights.transpose(0, 2, 1, 3)
            lc.assert_close(out_keras[real], output[real], terms=out_terms, err_msg=form)
            lc.assert_close(w_keras[real], weights[real], terms=w_terms, err_msg=form)
        assert np.all(w_keras[~real] == 0)
        assert np.all(w_keras[0][..., 3:] == 0)  # padded keys of row 0

    def test_keras_mask_propagates_to_the_next_layer(self):
        """The output carries the queries' Keras mask: a second attention layer downstream
        ignores the padded positions, as with keras.layers.MultiHeadAttention."""
        name = self.name
        tokens, lens = key_tokens()
        embedding = keras.layers.Embedding(10, D, mask_zero=True)
        first, second = LAYERS[name](), (LAYERS[name]() if name != "additive" else
                                         AdditiveAttention(HIDDEN))
        token_input = keras.Input((None,), dtype="int32")
        x = embedding(token_input)
        h = first(x, x, x)
        model = keras.Model(token_input, second(h, h, h, return_attention_scores=True))
        out_keras, w_keras = np_(model(tokens))

        e = embedding(tokens)
        h = first(e, e, e, valid_lens=lens)
        output, weights = call(second, h, h, h, valid_lens=lens)
        real = tokens != 0
        # two layers: the second's inputs carry the first's roundings
        lc.assert_close(out_keras[real], output[real], terms=2 * attention_terms(name)[1])
        assert np.all(w_keras[0][..., 3:] == 0)  # padded keys of row 0 hidden downstream too
        y = first(e, e, e)
        np.testing.assert_array_equal(np_(y._keras_mask), real)  # eager: mask on the output

    @pytest.mark.parametrize("form", list(MASKED_ONLY))
    def test_values_at_masked_positions_change_nothing(self, form):
        name = self.name
        kwargs, hidden = MASKED_ONLY[form]
        layer = LAYERS[name]()
        output, weights = call(layer, QUERIES, KEYS, VALUES, **kwargs)
        junk_keys = np.where(hidden[..., None], rand(B, K, D, seed=11, scale=100), KEYS)
        junk_values = np.where(hidden[..., None], rand(B, K, V, seed=12, scale=100), VALUES)
        output2, weights2 = call(layer, QUERIES, junk_keys, junk_values, **kwargs)
        w_terms, out_terms = attention_terms(name)
        lc.assert_close(output2, output, terms=out_terms)
        lc.assert_close(weights2, weights, terms=w_terms)
        weights = weights if name != "mha" else weights.max(1)  # (B, Q, K) over every head
        assert np.all(weights[np.broadcast_to(hidden[:, None], (B, Q, K))] == 0)

    @pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
    def test_row_without_valid_key_gives_zeros_not_nan(self, dtype):
        name = self.name
        layer = LAYERS[name](dtype=dtype)
        output, weights = layer(QUERIES, KEYS, VALUES, valid_lens=np.array([0, 3]),
                                return_attention_scores=True)
        assert keras.backend.standardize_dtype(output.dtype) == dtype
        assert keras.backend.standardize_dtype(weights.dtype) == dtype
        output, weights = np_(output), np_(weights)
        assert np.all(np.isfinite(output)) and np.all(np.isfinite(weights))
        assert np.all(weights[0] == 0) and np.all(output[0] == 0)  # no bias: zero context
        # float32: the softmax's sum over K; 16 bits: each weight rounded once to the dtype,
        # by <= eps/2 of itself, so <= eps/2 over a row summing to 1 (factor 1: twice that)
        float32, rows = dtype == "float32", weights[1].sum(-1)
        lc.assert_close(rows, np.ones_like(rows), terms=K if float32 else 1,
                        factor=lc.FACTOR if float32 else 1, dtype=dtype)

    def test_out_of_range_valid_lens(self):
        name = self.name
        layer = LAYERS[name]()
        expected = call(layer, QUERIES, KEYS, VALUES, valid_lens=np.array([0, K]))
        for lens in ([-3, K + 4], [-1, 1000]):
            got = call(layer, QUERIES, KEYS, VALUES, valid_lens=np.array(lens))
            lc.assert_equal(got, expected)  # clipped to the same mask: the same computation
        lc.assert_close(call(layer, QUERIES, KEYS, VALUES, valid_lens=np.array([K, K + 1])),
                        call(layer, QUERIES, KEYS, VALUES), terms=attention_terms(name)[1])

    def test_gradients_exist_and_are_finite(self):
        name = self.name
        layer = LAYERS[name]()
        q, k, v = (tf.constant(x) for x in (QUERIES, KEYS, VALUES))
        layer(q, k, v)
        assert len(layer.trainable_weights) == {"dot": 0, "additive": 3, "mha": 4}[name]
        lens = np.array([0, 3])  # including a row with no valid key
        lc.check_grads_finite(lambda: layer(q, k, v, valid_lens=lens),
                              list(layer.trainable_weights) + [q, k, v])

    def test_dropout_only_when_training(self):
        name = self.name
        w_terms, out_terms = attention_terms(name)
        lc.check_dropout(lambda rate: LAYERS[name](dropout=rate), QUERIES, KEYS, VALUES,
                         terms=out_terms, valid_lens=np.array([3, 5]))
        # The returned weights are taken before dropout.
        layer = LAYERS[name](dropout=0.5)
        _, evaluated = call(layer, QUERIES, KEYS, VALUES, training=False)
        _, trained = call(layer, QUERIES, KEYS, VALUES, training=True)
        lc.assert_close(trained, evaluated, terms=w_terms)

    def test_config_round_trip(self):
        name = self.name
        layer = LAYERS[name](dropout=0.25, name=f"att_{name}")
        clone = lc.check_config_round_trip(layer, QUERIES, KEYS, VALUES,
                                           terms=attention_terms(name)[1], valid_lens=LENS)
        assert clone.dropout == 0.25
        if name == "mha":
            layer = MultiHeadAttention(12, 3, dropout=0.1, use_bias=True)
            clone = lc.check_config_round_trip(
                layer, QUERIES, KEYS, VALUES, terms=attention_terms(name, hidden=12, heads=3)[1],
                use_causal_mask=True)
            assert (clone.num_hiddens, clone.num_heads, clone.use_bias) == (12, 3, True)

    def test_functional_model_unknown_lengths_save_load_and_xla(self, tmp_path):
        name = self.name
        layer = LAYERS[name](dropout=0.1)
        extra = {"use_causal_mask": True} if name == "mha" else {}

        def wire(q, k, v, lens):
            return layer(q, k, v, valid_lens=lens, return_attention_scores=True, **extra)

        specs = [((None, D), "float32"), ((None, D), "float32"), ((None, V), "float32"),
                 ((), "int32")]
        batches = [(QUERIES, KEYS, VALUES, np.array([2, 5], "int32")),
                   (rand(B, 6, D, seed=5), rand(B, 7, D, seed=6), rand(B, 7, V, seed=7),
                    np.array([0, 7], "int32"))]
        terms = attention_terms(name, num_keys=7)[1]  # up to 7 keys
        model = lc.check_functional_model(wire, specs, batches, terms=terms)
        loaded = lc.check_save_load(model, list(batches[1]), tmp_path, terms=terms)
        lc.check_jit(lambda *a: loaded(list(a)), *(tf.constant(x) for x in batches[0]), terms=terms)
        lc.check_jit(wire, *(tf.constant(x) for x in batches[1]), terms=terms)

    def test_mixed_float16(self):
        name = self.name
        outputs = lc.check_mixed_float16(lambda: LAYERS[name](), QUERIES, KEYS, VALUES,
                                         valid_lens=np.array([0, 4]), return_attention_scores=True,
                                         terms=attention_terms(name, num_keys=KEYS.shape[1])[1])
        # each weight rounded once to float16, by <= eps/2 of itself: <= eps/2 over a row
        # (factor 1: twice that)
        rows = np_(outputs[1]).sum(-1)[1]
        lc.assert_close(rows, np.ones_like(rows), terms=1, factor=1, dtype="float16")

    @pytest.mark.parametrize("rate", BAD_RATES)
    def test_bad_dropout_raises(self, rate):
        check_constructor_error(lambda: LAYERS[self.name](dropout=rate), [f"dropout={rate!r}"])

    @pytest.mark.parametrize("case", list(CALL_ERRORS))
    def test_bad_call_arguments(self, case):
        name = self.name
        queries, keys, values, kwargs, words = CALL_ERRORS[case]
        with pytest.raises(ValueError) as info:
            LAYERS[name]()(queries, keys, values, **kwargs)
        assert "Received" in str(info.value)
        for word in words:
            assert word in str(info.value)

    # One test function run by every subclass: Hypothesis keys its example database on the
    # function, so a layer may replay an example another layer drew; harmless here.
    @settings(max_examples=25, deadline=None,
              suppress_health_check=[HealthCheck.differing_executors])
    @given(data=st.data())
    def test_property_key_padding_changes_nothing(self, data):
        name = self.name
        num_keys = data.draw(st.integers(1, 5), label="num_keys")
        pad = data.draw(st.integers(1, 3), label="pad")
        lens = data.draw(hnp.arrays(np.int32, (B,), elements=st.integers(0, num_keys)),
                         label="lens")
        floats = st.floats(-3, 3, width=32)
        junk = st.floats(-1e3, 1e3, width=32)
        keys = data.draw(hnp.arrays(np.float32, (B, num_keys, D), elements=floats))
        values = data.draw(hnp.arrays(np.float32, (B, num_keys, V), elements=floats))
        pad_keys = data.draw(hnp.arrays(np.float32, (B, pad, D), elements=junk))
        pad_values = data.draw(hnp.arrays(np.float32, (B, pad, V), elements=junk))
        layer = cached_layer(name)
        expected = np_(layer(QUERIES, keys, values, valid_lens=lens))
        padded = np_(layer(QUERIES, np.concatenate([keys, pad_keys], 1),
                           np.concatenate([values, pad_values], 1), valid_lens=lens))
        terms = attention_terms(name, num_keys=num_keys + pad)[1]
        lc.assert_close(padded, expected, terms=terms)
        # The same padding hidden by a bool mask instead of valid_lens.
        mask = np.arange(num_keys + pad) < num_keys
        masked = np_(layer(QUERIES, np.concatenate([keys, pad_keys], 1),
                           np.concatenate([values, pad_values], 1), mask=np.stack([mask] * B)))
        lc.assert_close(masked, layer(QUERIES, keys, values), terms=terms)
