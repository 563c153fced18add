"""The engines a replica runs (:class:`Engine`), thin callers of the exported artefacts:
:class:`SavedModelEngine` and :class:`CTranslate2Engine`, registered by ``--engine`` name
in :data:`ENGINES`. The server reads what each declares (:class:`Capabilities`, layout)
and never its name. Importing this module imports neither TensorFlow nor CTranslate2.

Example:
    >>> engine = load_engine(locate("exported"), threads=1)
    >>> engine.capabilities.sampling
    True
    >>> engine.translate(["3 March 2021"], DecodingOptions(beam_size=2, num_hypotheses=2))
    [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
"""
import contextlib
import dataclasses
import os
import re
from typing import ClassVar, Optional, Protocol

from keras_attn.core.runs import read_json
from keras_attn.decoding.options import OPTIONS, DecodingOptions
from keras_attn.text import spans

# The names the exporters write (their modules import TensorFlow or CTranslate2;
# tests/translation/test_translation.py checks these agree with
# keras_attn.export.saved_model.MODEL_NAME and keras_attn.export.ctranslate2_runtime.METADATA).
MODEL_NAME = "translator"
CT2_METADATA = "keras_attn.json"


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can do: more is refused before it queues (:func:`check_options`);
    ``GET /frontend/settings`` tells the page.

    Args:
        sampling: random sampling (``sampling_topk > 1``) with keras_attn's seeded draws.
        alignments: word alignments (``return_alignments``; ``format=html`` uses them).
        max_beam_size: the largest ``beam_size``; None: no limit of the engine's own.
        scoring: its artefact scores a given translation (forced decoding).
        confidence: a hypothesis gets its calibrated ``confidence`` when asked.

    Example:
        >>> ENGINES["ctranslate2"].capabilities.sampling
        False
    """

    sampling: bool
    alignments: bool
    max_beam_size: Optional[int] = None
    scoring: bool = True
    confidence: bool = True


class Engine(Protocol):
    """What every engine of :data:`ENGINES` is.

    Attributes:
        name: its ``--engine`` value. capabilities: :class:`Capabilities`.
        layout: where its artefact lies in an export directory, in words.
        export_flags: the ``keras-attn export RUN_DIR`` flags that write its artefact.
        quiet_imports: modules a worker imports with stderr closed (C++ log lines).
        warm_sizes: the numbers of texts :func:`warm_up` sends, one call each.
        version_files: the files a numbered version folder holds once it is complete
            (:mod:`keras_attn.serve.versions` loads no version without them).

    Static methods: ``find(folder)`` (its artefact there, or None), ``max_len(path)``
    (None: unknown), ``default_threads(cores)`` (as the only replica).
    ``Engine(path, threads=0, xla=False)`` loads it.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    layout: ClassVar[str]
    export_flags: ClassVar[str]
    quiet_imports: ClassVar[tuple]
    warm_sizes: tuple
    version_files: ClassVar[tuple]

    def translate(self, texts, options, confidence=True, passthrough=None):
        """Per text, its hypotheses best first (``Translator.translate_nbest``'s shape),
        with ``"alignment"`` when ``options.return_alignments``, ``"confidence"`` when
        ``confidence`` and ``"applied_terms"`` when ``options.glossary``. ``options``
        hold ``passthrough`` (None: the engine's default; the ``passthrough`` argument,
        given, replaces it). Bad options raise ``ValueError`` naming the option (a 400)."""


