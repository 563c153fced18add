"""The serving graphs as ``tf.Module`` s (TensorFlow-only): what the exporters save or convert.

:class:`TranslatorModule` holds the tokenizers, the Keras model and the decoding loop as
``tf.function`` s: ``serve`` (strings in, strings out), ``translate_ids`` (ids in, ids out),
``score`` (forced decoding) and the options signatures (:mod:`keras_attn.export.request`),
every decoding :meth:`keras_attn.translator.Translator.search`; no ``Xla*`` op outside the
compiled twins (TF Serving refuses those without XLA; the SavedModel export checks).
"""
import tensorflow as tf

from keras_attn.core.deprecation import renamed
from keras_attn.kernels import fastpath

from keras_attn.text import spans
from keras_attn.text import tokenizers as text
from keras_attn.decoding.confidence import Calibrator
from keras_attn.decoding.options import LENGTH_PENALTY, DecodingOptions, control_defaults
from keras_attn.export.base import check_beam, check_choice
from keras_attn.export import request
from keras_attn.export.core_text import CoreCharTokenizer
from keras_attn.export.option_sets import (COMPILED_SIGNATURES, COMPILED_SUFFIX,
                                            OPTION_SIGNATURES, exported_options_signatures)
from keras_attn.translator import Translator

SERVING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
SCORE_SIGNATURE = "score"  # forced decoding of given translations (TranslatorModule._score)
TEXT_OPS = ("auto", "core", "tftext")
DEFAULT_MAX_BEAM = 8  # the largest beam_size a request of the `translate` signature may ask


def forward_only(fn, dynamic_shapes):
    """``fn`` (its signature kept) under a serving graph's kernel policy: no custom
    gradients, ``dynamic_shapes`` as given (a SavedModel: True; TFLite: False)."""
    return fastpath.under(fn, dynamic_shapes=dynamic_shapes, custom_gradients=False)


def model_variables(model):
    """The ``tf.Variable`` s behind ``model.weights``: every variable a serving graph of the
    model can capture, tracked before any is traced (the Keras wrappers are not: a SavedModel
    would hold a second copy)."""
    return [getattr(w, "value", w) for w in model.weights]


def track_variables(module, concrete_functions):
    """Attach the variables that ``concrete_functions`` capture to ``module`` (SavedModel
    and TFLite conversion both find variables through the tracked objects)."""
    captured = {}
    for fn in concrete_functions:
        for variable in fn.variables:
            captured[id(variable)] = variable
    module.captured_variables = list(captured.values())


class _Untracked:
    """Holds an object without making it a SavedModel dependency."""

    def __init__(self, value):
        self.value = value


