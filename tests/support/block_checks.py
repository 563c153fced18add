"""What the Transformer and GRU building blocks (``PositionWiseFFN``, ``AddNorm``, the
encoder/decoder blocks and stacks, ``Seq2SeqEncoder``, ``BahdanauDecoder``) share in their
tests: sizes and inputs, NumPy references, rounding counts, and the checks every layer gets.

References written here from the paper's formulas, with each layer's own weights:
  FFN          relu(x W1 + b1) W2 + b2
  LayerNorm    (x - mean) / sqrt(var + 1e-5) * gamma + beta
  post-norm    x = LN(x + f(x));   pre-norm   x = x + f(LN(x))
  encoder      x -> self-attention (padding keys masked) -> FFN
  decoder      x -> causal self-attention -> cross-attention (source padding masked) -> FFN

Tolerances (``lc.assert_close``) count the roundings along each piece's longest path, the
``*_terms`` functions below.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc

D, FFN, HEADS = 8, 16, 2  # model width, FFN width, heads (small: 2 CPU cores)
VOCAB = 13
EPS = 1e-5  # the LayerNorm epsilon the API promises (PyTorch's default)
BAD_RATES = [-0.1, 1.0, 1.5, "0.1"]  # dropout rates every layer rejects


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype("float32")


def ffn_terms():
    return lc.ffn_terms(D, FFN)


LN_TERMS = lc.layer_norm_terms(D)
ADDNORM_TERMS = 1 + LN_TERMS  # the residual add, then LayerNorm


def encoder_block_terms(length):
    return lc.encoder_block_terms(D, FFN, HEADS, length)


def decoder_block_terms(tgt_len, src_len):
    return lc.decoder_block_terms(D, FFN, HEADS, tgt_len, src_len)


def stack_terms(block_terms, num_layers, logits=False, final_norm=False):
    return lc.stack_terms(D, block_terms, num_layers, logits, final_norm)


def randomize(layer, seed=0):
    """Random weights everywhere (biases and LayerNorm gamma/beta too, so each one counts)."""
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        value = rng.standard_normal(tuple(w.shape)) * 0.3
        if w.path.endswith("gamma"):
            value += 1.0
        w.assign(value.astype("float32"))


# ----------------------------------------------------------------------------------------
# NumPy references


def np_layer_norm(ln, x):
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * ln.gamma.numpy() + ln.beta.numpy()


def np_ffn(ffn, x):
    return lc.dense_np(ffn.dense2, np.maximum(lc.dense_np(ffn.dense1, x), 0.0))


def np_sublayer(addnorm, x, f, norm_first):
    if norm_first:
        return x + f(np_layer_norm(addnorm.ln, x))
    return np_layer_norm(addnorm.ln, x + f(x))


def np_encoder_block(blk, x, keep):
    """``keep`` bool broadcastable to (B, L, L): the keys each query may attend."""
    x = np.asarray(x, np.float64)
    att = lambda h: lc.np_multi_head_attention(blk.attention, h, h, h, keep)[0]  # noqa: E731
    x = np_sublayer(blk.addnorm1, x, att, blk.norm_first)
    return np_sublayer(blk.addnorm2, x, lambda h: np_ffn(blk.ffn, h), blk.norm_first)


def np_decoder_block(blk, x, enc, self_keep, cross_keep):
    """``self_keep`` (B, T, T) (causal and target padding), ``cross_keep`` (B, 1|T, S)."""
    x, enc = np.asarray(x, np.float64), np.asarray(enc, np.float64)
    nf = blk.norm_first
    x = np_sublayer(blk.addnorm1, x,
                    lambda h: lc.np_multi_head_attention(blk.attention1, h, h, h, self_keep)[0], nf)
    x = np_sublayer(blk.addnorm2, x,
                    lambda h: lc.np_multi_head_attention(blk.attention2, h, enc, enc,
                                                         cross_keep)[0], nf)
    return np_sublayer(blk.addnorm3, x, lambda h: np_ffn(blk.ffn, h), nf)


def np_causal(t):
    return np.tril(np.ones((t, t), bool))


def tokens():
    """Source and target token ids of two sentences (0 = padding)."""
    src = np.array([[5, 6, 7, 8, 0, 0], [4, 9, 11, 12, 10, 3]], "int32")
    tgt = np.array([[2, 5, 6, 0], [2, 4, 9, 11]], "int32")
    return src, tgt


# Inputs of the checks every layer gets
X = rand(2, 5, D, seed=11)
ENC = rand(2, 6, D, seed=12)
SRC, TGT = tokens()


# ----------------------------------------------------------------------------------------
# The checks every layer gets, on a case ``make(dropout)``, ``args``, ``kwargs``


def check_config_round_trip(make, args, kwargs, terms):
    """``dropout`` is in the config, and ``from_config(get_config())`` computes the same."""
    layer = make(0.0)
    config = layer.get_config()
    assert "dropout" in config
    lc.check_config_round_trip(layer, *args, terms=terms, **kwargs)


def check_gradients_finite(make, args, kwargs, float_inputs):
    """Every weight (and every input when ``float_inputs``) gets a finite, non-zero
    gradient."""
    layer = make(0.0)
    layer(*args, **kwargs)
    sources = list(layer.trainable_weights)
    if float_inputs:
        args = tuple(tf.constant(a) for a in args)
        sources += list(args)
    with tf.GradientTape() as tape:
        tape.watch([s for s in sources if not isinstance(s, keras.Variable)])
        out = lc.flat(layer(*args, training=True, **kwargs))
        loss = tf.add_n([tf.reduce_sum(tf.square(o)) for o in out])
    grads = tape.gradient(loss, sources)
    for s, g in zip(sources, grads):  # embedding gradients come as IndexedSlices
        assert g is not None, getattr(s, "path", "input")
        assert np.all(np.isfinite(tf.convert_to_tensor(g).numpy())), getattr(s, "path", "input")
    # Every weight takes part: none gets an all-zero gradient (all inputs are used).
    zero = [s.path for s, g in zip(sources, grads) if isinstance(s, keras.Variable)
            and not np.any(tf.convert_to_tensor(g).numpy())]
    assert not zero, zero


def check_xla(make, args, kwargs, terms):
    """Under ``tf.function(jit_compile=True)`` the layer computes what it does eagerly."""
    layer = make(0.0)
    n = len(args)
    lc.check_jit(lambda *t: layer(*t[:n], **kwargs), *args, terms=terms)


def common_tests(cases, case_terms, float_inputs=True, dropout=None):
    """The checks every block gets, parametrized over a test file's ``cases``
    (``name -> (make, args, kwargs)``): config round trip, finite gradients, dropout only
    in training (for the names in ``dropout``; default all). ``float_inputs=False`` for
    stacks that take token ids. A test file binds them:
    ``test_config_round_trip, ... = common_tests(...)``; :func:`stack_tests` adds XLA and
    mixed precision."""

    @pytest.mark.parametrize("name", list(cases))
    def test_config_round_trip(name):
        check_config_round_trip(*cases[name], terms=case_terms[name])

    @pytest.mark.parametrize("name", list(cases))
    def test_gradients_finite(name):
        check_gradients_finite(*cases[name], float_inputs=float_inputs)

    @pytest.mark.parametrize("name", list(cases) if dropout is None else dropout)
    def test_dropout_only_in_training(name):
        make, args, kwargs = cases[name]
        lc.check_dropout(make, *args, terms=case_terms[name], **kwargs)

    return test_config_round_trip, test_gradients_finite, test_dropout_only_in_training


def stack_tests(cases, case_terms, names):
    """XLA and mixed-float16 checks for the stacks ``names`` of ``cases`` (token inputs):
    ``test_xla, test_mixed_float16 = stack_tests(...)``."""

    @pytest.mark.parametrize("name", names)
    def test_xla(name):
        check_xla(*cases[name], terms=case_terms[name])

    @pytest.mark.parametrize("name", names)
    def test_mixed_float16(name):
        make, args, kwargs = cases[name]
        lc.check_mixed_float16(lambda: make(0.0), *args, terms=case_terms[name], **kwargs)

    return test_xla, test_mixed_float16
