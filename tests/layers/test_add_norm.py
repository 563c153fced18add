"""keras_attn.layers.add_norm: ``AddNorm`` against NumPy's LayerNorm(x + y) (epsilon
1e-5), its residual helper in post-norm and pre-norm order, D2L 11.7's shape example, and
the checks every layer gets (block_checks)."""
import numpy as np
import pytest

from tests.support import layer_checks as lc
from tests.support.block_checks import (common_tests, ADDNORM_TERMS, BAD_RATES, D, EPS, X,
                                        np_layer_norm, rand, randomize)
from keras_attn.layers import AddNorm


def test_d2l_shapes():
    assert tuple(AddNorm(0.5)(np.ones((2, 3, 4)), np.ones((2, 3, 4))).shape) == (2, 3, 4)


def test_addnorm_reference_and_residual():
    norm = AddNorm(epsilon=EPS)
    x, y = rand(2, 3, D, seed=1), rand(2, 3, D, seed=2)
    norm(x, y)
    randomize(norm)
    lc.assert_close(norm(x, y), np_layer_norm(norm.ln, x + y), terms=ADDNORM_TERMS)
    f = lambda h: h * 2.0 + 1.0  # noqa: E731  (any sub-layer)
    terms = ADDNORM_TERMS + 2  # and f's two steps
    lc.assert_close(norm.residual(x, f), np_layer_norm(norm.ln, x + (x * 2 + 1)), terms=terms)
    lc.assert_close(norm.residual(x, f, norm_first=True),
                    x + (np_layer_norm(norm.ln, x) * 2 + 1), terms=terms)


# name -> (factory(dropout), positional call args, keyword call args)
CASES = {
    "addnorm": (lambda r: AddNorm(r), (X, X[:, ::-1] * 2), {}),
}
CASE_TERMS = {"addnorm": ADDNORM_TERMS}  # roundings of each case's output (lc.tolerance)


# ----------------------------------------------------------------------------------------
# The checks every layer gets (block_checks): config, gradients, dropout


test_config_round_trip, test_gradients_finite, test_dropout_only_in_training = common_tests(
    CASES, CASE_TERMS)


@pytest.mark.parametrize("make, arg", [
    (lambda: AddNorm(epsilon=0.0), "epsilon"),
])
def test_bad_sizes_raise(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("make", [
    lambda r: AddNorm(r),
], ids=["addnorm"])
def test_bad_dropout_raises(make, rate):
    with pytest.raises(ValueError, match="dropout"):
        make(rate)
