"""The kernel choice as explicit state (keras_attn.kernels.fastpath.KernelPolicy), caches that carry
their layout (keras_attn.kernels.kv_cache), and every variant the step kernels meet: covered
by the same code (compared with the layer's own call) or refused with an error naming it.

Tolerances: float32 sums of ``d`` products, ``eps32 * d * scale`` with a small factor
(layer_checks.assert_close); float16 results, half an ulp of float16 at their scale.
"""
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.kernels import fastpath
from keras_attn.kernels import tf_attention
from keras_attn.layers import MultiHeadAttention
from keras_attn.layers import _step
from keras_attn.kernels.kv_cache import GrowingCache, HeadsFirstCache, KVCache, as_cache

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="the fast paths are TensorFlow's")


# --- the policy ---------------------------------------------------------------------------------
def test_policy_is_scoped_and_validated():
    before = fastpath.current()
    with fastpath.using(fast_paths=False, dynamic_shapes=True) as policy:
        assert policy is fastpath.current()
        assert not fastpath.enabled() and policy.dynamic_shapes
        with fastpath.using(fast_paths=True):
            assert fastpath.enabled() and fastpath.current().dynamic_shapes  # inherited
        assert not fastpath.enabled()
    assert fastpath.current() == before
    with pytest.raises(ValueError, match="dynamic_shapes"):
        fastpath.KernelPolicy(dynamic_shapes="yes")
    with pytest.raises(ValueError, match="attention_chunks"):
        fastpath.KernelPolicy(attention_chunks=1)
    with pytest.raises(ValueError, match="policy"):
        with fastpath.using("fast"):
            pass


def test_policy_does_not_leak_into_another_thread():
    """A context variable: a server tracing a TFLite graph in one thread and a SavedModel
    in another does not mix their policies."""
    seen = []
    with fastpath.using(dynamic_shapes=True):
        thread = threading.Thread(target=lambda: seen.append(fastpath.current().dynamic_shapes))
        thread.start()
        thread.join()
        assert fastpath.current().dynamic_shapes
    assert seen == [False]


def test_growing_cache_only_in_a_traced_graph_with_dynamic_shapes():
    mha = MultiHeadAttention(8, 2)
    mha.build((1, 1, 8))

    seen = []

    def layout():
        seen.append(type(mha.init_cache(1, 4)))
        return tf.constant(0)

    def traced():
        tf.function(layout)()
        return seen[-1]

    layout()
    assert seen[-1] is HeadsFirstCache  # eager, default policy
    assert traced() is HeadsFirstCache  # a graph, but no dynamic shapes
    with fastpath.using(dynamic_shapes=True):
        layout()
        assert seen[-1] is HeadsFirstCache  # eager: nothing grows
        assert traced() is GrowingCache
    with fastpath.using(fast_paths=False, dynamic_shapes=True):
        assert traced() is KVCache
    with fastpath.using(dynamic_shapes=True, compiled=True):  # XLA: fixed shapes
        assert traced() is HeadsFirstCache
    with pytest.raises(ValueError, match="compiled"):
        fastpath.KernelPolicy(compiled=1)


@pytest.mark.heavy  # compiles the confidence pass
def test_compiled_confidence_pass_reads_the_whole_buffer_alike():
    """Under ``compiled`` (XLA) the confidence pass is not cut to the longest hypothesis:
    the same features, the padding positions adding nothing (causal, masked)."""
    from keras_attn import models
    from keras_attn.decoding.confidence import hypothesis_features

    tf.keras.utils.set_random_seed(0)
    model = models.transformer_seq2seq(12, 12, 16, 32, 2, 1, dropout=0.0, max_len=16)
    source = tf.constant([[5, 6, 7, 3, 0], [4, 3, 0, 0, 0]])
    tokens = tf.constant([[5, 3] + [0] * 10, [6, 7, 8, 3] + [0] * 8])  # (B, max_len 12)
    cut = hypothesis_features(model, source, tokens, 2, 3)
    with fastpath.using(compiled=True):
        whole = tf.function(lambda s, t: hypothesis_features(model, s, t, 2, 3),
                            jit_compile=True)(source, tokens)
    # The features hold summed log-probabilities over at most 12 tokens of a 1-layer model.
    terms = lc.log_prob_terms(lc.transformer_terms(16, 32, 2, 1, 5, 12), 12, 12)
    lc.assert_close(whole, cut, terms=terms)


@pytest.mark.parametrize("chunks, gpu, expected", [(None, False, 64), (None, True, 1),
                                                    (True, True, 64), (False, False, 1)])
def test_attention_chunks_follow_the_policy(monkeypatch, chunks, gpu, expected):
    """None asks whether a GPU is visible; True/False decide whatever TensorFlow sees."""
    monkeypatch.setattr(tf_attention, "gpu_visible", lambda: gpu)
    with fastpath.using(attention_chunks=chunks):
        assert len(tf_attention.attention_chunks(16, 8, 512, 512)) == expected


