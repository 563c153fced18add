"""keras_attn.layers.multi_head_attention: ``MultiHeadAttention`` against NumPy's
Concat(head_1..head_h) W_o, head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i (with and without
biases, every mask form, causal included), D2L 11.5's shapes, attention in chunks of heads
(TensorFlow's fast path, forced by shrinking the chunk size), the one-query decoding path,
and the checks every attention layer gets (``attention_checks.AttentionLayerChecks``)."""
import functools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.support import layer_checks as lc
from tests.support.attention_checks import (B, BF16_FACTOR, BF16_STAGES, CAUSAL, CAUSAL_CASES,
                                            CHUNK_B, CHUNK_CASES, CHUNK_HEADS, D, HEADS, HIDDEN, K,
                                            MASK_CASES, Q, AttentionLayerChecks, attention_terms,
                                            cached_layer, call, check_constructor_error,
                                            check_matches_numpy_forward_pass, np_, rand, reference)
from keras_attn.layers import MultiHeadAttention


class TestMultiHeadAttention(AttentionLayerChecks):
    name = "mha"


def test_d2l_multi_head_attention_shapes():
    mha = MultiHeadAttention(num_hiddens=100, num_heads=5, dropout=0.5)
    x, y = rand(2, 4, 100, seed=4), rand(2, 6, 100, seed=5)
    output, weights = mha(x, y, y, valid_lens=np.array([3, 2]), return_attention_scores=True)
    assert tuple(output.shape) == (2, 4, 100)
    assert tuple(weights.shape) == (2, 5, 4, 6)
    assert mha.W_q.kernel.shape == (100, 100) and mha.W_o.kernel.shape == (100, 100)
    lc.assert_close(output, reference(mha, x, y, y, lc.np_keep_from_valid_lens([3, 2], 6))[0],
                    terms=attention_terms("mha", 100, num_keys=6, hidden=100, heads=5)[1])


@pytest.mark.parametrize("case", CAUSAL_CASES)
def test_causal_mask_matches_numpy_forward_pass(case):
    check_matches_numpy_forward_pass("mha", case)


@pytest.mark.parametrize("case", ["none", "valid_lens (B,)", "valid_lens (B,Q)", "causal"])
@pytest.mark.parametrize("use_bias", [False, True])
def test_multi_head_attention_matches_numpy(use_bias, case):
    kwargs, keep, _ = MASK_CASES[case]
    layer = MultiHeadAttention(HIDDEN, HEADS, use_bias=use_bias)
    queries, keys, values = rand(B, Q, 3, seed=1), rand(B, K, 5, seed=2), rand(B, K, 7, seed=3)
    layer(queries, keys, values)
    for dense in (layer.W_q, layer.W_k, layer.W_v, layer.W_o):
        assert dense.kernel.shape[-1] == HIDDEN and (dense.bias is not None) == use_bias
        if use_bias:  # non-zero biases, so a missing bias would show
            dense.bias.assign(rand(HIDDEN, seed=7))
    output, weights = call(layer, queries, keys, values, **kwargs)
    assert weights.shape == (B, HEADS, Q, K)
    expected_output, expected_weights = reference(layer, queries, keys, values, keep)
    w_terms, out_terms = attention_terms("mha", 7)  # inputs of 3, 5 and 7 features
    lc.assert_close(weights, expected_weights, terms=w_terms)
    lc.assert_close(output, expected_output, terms=out_terms)


