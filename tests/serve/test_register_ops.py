"""``keras_attn.serve.signature.register_ops``: a served graph's tensorflow-text ops are
registered by loading only their op libraries, in a fresh process (what a server is), and a
graph of TensorFlow's own ops loads nothing."""
import json
import os
import subprocess
import sys

import pytest

from keras_attn.serve.signature import prune, read_meta_graph, register_ops

from tests.support import ROOT
PATH = os.path.join(ROOT, "exported", "saved_model", "translator", "1")


# A MetaGraph naming tensorflow-text ops, one in the graph and one in a function; whether
# the process then registers them, and whether it imported the tensorflow_text package.
_REGISTER_PROBE = r"""
import json, sys
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.framework import op_def_registry
from keras_attn.serve.signature import register_ops

meta_graph = meta_graph_pb2.MetaGraphDef()
meta_graph.graph_def.node.add(name="split", op="RegexSplitWithOffsets")
function = meta_graph.graph_def.library.function.add()
function.signature.name = "tokenize"
function.node_def.add(name="pieces", op=sys.argv[2])
loaded = register_ops(meta_graph) if sys.argv[1] == "register" else []

def registered(op):  # in TensorFlow's op registry of this process
    return op_def_registry.get(op) is not None

print(json.dumps({"loaded": loaded, "imported": "tensorflow_text" in sys.modules,
                  "registered": [registered("RegexSplitWithOffsets"), registered(sys.argv[2])]}))
"""


def _register(mode, op):
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
    meta_graph = prune(read_meta_graph(PATH), ["serving_default"])
    assert register_ops(meta_graph) == []  # the committed export's characters: core ops
