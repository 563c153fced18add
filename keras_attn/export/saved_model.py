"""The TF Serving SavedModel target (TensorFlow-only) and what a SavedModel's graph needs.

:class:`SavedModelExporter` saves :class:`~keras_attn.export.modules.TranslatorModule`'s
signatures (docs/export.md) in TF Serving's layout, ``<version>.report.json`` beside them.
A character vocabulary needs core TensorFlow ops only; WordPiece and SentencePiece need
tensorflow-text's. The report lists every op, the non-core ones with the library that
registers them, and those a stock TF Serving lacks (:data:`TF_SERVING_TFTEXT_OPS`).
"""
import json
import os
import subprocess
import sys

import tensorflow as tf

from keras_attn.core import runs
from keras_attn.core.deprecation import renamed
from keras_attn.core.languages import SAVED_MODEL_METADATA
from keras_attn.decoding.options import LENGTH_PENALTY
from keras_attn.export.base import (Exporter, as_parts, check_beam, check_choice,
                                    check_length_penalty, decoding_info, file_sizes, now,
                                    versions)
from keras_attn.export.modules import (IDS_SIGNATURE, SERVING_SIGNATURE, TEXT_OPS,
                                       TranslatorModule)

MODEL_NAME = "translator"
METADATA = SAVED_MODEL_METADATA
# tensorflow-text ops that every stock TF Serving (2.12 and later) links
# (tensorflow_text:ops_lib, text 2.12.1 / 2.20.0; tensorflow/serving BUILD and workspace.bzl).
TF_SERVING_TFTEXT_OPS = frozenset({
    "CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets", "WordpieceTokenizeWithOffsets",
    "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize", "FastBertNormalize",
    "TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize",
    "SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceTokenizeWithOffsetsOp",
    "SentencepieceDetokenizeOp", "SentencepieceVocabSizeOp", "SentencepieceIdToStringOp",
    "SentencepieceStringToIdOp", "WhitespaceTokenizeWithOffsets",
    "TFText>WhitespaceTokenizeWithOffsetsV2", "UnicodeScriptTokenizeWithOffsets",
})
SERVING_DOCKER = ("docker run -p 8501:8501 -p 8500:8500 -v {base}:/models/{name} "
                  "-e MODEL_NAME={name} tensorflow/serving")