# Chunked attention: CHUNK_CASES (attention_checks) gives the rows of each chunk.
CHUNK_LENS, CHUNK_LENS_BQ = np.array([4, 0, 2]), np.array([[1, 3, 5], [2, 0, 9], [5, 4, 1]])
CHUNK_MASKS = {
    "none": ({}, None),
    "valid_lens (B,)": ({"valid_lens": CHUNK_LENS}, lc.np_keep_from_valid_lens(CHUNK_LENS, K)),
    "valid_lens (B,Q)": ({"valid_lens": CHUNK_LENS_BQ},
                         lc.np_keep_from_valid_lens(CHUNK_LENS_BQ, K)),
    "mask (B,Q,K)": ({"mask": rand(CHUNK_B, Q, K, seed=9) > 0}, rand(CHUNK_B, Q, K, seed=9) > 0),
    "causal AND mask (B,K)": ({"use_causal_mask": True, "mask": rand(CHUNK_B, K, seed=4) > 0},
                              CAUSAL & (rand(CHUNK_B, K, seed=4) > 0)[:, None]),
}


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_multi_head_attention_chunks_follow_the_gpu_decision(monkeypatch, gpu):
    """With a GPU (injected) the layer attends in one chunk, on a CPU in several; same
    outputs either way."""
    from keras_attn.kernels import fastpath
    from keras_attn.kernels import tf_attention

    monkeypatch.setattr(tf_attention, "gpu_visible", lambda: gpu)
    monkeypatch.setattr(tf_attention, "CHUNK_ABOVE", 0)
    monkeypatch.setattr(tf_attention, "CHUNK_BYTES", 60)
    x = rand(CHUNK_B, Q, HIDDEN, seed=1)
    layer = MultiHeadAttention(HIDDEN, CHUNK_HEADS)
    layer(x, x, x)
    g = tf.function(lambda a: layer(a, a, a)).get_concrete_function(
        tf.TensorSpec(x.shape)).graph
    matmuls = sum(op.type == "BatchMatMulV2" for op in g.get_operations())
    assert matmuls == (2 if gpu else 2 * CHUNK_B * CHUNK_HEADS)
    with fastpath.disabled():
        reference_out = np_(layer(x, x, x))
    lc.assert_close(layer(x, x, x), reference_out,
                    terms=attention_terms("mha", HIDDEN, num_keys=Q, heads=CHUNK_HEADS)[1])


