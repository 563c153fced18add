"""Checks shared by the layer test modules, and NumPy references of the attention maths.

Every public layer's tests run the same checks (STYLE.md, "A test module"): config round
trip, ``.keras`` save/load, finite gradients, dropout only while training, a functional model
with unknown sequence length, XLA, mixed precision. They live here so the Transformer-block
tests reuse them. The NumPy references are written from the formulas, not from the code
under test.
"""
import contextlib

import keras
import numpy as np
import tensorflow as tf

# ----------------------------------------------------------------------------------------
# Small utilities


def as_numpy(x):
    """A tensor, or a (nested) tuple/list of tensors, as float64 NumPy arrays."""
    if isinstance(x, (tuple, list)):
        return type(x)(as_numpy(t) for t in x)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")), np.float64)


def assert_close(actual, expected, rtol=1e-5, atol=1e-5):
    """``assert_allclose`` through tuples and lists of tensors."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def flat(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


@contextlib.contextmanager
def global_policy(name):
    """Set Keras's global dtype policy inside a ``with`` block, restoring it afterwards."""
    old = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(old)


# ----------------------------------------------------------------------------------------
# NumPy references


def np_softmax_keep(scores, keep):
    """Softmax over the last axis over the ``keep`` entries only; 0 elsewhere; rows with
    no kept entry are all 0. ``keep`` broadcasts against ``scores``."""
    scores = np.asarray(scores, np.float64)
    keep = np.broadcast_to(np.asarray(keep, bool), scores.shape)
    shifted = np.where(keep, scores, -np.inf)
    row_max = np.max(shifted, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(keep, np.exp(np.where(keep, scores, 0.0) - row_max), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def np_keep_from_valid_lens(valid_lens, num_keys):
    """D2L semantics: key j is kept iff j < valid_len; (B,) -> (B, 1, K), (B, Q) -> (B, Q, K)."""
    valid_lens = np.asarray(valid_lens)
    keep = np.arange(num_keys) < valid_lens[..., None]
    return keep[:, None, :] if valid_lens.ndim == 1 else keep


def dense_np(layer, x):
    """``x @ kernel (+ bias)`` of a built ``keras.layers.Dense``, in float64."""
    y = np.asarray(x, np.float64) @ np.asarray(layer.kernel.numpy(), np.float64)
    if layer.use_bias:
        y = y + np.asarray(layer.bias.numpy(), np.float64)
    return y


def np_multi_head_attention(layer, queries, keys, values, keep=None):
    """Multi-head attention from ``layer``'s own ``W_q``/``W_k``/``W_v``/``W_o`` weights.

    ``keep``: bool broadcastable to (B, Q, K), shared by every head (None = keep all).
    Returns (output (B, Q, num_hiddens), weights (B, H, Q, K)).
    """
    h = layer.num_heads
    q, k, v = (dense_np(d, x) for d, x in
               ((layer.W_q, queries), (layer.W_k, keys), (layer.W_v, values)))
    b, nq, hidden = q.shape
    nk = k.shape[1]
    dh = hidden // h

    def split(x, n):  # (B, n, hidden) -> (B, H, n, dh)
        return x.reshape(b, n, h, dh).transpose(0, 2, 1, 3)

    qh, kh, vh = split(q, nq), split(k, nk), split(v, nk)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(dh)  # (B, H, Q, K)
    keep = np.ones((b, nq, nk), bool) if keep is None else np.asarray(keep, bool)
    weights = np_softmax_keep(scores, np.broadcast_to(keep, (b, nq, nk))[:, None])
    context = (weights @ vh).transpose(0, 2, 1, 3).reshape(b, nq, hidden)  # concat heads
    return dense_np(layer.W_o, context), weights


# ----------------------------------------------------------------------------------------
# Checks every layer test runs


def check_config_round_trip(layer, *args, **kwargs):
    """``from_config(get_config())`` rebuilds the layer; with the same weights it computes
    the same outputs. Also checks the layer is registered under the ``keras_attn`` package.
    ``layer(*args, **kwargs)`` must run (it builds the layer)."""
    expected = layer(*args, **kwargs)
    config = layer.get_config()
    name = type(layer).__name__
    assert keras.saving.get_registered_name(type(layer)) == f"keras_attn>{name}"
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # Through the registry, as a .keras file deserializes it.
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer) and restored.get_config() == config
    clone(*args, **kwargs)
    clone.set_weights(layer.get_weights())
    assert_close(clone(*args, **kwargs), expected, rtol=1e-6, atol=1e-6)
    return clone


def check_save_load(model, inputs, tmp_path, rtol=1e-6, atol=1e-6):
    """A model saved to ``.keras`` loads back (no ``custom_objects``: registration must be
    enough) and gives the same outputs. Returns the loaded model."""
    expected = model(inputs, training=False)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert_close(loaded(inputs, training=False), expected, rtol=rtol, atol=atol)
    return loaded


def check_grads_finite(fn, sources):
    """Gradients of ``sum(fn() ** 2)`` w.r.t. every one of ``sources`` (variables or watched
    tensors) exist and are finite, and not all of them are zero. Returns the gradients."""
    sources = list(sources)
    assert sources, "nothing to differentiate"
    with tf.GradientTape() as tape:
        for s in sources:
            if not isinstance(s, (tf.Variable, keras.Variable)):
                tape.watch(s)
        loss = tf.add_n([tf.reduce_sum(tf.square(tf.cast(o, "float32"))) for o in flat(fn())])
    grads = tape.gradient(loss, sources)
    for s, g in zip(sources, grads):
        assert g is not None, f"no gradient for {getattr(s, 'path', s)}"
        assert np.all(np.isfinite(g.numpy())), f"non-finite gradient for {getattr(s, 'path', s)}"
    assert any(np.any(g.numpy() != 0) for g in grads), "all gradients are zero"
    return grads


def check_dropout(make_layer, *args, rate=0.5, **kwargs):
    """Dropout only with ``training=True``.

    ``make_layer(rate)`` builds the layer. With the same weights: ``training=False`` (and
    the default) is deterministic and equals a ``dropout=0`` twin; ``training=True``
    differs from it (and from one training call to the next).
    """
    layer, plain = make_layer(rate), make_layer(0.0)
    evaluated = layer(*args, training=False, **kwargs)
    plain(*args, **kwargs)
    plain.set_weights(layer.get_weights())
    assert_close(layer(*args, training=False, **kwargs), evaluated, rtol=0, atol=0)
    assert_close(layer(*args, **kwargs), evaluated, rtol=0, atol=0)
    assert_close(plain(*args, training=False, **kwargs), evaluated, rtol=1e-6, atol=1e-6)
    trained = [as_numpy(flat(layer(*args, training=True, **kwargs))[0]) for _ in range(2)]
    first = as_numpy(flat(evaluated)[0])
    assert not np.allclose(trained[0], first), "training=True gave the inference output"
    assert not np.allclose(trained[0], trained[1]), "dropout mask did not change between calls"
    return layer


def check_jit(fn, *tensors, rtol=1e-5, atol=1e-5):
    """``tf.function(fn, jit_compile=True)`` gives what ``fn`` gives eagerly."""
    expected = fn(*tensors)
    compiled = tf.function(fn, jit_compile=True)
    assert_close(compiled(*tensors), expected, rtol=rtol, atol=atol)


def check_functional_model(wire, specs, batches, rtol=1e-5, atol=1e-5):
    """A functional model whose inputs have unknown lengths gives the eager results.

    ``specs``: ``(shape, dtype)`` per input, ``None`` for unknown sizes. ``wire(*tensors)``
    calls the layer(s) on symbolic inputs for the model and on arrays for the reference.
    ``batches``: tuples of arrays (one per input), e.g. two different lengths.
    """
    inputs = [keras.Input(shape, dtype=dtype) for shape, dtype in specs]
    single = len(inputs) == 1
    model = keras.Model(inputs[0] if single else inputs, wire(*inputs))
    for arrays in batches:
        got = model(arrays[0] if single else list(arrays))
        assert_close(got, wire(*arrays), rtol=rtol, atol=atol)
    return model


def check_mixed_float16(make_layer, *args, **kwargs):
    """Built under the ``mixed_float16`` policy the layer computes in float16 (variables in
    float32) and its outputs are finite. Returns the outputs."""
    with global_policy("mixed_float16"):
        layer = make_layer()
    assert layer.compute_dtype == "float16" and layer.variable_dtype == "float32"
    outputs = layer(*args, **kwargs)
    for out in flat(outputs):
        assert keras.backend.standardize_dtype(out.dtype) == "float16"
        assert np.all(np.isfinite(as_numpy(out)))
    for w in layer.weights:
        assert keras.backend.standardize_dtype(w.dtype) == "float32", w.path
    return outputs
