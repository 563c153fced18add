"""keras_attn.layers.dot_product_attention: ``DotProductAttention`` against NumPy's
softmax(Q K^T / sqrt(d)) V (every mask form, causal included), D2L 11.3's worked example,
and the checks every attention layer gets (``attention_checks.AttentionLayerChecks``)."""
import pytest

from tests.support.attention_checks import (B, CAUSAL_CASES, HEADS, HIDDEN, K, QUERIES, VALUES,
                                            AttentionLayerChecks, check_d2l_worked_example,
                                            check_matches_numpy_forward_pass, rand)
from keras_attn.layers import DotProductAttention, MultiHeadAttention


class TestDotProductAttention(AttentionLayerChecks):
    name = "dot"


def test_d2l_worked_example():
    check_d2l_worked_example("dot", 2)


@pytest.mark.parametrize("case", CAUSAL_CASES)
def test_causal_mask_matches_numpy_forward_pass(case):
    check_matches_numpy_forward_pass("dot", case)


def test_dot_product_feature_sizes_must_match():
    with pytest.raises(ValueError, match=r"queries.*keys.*feature size.*\(2, 5, 3\)"):
        DotProductAttention()(QUERIES, rand(B, K, 3), VALUES)
    MultiHeadAttention(HIDDEN, HEADS)(QUERIES, rand(B, K, 3), VALUES)  # projections: fine
