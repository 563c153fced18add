"""keras_attn.kernels.fastpath: every TensorFlow fast path gives what its keras.ops reference gives.

Each comparison runs the same computation twice in one process, with the switch on and off,
and compares values and gradients. Tolerances come from float32 rounding of the sums
involved: ``eps32 * (terms summed) * (largest magnitude compared)`` with a modest factor.
"""
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding, models
from keras_attn.kernels import fastpath
from keras_attn.training import losses
from keras_attn.kernels import tf_attention
from keras_attn import ops as attn_ops
from keras_attn.layers import Dropout, MultiHeadAttention
from keras_attn.layers.dropout import quantized_rate

EPS = np.finfo("float32").eps


def tol(reference, terms, factor=8):
    """Absolute tolerance for float32 results that each sum ``terms`` products."""
    return factor * EPS * terms * max(float(np.abs(reference).max()), 1e-30)


def both(fn):
    """``fn()`` on the fast path, then on the reference path."""
    assert fastpath.enabled(), "the suite runs with the fast paths on (TensorFlow)"
    fast = fn()
    with fastpath.disabled():
        assert not fastpath.enabled()
        ref = fn()
    return fast, ref


def test_switch_restores_and_env_default(monkeypatch):
    with fastpath.disabled():
        with fastpath.switched(True):
            assert fastpath.enabled()
        assert not fastpath.enabled()
    assert fastpath.enabled()


@pytest.mark.parametrize("rank", [3, 4])
def test_masked_softmax_and_gradient_agree(rank):
    rng = np.random.default_rng(0)
    shape = (3, 2, 5, 7) if rank == 4 else (3, 5, 7)
    scores = tf.constant(rng.normal(size=shape).astype("float32") * 3)
    valid_lens = tf.constant([0, 3, 7])
    upstream = tf.constant(rng.normal(size=shape).astype("float32"))

    def run():
        with tf.GradientTape() as tape:
            tape.watch(scores)
            w = attn_ops.masked_softmax(scores, valid_lens=valid_lens)
            loss = tf.reduce_sum(w * upstream)
        return w.numpy(), tape.gradient(loss, scores).numpy()

    (w_fast, g_fast), (w_ref, g_ref) = both(run)
    np.testing.assert_array_equal(w_fast == 0, w_ref == 0)  # the same exact zeros
    np.testing.assert_allclose(w_fast, w_ref, rtol=0, atol=tol(w_ref, shape[-1]))
    np.testing.assert_allclose(g_fast, g_ref, rtol=0, atol=tol(g_ref, shape[-1]))
    assert np.abs(g_ref).max() > 0.01  # the check can fail


@pytest.mark.parametrize("case", ["self causal", "cross valid_lens", "one query",
                                  "chunks"])
def test_multi_head_attention_and_gradients_agree(case, monkeypatch):
    rng = np.random.default_rng(1)
    hidden, heads = 16, 4
    q_len = 1 if case == "one query" else 6
    queries = tf.constant(rng.normal(size=(3, q_len, hidden)).astype("float32"))
    keys = tf.constant(rng.normal(size=(3, 9, hidden)).astype("float32"))
    kwargs = {"self causal": dict(use_causal_mask=True), "cross valid_lens": dict(
        valid_lens=tf.constant([2, 9, 0])), "one query": dict(mask=tf.constant(
            rng.random((3, 9)) > 0.3)), "chunks": dict(mask=tf.constant(rng.random((3, 9)) > 0.3))
    }[case]
    if case == "chunks":  # the fast path attends one head per chunk
        monkeypatch.setattr(tf_attention, "CHUNK_ABOVE", 0)
        monkeypatch.setattr(tf_attention, "CHUNK_BYTES", 4 * q_len * 9)
        monkeypatch.setattr(tf_attention, "gpu_visible", lambda: False)
    if case == "self causal":
        keys = queries
    layer = MultiHeadAttention(hidden, heads, use_bias=True)
    layer(queries, keys, keys)

    def run():
        with tf.GradientTape() as tape:
            tape.watch([queries, keys])
            out, w = layer(queries, keys, keys, return_attention_scores=True, **kwargs)
            loss = tf.reduce_sum(out * np.arange(hidden, dtype="float32"))
        grads = tape.gradient(loss, [queries, keys] + layer.trainable_weights)
        return [out.numpy(), w.numpy()] + [g.numpy() for g in grads]

    fast, ref = both(run)
    for name, a, b in zip(["output", "weights", "d_queries", "d_keys"], fast, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol(b, 4 * hidden), err_msg=name)
    # Weight gradients: the key bias's is zero in exact arithmetic (a per-row constant
    # added to the scores does not move a softmax), so all are compared on the scale of
    # the largest weight gradient.
    scale = max(np.abs(g).max() for g in ref[2:])
    for a, b in zip(fast[4:], ref[4:]):
        np.testing.assert_allclose(a, b, rtol=0, atol=8 * EPS * 4 * hidden * 3 * q_len * scale)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_cross_entropy_and_gradient_agree(smoothing):
    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(size=(4, 6, 50)).astype("float32") * 2)
    labels = tf.constant(rng.integers(1, 50, (4, 6)).astype("int32") * (rng.random((4, 6)) > 0.3))

    def run():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = losses.masked_cross_entropy(labels, logits, smoothing)
        return loss.numpy(), tape.gradient(loss, logits).numpy()

    (l_fast, g_fast), (l_ref, g_ref) = both(run)
    np.testing.assert_allclose(l_fast, l_ref, rtol=0, atol=tol(l_ref, 50))
    np.testing.assert_allclose(g_fast, g_ref, rtol=0, atol=tol(g_ref, 50))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_paths_realise_the_same_rate(rate):
    """Both paths keep each element with probability ``1 - quantized_rate(rate)`` and scale
    kept values by its inverse; the random streams differ, so the check is statistical:
    the drop fraction of 200,000 draws lies within 5 binomial standard deviations."""
    x = tf.ones((200, 1000))
    n, q = 200_000, quantized_rate(rate)
    layer = Dropout(rate, seed=3)
    fast, ref = both(lambda: layer(x, training=True).numpy())
    for y in (fast, ref):
        dropped = float(np.mean(y == 0))
        assert abs(dropped - q) < 5 * np.sqrt(q * (1 - q) / n)
        # one float32 multiply of 1.0 by the scale: at most half an ulp off
        np.testing.assert_allclose(np.unique(y[y != 0]), [1 / (1 - q)], rtol=EPS, atol=0)


