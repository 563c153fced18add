"""keras_attn.decoding.processors: the one ordered list every loop and artefact runs, each
processor against numpy written here (the repetition controls' own references:
tests/decoding/test_repetition.py), and the GNMT length penalty against its formula."""
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding
from keras_attn.decoding import processors
from keras_attn.decoding.options import DecodingOptions
from keras_attn.decoding.processors import NEG, StepState
from tests.decoding.test_repetition import reference_penalty

START = 2
RNG = np.random.default_rng(0)


def test_ban_ids_fills_padding_and_start():
    logits = RNG.normal(size=(3, 9)).astype("float32")
    out = np.asarray(processors.BanIds((0, START), 9)(logits, StepState(0)))
    expected = logits.copy()
    expected[:, [0, START]] = NEG
    np.testing.assert_array_equal(out, expected)


def reference_force(logits, prefix, index, rows, beams):
    """numpy: each row keeps only its sentence's prefix token at ``index``, if any left."""
    out = logits.copy()
    for r, row in enumerate(rows):
        sentence = prefix[row // beams]
        forced = sentence[index] if index < len(sentence) else 0
        if forced:
            out[r, np.arange(logits.shape[1]) != forced] = NEG
    return out


@pytest.mark.parametrize("rows", [None, [5, 1, 2]])
def test_force_prefix_keeps_only_the_prefix_token(rows):
    """Rows of 2 beams per sentence; ``rows``: the rows left in a loop that drops ended ones
    (their numbers in the whole batch)."""
    prefix = np.array([[4, 6, 0], [7, 0, 0], [5, 5, 8]], "int32")
    n = 6 if rows is None else len(rows)
    logits = RNG.normal(size=(n, 10)).astype("float32")
    state_rows = None if rows is None else np.array(rows, "int32")
    for index in range(5):
        out = processors.ForcePrefix(prefix, beams=2)(logits, StepState(index, rows=state_rows))
        expected = reference_force(logits, prefix, index, range(n) if rows is None else rows, 2)
        np.testing.assert_array_equal(np.asarray(out), expected, err_msg=str(index))


def test_list_order_and_what_is_off():
    """Python values that switch a control off leave it out; tensors stay (a request decides);
    the order is bans, penalty, n-grams, prefix."""
    opts = DecodingOptions().resolve(16, controls={"repetition_penalty": 1.2,
                                                   "no_repeat_ngram_size": 3,
                                                   "max_length_factor": 0.0})
    kinds = [type(p).__name__ for p in processors.processors_for(opts, START, 9, [[4]])]
    assert kinds == ["BanIds", "RepetitionPenalty", "NoRepeatNgram", "ForcePrefix"]
    off = DecodingOptions().resolve(16)
    assert [type(p).__name__ for p in processors.processors_for(off, START, 9)] == ["BanIds"]
    assert not processors.processors_for(off, START, 9).reads_history
    tensors = types.SimpleNamespace(repetition_penalty=tf.constant(1.0),
                                    no_repeat_ngram_size=tf.constant(0))
    procs = processors.processors_for(tensors, START, 9)
    assert len(procs) == 3 and not bool(procs.gate)  # the request's one decision: all off
    assert [type(p).__name__ for p in procs.bans_only()] == ["BanIds"]
    assert procs.bans_only().gate is None
    on = types.SimpleNamespace(repetition_penalty=tf.constant(1.0),
                               no_repeat_ngram_size=tf.constant(2))
    assert bool(processors.processors_for(on, START, 9).gate)
    assert bool(processors.processors_for(tensors, START, 9, tf.constant([[0, 4]])).gate)
    assert not bool(processors.processors_for(tensors, START, 9, tf.zeros((1, 2), "int32")).gate)
    # A Python value that switches a control on: no decision to make.
    assert processors.processors_for(opts, START, 9, [[4]]).gate is None
    assert processors.length_limits(off, np.ones((2, 3), "int32"), 16) is None


def test_list_applies_each_in_order():
    """The whole list equals the numpy references applied one after the other."""
    vocab, index = 12, 5
    history = np.array([[4, 5, 4, 5, 4, 0, 0], [7, 8, 9, 7, 8, 0, 0]], "int32")
    logits = RNG.normal(size=(2, vocab)).astype("float32") * 3
    opts = types.SimpleNamespace(repetition_penalty=1.5, no_repeat_ngram_size=3)
    prefix = np.array([[0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 6, 0]], "int32")
    procs = processors.processors_for(opts, START, vocab, prefix)
    out = np.asarray(procs(logits, StepState(index, history)))
    expected = logits.copy()
    expected[:, [0, START]] = NEG
    expected = reference_penalty(expected, history, index, 1.5)
    for row in range(2):
        seq = history[row, :index].tolist()
        for j in range(index - 2):  # no_repeat_ngram_size 3: a bigram seen before
            if seq[j:j + 2] == seq[index - 2:]:
                expected[row, seq[j + 2]] = NEG
    expected = reference_force(expected, prefix, index, range(2), 1)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out[0, 5] == NEG and out[1, 6] > NEG / 2  # the n-gram ban; the forced token


def test_length_penalty_is_gnmt():
    lengths = np.array([0, 1, 7, 30])
    for alpha in (0.0, 0.6, 1.0):
        expected = ((5.0 + lengths) / 6.0) ** alpha
        np.testing.assert_allclose(np.asarray(decoding.length_penalty(lengths, alpha)),
                                   expected, rtol=1e-6)
    assert float(decoding.length_penalty(4, 0.6)) == pytest.approx(1.5 ** 0.6, rel=1e-6)


def test_log_probs_bans_then_normalises():
    logits = RNG.normal(size=(2, 3, 8)).astype("float32")
    banned = logits.copy()
    banned[..., [0, START]] = -np.inf
    expected = banned - np.log(np.exp(banned).sum(-1, keepdims=True))
    out = np.asarray(decoding.log_probs(logits, START))
    keep = np.isfinite(expected)
    np.testing.assert_allclose(out[keep], expected[keep], rtol=1e-5, atol=1e-6)
    assert (out[~keep] < -1e8).all()
