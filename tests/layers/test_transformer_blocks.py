"""keras_attn.layers.transformer_blocks: ``TransformerEncoderBlock`` and
``TransformerDecoderBlock`` against NumPy forward passes written from the paper's formulas
(block_checks: post-norm x = LN(x + f(x)), pre-norm x = x + f(LN(x)); encoder
self-attention -> FFN, decoder causal self-attention -> cross-attention -> FFN), parity
with ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` (torch is a test
dependency: without it those tests fail, they do not skip), D2L 11.7's shape examples,
where dropout sits, and the checks every layer gets.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from tests.support.block_checks import (common_tests, BAD_RATES, D, ENC, EPS, FFN, HEADS, X,
                                        check_xla, decoder_block_terms, encoder_block_terms,
                                        ffn_terms, np_causal, np_decoder_block, np_encoder_block,
                                        rand, randomize)
from keras_attn.layers import TransformerDecoderBlock, TransformerEncoderBlock

NORM_BIAS = [pytest.param(nf, ub, id=f"{'pre' if nf else 'post'}-{'bias' if ub else 'nobias'}")
             for nf in (False, True) for ub in (True, False)]


def test_d2l_shapes():
    x = np.ones((2, 100, 24), "float32")
    valid_lens = np.array([3, 2])
    enc_blk = TransformerEncoderBlock(24, 48, 8, 0.5)
    assert tuple(enc_blk(x, valid_lens=valid_lens).shape) == (2, 100, 24)
    dec_blk = TransformerDecoderBlock(24, 48, 8, 0.5)
    assert tuple(dec_blk(x, x, enc_valid_lens=valid_lens).shape) == (2, 100, 24)


# ----------------------------------------------------------------------------------------
# Blocks against NumPy


@pytest.mark.parametrize("norm_first, use_bias", NORM_BIAS)
@pytest.mark.parametrize("masking", ["valid_lens", "mask"])
def test_encoder_block_reference(norm_first, use_bias, masking):
    blk = TransformerEncoderBlock(D, FFN, HEADS, 0.0, use_bias, norm_first)
    x = rand(2, 5, D, seed=1)
    valid_lens = np.array([3, 5])
    keep = np.arange(5)[None, None, :] < valid_lens[:, None, None]  # (B, 1, L)
    kwargs = ({"valid_lens": valid_lens} if masking == "valid_lens"
              else {"mask": keep[:, 0, :]})
    blk(x, **kwargs)
    randomize(blk, seed=3)
    out = blk(x, **kwargs)
    lc.assert_close(out, np_encoder_block(blk, x, keep), terms=encoder_block_terms(5))
    # The reference is sensitive to the mask: unmasked attention gives something else.
    assert not lc.is_close(out, np_encoder_block(blk, x, None), terms=encoder_block_terms(5))


@pytest.mark.parametrize("norm_first, use_bias", NORM_BIAS)
def test_decoder_block_reference(norm_first, use_bias):
    blk = TransformerDecoderBlock(D, FFN, HEADS, 0.0, use_bias, norm_first)
    x, enc = rand(2, 4, D, seed=1), rand(2, 6, D, seed=2)
    enc_valid_lens = np.array([2, 6])
    x_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)  # target padding
    blk(x, enc, enc_valid_lens=enc_valid_lens)
    randomize(blk, seed=4)
    out = lc.as_numpy(blk(x, enc, enc_valid_lens=enc_valid_lens, x_mask=x_mask))
    self_keep = np_causal(4)[None] & x_mask[:, None, :]
    cross_keep = (np.arange(6)[None, :] < enc_valid_lens[:, None])[:, None, :]
    expected = np_decoder_block(blk, x, enc, self_keep, cross_keep)
    terms = decoder_block_terms(4, 6)
    lc.assert_close(out[x_mask], expected[x_mask], terms=terms)
    # Without target padding: every position.
    lc.assert_close(blk(x, enc, enc_valid_lens=enc_valid_lens),
                    np_decoder_block(blk, x, enc, np_causal(4)[None], cross_keep), terms=terms)


def test_decoder_block_keras_mask_equals_valid_lens():
    """A Keras mask on the encoder output masks the source like ``enc_valid_lens``."""
    blk = TransformerDecoderBlock(D, FFN, HEADS)
    x, enc = rand(2, 4, D, seed=1), rand(2, 6, D, seed=2)
    enc_valid_lens = np.array([2, 6])
    by_lens = blk(x, enc, enc_valid_lens=enc_valid_lens)
    by_mask = blk(x, enc, enc_outputs_mask=np.arange(6)[None] < enc_valid_lens[:, None])
    terms = decoder_block_terms(4, 6)
    lc.assert_close(by_mask, by_lens, terms=terms)
    # Masked source positions do not matter.
    enc2 = enc.copy()
    enc2[0, 2:] = 9.0
    lc.assert_close(blk(x, enc2, enc_valid_lens=enc_valid_lens), by_lens, terms=terms)


# ----------------------------------------------------------------------------------------
# Parity with PyTorch


def _copy_mha(torch, mha, tmha):
    kernels = [mha.W_q.kernel, mha.W_k.kernel, mha.W_v.kernel]
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    tmha.in_proj_weight.copy_(t(np.concatenate([k.numpy().T for k in kernels], 0)))
    tmha.in_proj_bias.copy_(t(np.concatenate([d.bias.numpy() for d in
                                              (mha.W_q, mha.W_k, mha.W_v)])))
    tmha.out_proj.weight.copy_(t(mha.W_o.kernel.numpy().T))
    tmha.out_proj.bias.copy_(t(mha.W_o.bias.numpy()))


def _copy_common(torch, blk, layer, norms):
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    layer.linear1.weight.copy_(t(blk.ffn.dense1.kernel.numpy().T))
    layer.linear1.bias.copy_(t(blk.ffn.dense1.bias.numpy()))
    layer.linear2.weight.copy_(t(blk.ffn.dense2.kernel.numpy().T))
    layer.linear2.bias.copy_(t(blk.ffn.dense2.bias.numpy()))
    for addnorm, tnorm in norms:
        tnorm.weight.copy_(t(addnorm.ln.gamma.numpy()))
        tnorm.bias.copy_(t(addnorm.ln.beta.numpy()))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_encoder_block_matches_torch(norm_first):
    import torch  # a test dependency: missing, the test fails (it must not skip)
    blk = TransformerEncoderBlock(D, FFN, HEADS, 0.0, use_bias=True, norm_first=norm_first)
    x = rand(2, 5, D, seed=1)
    keep = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    blk(x, mask=keep)
    randomize(blk, seed=5)
    layer = torch.nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, activation="relu",
                                             layer_norm_eps=EPS, batch_first=True,
                                             norm_first=norm_first).double()
    with torch.no_grad():
        _copy_mha(torch, blk.attention, layer.self_attn)
        _copy_common(torch, blk, layer, [(blk.addnorm1, layer.norm1),
                                         (blk.addnorm2, layer.norm2)])
    layer.eval()
    # Grad mode on (parameters require grad): the reference math path, not the fast path.
    expected = layer(torch.tensor(x, dtype=torch.float64),
                     src_key_padding_mask=torch.tensor(~keep)).detach().numpy()
    lc.assert_close(blk(x, mask=keep), expected, terms=encoder_block_terms(5))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_decoder_block_matches_torch(norm_first):
    import torch  # a test dependency: missing, the test fails (it must not skip)
    blk = TransformerDecoderBlock(D, FFN, HEADS, 0.0, use_bias=True, norm_first=norm_first)
    x, enc = rand(2, 4, D, seed=1), rand(2, 6, D, seed=2)
    x_keep = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    enc_keep = np.array([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
    blk(x, enc)
    randomize(blk, seed=6)
    layer = torch.nn.TransformerDecoderLayer(D, HEADS, FFN, dropout=0.0, activation="relu",
                                             layer_norm_eps=EPS, batch_first=True,
                                             norm_first=norm_first).double()
    with torch.no_grad():
        _copy_mha(torch, blk.attention1, layer.self_attn)
        _copy_mha(torch, blk.attention2, layer.multihead_attn)
        _copy_common(torch, blk, layer, [(blk.addnorm1, layer.norm1), (blk.addnorm2, layer.norm2),
                                         (blk.addnorm3, layer.norm3)])
    layer.eval()
    causal = torch.tensor(~np_causal(4))  # True = may not attend, as the padding masks
    expected = layer(torch.tensor(x, dtype=torch.float64), torch.tensor(enc, dtype=torch.float64),
                     tgt_mask=causal, tgt_key_padding_mask=torch.tensor(~x_keep),
                     memory_key_padding_mask=torch.tensor(~enc_keep)).detach().numpy()
    out = lc.as_numpy(blk(x, enc, x_mask=x_keep, enc_outputs_mask=enc_keep))
    # Padded target queries are implementation-defined (this block zeroes their weights).
    lc.assert_close(out[x_keep], expected[x_keep], terms=decoder_block_terms(4, 6))


# name -> (factory(dropout), positional call args, keyword call args)
CASES = {
    "encoder_block": (lambda r: TransformerEncoderBlock(D, FFN, HEADS, r, use_bias=True),
                      (X,), {"valid_lens": np.array([2, 5])}),
    "encoder_block_pre": (lambda r: TransformerEncoderBlock(D, FFN, HEADS, r, norm_first=True),
                          (X,), {"mask": np.arange(5)[None] < np.array([[3], [5]])}),
    "decoder_block": (lambda r: TransformerDecoderBlock(D, FFN, HEADS, r),
                      (X, ENC), {"enc_valid_lens": np.array([3, 6])}),
}
CASE_TERMS = {  # roundings of each case's output (lc.tolerance)
    "encoder_block": encoder_block_terms(5),
    "encoder_block_pre": encoder_block_terms(5),
    "decoder_block": decoder_block_terms(5, 6),
}


# ----------------------------------------------------------------------------------------
# The checks every layer gets (block_checks): config, gradients, dropout, XLA, mixed precision


test_config_round_trip, test_gradients_finite, test_dropout_only_in_training = common_tests(
    CASES, CASE_TERMS)


@pytest.mark.parametrize("name", ["encoder_block", "decoder_block"])
def test_xla(name):
    check_xla(*CASES[name], terms=CASE_TERMS[name])


@pytest.mark.parametrize("name", ["encoder_block", "decoder_block"])
def test_mixed_float16(name):
    make, args, kwargs = CASES[name]
    lc.check_mixed_float16(lambda: make(0.0), *args, terms=CASE_TERMS[name], **kwargs)


@pytest.mark.parametrize("name", ["encoder_block", "decoder_block"])
def test_save_load(name, tmp_path):
    make, args, kwargs = CASES[name]
    inputs = [keras.Input((None, D)) for _ in args]
    layer = make(0.0)
    model = keras.Model(inputs, layer(*inputs))
    randomize(layer, seed=13)
    loaded = lc.check_save_load(model, list(args), tmp_path, terms=CASE_TERMS[name])
    assert isinstance(loaded.layers[-1], type(layer))


# ----------------------------------------------------------------------------------------
# Bad arguments and bad input


@pytest.mark.parametrize("make, arg", [
    (lambda: TransformerEncoderBlock(10, 16, 3)(rand(1, 2, 10)), "num_heads"),
    (lambda: TransformerDecoderBlock(10, 16, 4)(rand(1, 2, 10), rand(1, 3, 10)), "num_heads"),
    (lambda: TransformerEncoderBlock(D, FFN, 0), "num_heads"),
])
def test_bad_sizes_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("make", [
    lambda r: TransformerEncoderBlock(D, FFN, HEADS, r),
    lambda r: TransformerDecoderBlock(D, FFN, HEADS, r),
], ids=["enc_block", "dec_block"])
def test_bad_dropout_raises(make, rate):
    with pytest.raises(ValueError, match="dropout"):
        make(rate)


@pytest.mark.parametrize("x, what", [
    (rand(2, 5, D + 1), "num_hiddens"),
    (rand(2, 5), "rank"),
    (rand(2, 5, D, 1), "rank"),
])
@pytest.mark.parametrize("block", ["encoder", "decoder"])
def test_block_rejects_bad_x(block, x, what):
    if block == "encoder":
        call = lambda: TransformerEncoderBlock(D, FFN, HEADS)(x)  # noqa: E731
    else:
        call = lambda: TransformerDecoderBlock(D, FFN, HEADS)(x, ENC)  # noqa: E731
    with pytest.raises(ValueError, match=what):
        call()


def test_decoder_block_rejects_bad_enc_outputs():
    with pytest.raises(ValueError, match="enc_outputs"):
        TransformerDecoderBlock(D, FFN, HEADS)(X, rand(2, 6))


# ----------------------------------------------------------------------------------------
# Where dropout sits: the paper's placement by default, torch's with ffn_dropout=dropout


@pytest.mark.parametrize("make", [
    lambda r, f: TransformerEncoderBlock(D, FFN, HEADS, r, ffn_dropout=f),
    lambda r, f: TransformerDecoderBlock(D, FFN, HEADS, r, ffn_dropout=f),
], ids=["encoder_block", "decoder_block"])
def test_ffn_hidden_dropout_is_separate(make):
    encoder = make(0.0, 0.0).__class__ is TransformerEncoderBlock
    args = (X,) if encoder else (X, ENC)
    terms = encoder_block_terms(5) if encoder else decoder_block_terms(5, 6)
    h = tf.constant(X)
    # Default (paper, D2L): residual/attention dropout on, the FFN hidden layer untouched.
    blk = make(0.5, 0.0)
    blk(*args)
    assert blk.ffn.dropout == 0.0
    lc.assert_close(blk.ffn(h, training=True), blk.ffn(h, training=False), terms=ffn_terms())
    assert not lc.is_close(blk(*args, training=True), blk(*args, training=False), terms=terms)
    # Only the FFN hidden layer dropped: training output differs, inference is unchanged.
    blk = make(0.0, 0.5)
    blk(*args)
    assert blk.ffn.dropout == 0.5
    assert not lc.is_close(blk.ffn(h, training=True), blk.ffn(h, training=False),
                           terms=ffn_terms())
    assert not lc.is_close(blk(*args, training=True), blk(*args, training=False), terms=terms)
    lc.assert_close(blk(*args, training=False), blk(*args), terms=terms)
    assert blk.get_config()["ffn_dropout"] == 0.5
    assert type(blk).from_config(blk.get_config()).ffn_dropout == 0.5


@pytest.mark.parametrize("make", [
    lambda r: TransformerEncoderBlock(D, FFN, HEADS, ffn_dropout=r),
    lambda r: TransformerDecoderBlock(D, FFN, HEADS, ffn_dropout=r),
], ids=["enc_block", "dec_block"])
def test_bad_ffn_dropout_raises(make):
    for rate in (-0.1, 1.0, "0.1"):
        with pytest.raises(ValueError, match="ffn_dropout"):
            make(rate)