@pytest.mark.heavy  # traces both paths' searches
def test_greedy_and_beam_decoding_agree():
    model = models.transformer_seq2seq(40, 40, num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                                       num_layers=2, dropout=0.0, max_len=24)
    rng = np.random.default_rng(4)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.3)
    source = rng.integers(3, 40, (4, 7)).astype("int32")
    source[1, 3:] = 0

    def run():
        greedy = decoding.greedy_search(model, source, 12, 1, 2).numpy()
        beam = decoding.beam_search(model, source, beam_size=3, max_len=12,
                                    start_id=1, end_id=2)[0].numpy()
        return greedy, beam

    (g_fast, b_fast), (g_ref, b_ref) = both(run)
    np.testing.assert_array_equal(g_fast, g_ref)
    np.testing.assert_array_equal(b_fast, b_ref)
    assert (g_ref > 2).any()  # something was generated


# Every option of the decoder builder in two models (test_architectures, in CI's slow pass,
# covers more of their pairs through the artefacts).
DECODER_CASES = {"post-norm, attention biases": dict(use_bias=True),
                 "pre-norm, tied": dict(norm_first=True, tie_embeddings=True)}


def _random_transformer(case, seed):
    model = models.transformer_seq2seq(40, 30, num_hiddens=16, ffn_num_hiddens=32,
                                       num_heads=4, num_layers=2, dropout=0.0, max_len=24,
                                       **DECODER_CASES[case])
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.3)
    return model, rng


@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_encoder_agrees(case):
    """The encoder on the fast path against the reference at every real source position
    (padded positions are never attended to), including an out-of-vocabulary id (read as
    [UNK] by both) and a row that is all padding."""
    from tests.support import layer_checks as lc

    model, rng = _random_transformer(case, 6)
    ids = np.where(np.arange(9) < [[9], [5], [0]], rng.integers(3, 40, (3, 9)), 0)
    ids[0, 3] = 57  # outside the source vocabulary
    source = tf.constant(ids.astype("int32"))
    encoder = model.get_layer("encoder")
    fast, ref = both(lambda: np.asarray(encoder(source, training=False)))
    assert fast.shape == ref.shape == (3, 9, 16)
    real = ids != 0
    terms = lc.stack_terms(16, lc.encoder_block_terms(16, 32, 4, 9), 2, final_norm=True)
    lc.assert_close(fast[real], ref[real], terms=terms)
    assert np.isfinite(fast).all()


