"""Decoding options per request (issue 29): one validated object, ValueError naming the
option and its value for every bad choice."""
import pytest

from keras_attn.decoding_options import NAMES, DecodingOptions


def test_defaults_follow_ctranslate2():
    opts = DecodingOptions()
    assert (opts.beam_size, opts.num_hypotheses, opts.target_prefix) == (1, 1, "")
    assert (opts.sampling_topk, opts.sampling_topp, opts.sampling_temperature) == (1, 1.0, 1.0)
    assert (opts.seed, opts.return_alignments, opts.sampling) == (0, False, False)
    resolved = opts.resolve(max_length_limit=64, length_penalty=0.6)
    assert (resolved.max_length, resolved.length_penalty) == (64, 0.6)
    assert DecodingOptions(max_length=10).resolve(64, 0.6).max_length == 10


@pytest.mark.parametrize("kwargs, name", [
    (dict(beam_size=0), "beam_size"),
    (dict(beam_size=2.0), "beam_size"),
    (dict(beam_size=True), "beam_size"),
    (dict(num_hypotheses=0), "num_hypotheses"),
    (dict(beam_size=2, num_hypotheses=3), "num_hypotheses"),
    (dict(sampling_topk=4, num_hypotheses=2), "num_hypotheses"),
    (dict(sampling_topp=0.0), "sampling_topp"),
    (dict(sampling_topp=1.5), "sampling_topp"),
    (dict(sampling_topp="0.9"), "sampling_topp"),
    (dict(sampling_temperature=0.0), "sampling_temperature"),
    (dict(sampling_temperature=-1.0), "sampling_temperature"),
    (dict(sampling_topk=0), "sampling_topk"),
    (dict(max_length=0), "max_length"),
    (dict(max_length=3.5), "max_length"),
    (dict(seed=2**31), "seed"),
    (dict(seed="1"), "seed"),
    (dict(target_prefix=b"x"), "target_prefix"),
    (dict(return_alignments=1), "return_alignments"),
    (dict(length_penalty="a"), "length_penalty"),
])
def test_bad_option_names_itself(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        DecodingOptions(**kwargs)


def test_limits_fixed_at_export():
    DecodingOptions(beam_size=4).validate(max_beam_size=4, max_length_limit=64)
    with pytest.raises(ValueError, match=r"`beam_size`.*fixed at export.*beam_size=5"):
        DecodingOptions(beam_size=5).validate(max_beam_size=4)
    with pytest.raises(ValueError, match=r"`max_length`.*max_length=65"):
        DecodingOptions(max_length=65).validate(max_length_limit=64)
    with pytest.raises(ValueError, match="`target_prefix`"):
        DecodingOptions(max_length=3, target_prefix="a b c").validate(prefix_tokens=3)
    with pytest.raises(ValueError, match="`target_prefix`"):
        DecodingOptions(target_prefix="a").validate(max_length_limit=4, prefix_tokens=4)
    DecodingOptions(max_length=4, target_prefix="a").validate(prefix_tokens=3)


def test_unknown_keyword_is_named():
    with pytest.raises(ValueError, match="beam"):
        DecodingOptions.from_kwargs(beam=2)
    assert DecodingOptions.from_kwargs(**{n: getattr(DecodingOptions(), n) for n in NAMES}) \
        == DecodingOptions()
