"""The two engines a replica runs: thin callers of the exported artefacts (no decoding here).

* :class:`SavedModelEngine`: the SavedModel's newest options signature, which takes every
  decoding option per request (``keras_attn.export.request``), or its XLA-compiled twin
  (``translate_v2_xla``) where the export has it, warmed up for every batch shape it
  compiles; run as TF Serving runs it, in a TF1 graph holding that signature alone
  (``keras_attn.serve.signature``).
* :class:`CTranslate2Engine`: ``keras_attn.export.ctranslate2_runtime.CTranslate2Translator``
  (a replica that serves it imports no TensorFlow).

Both answer ``translate(texts, options, confidence=True)`` with, per text, the list of
hypotheses ``{"translation": str, "score": float}`` (plus ``"alignment"`` when
``options.return_alignments``, ``"confidence"`` when asked and the artefact gives one: the
SavedModel's graph always computes it, CTranslate2 skips its ``score_batch`` pass when not
asked), best first:
the shape of ``Translator.translate_nbest``. Bad options raise ``ValueError`` naming the
option (the SavedModel's ``InvalidArgument`` is turned into one), which the HTTP layer
answers with 400.

Example:
    >>> engine = load_engine(locate("exported"), threads=1)
    >>> engine.translate(["3 March 2021"], DecodingOptions(beam_size=2, num_hypotheses=2))
    [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
"""
import dataclasses
import re

import numpy as np

from keras_attn.decoding.options import DecodingOptions
from keras_attn.export.runtime import option_inputs
from keras_attn.translation import pipeline


def check_options(artefact, options):
    """Refuse, before queueing, what the artefact cannot do (``ValueError`` naming the
    option): ``max_length`` above the export's, and for CTranslate2 sampling and alignments
    (``keras_attn.export.ctranslate2_runtime.refuse``, the rules of
    ``CTranslate2Translator.options``). What only the SavedModel knows (its largest beam) is
    refused by its graph."""
    options.validate(max_length_limit=artefact.max_len)
    if artefact.engine == "ctranslate2":
        from keras_attn.export.ctranslate2_runtime import refuse

        refuse(options, engine="the ctranslate2 engine (or serve with --engine savedmodel)")
    return options


def set_tensorflow_threads(threads):
    """Give TensorFlow ``threads`` intra-op threads and one inter-op thread (before it
    runs anything; 0 leaves TensorFlow's defaults). Returns False when it was too late."""
    import tensorflow as tf

    if not threads:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime is already initialised (a test process)
        return False
    return True