class SavedModelEngine:
    """The newest options signature of an exported SavedModel, or its XLA-compiled twin.

    Args:
        path: the SavedModel version folder (``.../saved_model/translator/1``).
        threads: TensorFlow intra-op threads (0: TensorFlow's default, every core); set
            before the first TensorFlow op of the process, or ignored.
        signature: the options signature to call (``keras_attn.export.option_sets``; an
            older one gets the options it lacks unset); default: the newest it has.
        xla: call the XLA-compiled twin (``translate_v2_xla``, the same answers) where the
            export has it (docs/serving.md compares them).

    Attributes:
        signature_name: the signature it calls. warm_sizes: the numbers of texts
            :func:`warm_up` sends, one call each (the compiled twin's batch shapes).
    """

    name = "savedmodel"
    capabilities = Capabilities(sampling=True, alignments=True)
    layout = f"saved_model/{MODEL_NAME}/<version>/"
    export_flags = ""
    quiet_imports = ("tensorflow",)
    version_files = ("saved_model.pb", "variables/variables.index")

    def __init__(self, path, threads=0, signature=None, xla=False):
        import absl.logging
        import numpy as np
        import tensorflow as tf

        from keras_attn.export.option_sets import (COMPILED_BUCKETS, compiled_signature,
                                                    newest_options_signature)
        from keras_attn.export.runtime import option_inputs
        from keras_attn.serve.signature import (SignatureRunner, read_meta_graph,
                                              signature_names)
        from keras_attn.translation import pipeline

        # Loading warns about every function with a custom gradient (the masked softmax's,
        # left out of serving files on purpose) and that sessions are TF1's API.
        absl.logging.set_verbosity(absl.logging.ERROR)
        if threads:  # one inter-op thread; too late (TensorFlow already ran: a test) is fine
            with contextlib.suppress(RuntimeError):
                tf.config.threading.set_intra_op_parallelism_threads(int(threads))
                tf.config.threading.set_inter_op_parallelism_threads(1)
        self._np, self._tf, self._option_inputs, self._pipeline = np, tf, option_inputs, pipeline
        self.path = path
        try:
            meta_graph = read_meta_graph(path)
            names = signature_names(meta_graph)
            name = signature or newest_options_signature(names)
        except ValueError as e:
            raise ValueError(f"the SavedModel at {path!r}: {e}") from None
        compiled = compiled_signature(name, names) if xla else None
        self.signature_name = compiled or name
        self.warm_sizes = COMPILED_BUCKETS if compiled else (1,)
        # (it refuses a signature the SavedModel lacks, naming those it has)
        self._signature = SignatureRunner(path, self.signature_name, threads, meta_graph)
        self._dtypes = self._signature.input_dtypes
        # Spans pass through by default where the graph does (translate_v3), else unless
        # the run's source vocabulary is characters (off when the run is not found).
        self.passthrough = ("passthrough" in self._dtypes
                            or spans.default_for_run(_run_dir_beside(path)))

    @staticmethod
    def find(folder):
        """The SavedModel version a folder holds: itself, a model base's highest integer
        version with a ``saved_model.pb`` (TF Serving's choice at start), or an export
        directory's."""
        if os.path.exists(os.path.join(folder, "saved_model.pb")):
            return folder
        return next(filter(None, (_highest_version(base, ("saved_model.pb",))
                                  for base in (folder, os.path.join(folder, MODEL_NAME),
                                               os.path.join(folder, "saved_model",
                                                            MODEL_NAME)))), None)

    @staticmethod
    def max_len(path):
        """From the export's report beside the version folder (``1.report.json``)."""
        report = os.path.join(os.path.dirname(path), os.path.basename(path) + ".report.json")
        return read_json(report)["decoding"]["max_len"] if os.path.exists(report) else None

    @staticmethod
    def default_threads(cores):
        """Every core but one, which the HTTP process needs (docs/benchmarks.md)."""
        return max(1, cores - 1)

    def translate(self, texts, options, confidence=True, passthrough=None):
        """:meth:`Engine.translate`: the graph answers sentences, the pipeline splits and
        joins documents; spans pass through and a glossary's terms are put in by the graph
        where its signature takes them (``translate_v3``: ``passthrough``; ``translate_v4``:
        the glossary too), else by the pipeline, placed by the graph's alignments."""
        if not texts:
            return []
        if passthrough is not None:
            options = dataclasses.replace(options, passthrough=bool(passthrough))
        if options.passthrough is None:
            options = dataclasses.replace(options, passthrough=self.passthrough)
        in_graph = {name: name in self._dtypes for name in ("passthrough", "glossary_source")}
        graph_glossary = options.glossary if in_graph["glossary_source"] else ()
        graph_passthrough = options.passthrough and in_graph["passthrough"]
        python = dataclasses.replace(options, glossary=() if graph_glossary else
                                     options.glossary,
                                     passthrough=options.passthrough and not graph_passthrough)
        asked = options.return_alignments
        decode = self._pipeline.needs_alignments(self, texts, python)
        docs = self._pipeline.split_and_join(
            texts, lambda sentences: self._sentences(sentences, decode, confidence,
                                                     graph_passthrough, graph_glossary),
            options.num_hypotheses, python.passthrough, asked, confidence, python.glossary)
        for hyps in docs if graph_glossary else ():  # a text of no sentence applied none
            for h in hyps:
                h.setdefault("applied_terms", {})
        return self._pipeline.answers(docs)

    def _sentences(self, sentences, options, confidence, passthrough=False, glossary=()):
        strings = self._np.array([t.encode("utf-8") for t in sentences], dtype=object)
        try:
            out = self._signature(text=strings, **self._option_inputs(
                options, self._dtypes, passthrough, glossary))
        except self._tf.errors.InvalidArgumentError as e:
            raise ValueError(_graph_message(e.message)) from None
        utf8 = lambda t: t.decode("utf-8", errors="replace")  # noqa: E731
        hyps = self._pipeline.hypotheses(
            [[utf8(t) for t in row] for row in out["translations"]],
            out["scores"],
            out["confidences"] if confidence and "confidences" in out else None,
            [[utf8(a) for a in row] for row in out["alignments"]]
            if options.return_alignments else None)
        extra = [{}] * len(hyps)
        if glossary:  # the graph's count of each term per sentence
            extra = [{"applied_terms": {glossary[g][0]: glossary[g][1]
                                        for g in self._np.flatnonzero(row)}}
                     for row in out["applied_terms"]]
        return [[dict(h, truncated=bool(cut), **more) for h in row]
                for row, cut, more in zip(hyps, out["truncated"], extra)]


