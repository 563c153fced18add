"""Checks shared by the layer test modules, and NumPy references of the attention maths.

Every public layer's tests run the same checks (STYLE.md, "A test module"): config round
trip, ``.keras`` save/load, finite gradients, dropout only while training, a functional model
with unknown sequence length, XLA, mixed precision. They live here so the Transformer-block
tests reuse them. The NumPy references are written from the formulas, not from the code
under test. Floats are compared with :func:`assert_close`, whose tolerance is derived from
the arithmetic compared (:func:`tolerance` and the rounding counts below), so that any
CPU's kernels pass, not only the ones a test was first run on.
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


# Machine epsilon (the gap above 1.0) of each dtype a layer may compute in.
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
# Safety factor of `tolerance`: the standard bound on a float sum of n terms is
# n * (eps / 2) * sum(|x_i|), and sum(|x_i|) may exceed the largest |result| by a few times
# (cancellation), and rounding in early stages is carried through later ones.
FACTOR = 10


def tolerance(expected, *, terms, scale=None, factor=FACTOR, dtype="float32"):
    """The absolute tolerance of :func:`assert_close`: ``factor * eps(dtype) * terms * scale``.

    It comes from the arithmetic compared, never from one machine's output (other CPUs,
    oneDNN or Eigen kernels, XLA, round differently; each is right to a few eps per term):

    - ``eps(dtype)``: machine epsilon of the dtype the compared values are computed in.
    - ``terms``: how many roundings one compared value accumulates: the sum of the
      reduction lengths along its longest path (matmul inner dimensions, softmax length,
      LayerNorm width, summed terms, time steps), plus one per elementwise stage. For
      float16/bfloat16 layers (float32 inside) count the roundings to the 16-bit dtype.
    - ``scale``: what the rounding is relative to; by default the largest ``|expected|``,
      so entries near zero are judged against the tensor's magnitude, not held to a
      relative tolerance they cannot meet. A value that is zero in exact arithmetic (a
      gradient that cancels) must be given the scale of the terms it is summed from
      (its neighbours' magnitude).
    - ``factor``: `FACTOR` for sums; 1 where a compared value only goes through a few
      roundings of its own value, no sums (a result rounded once to float16): each is at
      most eps/2 of the value, so factor 1 is already twice the bound.
    """
    if scale is None:
        scale = float(np.max(np.abs(expected))) if np.size(expected) else 0.0
    return factor * EPS[dtype] * terms * scale


def is_close(actual, expected, *, terms, scale=None, factor=FACTOR, dtype="float32"):
    """Whether every element agrees within :func:`tolerance` (tensors, tuples, lists)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if isinstance(expected, (tuple, list)):
        return len(actual) == len(expected) and all(
            is_close(a, e, terms=terms, scale=scale, factor=factor, dtype=dtype)
            for a, e in zip(actual, expected))
    tol = tolerance(expected, terms=terms, scale=scale, factor=factor, dtype=dtype)
    return bool(np.all(np.abs(actual - expected) <= tol))


def assert_close(actual, expected, *, terms, scale=None, factor=FACTOR, dtype="float32",
                 err_msg=""):
    """``assert_allclose(actual, expected, rtol=0, atol=tolerance(...))`` through tuples and
    lists of tensors (each compared against its own scale unless ``scale`` is given). See
    :func:`tolerance` for ``terms``, ``scale``, ``factor`` and ``dtype``."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, terms=terms, scale=scale, factor=factor, dtype=dtype,
                         err_msg=err_msg)
        return
    tol = tolerance(expected, terms=terms, scale=scale, factor=factor, dtype=dtype)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tol, err_msg=err_msg)


def assert_equal(actual, expected):
    """Exact equality through tuples and lists of tensors: for results that are equal by
    construction (the same call repeated, masked entries selected to 0, integers)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_array_equal(actual, expected)


# Rounding counts (``terms`` of `tolerance`) of a translator's pieces, along each one's
# longest path: a matmul adds its inner dimension, an elementwise step (bias, residual add,
# scaling, gate) 1, and a piece's output carries its inputs' roundings on.


def ffn_terms(d_in, hidden):
    """PositionWiseFFN: two matmuls (inner ``d_in``, then ``hidden``) and their biases."""
    return d_in + hidden + 2


def layer_norm_terms(d):
    """LayerNorm over ``d``: the mean and variance sums, subtract, rsqrt, scale, shift."""
    return 2 * d + 4


def mha_terms(d, heads, num_keys, in_size=None):
    """Multi-head attention of width ``d`` over ``num_keys``: the query/key projection
    (``in_size``, default ``d``), a head's ``d / heads``, the softmax and the weighted
    sum over the keys, the value projection and ``W_o`` (``d``)."""
    in_size = d if in_size is None else in_size
    return 2 * in_size + d // heads + 2 * num_keys + d


def encoder_block_terms(d, ffn, heads, length):
    """TransformerEncoderBlock: self-attention, FFN, two residual adds and LayerNorms."""
    return mha_terms(d, heads, length) + ffn_terms(d, ffn) + 2 * (1 + layer_norm_terms(d))


def decoder_block_terms(d, ffn, heads, tgt_len, src_len):
    """TransformerDecoderBlock: causal self-attention, cross-attention, FFN, three adds
    and LayerNorms."""
    return (mha_terms(d, heads, tgt_len) + mha_terms(d, heads, src_len) + ffn_terms(d, ffn)
            + 3 * (1 + layer_norm_terms(d)))


def stack_terms(d, block_terms, num_layers, logits=False, final_norm=False):
    """A Transformer stack: embedding times sqrt(d) plus positions (2), the blocks, the
    pre-norm stacks' final LayerNorm, the logits' projection over ``d`` plus bias."""
    return (2 + num_layers * block_terms + (layer_norm_terms(d) if final_norm else 0)
            + (d + 1 if logits else 0))


def transformer_terms(d, ffn, heads, num_layers, src_len, tgt_len, norm_first=False):
    """``transformer_seq2seq``'s logits: the encoder stack, then the decoder's."""
    encoder = stack_terms(d, encoder_block_terms(d, ffn, heads, src_len), num_layers,
                          final_norm=norm_first)
    decoder = stack_terms(d, decoder_block_terms(d, ffn, heads, tgt_len, src_len),
                          num_layers, logits=True, final_norm=norm_first)
    return encoder + decoder


def log_prob_terms(logit_terms, vocab, steps):
    """Roundings of a sequence's log-probability (``terms`` of :func:`tolerance`): each
    step's logits, a log-softmax over ``vocab`` (max, exp, sum, log, subtract), the sum
    over ``steps``."""
    return logit_terms + vocab + 4 + steps


def gru_terms(steps, in_size, d, num_layers):
    """A GRU stack of width ``d`` over ``steps``: per step the input matmul (``in_size``
    for the first layer, ``d`` above), the recurrent one (``d``) and 6 gate steps; the
    state carries every step's roundings on."""
    return sum(steps * ((in_size if i == 0 else d) + d + 6) for i in range(num_layers))


def bahdanau_decoder_terms(steps, embed, d, num_layers, src_len):
    """BahdanauDecoder: per step additive attention over the source (projections of
    ``d``, w_v over ``d``, softmax and weighted sum over ``src_len``) and the GRU stack fed
    the embedding and the context; then the logits over ``d``."""
    attention = 2 * d + 2 * src_len + 1
    return steps * attention + gru_terms(steps, embed + d, d, num_layers) + d + 1


def bahdanau_terms(embed, d, num_layers, src_len, tgt_len):
    """``bahdanau_seq2seq``'s logits: the GRU encoder, then the decoder from its states."""
    return (gru_terms(src_len, embed, d, num_layers)
            + bahdanau_decoder_terms(tgt_len, embed, d, num_layers, src_len))


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


def check_config_round_trip(layer, *args, terms, **kwargs):
    """``from_config(get_config())`` rebuilds the layer; with the same weights it computes
    the same outputs (within :func:`tolerance` of ``terms``, the layer's reduction lengths).
    Also checks the layer is registered under the ``keras_attn`` package.
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
    assert_close(clone(*args, **kwargs), expected, terms=terms)
    return clone


def check_save_load(model, inputs, tmp_path, *, terms):
    """A model saved to ``.keras`` loads back (no ``custom_objects``: registration must be
    enough) and gives the same outputs (within :func:`tolerance` of ``terms``). Returns the
    loaded model."""
    expected = model(inputs, training=False)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert_close(loaded(inputs, training=False), expected, terms=terms)
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


def check_dropout(make_layer, *args, terms, rate=0.5, **kwargs):
    """Dropout only with ``training=True``.

    ``make_layer(rate)`` builds the layer. With the same weights: ``training=False`` (and
    the default) is deterministic and equals a ``dropout=0`` twin (within
    :func:`tolerance` of ``terms``, the layer's reduction lengths); ``training=True``
    differs from it by more than that tolerance (and from one training call to the next).
    """
    layer, plain = make_layer(rate), make_layer(0.0)
    evaluated = layer(*args, training=False, **kwargs)
    plain(*args, **kwargs)
    plain.set_weights(layer.get_weights())
    assert_equal(layer(*args, training=False, **kwargs), evaluated)  # the same call
    assert_equal(layer(*args, **kwargs), evaluated)
    assert_close(plain(*args, training=False, **kwargs), evaluated, terms=terms)
    trained = [as_numpy(flat(layer(*args, training=True, **kwargs))[0]) for _ in range(2)]
    first = as_numpy(flat(evaluated)[0])
    assert not is_close(trained[0], first, terms=terms), \
        "training=True gave the inference output"
    assert not is_close(trained[0], trained[1], terms=terms), \
        "dropout mask did not change between calls"
    return layer


def check_jit(fn, *tensors, terms):
    """``tf.function(fn, jit_compile=True)`` gives what ``fn`` gives eagerly, within
    :func:`tolerance` of ``terms`` (XLA fuses and reorders the same reductions)."""
    expected = fn(*tensors)
    compiled = tf.function(fn, jit_compile=True)
    assert_close(compiled(*tensors), expected, terms=terms)


def check_functional_model(wire, specs, batches, *, terms):
    """A functional model whose inputs have unknown lengths gives the eager results
    (within :func:`tolerance` of ``terms``, the reduction lengths of ``wire``).

    ``specs``: ``(shape, dtype)`` per input, ``None`` for unknown sizes. ``wire(*tensors)``
    calls the layer(s) on symbolic inputs for the model and on arrays for the reference.
    ``batches``: tuples of arrays (one per input), e.g. two different lengths.
    """
    inputs = [keras.Input(shape, dtype=dtype) for shape, dtype in specs]
    single = len(inputs) == 1
    model = keras.Model(inputs[0] if single else inputs, wire(*inputs))
    for arrays in batches:
        got = model(arrays[0] if single else list(arrays))
        assert_close(got, wire(*arrays), terms=terms)
    return model


def check_mixed_float16(make_layer, *args, terms, **kwargs):
    """Built under the ``mixed_float16`` policy the layer computes in float16 (variables in
    float32), its outputs are finite, and they equal the float32 layer's with the same
    weights to float16's rounding over ``terms`` (see :func:`tolerance`). Returns the
    float16 outputs."""
    with global_policy("mixed_float16"):
        layer = make_layer()
    assert layer.compute_dtype == "float16" and layer.variable_dtype == "float32"
    outputs = layer(*args, **kwargs)
    for out in flat(outputs):
        assert keras.backend.standardize_dtype(out.dtype) == "float16"
        assert np.all(np.isfinite(as_numpy(out)))
    for w in layer.weights:
        assert keras.backend.standardize_dtype(w.dtype) == "float32", w.path
    reference = make_layer()  # float32
    reference(*args, **kwargs)
    reference.set_weights(layer.get_weights())
    assert_close(outputs, reference(*args, **kwargs), terms=terms, dtype="float16",
                 err_msg="mixed_float16 vs float32 with the same weights")
    return outputs


def confidence_tolerance(calibrator, log_prob_tolerance):
    """How far two engines' confidences may differ when their token log-probabilities
    differ by at most ``log_prob_tolerance``: of the calibrator's features only the mean
    and the least log-probability move (by at most that much; the lengths and counts are
    equal), and the sigmoid's slope is at most 1/4 (``keras_attn.decoding.confidence``)."""
    # Plus 1e-6: the roundings of the sigmoid itself, on a float32 value of at most 1.
    if not calibrator.calibrated:  # exp(mean log-probability): slope at most 1
        return log_prob_tolerance + 1e-6
    moved = sum(abs(calibrator.weights[i]) / calibrator.scale[i] for i in (0, 1))
    return 0.25 * moved * log_prob_tolerance + 1e-6
