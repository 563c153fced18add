"""keras_attn.layers.ffn: ``PositionWiseFFN`` against NumPy's relu(x W1 + b1) W2 + b2,
D2L 11.7's shape example, and the checks every layer gets (block_checks)."""
import numpy as np
import pytest

from tests.support import layer_checks as lc
from tests.support.block_checks import (common_tests, BAD_RATES, D, FFN, X, ffn_terms, np_ffn, rand,
                                        randomize)
from keras_attn.layers import PositionWiseFFN


def test_d2l_shapes():
    assert tuple(PositionWiseFFN(4, 8)(np.ones((2, 3, 4))).shape) == (2, 3, 8)


def test_ffn_reference():
    ffn = PositionWiseFFN(FFN, 5)
    x = rand(2, 3, D)
    ffn(x)
    randomize(ffn)
    lc.assert_close(ffn(x), np_ffn(ffn, x), terms=ffn_terms())
    assert [w.path.split("/")[-2] for w in ffn.weights] == ["dense1", "dense1", "dense2",
                                                             "dense2"]


# name -> (factory(dropout), positional call args, keyword call args)
CASES = {
    "ffn": (lambda r: PositionWiseFFN(FFN, D, dropout=r), (X,), {}),
}
CASE_TERMS = {"ffn": ffn_terms()}  # roundings of each case's output (lc.tolerance)


# ----------------------------------------------------------------------------------------
# The checks every layer gets (block_checks): config, gradients, dropout


test_config_round_trip, test_gradients_finite, test_dropout_only_in_training = common_tests(
    CASES, CASE_TERMS)


@pytest.mark.parametrize("make, arg", [
    (lambda: PositionWiseFFN(0, D), "ffn_num_hiddens"),
])
def test_bad_sizes_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("make", [
    lambda r: PositionWiseFFN(FFN, D, dropout=r),
], ids=["ffn"])
def test_bad_dropout_raises(make, rate):
    with pytest.raises(ValueError, match="dropout"):
        make(rate)
