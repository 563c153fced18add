"""keras_attn.ops and the MaskedSoftmax layer against NumPy references and D2L 11.3."""
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.support import layer_checks as lc
from keras_attn import ops as attn_ops
from keras_attn.layers import MaskedSoftmax

T, F = True, False
B, H, Q, K = 2, 3, 2, 4


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def np_(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def softmax_terms(num_keys):
    """Roundings of a float32 softmax weight (``terms`` of lc.tolerance): subtracting the
    row's max, exp, the sum over ``num_keys``, the division. (An error of d in a score
    moves its weight by w * d, and w <= exp(-(max - score)) keeps that below d / e: the
    scores' range does not enter.)"""
    return num_keys + 3


# ---------------------------------------------------------------------------- mask helpers

def test_sequence_mask():
    np.testing.assert_array_equal(
        np_(attn_ops.sequence_mask(np.array([1, 3, 0]), 4)),
        [[T, F, F, F], [T, T, T, F], [F, F, F, F]])
    per_query = np_(attn_ops.sequence_mask(np.array([[1, 2], [4, 0]]), 3))
    assert per_query.shape == (2, 2, 3) and per_query.dtype == bool
    np.testing.assert_array_equal(per_query, [[[T, F, F], [T, T, F]], [[T, T, T], [F, F, F]]])


def test_sequence_mask_rejects_float_lengths():
    with pytest.raises(ValueError, match="lengths.*float32"):
        attn_ops.sequence_mask(np.array([1.0, 2.0], "float32"), 3)


@pytest.mark.parametrize("num_queries, num_keys", [(4, None), (1, 1), (2, 5)])
def test_causal_mask_is_lower_triangular(num_queries, num_keys):
    nk = num_queries if num_keys is None else num_keys
    # With more keys than queries the queries are the last positions of the key sequence.
    expected = np.tril(np.ones((num_queries, nk), bool), k=nk - num_queries)
    np.testing.assert_array_equal(np_(attn_ops.causal_mask(num_queries, num_keys)), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_large_negative_fits_dtype_and_dominates(dtype):
    fill = attn_ops.large_negative(dtype)
    as_dtype = np_(keras.ops.cast(keras.ops.convert_to_tensor([fill], "float32"), dtype))
    assert np.all(np.isfinite(as_dtype.astype("float32")))
    assert fill <= -3e4


# ---------------------------------------------------------------------- D2L worked examples

def test_d2l_masked_softmax_valid_lens_per_batch_row():
    scores = np.random.default_rng(0).random((2, 2, 4)).astype("float32")
    weights = np_(attn_ops.masked_softmax(scores, valid_lens=np.array([2, 3])))
    assert np.all(weights[0, :, 2:] == 0) and np.all(weights[1, :, 3:] == 0)
    assert np.all(weights[0, :, :2] > 0) and np.all(weights[1, :, :3] > 0)
    # the softmax, then the float32 sum of its 4 weights
    lc.assert_close(weights.sum(-1), np.ones((2, 2)), terms=softmax_terms(4) + 4)
    expected = lc.np_softmax_keep(scores, lc.np_keep_from_valid_lens([2, 3], 4))
    lc.assert_close(weights, expected, terms=softmax_terms(4))


def test_d2l_masked_softmax_valid_lens_per_query():
    scores = np.random.default_rng(1).random((2, 2, 4)).astype("float32")
    weights = np_(attn_ops.masked_softmax(scores, valid_lens=np.array([[1, 3], [2, 4]])))
    np.testing.assert_array_equal(weights[0, 0], [1, 0, 0, 0])  # one valid key: all weight
    zero = np.array([[[F, T, T, T], [F, F, F, T]], [[F, F, T, T], [F, F, F, F]]])
    assert np.all(weights[zero] == 0) and np.all(weights[~zero] > 0)
    lc.assert_close(weights.sum(-1), np.ones((2, 2)), terms=softmax_terms(4) + 4)
    expected = lc.np_softmax_keep(scores, lc.np_keep_from_valid_lens([[1, 3], [2, 4]], 4))
    lc.assert_close(weights, expected, terms=softmax_terms(4))


# ------------------------------------------------------------------------------- mask forms

LENS = np.array([3, 1])  # (B,)
LENS_BQ = np.array([[2, 4], [1, 3]])  # (B, Q)
KEEP_B = np.arange(K) < LENS[:, None]  # (B, K)
KEEP_BQ = np.arange(K) < LENS_BQ[..., None]  # (B, Q, K)
ODD = np.array([[[T, F, T, F], [F, T, T, F]], [[F, F, F, T], [T, T, F, T]]])  # not a prefix


def _full(keep, rank):
    keep = np.broadcast_to(keep.reshape(B, -1, K), (B, Q, K))
    return np.broadcast_to(keep[:, None], (B, H, Q, K)) if rank == 4 else keep


MASK_FORMS = {
    # name: (kwargs for masked_softmax given the rank, the (B, Q, K) keep it means)
    "valid_lens (B,)": (lambda r: dict(valid_lens=LENS), KEEP_B[:, None]),
    "valid_lens (B,Q)": (lambda r: dict(valid_lens=LENS_BQ), KEEP_BQ),
    "mask (B,K)": (lambda r: dict(mask=KEEP_B), KEEP_B[:, None]),
    "mask (B,Q,K)": (lambda r: dict(mask=KEEP_BQ), KEEP_BQ),
    "mask scores' shape": (lambda r: dict(mask=_full(KEEP_BQ, r)), KEEP_BQ),
    "mask not a prefix": (lambda r: dict(mask=ODD), ODD),
    "int mask": (lambda r: dict(mask=ODD.astype("int32")), ODD),
    "valid_lens AND mask": (lambda r: dict(valid_lens=LENS_BQ, mask=ODD), KEEP_BQ & ODD),
}


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("form", list(MASK_FORMS))
def test_mask_forms_match_numpy(form, rank):
    kwargs, keep = MASK_FORMS[form]
    shape = (B, H, Q, K) if rank == 4 else (B, Q, K)
    scores = rand(*shape)
    weights = np_(attn_ops.masked_softmax(scores, **kwargs(rank)))
    expected = lc.np_softmax_keep(scores, _full(keep, rank))
    lc.assert_close(weights, expected, terms=softmax_terms(K))
    assert np.all(weights[~_full(keep, rank)] == 0)


def test_valid_lens_and_equivalent_masks_agree():
    scores = rand(B, H, Q, K)
    by_lens = np_(attn_ops.masked_softmax(scores, valid_lens=LENS))
    for mask in (KEEP_B, np.broadcast_to(KEEP_B[:, None], (B, Q, K)), _full(KEEP_B, 4)):
        np.testing.assert_array_equal(np_(attn_ops.masked_softmax(scores, mask=mask)), by_lens)


def test_no_mask_is_plain_softmax():
    scores = rand(B, Q, K)
    lc.assert_close(attn_ops.masked_softmax(scores), lc.np_softmax_keep(scores, True),
                    terms=softmax_terms(K))


@pytest.mark.parametrize("values, same_as", [
    ([-1, 2], [0, 2]), ([-100, -1], [0, 0]),  # negative = no key
    ([9, 2], [K, 2]), ([K + 1, 100], [K, K]),  # above K = all keys
])
def test_out_of_range_valid_lens(values, same_as):
    scores = rand(B, Q, K)
    np.testing.assert_array_equal(
        np_(attn_ops.masked_softmax(scores, valid_lens=np.array(values))),
        np_(attn_ops.masked_softmax(scores, valid_lens=np.array(same_as))))


def test_valid_lens_of_all_keys_is_no_mask():
    scores = rand(B, Q, K)
    lc.assert_close(attn_ops.masked_softmax(scores, valid_lens=np.array([K, K + 5])),
                    attn_ops.masked_softmax(scores), terms=softmax_terms(K))


# ------------------------------------------------------------------------------ dtypes, NaN

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_without_valid_key_is_zero_not_nan(dtype, rank):
    shape = (B, H, Q, K) if rank == 4 else (B, Q, K)
    scores = keras.ops.cast(rand(*shape) * 10, dtype)
    weights = attn_ops.masked_softmax(scores, valid_lens=np.array([0, 3]))
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    w = np_(keras.ops.cast(weights, "float32"))
    assert not np.any(np.isnan(w))
    assert np.all(w[0] == 0)
    # float32: the softmax and the sum of its K weights; 16 bits: each weight rounded once
    # to the dtype, by <= eps/2 of itself, so <= eps/2 over a row summing to 1 (factor 1:
    # twice that)
    float32 = dtype == "float32"
    lc.assert_close(w[1].sum(-1), np.ones(w[1].shape[:-1]),
                    terms=softmax_terms(K) + K if float32 else 1,
                    factor=lc.FACTOR if float32 else 1, dtype=dtype)
    # A mask with nothing kept, too.
    w = np_(keras.ops.cast(attn_ops.masked_softmax(scores, mask=np.zeros((B, K), bool)), "float32"))
    assert np.all(w == 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_large_magnitude_low_precision_scores(dtype):
    big = 6e4 if dtype == "float16" else 3e38  # near each dtype's largest finite value
    low = -min(big, 1e8)
    scores = np.array([[[big, -big, big, 0.0], [low, low, low, low]]], "float32")
    weights = attn_ops.masked_softmax(keras.ops.cast(scores, dtype), valid_lens=np.array([3]))
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    w = np_(keras.ops.cast(weights, "float32"))
    assert np.all(np.isfinite(w))
    # the float32 softmax of equal scores, rounded once to the dtype (by <= eps/2 of the
    # value: factor 1 is twice that)
    lc.assert_close(w[0, 0], np.array([0.5, 0, 0.5, 0]), terms=1, factor=1, dtype=dtype)
    # All valid scores equally (hugely) negative: still a uniform distribution, not zeros.
    lc.assert_close(w[0, 1], np.array([1 / 3, 1 / 3, 1 / 3, 0]), terms=1, factor=1,
                    dtype=dtype)


@pytest.mark.parametrize("dtype, tiny", [("float16", 6.2e-5), ("bfloat16", 1.2e-38)])
def test_low_precision_softmax_is_computed_in_float32(dtype, tiny):
    """Each weight is the float32 softmax of the (rounded) scores, rounded once to
    ``dtype``: relative error <= eps/2 of the dtype, plus the float32 softmax's own (the
    sum over 256 keys). A softmax computed in float16/bfloat16 errs by far more."""
    scores = keras.ops.cast(rand(4, 8, 256) * 3, dtype)
    lens = np.full(4, 200)
    expected = lc.np_softmax_keep(np_(keras.ops.cast(scores, "float32")),
                                  lc.np_keep_from_valid_lens(lens, 256))
    got = np_(keras.ops.cast(attn_ops.masked_softmax(scores, valid_lens=lens), "float32"))
    normal = expected > tiny  # skip values that underflow to subnormals in ``dtype``
    rtol = lc.EPS[dtype] / 2 + lc.tolerance(1.0, terms=softmax_terms(256))
    np.testing.assert_allclose(got[normal], expected[normal], rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_returns_scores_dtype(dtype):
    scores = keras.ops.cast(rand(B, Q, K), dtype)
    for kwargs in ({}, {"valid_lens": LENS}, {"mask": KEEP_B}):
        out = attn_ops.masked_softmax(scores, **kwargs)
        assert keras.backend.standardize_dtype(out.dtype) == dtype


# ----------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kwargs, words", [
    (dict(scores=rand(3, 4)), ["scores", "(3, 4)"]),
    (dict(scores=rand(1, 1, 1, 2, 2)), ["scores", "(1, 1, 1, 2, 2)"]),
    (dict(valid_lens=np.array([1.0, 2.0], "float32")), ["valid_lens", "float32"]),
    (dict(valid_lens=np.ones((B, Q, 1), "int32")), ["valid_lens", f"({B}, {Q}, 1)"]),
    (dict(valid_lens=np.array([1, 2, 3])), ["valid_lens", "(3,)"]),
    (dict(valid_lens=np.ones((B, Q + 1), "int32")), ["valid_lens", f"({B}, {Q + 1})"]),
    (dict(mask=np.ones((K,), bool)), ["mask", f"({K},)"]),
    (dict(mask=np.ones((B + 1, K), bool)), ["mask", f"({B + 1}, {K})"]),
])
def test_bad_arguments_raise_value_error(kwargs, words):
    kwargs = {"scores": rand(B, Q, K), **kwargs}
    with pytest.raises(ValueError) as info:
        attn_ops.masked_softmax(**kwargs)
    message = str(info.value)
    assert "Received" in message
    for word in words:
        assert word in message


# ------------------------------------------------------------------------------- properties

@st.composite
def masked_problems(draw):
    b, q, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    heads = draw(st.sampled_from([None, 2]))
    shape = (b, q, k) if heads is None else (b, heads, q, k)
    scores = draw(hnp.arrays(np.float32, shape, elements=st.floats(-30, 30, width=32)))
    lens_shape = draw(st.sampled_from([(b,), (b, q)]))
    valid_lens = draw(hnp.arrays(np.int32, lens_shape, elements=st.integers(-2, k + 2)))
    mask = draw(st.none() | hnp.arrays(np.bool_, (b, q, k)))
    keep = lc.np_keep_from_valid_lens(valid_lens, k) & (True if mask is None else mask)
    keep = np.broadcast_to(keep if heads is None else keep[:, None], shape)
    return scores, valid_lens, mask, keep


@settings(max_examples=25, deadline=None)
@given(masked_problems())
def test_property_rows_sum_to_one_or_zero_and_masked_are_zero(problem):
    scores, valid_lens, mask, keep = problem
    w = np_(attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=mask))
    assert not np.any(np.isnan(w))
    assert np.all(w[~keep] == 0)
    any_valid = keep.any(-1)
    k = scores.shape[-1]
    # rows of weights sum to 1 (scale 1): the softmax, then the float32 sum of k weights
    lc.assert_close(w.sum(-1), any_valid, terms=softmax_terms(k) + k, scale=1.0)
    lc.assert_close(w, lc.np_softmax_keep(scores, keep), terms=softmax_terms(k))


@settings(max_examples=25, deadline=None)
@given(masked_problems(), st.floats(-100, 100, width=32))
def test_property_invariant_to_adding_a_constant(problem, constant):
    scores, valid_lens, mask, _ = problem
    w = np_(attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=mask))
    shifted = np_(attn_ops.masked_softmax(scores + np.float32(constant),
                                          valid_lens=valid_lens, mask=mask))
    # Adding the constant rounds each score by up to |score + c| * eps / 2, which moves
    # its weight by that much relative: |score + c| more terms (twice: it and the max).
    shift_terms = 2 * int(np.ceil(np.abs(scores + np.float32(constant)).max()))
    lc.assert_close(shifted, w, terms=2 * softmax_terms(scores.shape[-1]) + shift_terms)


