"""keras_attn.decoding.processors: the banned ids, CTranslate2's repetition_penalty and
no_repeat_ngram_size, the forced prefix and Marian's max-length factor, against references
written here in numpy / plain Python, then in the decoding loops (plain and compacted, greedy,
beam and sampling)."""
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding, models
from keras_attn.kernels import fastpath
from keras_attn.decoding import processors
from keras_attn.decoding.options import DecodingOptions
from keras_attn.decoding.processors import NEG, StepState

START, END = 2, 3


def reference_penalty(logits, history, length, penalty):
    """CTranslate2 (and CTRL), in numpy: the logit of an id seen in ``history[:, :length]`` is
    divided by the penalty when positive, multiplied when negative; padding (0) is not seen."""
    expected = logits.copy()
    for row, ids in enumerate(history[:, :length]):
        for i in set(ids.tolist()) - {0}:
            x = logits[row, i]
            expected[row, i] = x * penalty if x < 0 else x / penalty
    return expected


def test_repetition_penalty_follows_ctranslate2():
    """A seen id's logit is divided by the penalty when positive, multiplied when negative;
    unseen ids and padding in the history change nothing."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 10)).astype("float32")
    history = np.array([[4, 5, 4, 0], [7, 0, 0, 0], [9, 1, 6, 8]], "int32")
    length = 3  # position 3 is not written yet (row 2's 8 does not count)
    out = np.asarray(processors.RepetitionPenalty(1.5)(logits, StepState(length, history)))
    np.testing.assert_array_equal(out, reference_penalty(logits, history, length, 1.5))


def reference_banned(history, length, n):
    """The ids that would complete an n-gram already in ``history[:length]`` (plain Python)."""
    seq = list(history[:length])
    if n < 1 or length < n - 1:
        return set()
    suffix = seq[length - n + 1:] if n > 1 else []
    return {seq[j + n - 1] for j in range(length - n + 1) if seq[j:j + n - 1] == suffix}


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_no_repeat_ngram_bans_exactly_the_completing_ids(n):
    rng = np.random.default_rng(n)
    history = rng.integers(4, 8, size=(16, 12)).astype("int32")  # few ids: many repeats
    for length in (0, 1, 3, 7, 12):
        logits = np.zeros((16, 10), "float32")
        out = np.asarray(processors.NoRepeatNgram(n)(logits, StepState(length, history)))
        for row in range(16):
            banned = set(np.flatnonzero(out[row] <= NEG / 2).tolist())
            assert banned == reference_banned(history[row], length, n), (row, length)


def test_row_limits_follow_the_source_length():
    source = np.array([[5, 6, 7, 3], [5, 3, 0, 0], [3, 0, 0, 0]], "int32")
    np.testing.assert_array_equal(processors.row_limits(source, 1.5, 5), [5, 3, 2])
    np.testing.assert_array_equal(processors.row_limits(source, 0.0, 5), [5, 5, 5])
    np.testing.assert_array_equal(processors.row_limits(source, 0.1, 50), [1, 1, 1])


def looping_model():
    """A tiny Transformer whose output layer prefers ids 5 and 6 in turn regardless of
    anything: greedy decoding loops "5 6 5 6 ..." without an end."""
    model = models.transformer_seq2seq(20, 12, num_hiddens=16, ffn_num_hiddens=32, num_heads=2,
                                       num_layers=1, dropout=0.0, max_len=32)
    bias = model.get_layer("decoder").dense.bias
    b = np.zeros(12, "float32")
    b[END] = -50.0
    b[5], b[6], b[7] = 8.0, 7.9, 7.0
    bias.assign(b)
    return model


SOURCE = np.array([[4, 5, 6, 7, 3], [8, 3, 0, 0, 0]], "int32")


def greedy(model, **options):
    opts = DecodingOptions(**options).resolve(16)
    return decoding.decode(model, SOURCE, opts, 16, START, END)


def test_controls_stop_the_loop_of_a_looping_model():
    model = looping_model()
    plain = np.asarray(greedy(model)["tokens"])[:, 0]
    assert (plain[:, :4] == 5).all() or len(set(plain[0].tolist())) <= 3  # it loops
    # no_repeat_ngram_size=1: no id twice in a row's output.
    out = np.asarray(greedy(model, no_repeat_ngram_size=1)["tokens"])[:, 0]
    for row in out:
        ids = [t for t in row.tolist() if t]
        assert len(ids) == len(set(ids)), row
    # no_repeat_ngram_size=2: no bigram twice.
    out = np.asarray(greedy(model, no_repeat_ngram_size=2)["tokens"])[:, 0]
    for row in out:
        ids = [t for t in row.tolist() if t]
        bigrams = list(zip(ids, ids[1:]))
        assert len(bigrams) == len(set(bigrams)), row
    # A strong repetition penalty moves away from the ids already written.
    out = np.asarray(greedy(model, repetition_penalty=50.0)["tokens"])[:, 0]
    assert len(set(out[0, :3].tolist())) == 3, out
    # max_length_factor: at most ceil(factor * source tokens) tokens per row.
    out = greedy(model, max_length_factor=1.5)
    np.testing.assert_array_equal(np.asarray(out["lengths"])[:, 0], [8, 3])


@pytest.mark.skipif(not fastpath.enabled(), reason="rows leave the loop on the fast path only")
@pytest.mark.parametrize("kind", ["greedy", "sample"])
def test_controls_alike_in_the_compacted_and_plain_loops(kind):
    """The loop that drops ended rows (a traced graph with dynamic shapes) gives the plain
    loop's tokens with every control on (the looping model ends only by the factor)."""
    model = looping_model()
    options = dict(no_repeat_ngram_size=3, repetition_penalty=1.3, max_length_factor=2.0)
    if kind == "sample":
        options.update(sampling_topk=4, beam_size=2, num_hypotheses=2, seed=3)
    opts = DecodingOptions(**options).resolve(16)
    eager = decoding.decode(model, SOURCE, opts, 16, START, END)

    def traced():
        with fastpath.using(dynamic_shapes=True):
            return decoding.decode(model, SOURCE, opts, 16, START, END)

    graph = tf.function(traced)()
    for key in ("tokens", "lengths"):
        np.testing.assert_array_equal(np.asarray(graph[key]), np.asarray(eager[key]))


