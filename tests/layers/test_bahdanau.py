"""keras_attn.layers.bahdanau: ``Seq2SeqEncoder`` (a GRU stack) and ``BahdanauDecoder``
(GRU with additive attention over the encoder outputs): D2L 11.4's shapes, padding
skipped and masked, causality, and the checks every layer gets (block_checks)."""
import numpy as np
import pytest

from tests.support import layer_checks as lc
from tests.support.block_checks import (BAD_RATES, D, ENC, SRC, TGT, VOCAB, X, common_tests,
                                        stack_tests)
from keras_attn.layers import BahdanauDecoder, Seq2SeqEncoder


def gru_terms(steps, num_layers, embed=6):
    return lc.gru_terms(steps, embed, D, num_layers)


def bahdanau_terms(steps, num_layers, src_len, embed=6):
    return lc.bahdanau_decoder_terms(steps, embed, D, num_layers, src_len)


def test_d2l_bahdanau_shapes():
    src = np.random.default_rng(0).integers(1, 10, (4, 7)).astype("int32")
    encoder = Seq2SeqEncoder(10, 8, 16, 2)
    outputs, states = encoder(src)
    assert tuple(outputs.shape) == (4, 7, 16)
    assert len(states) == 2 and all(tuple(s.shape) == (4, 16) for s in states)
    decoder = BahdanauDecoder(10, 8, 16, 2)
    logits = decoder(src, outputs, states)
    assert tuple(logits.shape) == (4, 7, 10)
    assert np.all(np.isfinite(lc.as_numpy(logits)))


def test_seq2seq_encoder_skips_padding():
    encoder = Seq2SeqEncoder(VOCAB, 6, D, 2)
    src = np.array([[5, 6, 7], [4, 9, 11]], "int32")
    out, states = encoder(src)
    out_p, states_p = encoder(np.pad(src, ((0, 0), (0, 3))))
    terms = gru_terms(6, 2)  # up to 6 steps
    lc.assert_close(list(states_p), list(states), terms=terms)
    lc.assert_close(out_p[:, :3], out, terms=terms)
    lc.assert_close(states[-1], out[:, -1], terms=terms)  # top layer's state = its last output


def test_bahdanau_decoder_masks_source_padding():
    encoder = Seq2SeqEncoder(VOCAB, 6, D, 1)
    decoder = BahdanauDecoder(VOCAB, 6, D, 1)
    src = np.array([[5, 6, 7, 0, 0], [4, 9, 11, 12, 10]], "int32")
    tgt = np.array([[2, 5, 6], [2, 4, 9]], "int32")
    out, states = encoder(src)
    keep = src != 0
    logits, w = decoder(tgt, out, states, enc_outputs_mask=keep, return_attention_scores=True)
    w = lc.as_numpy(w)
    assert w.shape == (2, 3, 5)
    np.testing.assert_array_equal(w[0, :, 3:], 0.0)
    lc.assert_close(w.sum(-1), np.ones((2, 3)), terms=2 * 5)  # softmax over 5, summed
    by_lens = decoder(tgt, out, states, enc_valid_lens=np.array([3, 5]))
    terms = bahdanau_terms(3, 1, 5)
    lc.assert_close(by_lens, logits, terms=terms)
    junk = lc.as_numpy(out).copy()
    junk[0, 3:] = 5.0
    lc.assert_close(decoder(tgt, junk, states, enc_outputs_mask=keep), logits, terms=terms)


def test_bahdanau_decoder_is_causal():
    encoder = Seq2SeqEncoder(VOCAB, 6, D, 2)
    decoder = BahdanauDecoder(VOCAB, 6, D, 2)
    src = np.array([[5, 6, 7, 8], [4, 9, 11, 12]], "int32")
    tgt = np.array([[2, 5, 6, 7], [2, 4, 9, 11]], "int32")
    out, states = encoder(src)
    base = lc.as_numpy(decoder(tgt, out, states))
    changed = tgt.copy()
    changed[:, 2] = 12
    new = lc.as_numpy(decoder(changed, out, states))
    terms = bahdanau_terms(4, 2, 4)
    lc.assert_close(new[:, :2], base[:, :2], terms=terms, scale=np.abs(base).max())
    assert not lc.is_close(new[:, 2], base[:, 2], terms=terms, scale=np.abs(base).max())


# name -> (factory(dropout), positional call args, keyword call args)
CASES = {
    "seq2seq_encoder": (lambda r: Seq2SeqEncoder(VOCAB, 6, D, 2, r), (SRC,), {}),
    "bahdanau_decoder": (lambda r: BahdanauDecoder(VOCAB, 6, D, 2, r),
                         (TGT, ENC, [X[:, 0], X[:, 1]]), {"enc_valid_lens": np.array([4, 6])}),
}
CASE_TERMS = {  # roundings of each case's output (lc.tolerance)
    "seq2seq_encoder": gru_terms(6, 2),
    "bahdanau_decoder": bahdanau_terms(4, 2, 6),
}


# ----------------------------------------------------------------------------------------
# The checks every layer gets (block_checks): config, gradients, dropout, XLA, mixed precision


test_config_round_trip, test_gradients_finite, test_dropout_only_in_training = common_tests(
    CASES, CASE_TERMS, float_inputs=False, dropout=["bahdanau_decoder"])
test_xla, test_mixed_float16 = stack_tests(CASES, CASE_TERMS, ["bahdanau_decoder"])


# ----------------------------------------------------------------------------------------
# Bad arguments and bad input


@pytest.mark.parametrize("make, arg", [
    (lambda: Seq2SeqEncoder(0, 6, D, 1), "vocab_size"),
    (lambda: BahdanauDecoder(VOCAB, 6, D, 0), "num_layers"),
])
def test_bad_sizes_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("make", [
    lambda r: Seq2SeqEncoder(VOCAB, 6, D, 1, r),
    lambda r: BahdanauDecoder(VOCAB, 6, D, 1, r),
], ids=["gru_enc", "bahdanau"])
def test_bad_dropout_raises(make, rate):
    with pytest.raises(ValueError, match="dropout"):
        make(rate)


def test_out_of_vocabulary_ids_give_finite_output():
    bad = np.array([[VOCAB, VOCAB + 100, 5], [-3, 4, 2 ** 30]], "int32")
    outs = []
    gru_enc = Seq2SeqEncoder(VOCAB, 6, D, 1)
    out, states = gru_enc(bad)
    outs += [out, BahdanauDecoder(VOCAB, 6, D, 1)(bad, out, states)]
    for o in outs:
        assert np.all(np.isfinite(lc.as_numpy(o)))


def test_all_padding_source_rows_give_finite_logits():
    src = np.array([[0, 0, 0], [5, 6, 0]], "int32")
    tgt = np.array([[2, 5], [2, 4]], "int32")
    gru_enc, gru_dec = Seq2SeqEncoder(VOCAB, 6, D, 1), BahdanauDecoder(VOCAB, 6, D, 1)
    out, states = gru_enc(src)
    logits = gru_dec(tgt, out, states, enc_outputs_mask=src != 0)
    assert np.all(np.isfinite(lc.as_numpy(logits)))