# ------------------------------------------------------------------- MaskedSoftmax, XLA, model

def test_masked_softmax_layer_matches_function():
    scores = rand(B, H, Q, K)
    layer = MaskedSoftmax()
    for kwargs in ({}, {"valid_lens": LENS_BQ}, {"mask": ODD}):
        np.testing.assert_array_equal(np_(layer(scores, **kwargs)),
                                      np_(attn_ops.masked_softmax(scores, **kwargs)))
    assert layer.compute_output_shape((B, Q, K)) == (B, Q, K)


def test_masked_softmax_layer_mask_is_not_a_keras_mask():
    """``mask=`` is the attention mask: no "does not support masking" warning, and the
    weights carry no Keras mask downstream."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        weights = MaskedSoftmax()(rand(B, Q, K), mask=ODD)
    assert getattr(weights, "_keras_mask", None) is None


def test_masked_softmax_layer_config_round_trip():
    lc.check_config_round_trip(MaskedSoftmax(name="sm"), rand(B, Q, K), terms=softmax_terms(K),
                               valid_lens=LENS)


def test_masked_softmax_in_functional_model_with_unknown_lengths(tmp_path):
    layer = MaskedSoftmax()

    def wire(scores, valid_lens):
        return layer(scores, valid_lens=valid_lens)

    specs = [((None, None), "float32"), ((), "int32")]
    batches = [(rand(B, Q, K), LENS), (rand(B, 3, 7, seed=1), np.array([0, 9]))]
    model = lc.check_functional_model(wire, specs, batches, terms=softmax_terms(7))
    lc.check_save_load(model, list(batches[1]), tmp_path, terms=softmax_terms(7))


@pytest.mark.parametrize("kwargs", [{}, {"valid_lens": LENS_BQ}, {"mask": ODD}])
def test_masked_softmax_under_xla(kwargs):
    scores = rand(B, H, Q, K)
    lc.check_jit(lambda s: attn_ops.masked_softmax(s, **kwargs), tf.constant(scores),
                 terms=softmax_terms(K))


def test_masked_softmax_under_xla_with_unknown_shapes():
    fn = tf.function(lambda s, v: attn_ops.masked_softmax(s, valid_lens=v), jit_compile=True,
                     input_signature=[tf.TensorSpec((None, None, None), tf.float32),
                                      tf.TensorSpec((None,), tf.int32)])
    for scores, lens in ((rand(B, Q, K), LENS), (rand(3, 1, 5), np.array([0, 2, 7]))):
        expected = lc.np_softmax_keep(scores, lc.np_keep_from_valid_lens(lens, scores.shape[-1]))
        lc.assert_close(fn(scores, lens.astype("int32")), expected,
                        terms=softmax_terms(scores.shape[-1]))


def test_masked_softmax_gradient_is_finite_with_empty_rows():
    scores = tf.constant(rand(B, Q, K))
    grads = lc.check_grads_finite(
        lambda: attn_ops.masked_softmax(scores, valid_lens=np.array([0, 2])) * rand(B, Q, K),
        [scores])
    g = grads[0].numpy()
    assert np.all(g[0] == 0) and np.all(g[1, :, 2:] == 0)  # no gradient through masked keys


@pytest.mark.parametrize("rank", [3, 4])
def test_masked_softmax_gradient_matches_numpy(rank):
    """Gradient of sum(c * masked_softmax(s)) against the softmax Jacobian written in NumPy:
    kept keys get w * (c - sum(c * w)), masked keys and fully masked rows get 0."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 3, 5)[-rank:] if rank == 3 else (2, 2, 3, 5)
    scores = rng.standard_normal(shape).astype("float32")
    c = rng.standard_normal(shape).astype("float32")
    keep = rng.random(shape) > 0.4
    keep[0, ..., 1, :] = False  # a row with no valid key
    s = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(s)
        w = attn_ops.masked_softmax(s, mask=keep)
        loss = tf.reduce_sum(w * c)
    grad = tape.gradient(loss, s).numpy()
    e = np.where(keep, np.exp(scores - scores.max(-1, keepdims=True)), 0.0)
    denom = e.sum(-1, keepdims=True)
    w_np = np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)
    expected = w_np * (c - (c * w_np).sum(-1, keepdims=True))
    k = shape[-1]
    # both sides float32 (NumPy's too): each side's softmax roundings
    lc.assert_close(w, w_np, terms=2 * softmax_terms(k))
    # w * (c - sum(c * w)): the softmax's, the k-term sum's and two more steps, on each
    # side; the sum cancels, so relative to the size of its terms, max|c| * max(w)
    lc.assert_close(grad, expected, terms=2 * (softmax_terms(k) + k + 2),
                    scale=np.abs(c).max() * w_np.max())
    assert not grad[0, ..., 1, :].any()
    theoretical, numerical = tf.test.compute_gradient(
        lambda t: tf.reduce_sum(attn_ops.masked_softmax(tf.cast(t, "float32"), mask=keep) * c),
        [tf.constant(scores.astype("float64"))])
    # Central differences of a float32 loss, step h = 1/1024 (compute_gradient's default):
    # the loss's rounding (the softmax's, then the sum of all c * w, at most max|c| each)
    # divided by the 2h between the two evaluations, plus the truncation error h**2.
    h = 1 / 1024
    loss_rounding = lc.tolerance(c, terms=softmax_terms(k) + c.size)
    np.testing.assert_allclose(theoretical[0], numerical[0],
                               atol=loss_rounding / (2 * h) + h ** 2)
