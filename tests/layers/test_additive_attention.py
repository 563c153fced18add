"""keras_attn.layers.additive_attention: ``AdditiveAttention`` against NumPy's
softmax(w_v^T tanh(W_q q + W_k k)) V, D2L 11.3's worked example, queries and keys of
different sizes, and the checks every attention layer gets
(``attention_checks.AttentionLayerChecks``)."""
import pytest

from tests.support import layer_checks as lc
from tests.support.attention_checks import (HIDDEN, LENS_BQ, VALUES, AttentionLayerChecks, B, K, Q,
                                            attention_terms, call, check_constructor_error,
                                            check_d2l_worked_example, rand, reference)
from keras_attn.layers import AdditiveAttention


class TestAdditiveAttention(AttentionLayerChecks):
    name = "additive"


def test_d2l_worked_example():
    check_d2l_worked_example("additive", 20)


def test_additive_queries_and_keys_of_different_sizes():
    layer = AdditiveAttention(num_hiddens=HIDDEN)
    queries, keys = rand(B, Q, 7, seed=1), rand(B, K, 3, seed=2)
    output, weights = call(layer, queries, keys, VALUES, valid_lens=LENS_BQ)
    assert layer.W_q.kernel.shape == (7, HIDDEN) and layer.W_k.kernel.shape == (3, HIDDEN)
    assert layer.w_v.kernel.shape == (HIDDEN, 1) and not layer.W_q.use_bias
    expected = reference(layer, queries, keys, VALUES, lc.np_keep_from_valid_lens(LENS_BQ, K))
    w_terms, out_terms = attention_terms("additive", 7)
    lc.assert_close(output, expected[0], terms=out_terms)
    lc.assert_close(weights, expected[1], terms=w_terms)


@pytest.mark.parametrize("make, words", [
    (lambda: AdditiveAttention(0), ["num_hiddens=0"]),
])
def test_bad_constructor_arguments(make, words):
    check_constructor_error(make, words)