def test_controls_in_beam_search():
    """Beam search with no_repeat_ngram_size=2: no hypothesis repeats a bigram."""
    model = looping_model()
    out = decoding.decode(model, SOURCE, DecodingOptions(
        beam_size=3, num_hypotheses=3, no_repeat_ngram_size=2).resolve(16), 16, START, END)
    for row in np.asarray(out["tokens"]).reshape(-1, 16):
        ids = [t for t in row.tolist() if t]
        bigrams = list(zip(ids, ids[1:]))
        assert len(bigrams) == len(set(bigrams)), row


def test_tensor_values_equal_python_values():
    """A served graph passes the controls as tensors (always in the loop): the same tokens
    as the Python values, and a tensor at its 'off' value changes nothing."""
    model = looping_model()
    opts = DecodingOptions(no_repeat_ngram_size=2, repetition_penalty=1.2,
                           max_length_factor=2.5).resolve(16)
    python = decoding.decode(model, SOURCE, opts, 16, START, END)
    import types

    tensors = types.SimpleNamespace(**{**vars(opts), **{
        "no_repeat_ngram_size": tf.constant(2), "repetition_penalty": tf.constant(1.2),
        "max_length_factor": tf.constant(2.5)}}, sampling=False)
    np.testing.assert_array_equal(
        np.asarray(decoding.decode(model, SOURCE, tensors, 16, START, END)["tokens"]),
        np.asarray(python["tokens"]))
    off = types.SimpleNamespace(**{**vars(opts), **{
        "no_repeat_ngram_size": tf.constant(0), "repetition_penalty": tf.constant(1.0),
        "max_length_factor": tf.constant(0.0)}}, sampling=False)
    np.testing.assert_array_equal(
        np.asarray(decoding.decode(model, SOURCE, off, 16, START, END)["tokens"]),
        np.asarray(greedy(model)["tokens"]))
    # In a plain graph both loops are traced and the request's values pick one: with one
    # control on (the loop with the processors) and with all off (the bans alone).
    def decode(n):
        with fastpath.using(dynamic_shapes=True):
            return decoding.decode(model, SOURCE, types.SimpleNamespace(
                **{**vars(off), "no_repeat_ngram_size": n}), 16, START, END)["tokens"]

    traced = tf.function(decode)
    np.testing.assert_array_equal(np.asarray(traced(tf.constant(0))),
                                  np.asarray(greedy(model)["tokens"]))
    np.testing.assert_array_equal(
        np.asarray(traced(tf.constant(1))),
        np.asarray(greedy(model, no_repeat_ngram_size=1)["tokens"]))