@pytest.mark.parametrize("case", list(CHUNK_MASKS))
@pytest.mark.parametrize("chunk_bytes", list(CHUNK_CASES))
def test_multi_head_attention_in_chunks_matches_numpy_and_one_chunk(monkeypatch, chunk_bytes,
                                                                    case):
    """Outputs, weights and gradients are those of NumPy and of the unchunked layer, for
    every mask, when the heads are attended in chunks of rows (split inside an example,
    whole examples, a remainder)."""
    from keras_attn.kernels import tf_attention as mha_module
    kwargs, keep = CHUNK_MASKS[case]
    queries, keys = rand(CHUNK_B, Q, 6, seed=1), rand(CHUNK_B, K, 6, seed=2)
    values = rand(CHUNK_B, K, 7, seed=3)
    w_terms, out_terms = attention_terms("mha", 7, heads=CHUNK_HEADS)
    layer = MultiHeadAttention(HIDDEN, CHUNK_HEADS, use_bias=True)
    layer(queries, keys, values)
    for dense in (layer.W_q, layer.W_k, layer.W_v, layer.W_o):
        dense.bias.assign(rand(HIDDEN, seed=7))

    def run(graph):
        x = [tf.constant(a) for a in (queries, keys, values)]

        def fn(*x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                out, w = layer(*x, return_attention_scores=True, **kwargs)
                loss = tf.reduce_sum(out * np.arange(HIDDEN, dtype="float32"))
            return out, w, tape.gradient(loss, list(x) + layer.trainable_weights)

        return fn(*x) if not graph else tf.function(fn)(*x)

    monkeypatch.setattr(mha_module, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(mha_module, "CHUNK_ABOVE", 0)
    monkeypatch.setattr(mha_module, "gpu_visible", lambda: False)
    for graph in (False, True):
        out, w, grads = run(graph)
        if graph:  # the chunks are really there: two batched matmuls per chunk forward
            g = tf.function(lambda *x: layer(*x, **kwargs)).get_concrete_function(
                *(tf.TensorSpec(a.shape) for a in (queries, keys, values))).graph
            assert sum(op.type == "BatchMatMulV2" for op in g.get_operations()) == \
                2 * len(CHUNK_CASES[chunk_bytes])
        expected_output, expected_weights = reference(layer, queries, keys, values, keep)
        lc.assert_close(w, expected_weights, terms=w_terms)
        lc.assert_close(out, expected_output, terms=out_terms)
    monkeypatch.setattr(mha_module, "CHUNK_BYTES", 1 << 30)
    one_out, one_w, one_grads = run(True)
    lc.assert_close(out, one_out, terms=out_terms)
    # Gradients: the forward's roundings, then back through W_o (HIDDEN), the weighted
    # sum and the softmax (K each), a head's d_h, and the projections (weight gradients
    # sum over CHUNK_B * K rows). A weight's gradient is judged at the scale of its Dense
    # sub-layer's gradients: the key bias's is zero in exact arithmetic (a per-row
    # constant added to the scores does not move a softmax), so what is compared there is
    # rounding noise, of the size of the key kernel's gradient times eps.
    grad_terms = out_terms + HIDDEN + 2 * K + HIDDEN // CHUNK_HEADS + CHUNK_B * K
    dense_scale = {}
    for weight, g in zip(layer.trainable_weights, one_grads[3:]):
        dense = weight.path.rsplit("/", 1)[0]
        dense_scale[dense] = max(dense_scale.get(dense, 0.0), np.abs(np_(g)).max())
    scales = [None] * 3 + [dense_scale[w.path.rsplit("/", 1)[0]]
                           for w in layer.trainable_weights]
    for a, b, scale in zip(grads, one_grads, scales):
        lc.assert_close(a, b, terms=grad_terms, scale=scale)


@pytest.mark.parametrize("variant", ["xla", "mixed_bfloat16"])
def test_multi_head_attention_in_chunks_under_xla_and_bfloat16(monkeypatch, variant):
    from keras_attn.kernels import tf_attention as mha_module
    x = rand(CHUNK_B, Q, HIDDEN, seed=1)
    lens = CHUNK_LENS
    layer = MultiHeadAttention(HIDDEN, CHUNK_HEADS)
    expected = np_(layer(x, x, x, valid_lens=lens))  # one chunk, float32
    monkeypatch.setattr(mha_module, "CHUNK_BYTES", 120)
    monkeypatch.setattr(mha_module, "CHUNK_ABOVE", 0)
    monkeypatch.setattr(mha_module, "gpu_visible", lambda: False)
    if variant == "xla":
        out = tf.function(lambda a: layer(a, a, a, valid_lens=lens), jit_compile=True)(x)
        lc.assert_close(out, expected, terms=attention_terms("mha", HIDDEN, heads=CHUNK_HEADS)[1])
    else:
        half = MultiHeadAttention(HIDDEN, CHUNK_HEADS, dtype="mixed_bfloat16")
        half(x, x, x)
        half.set_weights(layer.get_weights())
        out = half(x, x, x, valid_lens=lens)
        assert out.dtype == "bfloat16"
        # bfloat16 in and out, float32 inside: one rounding to bfloat16 per stage (inputs,
        # projections, scores, weights, context, output) of eps_bf16/2 each, relative
        lc.assert_close(out, expected, terms=BF16_STAGES, factor=BF16_FACTOR, dtype="bfloat16")


def test_multi_head_attention_in_chunks_drops_weights_only_in_training(monkeypatch):
    from keras_attn.kernels import tf_attention as mha_module
    monkeypatch.setattr(mha_module, "CHUNK_BYTES", 60)  # one head per chunk
    monkeypatch.setattr(mha_module, "CHUNK_ABOVE", 0)
    monkeypatch.setattr(mha_module, "gpu_visible", lambda: False)
    x = rand(CHUNK_B, Q, HIDDEN, seed=1)
    layer = MultiHeadAttention(HIDDEN, CHUNK_HEADS, dropout=0.5)
    eval_out, eval_w = call(layer, x, x[:, :, :], x, training=False)
    out, w = call(layer, x, x, x, training=True)
    w_terms, out_terms = attention_terms("mha", HIDDEN, heads=CHUNK_HEADS)
    lc.assert_close(w, eval_w, terms=w_terms)  # weights are returned before dropout
    assert not lc.is_close(out, eval_out, terms=out_terms)
    # dropout only rescales the kept weights: the mean over many draws is the eval output.
    # Statistical, not rounding: at rate 0.5 one draw's spread is about |output|, so the
    # mean of 300 draws is within |output| / sqrt(300) ~ 0.058 max|output| (1 sigma);
    # 0.15 is 2.6 sigma (the draws are seeded).
    # Traced once (the chunk loop unrolled), then run 300 times: each run draws new masks
    # from the layer's seed generator, as the eager calls above do.
    draw = tf.function(lambda a: layer(a, a, a, training=True))
    mean = np.mean([np_(draw(x)) for _ in range(300)], axis=0)
    np.testing.assert_allclose(mean, eval_out, atol=0.15 * np.abs(eval_out).max())
    # ... and those draws differ from each other, so the mean is over 300 masks, not one.
    assert not np.array_equal(np_(draw(x)), np_(draw(x)))


# ---------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("make, words", [
    (lambda: MultiHeadAttention(10, 3), ["num_hiddens=10", "num_heads=3"]),
    (lambda: MultiHeadAttention(8, 0), ["num_heads=0"]),
    (lambda: MultiHeadAttention(8, -2), ["num_heads=-2"]),
    (lambda: MultiHeadAttention(0, 2), ["num_hiddens=0"]),
])
def test_bad_constructor_arguments(make, words):
    check_constructor_error(make, words)