class SavedModelExporter(Exporter):
    """A TF-Serving SavedModel at ``export_dir/model_name/version/``.

    Args:
        model_name: the TF Serving model name (a plain folder name).
        version: integer version folder (>= 0).
        beam_size, length_penalty: the export's decoding (``alpha=``: ``length_penalty``'s
            deprecated name).
        text_ops: ``"auto"``, ``"core"`` or ``"tftext"``
            (:func:`~keras_attn.export.modules.resolve_text_ops`).
        overwrite: replace an existing version (otherwise ``FileExistsError``).
        request_signature: also the ``translate`` signature (every decoding option per
            request); False: ``serving_default``, ``translate_ids`` and ``score`` alone.
        passthrough: ``serving_default`` passes spans through in the graph (None:
            :func:`keras_attn.text.spans.default_for`).

    Example:
        >>> SavedModelExporter(version=2).export(translator, "exported/saved_model")
    """

    format = "tf_saved_model"

    @renamed(alpha="length_penalty")
    def __init__(self, model_name=MODEL_NAME, version=1, beam_size=1,
                 length_penalty=LENGTH_PENALTY, text_ops="auto", overwrite=False,
                 request_signature=True, passthrough=None):
        super().__init__(overwrite)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"`version` must be a non-negative integer (TF Serving reads "
                             f"version folders as integers). Received: version={version!r}")
        if (not isinstance(model_name, str) or not model_name or os.sep in model_name
                or model_name in (".", "..")):
            raise ValueError(f"`model_name` must be a plain folder name. Received: "
                             f"model_name={model_name!r}")
        self.model_name = model_name
        self.version = version
        self.beam_size = check_beam(beam_size)
        self.length_penalty = check_length_penalty(length_penalty)
        self.text_ops = check_choice("text_ops", text_ops, TEXT_OPS)
        self.request_signature = check_choice("request_signature", request_signature,
                                              (True, False))
        self.passthrough = check_choice("passthrough", passthrough, (None, True, False))

    def options(self):
        return {"tag_set": "serve", "model_name": self.model_name, "version": self.version}

    def destination(self, export_dir):
        return os.path.abspath(os.path.join(os.fspath(export_dir), self.model_name,
                                            str(self.version)))

    def write(self, parts, path):
        module = TranslatorModule(parts, self.beam_size, self.length_penalty, for_tflite=False,
                                  text_ops=self.text_ops,
                                  request_signature=self.request_signature,
                                  passthrough=self.passthrough)
        self._save(module, path, module.signatures())
        if parts.languages:
            runs.write_json(os.path.join(path, METADATA), {"languages": parts.languages})
        return {"decoding": decoding_info(parts, self.beam_size, self.length_penalty,
                                          module.normalize),
                "text_ops": module.text_ops, "passthrough": module.passthrough}

    @staticmethod
    def _save(module, path, signatures):
        # Serving needs no gradients: the custom-gradient functions are left out.
        tf.saved_model.save(module, path, signatures=signatures, options=tf.saved_model
                            .SaveOptions(experimental_custom_gradients=False))

    def check(self, parts, path, samples):
        probe = _start_probe(saved_model_ops(path))  # a process, while this one loads
        try:
            loaded = tf.saved_model.load(path)
            out = loaded.signatures[SERVING_SIGNATURE](text=tf.constant(samples, tf.string))
        except BaseException:
            probe.kill()
            raise
        if out["translation"].shape != (len(samples),):
            probe.kill()
            raise RuntimeError(f"the exported SavedModel at {path} returned {out}")
        self._loaded = loaded  # run_samples' (the files are renamed, the graph stays loaded)
        report = saved_model_report(path, probe)
        if report["xla_ops"]:
            raise RuntimeError(f"the SavedModel graph uses XLA ops {report['xla_ops']} that TF "
                               "Serving runs only with XLA JIT (keras_attn.ops.slice_update "
                               "should have kept them out)")
        if report["tf_serving_lacks"]:
            report["warnings"] = [f"a stock TF Serving image does not link "
                                  f"{report['tf_serving_lacks']}: serve it from a build "
                                  "that registers them"]
        return report

    def published(self, path, report):
        base = os.path.dirname(path)
        runs.write_json(os.path.join(base, f"{self.version}.report.json"), report)

    def run_samples(self, path, translator, sources):
        """``serving_default`` on the raw ``sources``; ``translate_ids`` on
        ``translator.encode(sources)`` (the reference of ``export_run``'s agreement). The
        SavedModel this exporter checked is not loaded again."""
        loaded = getattr(self, "_loaded", None) or tf.saved_model.load(path)
        out = loaded.signatures[SERVING_SIGNATURE](text=tf.constant(sources, tf.string))
        ids = loaded.signatures[IDS_SIGNATURE](source=translator.encode(sources))["tokens"]
        return {"translation": [t.decode("utf-8", "replace")
                                for t in out["translation"].numpy().tolist()],
                "ids": [[t for t in row if t] for row in ids.numpy().tolist()]}


@renamed(alpha="length_penalty")
def export_saved_model(translator_or_parts, export_dir, model_name=MODEL_NAME, version=1,
                       overwrite=False, beam_size=1, max_len=None,
                       length_penalty=LENGTH_PENALTY, text_ops="auto", request_signature=True,
                       passthrough=None):
    """Write a TF-Serving SavedModel to ``export_dir/model_name/version/``
    (:class:`SavedModelExporter`'s arguments; ``max_len`` overrides the translator's).

    Returns:
        The report dict (also ``export_dir/model_name/<version>.report.json``).

    Example:
        >>> export_saved_model(Translator.from_run_dir("runs/dates"), "exported/saved_model")
    """
    exporter = SavedModelExporter(model_name, version, beam_size, length_penalty, text_ops,
                                  overwrite, request_signature, passthrough)
    return exporter.export(as_parts(translator_or_parts, max_len), export_dir)


# --- what a SavedModel needs ----------------------------------------------------------------
def _read_saved_model_proto(path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def saved_model_signatures(path):
    """``{signature: {"inputs": {name: {dtype, shape}}, "outputs": {...}}}`` of a SavedModel
    (what ``saved_model_cli show --all`` prints; -1 = any size); an input with a default
    (``SignatureDef.defaults``: TF Serving fills it in) has ``"default": true``."""
    meta = _read_saved_model_proto(path).meta_graphs[0]

    def spec(info, default=False):
        shape = (None if info.tensor_shape.unknown_rank
                 else [int(d.size) for d in info.tensor_shape.dim])
        return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": shape,
                **({"default": True} if default else {})}

    return {name: {"method": sig.method_name,
                   "inputs": {k: spec(v, k in sig.defaults)
                              for k, v in sorted(sig.inputs.items())},
                   "outputs": {k: spec(v) for k, v in sorted(sig.outputs.items())}}
            for name, sig in sorted(meta.signature_def.items()) if not name.startswith("__")}