@pytest.mark.slow  # 12 s each; the README pass compares the layers' steps in test_decoding
@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_cached_decoding_step_agrees(case):
    """The decoder's cached call on the fast path (heads-first caches, one-position
    kernels; growing caches in a graph, preallocated eagerly and for TFLite) against the
    reference path and against the uncached call (the whole prefix re-run): logits and
    alignment at every step of a fixed token sequence, then greedy tokens, scores and
    alignments, and beam hypotheses. Row 2 of the source is all padding: zero alignment
    and a finite step, as in the reference."""
    from tests.support import layer_checks as lc

    model, rng = _random_transformer(case, 5)
    source = tf.constant(np.where(np.arange(7) < [[7], [4], [0]],
                                  rng.integers(3, 40, (3, 7)), 0).astype("int32"))
    tokens = rng.integers(3, 30, (3, 8)).astype("int32")

    def stepwise(use_cache=True):
        steps = decoding.step_functions(model, source, 8, use_cache=use_cache,
                                        encoded=decoding.encode(model, source))
        state, out = steps.init(), []
        for i in range(8):
            logits, state, align = steps.step(tf.constant(tokens[:, i]), state,
                                              tf.constant(i), alignment=True)
            out.append((logits, align))
        return out

    def numpy(run):
        return [tuple(np.asarray(t) for t in pair) for pair in run]

    def decode():
        greedy = decoding.greedy_decode_fixed(model, source, 8, 1, 2, return_attention=True)
        beam = decoding.beam_decode_fixed(model, source, 3, 0.6, 8, 1, 2)["tokens"]
        if tf.inside_function():
            return greedy, beam
        return {k: v.numpy() for k, v in greedy.items()}, beam.numpy()

    terms = lc.transformer_terms(16, 32, 4, 2, 7, 8, norm_first=True)
    fast, ref = both(lambda: numpy(stepwise()))
    with fastpath.using(dynamic_shapes=True):
        graph = numpy(tf.function(stepwise)())  # the cache grows
    preallocated = numpy(tf.function(stepwise)())  # fixed buffers, as for TFLite
    uncached = numpy(stepwise(use_cache=False))
    for run in (fast, graph, preallocated, uncached):
        for (l_fast, a_fast), (l_ref, a_ref) in zip(run, ref):
            lc.assert_close(l_fast, l_ref, terms=terms)  # the decoder's logits (no bans)
            lc.assert_close(a_fast, a_ref, terms=terms)
            np.testing.assert_array_equal(a_fast[2], 0)
    (g_fast, b_fast), (g_ref, b_ref) = both(decode)
    with fastpath.using(dynamic_shapes=True):
        g_graph, b_graph = tf.function(decode)()
    for g, b in ((g_fast, b_fast), (g_graph, b_graph)):
        for key in ("tokens", "lengths"):
            np.testing.assert_array_equal(g[key], g_ref[key])
        lc.assert_close(g["log_prob"], g_ref["log_prob"], terms=8 * (terms + 34))
        lc.assert_close(g["attention"], g_ref["attention"], terms=terms)
        np.testing.assert_array_equal(b, b_ref)
    assert (g_ref["tokens"] > 2).any()  # something was generated


def test_decode_step_with_a_start_id_outside_the_vocabulary():
    """The reference embeds an out-of-vocabulary id as [UNK] (clean_token_ids); so does
    the fast step, for the start token."""
    model = models.transformer_seq2seq(20, 10, num_hiddens=8, ffn_num_hiddens=16,
                                       num_heads=2, num_layers=1, dropout=0.0, max_len=8)
    source = np.array([[4, 5, 6, 3]], "int32")
    fast, ref = both(lambda: decoding.greedy_decode_fixed(model, source, 6, 12, 2)["tokens"]
                     .numpy())
    np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("graph", [False, True])
def test_cached_attention_with_several_queries_and_valid_lens(graph):
    """The cached call on the fast path (heads-first cache; in a graph a growing one)
    against the reference for what decoding does not exercise: three queries written at
    once after two cached positions (a target prefix), causal among themselves, and a
    cross-attention cache with ``valid_lens``."""
    rng = np.random.default_rng(7)
    layer = MultiHeadAttention(16, 4, use_bias=True)
    x = tf.constant(rng.normal(size=(2, 5, 16)).astype("float32"))
    source = tf.constant(rng.normal(size=(2, 6, 16)).astype("float32"))
    layer(x, x, x)

    def run():
        cache = layer.init_cache(2, 5)
        out = []
        for start, stop in ((0, 2), (2, 5)):
            part = x[:, start:stop]
            y, _, cache = layer(part, part, part, use_causal_mask=True, cache=cache,
                                cache_update_index=start, return_attention_scores=True)
            out.append(y)
        y, w, _ = layer(x, cache=layer.compute_cache(source), valid_lens=tf.constant([6, 3]),
                        return_attention_scores=True)
        return out + [y, w]

    def fn():
        return [np.asarray(t) for t in (tf.function(run)() if graph else run())]

    fast, ref = both(fn)
    full = layer(x, x, x, use_causal_mask=True)  # the uncached reference
    np.testing.assert_allclose(np.concatenate(fast[:2], 1), full, rtol=0, atol=tol(full, 64))
    for a, b in zip(fast, ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol(b, 64))
    assert (fast[3][1, :, :, 3:] == 0).all()  # keys beyond valid_lens get no weight


@pytest.mark.heavy  # traces the searches in mixed float16
def test_cached_decoding_in_mixed_float16():
    """Under mixed_float16 the fast step's kernels take float16 (``BatchMatMulV3`` has no
    float16 CPU kernel: ``tf.matmul`` there); eagerly and in a graph it decodes what the
    reference decodes."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(3)
        model = models.transformer_seq2seq(40, 30, 32, 64, 4, 2, 0.0, max_len=24,
                                           norm_first=True, tie_embeddings=True)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    source = np.array([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], "int32")

    def decode():
        return decoding.greedy_decode_fixed(model, source, 10, 2, 3)["tokens"]

    fast, ref = both(lambda: np.asarray(decode()))
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(tf.function(decode)(), ref)