# ------------------------------------------------------------------------------ properties

@pytest.mark.parametrize("name", ["mha", "mha+bias"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_property_self_attention_is_permutation_equivariant(name, data):
    length = data.draw(st.integers(1, 6), label="length")
    x = data.draw(hnp.arrays(np.float32, (1, length, D), elements=st.floats(-3, 3, width=32)))
    perm = np.array(data.draw(st.permutations(range(length)), label="perm"))
    layer = cached_layer(name, value_size=D)
    out = np_(layer(x, x, x))
    out_perm = np_(layer(x[:, perm], x[:, perm], x[:, perm]))
    lc.assert_close(out_perm, out[:, perm], terms=attention_terms(name, num_keys=length)[1])


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_one_query_path_matches_general_path(dtype):
    """A single query (a decoding step) takes the keys-first fast path; the same query
    repeated twice takes the einsum path. Outputs and weights must agree, masks included
    (a row with no valid key gives zero weights and the output bias only)."""
    rng = np.random.default_rng(5)
    layer = MultiHeadAttention(16, 4, use_bias=True, dtype=dtype)
    q = rng.standard_normal((3, 1, 16)).astype("float32")
    kv = rng.standard_normal((3, 6, 16)).astype("float32")
    keep = rng.random((3, 1, 6)) > 0.3
    keep[2] = False  # no valid key
    one, w_one = layer(q, kv, kv, mask=keep, return_attention_scores=True)
    two, w_two = layer(np.repeat(q, 2, axis=1), kv, kv, mask=np.repeat(keep, 2, axis=1),
                       return_attention_scores=True)
    # float32: the layer's reductions; mixed_bfloat16: one rounding to bfloat16 per stage
    w_terms, out_terms = attention_terms("mha", 16, num_keys=6, hidden=16, heads=4)
    close = (functools.partial(lc.assert_close, terms=out_terms) if dtype == "float32" else
             functools.partial(lc.assert_close, terms=BF16_STAGES, factor=BF16_FACTOR,
                               dtype="bfloat16"))
    close(one, np_(two)[:, :1])
    close(w_one, np_(w_two)[:, :, :1])
    assert not np_(w_one)[2].any()
    assert not np_(w_one)[~np.broadcast_to(keep[:, None], np_(w_one).shape)].any()
    # no mask, and a (B, K) mask
    q2 = np.repeat(q, 2, axis=1)
    close(layer(q, kv, kv), np_(layer(q2, kv, kv))[:, :1])
    close(layer(q, kv, kv, mask=keep[:, 0]), np_(layer(q2, kv, kv, mask=keep[:, 0]))[:, :1])
