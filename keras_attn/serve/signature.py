"""One signature of an exported SavedModel, run as TF Serving runs it: only the nodes and
functions that signature needs, in one session (``tf.saved_model.load`` would restore
every function of the export). The same graph, the same kernels, the same answers.

Example:
    >>> run = SignatureRunner("exported/saved_model/translator/1", "serving_default")
    >>> run(text=np.array([b"3 March 2021"], object))["translation"]
    array([b'2021-03-03'], dtype=object)
"""
import os

import numpy as np

SERVE_TAGS = ("serve",)
INIT_SIGNATURE = "__saved_model_init_op"
# tensorflow-text's op libraries and their ops that exports use: loading only those a graph
# needs takes far less memory than ``import tensorflow_text`` (all 22 libraries).
TEXT_OP_LIBRARIES = {
    "_regex_split_ops.so": ("RegexSplitWithOffsets",),
    "_fast_sentencepiece_tokenizer.so": ("TFText>FastSentencepieceTokenize",
                                         "TFText>FastSentencepieceDetokenize"),
    "_fast_wordpiece_tokenizer.so": ("FastWordpieceTokenizeWithOffsets",
                                     "TFText>FastWordpieceDetokenize"),
    "_normalize_ops.so": ("CaseFoldUTF8", "NormalizeUTF8", "NormalizeUTF8WithOffsetsMap",
                          "FindSourceOffsets"),
    "_byte_splitter.so": ("TFText>ByteSplitWithOffsets", "TFText>ByteSplitByOffsets"),
}