class SavedModelEngine:
    """The newest options signature of an exported SavedModel, or its XLA-compiled twin.

    Args:
        path: the SavedModel version folder (``.../saved_model/translator/1``).
        threads: TensorFlow intra-op threads (0: TensorFlow's default, every core); set
            before the first TensorFlow op of the process, or ignored.
        signature: the options signature to call (``keras_attn.export.option_sets``; an
            older one gets the options it lacks unset); default: the newest it has.
        xla: call the compiled twin (``translate_v2_xla``: greedy decoding compiled by XLA,
            the same answers) where the export has it; default: the plain signature (on the
            English-French recipe's model the twin was as fast at batch 1 and slower at
            batch 32: docs/serving.md).

    Attributes:
        signature_name: the signature it calls. warm_sizes: the numbers of texts
            :func:`warm_up` sends, one call each (the compiled twin's batch shapes).
    """

    name = "savedmodel"

    def __init__(self, path, threads=0, signature=None, xla=False):
        import absl.logging
        import tensorflow as tf

        # Loading warns about every function with a custom gradient (the masked softmax's,
        # left out of serving files on purpose) and that sessions are TF1's API.
        absl.logging.set_verbosity(absl.logging.ERROR)
        set_tensorflow_threads(threads)
        try:
            import tensorflow_text  # noqa: F401  (registers a SentencePiece model's ops)
        except ImportError:
            pass
        self._tf = tf
        self.path = path
        from keras_attn.export.option_sets import (COMPILED_BUCKETS, compiled_signature,
                                                    newest_options_signature)
        from keras_attn.serve.signature import (SignatureRunner, read_meta_graph,
                                              signature_names)

        try:
            meta_graph = read_meta_graph(path)
            names = signature_names(meta_graph)
            name = signature or newest_options_signature(names)
            if name not in names:
                raise ValueError(f"it has no {name!r} signature; its signatures are "
                                 f"{sorted(names)}")
        except ValueError as e:
            raise ValueError(f"the SavedModel at {path!r}: {e}") from None
        compiled = compiled_signature(name, names) if xla else None
        self.signature_name = compiled or name
        self.warm_sizes = COMPILED_BUCKETS if compiled else (1,)
        self._signature = SignatureRunner(path, self.signature_name, threads, meta_graph)
        self._dtypes = self._signature.input_dtypes

    def translate(self, texts, options, confidence=True):
        """Per text, its hypotheses (module docstring). ``options``: ``DecodingOptions``;
        ``confidence``: keep the graph's confidences in the answer."""
        tf = self._tf
        if not texts:
            return []
        strings = np.array([t.encode("utf-8") for t in texts], dtype=object)
        try:
            out = self._signature(text=strings, **option_inputs(options, self._dtypes))
        except tf.errors.InvalidArgumentError as e:
            raise ValueError(_graph_message(e.message)) from None
        utf8 = lambda t: t.decode("utf-8", errors="replace")  # noqa: E731
        return pipeline.hypotheses(
            [[utf8(t) for t in row] for row in out["translations"]],
            out["scores"],
            out["confidences"] if confidence and "confidences" in out else None,
            [[utf8(a) for a in row] for row in out["alignments"]]
            if options.return_alignments else None)


def _graph_message(message):
    """The option's sentence out of an ``InvalidArgument`` of the graph's ``Assert``."""
    found = re.search(r"\[(`[^`]+`[^\]]*)\]", message)
    text = found.group(1) if found else message.splitlines()[0]
    received = re.search(r"Received: (\w+)=\] \[([^\]]*)\]", message)
    if received:
        text = text.replace("Received: " + received.group(1) + "=", "").rstrip(". ")
        text += f". Received: {received.group(1)}={received.group(2)}"
    return text


class CTranslate2Engine:
    """A CTranslate2 model directory (``keras-attn export RUN --format ctranslate2``).

    Args:
        path: the model directory. threads: CTranslate2's ``intra_threads`` (0: its default).
    """

    name = "ctranslate2"

    def __init__(self, path, threads=0, signature=None):
        from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

        self.path = path
        self._translator = CTranslate2Translator(path, intra_threads=int(threads or 0))

    def translate(self, texts, options, confidence=True):
        if not texts:
            return []
        kwargs = {k: v for k, v in dataclasses.asdict(options).items() if v is not None}
        return self._translator.translate_nbest(list(texts), batch_size=max(len(texts), 1),
                                                confidence=confidence, **kwargs)


ENGINE_CLASSES = {"savedmodel": SavedModelEngine, "ctranslate2": CTranslate2Engine}


def load_engine(artefact, threads=0, xla=False):
    """The engine of a :class:`~keras_attn.serve.locate.Artefact`, loaded; ``xla``: the
    SavedModel's compiled signature where it has one (:class:`SavedModelEngine`)."""
    if artefact.engine == "savedmodel":
        return SavedModelEngine(artefact.path, threads, xla=xla)
    return ENGINE_CLASSES[artefact.engine](artefact.path, threads)


def warm_up(engine):
    """Short calls, so that no client waits for the graph's first run or for a compile:
    one per number of texts in the engine's ``warm_sizes`` (default: one call). Then the
    heap's free pages go back to the system: loading and compiling leave hundreds of MB
    freed but held (glibc's ``malloc_trim``; elsewhere nothing is done)."""
    for size in getattr(engine, "warm_sizes", (1,)):
        engine.translate(["1"] * size, DecodingOptions())
    trim_heap()


def trim_heap():
    """glibc's ``malloc_trim(0)``; True where it ran."""
    import ctypes
    import ctypes.util

    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim(0)
    return True