# --- caches carry their layout -------------------------------------------------------------------
def _step_outputs(mha, x, layout, steps=3):
    cache = mha.init_cache(2, steps, layout=layout)
    out = []
    for i in range(steps):
        y, cache = mha(x[:, i:i + 1], x[:, i:i + 1], x[:, i:i + 1], cache=cache,
                       cache_update_index=i, use_causal_mask=True)
        assert isinstance(cache, layout)
        out.append(np.asarray(y))
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("fast_paths", [True, False])
def test_the_cache_layout_chooses_the_kernels(fast_paths):
    """The same self-attention steps from a KVCache (reference) and a HeadsFirstCache
    (TensorFlow's step kernels) under either policy: the layer reads the cache's class, not
    the switch. Both equal the uncached causal call."""
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(16, 4, use_bias=True)
    x = rng.normal(size=(2, 3, 16)).astype("float32")
    full = np.asarray(mha(x, x, x, use_causal_mask=True))
    with fastpath.using(fast_paths=fast_paths):
        ref = _step_outputs(mha, x, KVCache)
        fast = _step_outputs(mha, x, HeadsFirstCache)
    lc.assert_close(ref, full, terms=16 * 3)
    lc.assert_close(fast, full, terms=16 * 3)


def test_a_plain_pair_is_a_kv_cache_and_bad_caches_are_refused():
    zeros = np.zeros((1, 2, 2, 4), "float32")
    assert isinstance(as_cache((zeros, zeros)), KVCache)
    with pytest.raises(ValueError, match="cache"):
        as_cache([zeros])
    with pytest.raises(ValueError, match="layout"):
        MultiHeadAttention.cache_layout(tuple)


# --- variants of the step kernels: covered or refused ---------------------------------------------
def _dense(**kwargs):
    layer = keras.layers.Dense(6, activation="relu", **kwargs)
    layer.build((None, None, 5))
    rng = np.random.default_rng(1)
    layer.kernel.assign(rng.normal(size=(5, 6)).astype("float32"))
    return layer


def test_lora_dense_is_covered_by_the_step_kernel():
    """A LoRA-enabled Dense: its kernel property adds the low-rank update, which the
    one-position kernel multiplies by; equal to the layer's own call."""
    layer = _dense()
    layer.enable_lora(2)
    rng = np.random.default_rng(2)
    layer.lora_kernel_b.assign(rng.normal(size=(2, 6)).astype("float32"))  # a real update
    x = rng.normal(size=(3, 1, 5)).astype("float32")
    assert fastpath.enabled()
    lc.assert_close(np.asarray(_step.dense(layer, x)), np.asarray(layer(x)), terms=5 + 2)


def test_quantized_dense_is_refused_naming_the_mode():
    layer = _dense()
    layer.quantize("int8")
    x = np.ones((2, 1, 5), "float32")
    with pytest.raises(ValueError, match="int8"):
        _step.dense(layer, x)
    with fastpath.disabled():  # the reference path runs the layer's own call
        assert np.asarray(_step.dense(layer, x)).shape == (2, 1, 6)


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")  # Keras's deprecation
@pytest.mark.parametrize("kwargs, name", [(dict(rms_scaling=True), "rms_scaling"),
                                           (dict(center=False), "center"),
                                           (dict(scale=False), "scale")])
def test_layer_norm_variants_the_kernel_lacks_are_refused(kwargs, name):
    ln = keras.layers.LayerNormalization(**kwargs)
    ln.build((None, 1, 8))
    with pytest.raises(ValueError, match=name):
        _step.layer_norm(ln, np.ones((2, 1, 8), "float32"))


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_layer_norm_step_kernel_covers_every_compute_dtype(policy):
    """Computed in float32 and cast to the compute dtype, as Keras's LayerNormalization."""
    ln = keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy)
    ln.build((None, 1, 8))
    rng = np.random.default_rng(3)
    ln.gamma.assign(rng.normal(size=8).astype("float32"))
    ln.beta.assign(rng.normal(size=8).astype("float32"))
    x = tf.cast(rng.normal(size=(4, 1, 8)) * 3, ln.compute_dtype)
    fast, ref = _step.layer_norm(ln, x), ln(x)
    assert fast.dtype == ref.dtype
    fast, ref = np.asarray(tf.cast(fast, tf.float32)), np.asarray(tf.cast(ref, tf.float32))
    if policy == "float32":
        lc.assert_close(fast, ref, terms=8)
    else:  # one rounding to the half type each: at most an ulp of it apart
        ulp = {"mixed_float16": 2.0 ** -10, "mixed_bfloat16": 2.0 ** -7}[policy]
        np.testing.assert_allclose(fast, ref, atol=ulp * np.abs(ref).max(), rtol=0)


def test_fused_and_separate_projections_agree():
    """Self-attention steps project with one matmul (queries is keys is values); the same
    tensors passed as copies take three: the same values."""
    rng = np.random.default_rng(4)
    mha = MultiHeadAttention(16, 4, use_bias=True)
    x = rng.normal(size=(2, 1, 16)).astype("float32")
    mha(x, x, x)
    cache = mha.init_cache(2, 4, layout=HeadsFirstCache)
    t = tf.constant(x)
    fused, _ = mha(t, t, t, cache=cache, cache_update_index=0)
    separate, _ = mha(t, tf.identity(t), tf.identity(t), cache=cache, cache_update_index=0)
    lc.assert_close(np.asarray(fused), np.asarray(separate), terms=2 * 16)