def read_meta_graph(path, tags=SERVE_TAGS):
    """The ``MetaGraphDef`` of ``path/saved_model.pb`` with ``tags``.

    Raises:
        ValueError: no ``saved_model.pb`` there, or no MetaGraph with those tags.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    file = os.path.join(path, "saved_model.pb")
    if not os.path.isfile(file):
        raise ValueError(f"no saved_model.pb in {path!r}: give a SavedModel version folder "
                         "(.../saved_model/translator/1)")
    saved = saved_model_pb2.SavedModel()
    with open(file, "rb") as f:
        saved.ParseFromString(f.read())
    for meta_graph in saved.meta_graphs:
        if set(tags) <= set(meta_graph.meta_info_def.tags):
            return meta_graph
    raise ValueError(f"the SavedModel at {path!r} has no MetaGraph tagged {list(tags)}")


def register_ops(meta_graph):
    """Register the ops of ``meta_graph`` (its graph and functions) that TensorFlow lacks:
    their tensorflow-text libraries alone where :data:`TEXT_OP_LIBRARIES` names them all,
    else the whole ``tensorflow_text``; nothing when there are none or tensorflow-text is
    not installed (loading then names the missing op). Returns what it loaded."""
    import importlib.util

    import tensorflow as tf

    graph_def = meta_graph.graph_def
    ops = {n.op for n in graph_def.node} | {
        n.op for f in graph_def.library.function for n in f.node_def}
    missing = {op for op in ops if not hasattr(tf.raw_ops, op)}
    spec = importlib.util.find_spec("tensorflow_text")
    if not missing or spec is None:
        return []
    libraries = [name for name, names in TEXT_OP_LIBRARIES.items() if missing & set(names)]
    if missing - {op for name in libraries for op in TEXT_OP_LIBRARIES[name]}:
        import tensorflow_text  # noqa: F401  (registers every op it has)

        return ["tensorflow_text"]
    folder = os.path.join(os.path.dirname(spec.origin), "python", "ops")
    for name in libraries:
        tf.load_op_library(os.path.join(folder, name))
    return libraries


def _called_functions(attrs):
    for value in attrs.values():
        if value.HasField("func"):
            yield value.func.name
        if value.HasField("list"):
            yield from (f.name for f in value.list.func)


def prune(meta_graph, keep):
    """Cut ``meta_graph`` (in place) to the signatures named in ``keep`` and what they
    need; returns it."""
    import tensorflow as tf

    node = lambda name: name.split(":")[0].lstrip("^")  # noqa: E731
    keep = set(keep) | {INIT_SIGNATURE}
    signatures = meta_graph.signature_def
    outputs = [node(t.name) for k in keep if k in signatures
               for t in signatures[k].outputs.values()]
    if meta_graph.HasField("saver_def"):
        outputs.append(node(meta_graph.saver_def.restore_op_name))
    graph_def = meta_graph.graph_def
    sub = tf.compat.v1.graph_util.extract_sub_graph(graph_def, outputs)
    library = {f.signature.name: f for f in graph_def.library.function}
    needed, todo = set(), [f for n in sub.node for f in _called_functions(n.attr)]
    while todo:
        name = todo.pop()
        if name in needed or name not in library:
            continue
        needed.add(name)
        todo.extend(f for n in library[name].node_def for f in _called_functions(n.attr))
    functions = [f for name, f in library.items() if name in needed]
    gradients = [g for g in graph_def.library.gradient if g.function_name in needed]
    for field, kept in ((graph_def.node, sub.node), (graph_def.library.function, functions),
                        (graph_def.library.gradient, gradients)):
        del field[:]
        field.extend(kept)
    for name in [k for k in signatures if k not in keep]:
        del signatures[name]
    meta_graph.ClearField("object_graph_def")  # TF2's object restore; a session has no use
    meta_graph.ClearField("collection_def")  # of either, and collections name cut nodes
    return meta_graph


class SignatureRunner:
    """One signature of a SavedModel in a ``tf.compat.v1.Session`` of its own, pruned to
    that signature: ``runner(**inputs)`` (numpy arrays) -> ``{output name: numpy array}``.

    Args:
        path: the SavedModel version folder. name: the signature to run.
        threads: intra-op threads (0: TensorFlow's default).
        meta_graph: the path's ``MetaGraphDef`` if already read (:func:`read_meta_graph`).

    Attributes:
        input_dtypes: ``{input name: tf.DType}``. output_names: the outputs, sorted.
        op_libraries: what :func:`register_ops` loaded for the signature's ops.

    Raises:
        ValueError: no such signature (the message lists those there).
    """

    def __init__(self, path, name, threads=0, meta_graph=None):
        import tensorflow as tf

        meta_graph = meta_graph if meta_graph is not None else read_meta_graph(path)
        if name not in meta_graph.signature_def:
            raise ValueError(f"the SavedModel at {path!r} has no {name!r} signature; its "
                             f"signatures are {sorted(signature_names(meta_graph))}")
        prune(meta_graph, [name])
        self.op_libraries = register_ops(meta_graph)
        signature = meta_graph.signature_def[name]
        for kind, infos in (("input", signature.inputs), ("output", signature.outputs)):
            for key, info in infos.items():
                if not info.name:
                    raise ValueError(f"signature {name!r}: {kind} {key!r} is not a dense "
                                     "tensor, which this runner does not feed")
        self.input_dtypes = {k: tf.as_dtype(v.dtype) for k, v in signature.inputs.items()}
        self.output_names = sorted(signature.outputs)
        config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=int(threads or 0),
            inter_op_parallelism_threads=1 if threads else 0, allow_soft_placement=True)
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=config)
        with self._graph.as_default():
            saver = tf.compat.v1.train.import_meta_graph(meta_graph, clear_devices=True)
            if saver is not None:
                saver.restore(self._session, os.path.join(path, "variables", "variables"))
            if INIT_SIGNATURE in meta_graph.signature_def:
                assets = {a.tensor_info.name: os.path.join(path, "assets", a.filename)
                          for a in meta_graph.asset_file_def}
                init = meta_graph.signature_def[INIT_SIGNATURE].outputs[INIT_SIGNATURE]
                self._session.run(self._graph.get_operation_by_name(init.name.split(":")[0]),
                                  feed_dict=assets)
            self._inputs = sorted(signature.inputs)
            self._run = self._session.make_callable(
                [self._graph.get_tensor_by_name(signature.outputs[k].name)
                 for k in self.output_names],
                [self._graph.get_tensor_by_name(signature.inputs[k].name)
                 for k in self._inputs])
        self._graph.finalize()

    def __call__(self, **inputs):
        if set(inputs) != set(self._inputs):
            missing = set(self._inputs) - set(inputs)
            raise TypeError(f"the signature takes {self._inputs}; missing "
                            f"{sorted(missing)}, unknown {sorted(set(inputs) - set(self._inputs))}")
        values = [np.asarray(inputs[k], self.input_dtypes[k].as_numpy_dtype)
                  for k in self._inputs]
        return dict(zip(self.output_names, self._run(*values)))

    def close(self):
        self._session.close()


def signature_names(meta_graph):
    """The signatures a client can call (the init op's left out)."""
    return [k for k in meta_graph.signature_def if k != INIT_SIGNATURE]
