"""keras_attn.core.deprecation: a renamed keyword argument keeps its old name, with a
warning, and refuses both names with different values."""
import warnings

import pytest

from keras_attn.core.deprecation import renamed


@renamed(alpha="length_penalty")
def rank(scores, beam_size=1, length_penalty=0.6, **options):
    """Ranks."""
    return beam_size, length_penalty, options


def test_the_new_name_and_positions_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rank([], 4, 1.0) == (4, 1.0, {})
        assert rank([], length_penalty=0.2, seed=1) == (1, 0.2, {"seed": 1})
    assert rank.__name__ == "rank" and rank.__doc__ == "Ranks."


def test_the_old_name_warns_and_passes_its_value_on():
    with pytest.warns(DeprecationWarning, match="`alpha` is deprecated: it is now "
                                                "`length_penalty`"):
        assert rank([], 4, alpha=1.5, seed=1) == (4, 1.5, {"seed": 1})


@pytest.mark.parametrize("args, kwargs", [((), {"length_penalty": 0.3}), ((2, 0.3), {})])
def test_both_names_with_different_values_raise(args, kwargs):
    with pytest.warns(DeprecationWarning), \
            pytest.raises(TypeError, match="alpha=1.5, length_penalty=0.3"):
        rank([], *args, alpha=1.5, **kwargs)


def test_both_names_with_the_same_value_pass():
    with pytest.warns(DeprecationWarning):
        assert rank([], 2, 0.3, alpha=0.3) == (2, 0.3, {})