def saved_model_ops(path):
    """Every op type in a SavedModel's graph and function library (sorted)."""
    meta = _read_saved_model_proto(path).meta_graphs[0]
    ops = {node.op for node in meta.graph_def.node}
    for fn in meta.graph_def.library.function:
        ops.update(node.op for node in fn.node_def)
    return sorted(ops)


_REGISTRY_PROBE = r"""
import json, sys
import tensorflow as tf

def registered(op):
    # A graph holding one node of type `op` is refused as "not registered" (NotFoundError)
    # exactly when the process lacks the op; a registered op fails later, on its inputs.
    graph_def = tf.compat.v1.GraphDef()
    graph_def.node.add(name="probe", op=op)
    with tf.Graph().as_default():
        try:
            tf.graph_util.import_graph_def(graph_def, name="")
        except tf.errors.NotFoundError:
            return False
        except ValueError:
            pass
    return True

asked = json.load(sys.stdin)
missing = [op for op in asked or [] if not registered(op)]
import tensorflow_text
print(json.dumps({"core": None if asked is not None else sorted(n for n in dir(tf.raw_ops)
                                                    if not n.startswith("_")),
                  "missing_in_tensorflow": missing,
                  "missing_with_tensorflow_text": [op for op in missing if not registered(op)]}))
"""


def _start_probe(ops):
    """:func:`_probe` started in its process (:func:`_probe_answer` reads it)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    process = subprocess.Popen([sys.executable, "-c", _REGISTRY_PROBE], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    process.asked = json.dumps(ops)
    return process


def _probe_answer(process):
    try:
        out, err = process.communicate(process.asked, timeout=300)
        if process.returncode:
            raise subprocess.CalledProcessError(process.returncode, "probe", out, err)
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        process.kill()
        raise RuntimeError(f"could not list the ops a bare TensorFlow registers: {e}") from None


def _probe(ops):
    """Which ops a fresh Python registers with ``tensorflow`` alone, then with
    ``tensorflow_text`` (what a serving process without keras_attn has)."""
    return _probe_answer(_start_probe(ops))


def core_ops():
    """Every op of a bare ``import tensorflow`` (``tf.raw_ops``; TF Serving links them all)."""
    return frozenset(_probe(None)["core"])


def serving_allowlist():
    """The ops a stock TF Serving runs: core TensorFlow ops except ``Xla*`` (XLA JIT is
    off by default), plus :data:`TF_SERVING_TFTEXT_OPS`."""
    return frozenset(op for op in core_ops() if not op.startswith("Xla")) | TF_SERVING_TFTEXT_OPS


def classify_ops(ops, probe=None):
    """``{"non_core": [{"op", "registered_by", "version"}], "unregistered": [...]}``: the op
    types beyond core TensorFlow and the library that registers them (``probe``: a
    :func:`_start_probe` of ``ops`` already running)."""
    import tensorflow_text

    probe = _probe_answer(probe) if probe is not None else _probe(list(ops))
    unregistered = probe["missing_with_tensorflow_text"]
    non_core = [{"op": op, "registered_by": "tensorflow_text",
                 "version": tensorflow_text.__version__}
                for op in probe["missing_in_tensorflow"] if op not in unregistered]
    non_core += [{"op": op, "registered_by": "unknown", "version": None} for op in unregistered]
    return {"non_core": non_core, "unregistered": unregistered}


def saved_model_report(path, probe=None):
    """Report of a SavedModel folder: signatures, ops (non-core ones flagged), sizes
    (``probe``: :func:`classify_ops`')."""
    ops = saved_model_ops(path)
    classes = classify_ops(ops, probe)
    sizes = file_sizes(path)
    xla = [op for op in ops if op.startswith("Xla")]
    return {
        "format": "tf_saved_model", "tag_set": "serve", "created": now(),
        "versions": versions(), "signatures": saved_model_signatures(path),
        "ops": ops, "non_core_ops": classes["non_core"], "xla_ops": xla,
        "tf_serving_lacks": sorted(set(xla) | {o["op"] for o in classes["non_core"]
                                               if o["op"] not in TF_SERVING_TFTEXT_OPS}),
        "files": sizes, "total_bytes": sum(sizes.values()),
    }
