"""keras_attn.layers.transformer: ``TransformerEncoder`` and ``TransformerDecoder``
against NumPy (blocks over E[tokens] * sqrt(d) + P[:L] (sinusoids), logits h W + b, tied
embeddings), causality, padding invariance, cached incremental decoding (eager and XLA),
D2L 11.7's shape examples, ``ffn_dropout`` through the model builders, and the checks every
layer gets (block_checks)."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from tests.support.block_checks import (BAD_RATES, D, ENC, FFN, HEADS, SRC, TGT, VOCAB,
                                        common_tests, stack_tests, decoder_block_terms,
                                        encoder_block_terms, np_causal, np_decoder_block,
                                        np_encoder_block, np_layer_norm, rand, randomize,
                                        stack_terms, tokens)
from keras_attn.layers import TransformerDecoder, TransformerEncoder


def np_sinusoids(length, d):
    pos = np.arange(length)[:, None]
    i = np.arange(d)[None, :]
    angle = pos / np.power(10000.0, (i - i % 2) / d)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def test_d2l_shapes():
    valid_lens = np.array([3, 2])
    tokens = np.ones((2, 100), "int32")
    encoder = TransformerEncoder(200, 24, 48, 8, 2, 0.5)
    enc_outputs = encoder(tokens, valid_lens=valid_lens)
    assert tuple(enc_outputs.shape) == (2, 100, 24)
    decoder = TransformerDecoder(200, 24, 48, 8, 2, 0.5)
    assert tuple(decoder(tokens, enc_outputs, enc_valid_lens=valid_lens).shape) == (2, 100, 200)
    assert len(encoder.blks) == len(decoder.blks) == 2


# ----------------------------------------------------------------------------------------
# Stacks against NumPy


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_encoder_stack_reference(norm_first):
    """Embedding scaled by sqrt(d), sinusoids, padding (id 0) masked, final norm if pre-norm."""
    src, _ = tokens()
    encoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 2, norm_first=norm_first)
    encoder(src)
    randomize(encoder, seed=7)
    x = encoder.embedding.embeddings.numpy()[src] * math.sqrt(D) + np_sinusoids(6, D)
    keep = (src != 0)[:, None, :]
    for blk in encoder.blks:
        x = np_encoder_block(blk, x, keep)
    if norm_first:
        x = np_layer_norm(encoder.final_norm, x)
    lc.assert_close(encoder(src), x,
                    terms=stack_terms(encoder_block_terms(6), 2, final_norm=norm_first))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_decoder_stack_reference(norm_first):
    src, tgt = tokens()
    enc = rand(2, 6, D, seed=3)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 2, norm_first=norm_first)
    decoder(tgt, enc)
    randomize(decoder, seed=8)
    x = decoder.embedding.embeddings.numpy()[tgt] * math.sqrt(D) + np_sinusoids(4, D)
    self_keep = np_causal(4)[None] & (tgt != 0)[:, None, :]
    cross_keep = (src != 0)[:, None, :]
    for blk in decoder.blks:
        x = np_decoder_block(blk, x, enc, self_keep, cross_keep)
    if norm_first:
        x = np_layer_norm(decoder.final_norm, x)
    expected = lc.dense_np(decoder.dense, x)
    out = lc.as_numpy(decoder(tgt, enc, enc_outputs_mask=src != 0))
    real = tgt != 0
    lc.assert_close(out[real], expected[real], terms=stack_terms(
        decoder_block_terms(4, 6), 2, logits=True, final_norm=norm_first))


def test_tied_embeddings_share_the_weight():
    src, tgt = tokens()
    enc = rand(2, 6, D, seed=3)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 1, tie_embeddings=True)
    decoder(tgt, enc)
    randomize(decoder, seed=9)
    assert not any(tuple(w.shape) in ((D, VOCAB), (VOCAB, D)) for w in decoder.dense.weights)
    assert [tuple(w.shape) for w in decoder.dense.weights] == [(VOCAB,)]
    untied = TransformerDecoder(VOCAB, D, FFN, HEADS, 1)
    untied(tgt, enc)
    assert len(untied.weights) == len(decoder.weights) + 1  # the dense kernel
    # logits = h E^T + b, h the last hidden states (recomputed from the blocks).
    h = lc.as_numpy(decoder.embed(tgt))
    for blk in decoder.blks:
        h = np_decoder_block(blk, h, enc, np_causal(4)[None] & (tgt != 0)[:, None, :],
                             np.ones((1, 1, 6), bool))
    emb, bias = decoder.embedding.embeddings.numpy(), decoder.dense.bias.numpy()
    out = lc.as_numpy(decoder(tgt, enc))
    real = tgt != 0
    terms = stack_terms(decoder_block_terms(4, 6), 1, logits=True)
    lc.assert_close(out[real], (h @ emb.T + bias)[real], terms=terms)
    # One variable: changing the embedding changes the output projection.
    decoder.embedding.embeddings.assign(emb * 2)
    lc.assert_close(decoder.logits(h.astype("float32")), h @ (2 * emb).T + bias, terms=D + 1)
    clone = lc.check_config_round_trip(decoder, tgt, enc, terms=terms)
    assert clone.tie_embeddings


# ----------------------------------------------------------------------------------------
# Causality, padding and incremental decoding of TransformerDecoder


def test_decoder_is_causal():
    src, _ = tokens()
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 2)
    enc = rand(2, 6, D, seed=3)
    tgt = np.array([[2, 5, 6, 7, 8, 9], [2, 4, 9, 11, 12, 10]], "int32")
    base = lc.as_numpy(decoder(tgt, enc))
    terms = stack_terms(decoder_block_terms(6, 6), 2, logits=True)
    for t in range(1, 6):
        changed = tgt.copy()
        changed[:, t] = 1 + (changed[:, t] % (VOCAB - 1))
        out = lc.as_numpy(decoder(changed, enc))
        lc.assert_close(out[:, :t], base[:, :t], terms=terms, scale=np.abs(base).max())
        assert not lc.is_close(out[:, t], base[:, t], terms=terms, scale=np.abs(base).max())


def test_decoder_padding_invariance():
    encoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 2)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 2)
    src, tgt = tokens()
    base = lc.as_numpy(decoder(tgt, encoder(src)))
    real = tgt != 0
    # the encoder's roundings (up to 9 source positions) carried into the decoder's
    terms = (stack_terms(encoder_block_terms(9), 2)
             + stack_terms(decoder_block_terms(6, 9), 2, logits=True))
    padded_src = np.pad(src, ((0, 0), (0, 3)))
    out = lc.as_numpy(decoder(tgt, encoder(padded_src)))
    lc.assert_close(out[real], base[real], terms=terms)
    padded_tgt = np.pad(tgt, ((0, 0), (0, 2)))
    out = lc.as_numpy(decoder(padded_tgt, encoder(src)))[:, :4]
    lc.assert_close(out[real], base[real], terms=terms)
    # A real source token at the end does change things (the check can fail).
    other_src = src.copy()
    other_src[0, 4] = 3
    assert not lc.is_close(decoder(tgt, encoder(other_src))[0], base[0], terms=terms)


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_incremental_decoding_matches_full_call(norm_first, tie):
    src, _ = tokens()
    encoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 2, norm_first=norm_first)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 2, norm_first=norm_first,
                                 tie_embeddings=tie)
    tgt = np.array([[2, 5, 6, 7, 8], [2, 4, 9, 11, 12]], "int32")
    enc = encoder(src)
    decoder(tgt, enc)
    randomize(decoder, seed=10)
    cache = decoder.init_cache(enc, src, 7)  # longer than needed: unused slots must not count
    for t in range(tgt.shape[1]):
        logits, maps, cache = decoder(tgt[:, t:t + 1], cache=cache, cache_update_index=t,
                                      return_attention_scores=True)
        full = lc.as_numpy(decoder(tgt[:, :t + 1], enc, enc_outputs_mask=src != 0))[:, -1]
        lc.assert_close(logits[:, 0], full, terms=stack_terms(  # cache of 7 slots, 6 source
            decoder_block_terms(7, 6), 2, logits=True, final_norm=norm_first))
        cross_w = maps["cross"]
        assert len(cross_w) == 2 and tuple(cross_w[0].shape) == (2, HEADS, 1, 6)
        np.testing.assert_array_equal(lc.as_numpy(cross_w[0])[0, :, 0, 4:], 0.0)


@pytest.mark.heavy  # compiles the step with XLA
def test_incremental_step_under_xla():
    """Steps inside ``tf.function(jit_compile=True)`` with a tensor index equal eager ones."""
    src, _ = tokens()
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 1)
    enc = rand(2, 6, D, seed=3)
    tgt = np.array([[2, 5, 6], [2, 4, 9]], "int32")
    decoder(tgt, enc)

    def run(tokens, index, cache):
        logits, cache = decoder(tokens, cache=cache, cache_update_index=index)
        return logits, cache

    eager = []
    cache = decoder.init_cache(enc, src, 5)
    for t in range(2):
        logits, cache = run(tgt[:, t:t + 1], t, cache)
        eager.append(lc.as_numpy(logits))
    step = tf.function(run, jit_compile=True)
    cache = decoder.init_cache(enc, src, 5)
    for t in range(2):
        logits, cache = step(tf.constant(tgt[:, t:t + 1]), tf.constant(t), cache)
        lc.assert_close(logits, eager[t],
                        terms=stack_terms(decoder_block_terms(5, 6), 1, logits=True))


# name -> (factory(dropout), positional call args, keyword call args)
CASES = {
    "encoder": (lambda r: TransformerEncoder(VOCAB, D, FFN, HEADS, 2, r, norm_first=True),
                (SRC,), {}),
    "decoder": (lambda r: TransformerDecoder(VOCAB, D, FFN, HEADS, 2, r), (TGT, ENC),
                {"enc_valid_lens": np.array([4, 6])}),
}
CASE_TERMS = {  # roundings of each case's output (lc.tolerance)
    "encoder": stack_terms(encoder_block_terms(6), 2, final_norm=True),
    "decoder": stack_terms(decoder_block_terms(4, 6), 2, logits=True),
}


# ----------------------------------------------------------------------------------------
# The checks every layer gets (block_checks): config, gradients, dropout, XLA, mixed precision


test_config_round_trip, test_gradients_finite, test_dropout_only_in_training = common_tests(
    CASES, CASE_TERMS, float_inputs=False)
test_xla, test_mixed_float16 = stack_tests(CASES, CASE_TERMS, ["decoder"])


@pytest.mark.heavy  # saves and loads the stacks
def test_stacks_save_load_unknown_length(tmp_path):
    src = keras.Input((None,), dtype="int32")
    tgt = keras.Input((None,), dtype="int32")
    encoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 1)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 1, tie_embeddings=True)
    model = keras.Model([src, tgt], decoder(tgt, encoder(src)))
    s, t = tokens()
    eager = decoder(t, encoder(s))
    terms = (stack_terms(encoder_block_terms(6), 1)
             + stack_terms(decoder_block_terms(4, 6), 1, logits=True))
    lc.assert_close(model([s, t]), eager, terms=terms)
    lc.assert_close(model([s[:, :4], t[:, :3]]), decoder(t[:, :3], encoder(s[:, :4])),
                    terms=terms)
    lc.check_save_load(model, [s, t], tmp_path, terms=terms)


# ----------------------------------------------------------------------------------------
# Bad arguments and bad input


@pytest.mark.parametrize("make, arg", [
    (lambda: TransformerEncoder(VOCAB, 10, 16, 3, 1), "num_heads"),
    (lambda: TransformerDecoder(VOCAB, 10, 16, 4, 1), "num_heads"),
    (lambda: TransformerEncoder(VOCAB, D, FFN, HEADS, 0), "num_layers"),
    (lambda: TransformerDecoder(VOCAB, D, FFN, HEADS, 1, max_len=0), "max_len"),
])
def test_bad_sizes_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("make", [
    lambda r: TransformerEncoder(VOCAB, D, FFN, HEADS, 1, r),
    lambda r: TransformerDecoder(VOCAB, D, FFN, HEADS, 1, r),
], ids=["encoder", "decoder"])
def test_bad_dropout_raises(make, rate):
    with pytest.raises(ValueError, match="dropout"):
        make(rate)


@pytest.mark.parametrize("tokens", [np.zeros((2, 3, 1), "int32"), np.zeros((3,), "int32")])
def test_stack_rejects_bad_token_rank(tokens):
    with pytest.raises(ValueError, match="tokens"):
        TransformerEncoder(VOCAB, D, FFN, HEADS, 1)(tokens)


def test_out_of_vocabulary_ids_give_finite_output():
    bad = np.array([[VOCAB, VOCAB + 100, 5], [-3, 4, 2 ** 30]], "int32")
    encoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 1)
    enc = encoder(bad)
    decoder = TransformerDecoder(VOCAB, D, FFN, HEADS, 1)
    for o in (enc, decoder(bad, enc)):
        assert np.all(np.isfinite(lc.as_numpy(o)))


def test_all_padding_source_rows_give_finite_logits():
    src = np.array([[0, 0, 0], [5, 6, 0]], "int32")
    tgt = np.array([[2, 5], [2, 4]], "int32")
    encoder, decoder = TransformerEncoder(VOCAB, D, FFN, HEADS, 1), TransformerDecoder(
        VOCAB, D, FFN, HEADS, 1)
    assert np.all(np.isfinite(lc.as_numpy(decoder(tgt, encoder(src)))))


# ----------------------------------------------------------------------------------------
# ffn_dropout: every block of the stacks, from the model builders and old configs


def test_ffn_dropout_reaches_every_block():
    from keras_attn.models import transformer_seq2seq

    model = transformer_seq2seq(VOCAB, VOCAB, D, FFN, HEADS, 2, dropout=0.1, ffn_dropout=0.3)
    model({"source": SRC, "target_in": TGT})
    for name in ("encoder", "decoder"):
        stack = model.get_layer(name)
        assert stack.get_config()["ffn_dropout"] == 0.3
        assert [b.ffn.dropout for b in stack.blks] == [0.3, 0.3]
        assert [b.dropout for b in stack.blks] == [0.1, 0.1]
    default = transformer_seq2seq(VOCAB, VOCAB, D, FFN, HEADS, 1)
    default({"source": SRC, "target_in": TGT})
    assert default.get_layer("decoder").blks[0].ffn.dropout == 0.0
    # A config saved before ffn_dropout existed loads with the paper's placement.
    config = model.get_layer("encoder").get_config()
    del config["ffn_dropout"]
    assert TransformerEncoder.from_config(config).ffn_dropout == 0.0


@pytest.mark.parametrize("make", [
    lambda r: TransformerEncoder(VOCAB, D, FFN, HEADS, 1, ffn_dropout=r),
    lambda r: TransformerDecoder(VOCAB, D, FFN, HEADS, 1, ffn_dropout=r),
], ids=["encoder", "decoder"])
def test_bad_ffn_dropout_raises(make):
    for rate in (-0.1, 1.0, "0.1"):
        with pytest.raises(ValueError, match="ffn_dropout"):
            make(rate)


def test_train_config_ffn_dropout_reaches_the_model():
    import dataclasses

    from keras_attn.training import recipes as training

    config = dataclasses.asdict(training.TrainConfig(num_hiddens=D, ffn_num_hiddens=FFN,
                                                     num_heads=HEADS, ffn_dropout=0.2))
    config.update(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    model = training.build_model(config)
    model({"source": SRC, "target_in": TGT})
    assert model.get_layer("decoder").blks[0].ffn.dropout == 0.2
    del config["ffn_dropout"]  # a run directory written before the option existed
    model = training.build_model(config)
    model({"source": SRC, "target_in": TGT})
    assert model.get_layer("encoder").blks[0].ffn.dropout == 0.0


def test_train_config_decoder_depth_tied_output_and_pre_norm_reach_the_model():
    import argparse
    import dataclasses

    from keras_attn.cli import train as train_cli
    from keras_attn.training import recipes as training

    parser = argparse.ArgumentParser(prog="keras-attn")
    p = train_cli.add_parser(parser.add_subparsers())
    args = p.parse_args(["--task", "tatoeba", "--num-layers", "3", "--num-decoder-layers", "1",
                         "--tie-embeddings", "--norm-first"])
    config = train_cli.config_from_args(args)
    assert (config.num_layers, config.num_decoder_layers, config.tie_embeddings,
            config.norm_first) == (3, 1, True, True)
    default = train_cli.config_from_args(p.parse_args(["--task", "tatoeba"]))
    assert (default.tie_embeddings, default.norm_first) == (False, False)
    config = dataclasses.asdict(dataclasses.replace(config, num_hiddens=D, ffn_num_hiddens=FFN,
                                                    num_heads=HEADS))
    config.update(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    model = training.build_model(config)
    model({"source": SRC, "target_in": TGT})
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    assert (len(encoder.blks), len(decoder.blks), decoder.tie_embeddings) == (3, 1, True)
    # Pre-norm: each stack ends with its own LayerNorm.
    assert encoder.norm_first and decoder.norm_first
    assert encoder.final_norm is not None and decoder.final_norm is not None
    # A deep encoder, a shallow decoder: the layer counts are what the weights say.
    assert len(model.weights) == len(encoder.weights) + len(decoder.weights)
    config["num_decoder_layers"] = 0  # 0: as deep as the encoder
    model = training.build_model(config)
    model({"source": SRC, "target_in": TGT})
    assert len(model.get_layer("decoder").blks) == 3
    for key in ("num_decoder_layers", "tie_embeddings", "norm_first"):  # saved before them
        del config[key]
    model = training.build_model(config)
    model({"source": SRC, "target_in": TGT})
    assert len(model.get_layer("decoder").blks) == 3
    assert not model.get_layer("decoder").tie_embeddings
    assert model.get_layer("encoder").final_norm is None
    with pytest.raises(ValueError, match="num_decoder_layers"):
        training.check_config(dataclasses.replace(training.TrainConfig(), num_decoder_layers=-1))
