"""Scoring given translations (issue 40, "Score a given translation"; API.md, "Scoring a
given translation"): ``keras_attn.decoding.score`` against a NumPy log-softmax of the
model's logits written here and against the searches' own scores; ``Translator.score``
against ``translate_nbest`` (greedy: the summed log-probability, beam: the normalised
score) on the committed dates model and the committed tiny dates run, with the fast paths
and on the reference; the SavedModel's ``score`` signature, ``keras-attn score`` and
``CTranslate2Translator.score`` against ``Translator.score``."""
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
from keras_attn import decoding, fastpath, models

START, END = 2, 3
ALPHA = 0.6

SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3],
                   [17, 3, 0, 0, 0, 0, 0]], "int32")
# Rows as the searches return them (END, then 0), one without END (cut at the maximum
# length), and one with tokens after END that must be ignored.
TARGET = np.array([[7, 8, 9, END, 0, 0], [4, END, 0, 0, 0, 0], [5, 6, 7, 8, 9, 10],
                   [7, END, 9, 9, 0, 0]], "int32")


@pytest.fixture(scope="module", params=["transformer", "bahdanau"])
def model(request):
    tf.keras.utils.set_random_seed(1)
    if request.param == "bahdanau":
        return models.bahdanau_seq2seq(40, 30, embed_size=16, num_hiddens=32, num_layers=2,
                                       dropout=0.0)
    return models.transformer_seq2seq(40, 30, num_hiddens=32, ffn_num_hiddens=64, num_heads=4,
                                      num_layers=2, dropout=0.0, max_len=64)


def log_prob_terms(model, steps):
    """Roundings of a sequence's log-probability (lc.tolerance's ``terms``): the logits,
    a log-softmax over the vocabulary of 30, the sum over ``steps``."""
    if models.model_kind(model) == "bahdanau":
        logits = lc.bahdanau_terms(16, 32, 2, SOURCE.shape[1], steps)
    else:
        logits = lc.transformer_terms(32, 64, 4, 2, SOURCE.shape[1], steps)
    return logits + 30 + 4 + steps


def numpy_scores(model, source, target, alpha):
    """The reference: the model's logits (its functional call, teacher-forced), padding and
    START banned, a float64 log-softmax, each target token's entry up to its first END."""
    target_in = np.concatenate([np.full((len(target), 1), START, "int32"), target[:, :-1]], 1)
    logits = np.asarray(model({"source": source, "target_in": target_in}, training=False),
                        "float64")
    logits[..., [0, START]] = -np.inf
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
    kept = np.zeros(target.shape, bool)
    for b, row in enumerate(target):
        for t, token in enumerate(row):
            if token == 0:
                continue
            kept[b, t] = True
            if token == END:
                break
    per_token = np.where(kept, picked, 0.0)
    lengths = kept.sum(1)
    return per_token, per_token.sum(1), per_token.sum(1) / ((5.0 + lengths) / 6.0) ** alpha


# --- keras_attn.decoding.score ---------------------------------------------------------------
@pytest.mark.kernels
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_score_equals_a_numpy_log_softmax_of_the_logits(model, alpha):
    out = decoding.score(model, SOURCE, TARGET, START, END, alpha)
    per_token, log_prob, score = numpy_scores(model, SOURCE, TARGET, alpha)
    terms = log_prob_terms(model, TARGET.shape[1])
    lc.assert_close(out["token_log_probs"], per_token, terms=terms)
    lc.assert_close(out["log_prob"], log_prob, terms=terms)
    lc.assert_close(out["score"], score, terms=terms)
    np.testing.assert_array_equal(out["lengths"], [4, 2, 6, 2])
    # Padding and whatever follows END count nothing.
    assert (np.asarray(out["token_log_probs"])[TARGET == 0] == 0).all()
    assert (np.asarray(out["token_log_probs"])[3, 2:] == 0).all()


@pytest.mark.kernels
@pytest.mark.parametrize("fast_paths", [True, False])
def test_score_gives_the_searches_their_scores_back(model, fast_paths):
    """Greedy's summed log-probability and beam search's normalised scores (every beam),
    for hypotheses that ended and ones cut at max_len, on the fast paths and the
    reference."""
    with fastpath.using(fast_paths=fast_paths):
        greedy = decoding.greedy_decode_fixed(model, SOURCE, 12, START, END)
        beam = decoding.beam_decode_fixed(model, SOURCE, 3, ALPHA, 12, START, END)
        scored = decoding.score(model, SOURCE, greedy["tokens"], START, END, ALPHA)
        flat = np.reshape(beam["tokens"], (-1, 12))
        scored_beam = decoding.score(model, np.repeat(SOURCE, 3, axis=0), flat, START, END,
                                     ALPHA)
    terms = log_prob_terms(model, 12)
    lc.assert_close(scored["log_prob"], greedy["log_prob"], terms=2 * terms)
    np.testing.assert_array_equal(scored["lengths"], greedy["lengths"])
    lc.assert_close(np.reshape(scored_beam["score"], (-1, 3)), beam["scores"], terms=2 * terms)
    np.testing.assert_array_equal(np.reshape(scored_beam["lengths"], (-1, 3)), beam["lengths"])


def test_score_in_a_graph_and_under_xla(model):
    eager = decoding.score(model, SOURCE, TARGET, START, END, ALPHA)
    for jit in (False, True):
        graph = tf.function(lambda s, t: decoding.score(model, s, t, START, END, ALPHA),
                            jit_compile=jit)(tf.constant(SOURCE), tf.constant(TARGET))
        lc.assert_close(graph["log_prob"], eager["log_prob"],
                        terms=2 * log_prob_terms(model, TARGET.shape[1]))


def test_score_refuses_bad_shapes(model):
    with pytest.raises(ValueError, match="target"):
        decoding.score(model, SOURCE, TARGET[0], START, END)
    with pytest.raises(ValueError, match="source"):
        decoding.score(model, SOURCE.astype("float32"), TARGET, START, END)