class TranslatorModule(tf.Module):
    """Tokenizers, model and decoding loop as ``tf.function`` s (what gets exported).

    Args:
        parts: a :class:`~keras_attn.export.base.Parts`.
        beam_size, length_penalty: the export's decoding (``alpha=``: ``length_penalty``'s
            deprecated name).
        for_tflite: detokenize with ``detokenize_tflite`` and skip input normalisation.
        text_ops: ``"core"`` (:class:`CoreCharTokenizer`, character vocabularies only),
            ``"tftext"`` (the ``Tokenizer`` objects) or ``"auto"`` (core when possible).
        batch_size: fixed batch of ``serve`` (None: any).
        max_beam_size: the largest ``beam_size`` a ``translate`` request may ask.
        request_signature: also the options signatures (:mod:`keras_attn.export.request`).
        passthrough: ``serve`` passes spans through in its graph (None:
            :func:`keras_attn.text.spans.default_for`; never in TFLite).

    Example:
        >>> module = TranslatorModule(as_parts(translator), beam_size=4)
        >>> module.serve(tf.constant(["3 March 2021"]))["translation"]
    """

    @renamed(alpha="length_penalty")
    def __init__(self, parts, beam_size=1, length_penalty=LENGTH_PENALTY, for_tflite=False,
                 text_ops="auto", batch_size=None, max_beam_size=DEFAULT_MAX_BEAM,
                 request_signature=True, passthrough=None, name="translator"):
        super().__init__(name=name)
        check_beam(beam_size)
        check_beam(max_beam_size, "max_beam_size")
        # The Keras model is not a SavedModel dependency: `track_variables` records the
        # tf.Variables the graphs capture instead (as keras.export does; tracking the Keras
        # wrappers too would save a second copy that TF1-style loaders restore).
        self._keras = _Untracked(parts.model)
        self.max_len = int(parts.max_len)
        self.normalize = bool(parts.normalize) and not for_tflite
        self.beam_size = int(beam_size)
        self.length_penalty = float(length_penalty)
        self.for_tflite = bool(for_tflite)
        self.controls = dict(control_defaults(parts.tgt_tokenizer))
        self._calibrator = _Untracked(parts.calibrator or Calibrator.uncalibrated())
        self.text_ops = resolve_text_ops(text_ops, parts, for_tflite)
        if passthrough is None:
            passthrough = spans.default_for(parts.src_tokenizer)
        self.passthrough = bool(passthrough) and not self.for_tflite
        graph_tokenizer = CoreCharTokenizer if self.text_ops == "core" else (lambda t: t)
        self.src_tokenizer = graph_tokenizer(parts.src_tokenizer)
        self.tgt_tokenizer = graph_tokenizer(parts.tgt_tokenizer)
        dynamic = not self.for_tflite
        self.serve = fastpath.graph_function(
            forward_only(self._serve, dynamic),
            input_signature=[tf.TensorSpec([batch_size], tf.string, name="text")])
        self.translate_ids = fastpath.graph_function(
            forward_only(self._translate_ids, dynamic),
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])
        # The target vocabulary's pieces, "" for padding: the `score` signature's tokens.
        self._target_pieces = _Untracked([""] + list(parts.tgt_tokenizer.vocab)[1:])
        self.score = fastpath.graph_function(
            forward_only(self._score, dynamic),
            input_signature=[tf.TensorSpec([batch_size], tf.string, name="source"),
                             tf.TensorSpec([batch_size], tf.string, name="target")])
        self.max_beam_size = int(max_beam_size)
        self.batch_size = batch_size
        # Without it the tf.functions are not even made: tf.saved_model.save traces every
        # tf.function with an input signature that the module holds, signature or not.
        self.request_signature = bool(request_signature)
        self._translator = _Untracked(Translator(parts.model, parts.src_tokenizer,
                                                 parts.tgt_tokenizer, self.max_len))
        self._request = _Untracked(request.RequestDecoder(self, max_beam_size))
        # The options signatures, newest first, then a SavedModel's compiled twins
        # (``translate_v2_xla``: greedy decoding in one XLA cluster). An older one calls the
        # newest: one trace; one decoder in a SavedModel, a copy per signature in a TFLite
        # file (the converter inlines the call: keras_attn.export.conversion.convert).
        self.requests = {}
        names = exported_options_signatures(self.for_tflite, self.passthrough)
        newest = names[-1]
        keys = list(reversed(names)) if self.request_signature else []
        keys += [] if for_tflite else [n + COMPILED_SUFFIX for n in keys
                                       if n + COMPILED_SUFFIX in COMPILED_SIGNATURES]
        for key in keys:
            name = COMPILED_SIGNATURES.get(key, key)
            suffix = key[len(name):]  # "" or COMPILED_SUFFIX
            if name == newest:
                translate = self._compiled_body(name) if suffix else self._request.value.translate
                body = forward_only(request.signature_function(translate, name, key,
                                                               newest=newest), dynamic)
            else:
                body = request.signature_function(self.requests[newest + suffix], name, key,
                                                  newest=newest)
            self.requests[key] = fastpath.graph_function(
                body, input_signature=request.input_signature(batch_size, name))

    def _compiled_body(self, name):
        """``(text, **options) ->`` the compiled twin of options signature ``name``
        (``RequestDecoder.translate_compiled``, falling back on ``self.requests[name]``)."""
        plain, names = self.requests[name], OPTION_SIGNATURES[name]

        def fallback(strings, **options):
            return plain(strings, *(options[n] for n in names))

        def body(strings, **options):
            return self._request.value.translate_compiled(fallback, strings, **options)

        return body

    @property
    def model(self):
        return self._keras.value

    @property
    def calibrator(self):
        return self._calibrator.value

    @property
    def translator(self):
        """The ``Translator`` whose ``search`` every graph of the module decodes with."""
        return self._translator.value

    def signatures(self):
        """``{signature name: tf.function}`` of the SavedModel, the model's variables tracked.

        Traced by ``tf.saved_model.save`` itself: a function traced before it would be traced
        again there (a save keys its traces apart), so nothing is traced here. As
        tf.functions, the options signatures' input defaults become the SignatureDef's."""
        self.captured_variables = model_variables(self.model)
        return {SERVING_SIGNATURE: self.serve, IDS_SIGNATURE: self.translate_ids,
                SCORE_SIGNATURE: self.score, **self.requests}

    def tflite_functions(self):
        """``{signature key: concrete function}`` of the TFLite text target. A fixed batch (a
        Bahdanau model) has no options signatures (beams need ``B * K`` rows) and no
        ``score`` (the interpreter refuses the teacher-forced GRU pass)."""
        functions = {SERVING_SIGNATURE: self.serve.get_concrete_function()}
        if self.batch_size is None:
            functions[SCORE_SIGNATURE] = self.score.get_concrete_function()
            functions.update({name: fn.get_concrete_function()
                              for name, fn in self.requests.items()})
        track_variables(self, functions.values())
        return functions

    def encode_text(self, strings, tokenizer=None):
        """Strings ``(B,)`` -> ids ``(B, S)`` as ``Translator.encode`` (``[END]`` appended,
        0-padded), truncated ``(B,)``. ``tokenizer``: another than the source's."""
        if self.normalize:
            strings = text.normalize_text_tf(strings)
        ids = (tokenizer or self.src_tokenizer).tokenize(strings)  # ragged (B, None)
        keep = self.max_len - 1
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        truncated = lengths > keep
        n = tf.minimum(lengths, keep)  # (B,)
        dense = tf.cast(ids.to_tensor(default_value=text.PAD_ID), tf.int32)[:, :keep]
        dense = tf.pad(dense, [[0, 0], [0, 1]])  # (B, max(n) + 1)
        pos = tf.range(tf.shape(dense)[1])[tf.newaxis, :]
        source = tf.where(pos == n[:, tf.newaxis], text.END_ID, dense)
        return source, truncated

    def decode(self, source, confidence=False, return_alignments=False):
        """The export's own decoding of source ids ``(B, S)``: ``Translator.search``'s best
        hypothesis, ``tokens`` ``(B, max_len)``, ``lengths``, ``scores`` ``(B,)`` and with
        ``confidence`` the ``features`` ``(B, F)``."""
        opts = DecodingOptions(beam_size=self.beam_size).resolve(
            self.max_len, self.length_penalty, self.controls)
        if return_alignments is not False:  # a bool tensor: the pair codes when True
            opts = opts.replaced(return_alignments=return_alignments)
        out = self.translator.search(source, None, opts, confidence)
        return {name: value[:, 0] for name, value in out.items()}

    def _serve(self, strings):
        from keras_attn.export import documents

        if self.for_tflite:
            # TFLite runs no regex op: the app splits documents first; the file flags each
            # text it cannot vouch is one sentence.
            out = self._serve_sentences(strings)
            out["needs_split"] = documents.needs_split_tensor(strings)
            return out
        return documents.translate_documents_tensor(
            strings, lambda sentences: self._serve_sentences(sentences.flat_values))

    def _serve_sentences(self, strings):
        """Sentences ``(B,)`` -> ``translation``, ``score``, ``confidence``, ``truncated``
        ``(B,)``; with :attr:`passthrough`, spans passed through."""
        if not self.passthrough:
            return self._decode_sentences(strings)
        from keras_attn.export import spans_graph

        def decode(rest, return_alignments):
            out = self._decode_sentences(rest, return_alignments=return_alignments)
            return {"translations": out["translation"][:, tf.newaxis],
                    "scores": out["score"][:, tf.newaxis],
                    "confidences": out["confidence"][:, tf.newaxis],
                    "alignments": out["alignments"][:, tf.newaxis],
                    "truncated": out["truncated"]}

        out = spans_graph.passed_through(strings, decode)
        return {"translation": out["translations"][:, 0], "score": out["scores"][:, 0],
                "confidence": out["confidences"][:, 0], "truncated": out["truncated"]}

    def _decode_sentences(self, strings, return_alignments=False):
        """:meth:`_serve_sentences` without the pass-through (``return_alignments``: a bool
        tensor, also ``alignments`` ``(B,)``, Pharaoh pairs, "" when False)."""
        batch = tf.shape(strings)[0]
        source, truncated = self.encode_text(strings)
        if self.for_tflite:
            # TFLite leaves the WHILE loop's outputs unallocated for an empty batch (reading
            # them fails): decode one padding row instead and return none of it.
            source = tf.pad(source, [[0, tf.maximum(1 - batch, 0)], [0, 0]])
        # A fixed batch (a Bahdanau model in TFLite) has no teacher-forced pass: the
        # search's geometric mean of the tokens' probabilities stands in, uncalibrated.
        geometric = self.for_tflite and self.batch_size is not None
        out = self.decode(source, confidence=not geometric, return_alignments=return_alignments)
        tokens, score = out["tokens"], out["scores"]
        if geometric:
            confidence = tf.exp(score / tf.cast(tf.maximum(out["lengths"], 1), tf.float32))
        else:
            confidence = self.calibrator(out["features"])
        if self.for_tflite:  # no regex repair (Flex); identity in character mode anyway
            translation = self.tgt_tokenizer.detokenize_tflite(tokens)
            translation, score, confidence, truncated = (
                t[:batch] for t in (translation, score, confidence, truncated))
        else:
            translation = self.tgt_tokenizer.detokenize(tokens)
        result = {"translation": translation, "score": score, "confidence": confidence,
                  "truncated": truncated}
        if return_alignments is not False:
            result["alignments"] = self._request.value.pharaoh(out["codes"])
        return result

    def _score(self, source, target):
        """The ``score`` signature, ``Translator.score``'s numbers: ``source`` and ``target``
        strings ``(B,)`` -> ``tokens`` string ``(B, T)`` ("" after ``[END]``), ``token_ids``
        int32 and ``token_log_probs`` float32 ``(B, T)``, ``log_prob``, ``score`` (with the
        export's ``length_penalty``), ``confidence`` float32, ``lengths`` int32 and ``truncated``
        bool ``(B,)``."""
        from keras_attn import decoding
        from keras_attn.decoding.confidence import features

        checks = []
        if not self.for_tflite:  # TFLite drops Assert: a mismatch fails in the decoder there
            checks.append(tf.debugging.assert_equal(
                tf.shape(source)[0], tf.shape(target)[0],
                message="`source` and `target` must hold as many strings"))
        with tf.control_dependencies(checks):
            source_ids, _ = self.encode_text(source)
            target_ids, truncated = self.encode_text(target, self.tgt_tokenizer)
        out = decoding.score(self.model, source_ids, target_ids, text.START_ID, text.END_ID,
                             self.length_penalty)
        return {"tokens": tf.gather(tf.constant(self._target_pieces.value), target_ids),
                "token_ids": target_ids, "token_log_probs": out["token_log_probs"],
                "log_prob": out["log_prob"], "score": out["score"],
                "confidence": self.calibrator(features(out["token_log_probs"], out["lengths"],
                                                       source_ids)),
                "lengths": out["lengths"], "truncated": truncated}

    def _translate_ids(self, source):
        source = tf.cast(source, tf.int32)[:, : self.max_len]
        # A source of width 0 becomes one padding column (no key: zero attention).
        source = tf.pad(source, [[0, 0], [0, tf.maximum(1 - tf.shape(source)[1], 0)]])
        out = self.decode(source)
        width = tf.reduce_max(tf.concat([out["lengths"], [1]], axis=0))
        return {"tokens": out["tokens"][:, :width], "lengths": out["lengths"],
                "score": out["scores"]}


def resolve_text_ops(text_ops, parts, for_tflite=False):
    """``"core"`` or ``"tftext"``: which tokenizer implementation goes into the graph."""
    check_choice("text_ops", text_ops, TEXT_OPS)
    core_ok = (not for_tflite and CoreCharTokenizer.supports(parts.src_tokenizer)
               and CoreCharTokenizer.supports(parts.tgt_tokenizer))
    if text_ops == "core" and not core_ok:
        raise ValueError("text_ops='core' needs character vocabularies on both sides (and is "
                         "not available for TFLite, whose string kernels are tensorflow-text's). "
                         "Use text_ops='tftext'")
    if text_ops == "auto":
        return "core" if core_ok else "tftext"
    return text_ops
