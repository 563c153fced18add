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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


# A MetaGraph naming tensorflow-text ops, one in the graph and one in a function; whether
# the process then registers them, and whether it imported the tensorflow_text package.
_REGISTER_PROBE = r"""
import json, sys
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2
from keras_attn.serve.signature import register_ops

meta_graph = meta_graph_pb2.MetaGraphDef()
meta_graph.graph_def.node.add(name="split", op="RegexSplitWithOffsets")
function = meta_graph.graph_def.library.function.add()
function.signature.name = "tokenize"
function.node_def.add(name="pieces", op=sys.argv[2])
loaded = register_ops(meta_graph) if sys.argv[1] == "register" else []

def registered(op):
    graph_def = tf.compat.v1.GraphDef()
    graph_def.node.add(name="probe", op=op)
    with tf.Graph().as_default():
        try:
            tf.graph_util.import_graph_def(graph_def, name="")
        except tf.errors.NotFoundError:
            return False
        except ValueError:  # registered: refused later, for its missing inputs
            pass
    return True

print(json.dumps({"loaded": loaded, "imported": "tensorflow_text" in sys.modules,
                  "registered": [registered("RegexSplitWithOffsets"), registered(sys.argv[2])]}))
"""


def _register(mode, op):
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _REGISTER_PROBE, mode, op], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_register_ops_loads_only_the_text_libraries_a_graph_needs():
    pytest.importorskip("tensorflow_text")
    # Without it a fresh process lacks both ops: the probe can tell.
    assert _register("none", "TFText>FastSentencepieceTokenize")["registered"] == [False, False]
    got = _register("register", "TFText>FastSentencepieceTokenize")
    assert got == {"loaded": ["_regex_split_ops.so", "_fast_sentencepiece_tokenizer.so"],
                   "imported": False, "registered": [True, True]}
    # An op no library of the table holds: the whole package, as before.
    got = _register("register", "TFText>PhraseDetokenize")
    assert got["loaded"] == ["tensorflow_text"] and got["imported"]


def test_register_ops_loads_nothing_for_tensorflows_own_ops():
    from keras_attn.serve.signature import register_ops

    meta_graph = prune(read_meta_graph(PATH), ["serving_default"])
    assert register_ops(meta_graph) == []  # the committed export's characters: core ops
