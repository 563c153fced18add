"""``keras_attn.serve.signature``: one signature of the committed export (``exported/``) in a
session pruned to it gives what ``tf.saved_model.load``'s signature gives, and keeps only
the functions that signature calls."""
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding.options import DecodingOptions
from keras_attn.export import runtime
from keras_attn.serve.signature import SignatureRunner, prune, read_meta_graph, signature_names

from tests.support import ROOT
PATH = os.path.join(ROOT, "exported", "saved_model", "translator", "1")
DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021", "x"]


@pytest.fixture(scope="module")
def loaded():
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(PATH)


@pytest.fixture(scope="module")
def default_run():
    return SignatureRunner(PATH, "serving_default", threads=1)


@pytest.fixture(scope="module")
def options_run():
    return SignatureRunner(PATH, "translate_v2")


def _same(ours, theirs):
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        value = value.numpy()
        if value.dtype.kind in "fc":  # the same graph and kernels: equal to float rounding
            np.testing.assert_allclose(ours[key], value, rtol=0, atol=1e-6 * (1 + abs(value).max()))
        else:
            np.testing.assert_array_equal(ours[key], value)


def test_serving_default_answers_as_the_loaded_signature(loaded, default_run):
    run = default_run
    text = np.array([d.encode() for d in DATES], object)
    _same(run(text=text), loaded.signatures["serving_default"](text=tf.constant(text)))
    assert run.output_names == sorted(loaded.signatures["serving_default"].structured_outputs)


@pytest.mark.slow  # the loaded signature's first call takes seconds; the engine built on
# SignatureRunner is checked against Translator in the README pass (test_serve)
@pytest.mark.parametrize("options", [DecodingOptions(),
                                     DecodingOptions(beam_size=3, num_hypotheses=2),
                                     DecodingOptions(target_prefix="2021", max_length=6)])
def test_options_signature_answers_as_the_loaded_signature(loaded, options_run, options):
    run = options_run
    inputs = runtime.option_inputs(options, run.input_dtypes)
    text = np.array([d.encode() for d in DATES], object)
    theirs = loaded.signatures["translate_v2"](
        text=tf.constant(text), **{k: tf.constant(v, run.input_dtypes[k])
                                   for k, v in inputs.items()})
    _same(run(text=text, **inputs), theirs)


def test_prune_keeps_only_what_the_signature_calls():
    whole = read_meta_graph(PATH)
    functions = len(whole.graph_def.library.function)
    kept = prune(read_meta_graph(PATH), ["serving_default"])
    assert signature_names(kept) == ["serving_default"]
    assert 0 < len(kept.graph_def.library.function) < functions / 2
    # every function a kept node calls is still in the library
    names = {f.signature.name for f in kept.graph_def.library.function}
    calls = {a.func.name for f in kept.graph_def.library.function for n in f.node_def
             for a in n.attr.values() if a.HasField("func")}
    assert calls <= names


def test_bad_signature_and_inputs_are_refused(tmp_path, default_run):
    with pytest.raises(ValueError, match="no 'translate_v9' signature; its signatures are"):
        SignatureRunner(PATH, "translate_v9")
    with pytest.raises(ValueError, match="no saved_model.pb"):
        read_meta_graph(str(tmp_path))
    with pytest.raises(TypeError, match=r"missing \['text'\], unknown \['txt'\]"):
        default_run(txt=np.array([b"1"], object))