def _highest_version(base, files):
    """The highest integer subfolder of ``base`` holding every one of ``files``, or None."""
    versions = [int(n) for n in (os.listdir(base) if os.path.isdir(base) else ())
                if n.isdigit() and all(os.path.isfile(os.path.join(base, n, f)) for f in files)]
    return os.path.join(base, str(max(versions))) if versions else None


def _run_dir_beside(path):
    """The run of ``EXPORT/saved_model/translator/1``: ``EXPORT/export_report.json``'s
    ``run_dir``, or the run around a ``RUN/export``, or None."""
    export_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(path))))
    report = os.path.join(export_dir, "export_report.json")
    if os.path.exists(report):
        run_dir = read_json(report).get("run_dir")
        if run_dir and os.path.isdir(run_dir):
            return run_dir
    parent = os.path.dirname(export_dir)
    return parent if os.path.exists(os.path.join(parent, "config.json")) else None


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
    """A CTranslate2 model directory (``keras-attn export RUN --format ctranslate2``). Its
    random numbers are not keras_attn's seeded hash and its attention is not our word
    alignment: it neither samples nor aligns.

    Args:
        path: the model directory. threads: CTranslate2's ``intra_threads`` (0: its default).
        xla: no meaning here (CTranslate2 compiles nothing); accepted as every engine takes it.
    """

    name = "ctranslate2"
    capabilities = Capabilities(sampling=False, alignments=False)
    layout = f"ctranslate2/{CT2_METADATA}"
    export_flags = " --format ctranslate2"
    quiet_imports = ()
    warm_sizes = (1,)
    version_files = ("model.bin", CT2_METADATA)

    def __init__(self, path, threads=0, xla=False):
        from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

        self.path = path
        self._translator = CTranslate2Translator(path, intra_threads=int(threads or 0))

    @staticmethod
    def find(folder):
        """The model directory a folder holds: itself, its ``ctranslate2/`` or its
        ``export/ctranslate2/``, or the highest complete integer version of one of them
        (``MODEL/1/``, served as TF Serving serves versions)."""
        candidates = (folder, os.path.join(folder, "ctranslate2"),
                      os.path.join(folder, "export", "ctranslate2"))
        return next((c for c in candidates if os.path.exists(os.path.join(c, CT2_METADATA))),
                    None) or next(filter(None, (_highest_version(
                        c, CTranslate2Engine.version_files) for c in candidates)), None)

    @staticmethod
    def max_len(path):
        return read_json(os.path.join(path, CT2_METADATA))["max_len"]

    @staticmethod
    def default_threads(cores):
        return 0  # CTranslate2's own default

    def translate(self, texts, options, confidence=True, passthrough=None):
        if not texts:
            return []
        if passthrough is not None:
            options = dataclasses.replace(options, passthrough=bool(passthrough))
        kwargs = {k: getattr(options, k) for k in OPTIONS if getattr(options, k) is not None}
        return self._translator.translate_nbest(list(texts), batch_size=max(len(texts), 1),
                                                confidence=confidence, **kwargs)


ENGINES = {e.name: e for e in (SavedModelEngine, CTranslate2Engine)}  # the registry
ENGINE_CLASSES = ENGINES  # its earlier name, kept for code written against it


def check_options(artefact, options):
    """Refuse, before queueing, what the artefact's engine cannot do (``ValueError`` naming
    the option): ``max_length`` above the export's, and a beam, sampling or alignments
    beyond the engine's :class:`Capabilities`. What only the artefact knows (a SavedModel's
    largest beam) is refused by it."""
    engine = ENGINES[artefact.engine]
    can = engine.capabilities
    options.validate(max_beam_size=can.max_beam_size, max_length_limit=artefact.max_len)
    for asked, capability, field, what in (
            (options.sampling, "sampling", "sampling_topk", "` > 1 (random sampling)"),
            (options.return_alignments, "alignments", "return_alignments", "`")):
        if asked and not getattr(can, capability):
            able = [n for n, e in ENGINES.items() if getattr(e.capabilities, capability)]
            raise ValueError(f"`{field}{what} is not available with the {engine.name} engine "
                             f"(serve with --engine {' or '.join(able)}). "
                             f"Received: {field}={getattr(options, field)!r}")
    return options


def load_engine(artefact, threads=0, xla=False):
    """The engine of a :class:`~keras_attn.serve.locate.Artefact`, loaded; ``xla``: the
    SavedModel's compiled signature where it has one (:class:`SavedModelEngine`)."""
    return ENGINES[artefact.engine](artefact.path, threads, xla=xla)


def warm_up(engine):
    """One short call per size of ``engine.warm_sizes`` (no client waits for a first run
    or a compile), then :func:`trim_heap` (loading leaves hundreds of MB freed but held)."""
    for size in engine.warm_sizes:
        # passthrough off: "1" is a number, which would pass through without the graph
        engine.translate(["1"] * size, DecodingOptions(passthrough=False), True)
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
