"""The serving graphs as ``tf.Module`` s (TensorFlow-only): what the exporters save or convert.

:class:`TranslatorModule` holds the tokenizers, the Keras model and the decoding loop
(``keras_attn.decoding``) as ``tf.function`` s: ``serve`` (strings in, strings out),
``translate_ids`` (ids in, ids out) and ``score`` (a source and a given translation in, its
log-probabilities out); the SavedModel and the TFLite text target are made from it.
:class:`BuiltinModule` is the encoder and one decoder step with fixed shapes, for the
TFLite builtin target (the application runs the loop: ``keras_attn.export.runtime``; the
step, the processors every loop runs and the greedy choice are :mod:`keras_attn.decoding`'s,
inside the file).

Kernel policy (:mod:`keras_attn.fastpath`, :func:`forward_only`): every serving graph is
traced without the fast paths' hand-written gradients (it only runs forward); the
SavedModel's with ``dynamic_shapes`` on (growing caches, loops that drop ended rows), the
TFLite graphs with it off (fixed ``max_len`` buffers: the interpreter re-plans its memory
whenever a loop variable changes shape).

Portable graphs. Keras's TF backend implements ``keras.ops.slice_update`` with
``XlaDynamicUpdateSlice``, an XLA op that TF Serving refuses unless started with
``--xla_cpu_compilation_enabled`` (tensorflow/serving issue 2217). The decoding buffers and
the key/value cache are therefore written with core ops (``keras_attn.ops.slice_update``,
and on TensorFlow's fast path a concat or ``tensor_scatter_nd_update``,
``keras_attn.tf_step``); the SavedModel export fails if an ``Xla*`` op is left.
"""
import tensorflow as tf

from keras_attn import fastpath, text
from keras_attn.decoding.confidence import Calibrator
from keras_attn.decoding.options import (CONTROL_DEFAULTS, LENGTH_PENALTY, DecodingOptions,
                                         control_defaults)
from keras_attn.export.base import check_beam
from keras_attn.export import request
from keras_attn.export.core_text import CoreCharTokenizer
from keras_attn.export.option_sets import (COMPILED_SIGNATURES, LATEST_OPTIONS_SIGNATURE,
                                            OPTION_SIGNATURES)
from keras_attn.export.runtime import (TFLITE_ENCODER_SIGNATURE, TFLITE_FROZEN_STEP_SIGNATURE,
                                       TFLITE_STEP_SIGNATURE)
from keras_attn.layers.kv_cache import HeadsFirstCache

SERVING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
SCORE_SIGNATURE = "score"  # forced decoding of given translations (TranslatorModule._score)
TEXT_OPS = ("auto", "core", "tftext")
DEFAULT_MAX_BEAM = 8  # the largest beam_size a request of the `translate` signature may ask


def forward_only(fn, dynamic_shapes):
    """``fn`` run under the kernel policy of a serving graph: no custom gradients, and
    ``dynamic_shapes`` as given (a SavedModel: True; TFLite: False). Keeps ``fn``'s
    signature, so ``tf.function`` names the inputs alike."""
    return fastpath.under(fn, dynamic_shapes=dynamic_shapes, custom_gradients=False)


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
        parts: a :class:`Parts`.
        beam_size: 1 = greedy; more = beam search (``keras_attn.decoding``).
        alpha: beam-search length-penalty exponent.
        for_tflite: detokenize with ``detokenize_tflite`` and skip input normalisation.
        text_ops: ``"core"`` (:class:`CoreCharTokenizer`, character vocabularies only),
            ``"tftext"`` (the ``Tokenizer`` objects) or ``"auto"`` (core when possible).
        batch_size: fixed batch of ``serve`` (None: any).
        max_beam_size: the largest ``beam_size`` a ``translate`` request may ask.
        request_signature: also export the options signatures (``translate``,
            ``translate_v2``: decoding options per request, ``keras_attn.export.request``).
    """

    def __init__(self, parts, beam_size=1, alpha=LENGTH_PENALTY, for_tflite=False, text_ops="auto",
                 batch_size=None, max_beam_size=DEFAULT_MAX_BEAM, request_signature=True,
                 name="translator"):
        super().__init__(name=name)
        check_beam(beam_size)
        check_beam(max_beam_size, "max_beam_size")
        # The Keras model is not a SavedModel dependency: `track_variables` records the
        # tf.Variables the traced functions capture instead (as keras.export does). Tracking
        # the Keras variable wrappers saves a second copy of every variable, and TF1-style
        # loaders (saved_model_cli) restore that copy and not the one the graph reads.
        self._keras = _Untracked(parts.model)
        self.max_len = int(parts.max_len)
        self.normalize = bool(parts.normalize) and not for_tflite
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)
        self.for_tflite = bool(for_tflite)
        # The repetition controls' defaults for this target vocabulary (DecodingOptions).
        self.controls = dict(control_defaults(parts.tgt_tokenizer))
        # Its weights become constants of the graphs (keras_attn.decoding.confidence).
        self._calibrator = _Untracked(parts.calibrator or Calibrator.uncalibrated())
        self.text_ops = resolve_text_ops(text_ops, parts, for_tflite)
        if self.text_ops == "core":
            self.src_tokenizer = CoreCharTokenizer(parts.src_tokenizer)
            self.tgt_tokenizer = CoreCharTokenizer(parts.tgt_tokenizer)
        else:
            self.src_tokenizer = parts.src_tokenizer
            self.tgt_tokenizer = parts.tgt_tokenizer
        dynamic = not self.for_tflite
        self.serve = tf.function(
            forward_only(self._serve, dynamic),
            input_signature=[tf.TensorSpec([batch_size], tf.string, name="text")])
        self.translate_ids = tf.function(
            forward_only(self._translate_ids, dynamic),
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])
        # The target vocabulary's pieces, "" for padding: the `score` signature's tokens.
        self._target_pieces = _Untracked([""] + list(parts.tgt_tokenizer.vocab)[1:])
        self.score = tf.function(
            forward_only(self._score, dynamic),
            input_signature=[tf.TensorSpec([batch_size], tf.string, name="source"),
                             tf.TensorSpec([batch_size], tf.string, name="target")])
        self.max_beam_size = int(max_beam_size)
        self.batch_size = batch_size
        # Without it (request_signature=False) an artefact has serving_default alone:
        # smaller and exported in about half the time (no three decoders to trace). The
        # tf.function is not even made then: tf.saved_model.save traces and keeps every
        # tf.function with an input signature that the module holds, signature or not.
        self.request_signature = bool(request_signature)
        self._request = _Untracked(request.RequestDecoder(self, parts, max_beam_size))
        # The options signatures (keras_attn.export.contract), the options each lacks left
        # to the export. In a SavedModel an older one calls the newest (one decoder in the
        # file); TFLite's converter refuses a call of another function: each is traced.
        self.requests = {}
        newest_first = sorted(OPTION_SIGNATURES, key=lambda n: n != LATEST_OPTIONS_SIGNATURE)
        for name in newest_first if self.request_signature else ():
            latest = self.requests.get(LATEST_OPTIONS_SIGNATURE)
            if latest is None or self.for_tflite:
                body = forward_only(request.signature_function(
                    self._request.value.translate, name), dynamic)
            else:
                body = request.signature_function(latest, name)
            self.requests[name] = tf.function(
                body, input_signature=request.input_signature(batch_size, name))
        # A SavedModel's compiled twins (``translate_v2_xla``): greedy decoding in one XLA
        # cluster, beam search and sampling by the signature they twin (its function).
        for name, twin in COMPILED_SIGNATURES.items() if self.requests and not for_tflite else ():
            self.requests[name] = tf.function(forward_only(request.signature_function(
                self._compiled_body(twin), twin, name), dynamic),
                input_signature=request.input_signature(batch_size, twin))

    def _compiled_body(self, twin):
        """``(text, **options) ->`` the compiled twin of options signature ``twin``
        (``RequestDecoder.translate_compiled``, falling back on ``self.requests[twin]``)."""
        plain, names = self.requests[twin], OPTION_SIGNATURES[twin]

        def fallback(strings, **options):
            return plain(strings, *(options[name] for name in names))

        def body(strings, **options):
            return self._request.value.translate_compiled(fallback, strings, **options)

        return body

    @property
    def model(self):
        return self._keras.value

    @property
    def calibrator(self):
        return self._calibrator.value

    def confidence(self, source, tokens, encoded=None):
        """Confidences float32 ``(B * N,)`` of hypotheses ``tokens`` ``(B * N, T)`` of
        ``source`` ``(B, S)``: one teacher-forced pass, the calibrator in the graph."""
        from keras_attn.decoding.confidence import hypothesis_features

        return self.calibrator(hypothesis_features(self.model, source, tokens, text.START_ID,
                                                   text.END_ID, encoded))

    def track_variables(self, concrete_functions):
        """Make the variables the traced functions read part of the SavedModel."""
        track_variables(self, concrete_functions)

    def signatures(self):
        """``{signature name: concrete function}`` of the SavedModel (variables tracked)."""
        functions = {SERVING_SIGNATURE: self.serve.get_concrete_function(),
                     IDS_SIGNATURE: self.translate_ids.get_concrete_function(),
                     SCORE_SIGNATURE: self.score.get_concrete_function()}
        self.track_variables([*functions.values(), *(
            fn.get_concrete_function() for fn in self.requests.values())])
        # The options signatures as tf.functions: their inputs' defaults become the
        # SignatureDef's (TF Serving fills what a request leaves out).
        return {**functions, **self.requests}

    def tflite_functions(self):
        """``{signature key: concrete function}`` of the TFLite text target. A module with
        a fixed batch (a Bahdanau model: Keras's GRU loops need a static batch in TFLite)
        has no ``translate`` signature (beams and n-best need ``B * K`` rows) and no
        ``score``: it converts, but the interpreter refuses the teacher-forced GRU pass
        ("Fill dimensions must be >= 0 ... FILL failed to prepare"), so its
        ``confidence`` is the search's geometric mean of the tokens' probabilities,
        uncalibrated; a Transformer's ``score`` runs with builtin ops and tensorflow-text's
        kernels only."""
        functions = {SERVING_SIGNATURE: self.serve.get_concrete_function()}
        if self.batch_size is None:
            functions[SCORE_SIGNATURE] = self.score.get_concrete_function()
        if self.batch_size is None:
            functions.update({name: fn.get_concrete_function()
                              for name, fn in self.requests.items()})
        self.track_variables(functions.values())
        return functions

    def encode_text(self, strings, tokenizer=None):
        """Strings ``(B,)`` -> source ids ``(B, S)`` (``[END]`` appended, 0-padded),
        truncated ``(B,)``; exactly ``Translator.encode`` (plus the truncation flag).
        ``tokenizer``: another than the source's (the target's: ``Translator.encode_targets``)."""
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

    def decode(self, source, encoded=None):
        """Source ids ``(B, S)`` -> tokens ``(B, max_len)``, lengths ``(B,)``, score ``(B,)``
        (traced inside the module's functions, under their kernel policy). ``encoded``:
        the encoder's output, if computed."""
        from keras_attn import decoding

        if self.beam_size == 1:
            out = decoding.greedy_decode_fixed(self.model, source, self.max_len,
                                               text.START_ID, text.END_ID,
                                               options=self.default_options(), encoded=encoded)
            return out["tokens"], out["lengths"], out["log_prob"]
        out = decoding.beam_decode_fixed(self.model, source, self.beam_size, self.alpha,
                                         self.max_len, text.START_ID, text.END_ID,
                                         options=self.default_options(), encoded=encoded)
        return out["tokens"][:, 0], out["lengths"][:, 0], out["scores"][:, 0]

    def default_options(self):
        """What ``serving_default`` decodes with: every option's default, resolved."""
        return DecodingOptions().resolve(self.max_len, self.alpha, self.controls)

    def _serve(self, strings):
        from keras_attn.export import documents

        if self.for_tflite:
            # TFLite runs no regex op: the app splits documents first (keras_attn.export.
            # runtime.split_for_tflite); the file flags each text it cannot vouch is one
            # sentence, so no text is lost in silence.
            out = self._serve_sentences(strings)
            out["needs_split"] = documents.needs_split_tensor(strings)
            return out
        # Documents: split in the graph (the rules of keras_attn.documents), every sentence
        # of the request decoded as one batch, joined back with the text's whitespace; a
        # text's score sums its sentences', it is truncated if any sentence was.
        sentences, separators = documents.split_tensor(strings)
        out = self._serve_sentences(sentences.flat_values)
        per_text = {k: sentences.with_flat_values(v) for k, v in out.items()}
        return {"translation": documents.join_tensor(per_text["translation"], separators),
                "score": tf.reduce_sum(per_text["score"], axis=1),
                "confidence": documents.lowest(per_text["confidence"]),
                "truncated": tf.reduce_any(per_text["truncated"], axis=1)}

    def _serve_sentences(self, strings):
        """Sentences ``(B,)`` -> ``translation``, ``score``, ``confidence``, ``truncated``
        ``(B,)``."""
        batch = tf.shape(strings)[0]
        source, truncated = self.encode_text(strings)
        if self.for_tflite:
            # TFLite leaves the WHILE loop's outputs unallocated for an empty batch (reading
            # them fails): decode one padding row instead and return none of it.
            source = tf.pad(source, [[0, tf.maximum(1 - batch, 0)], [0, 0]])
        from keras_attn import decoding

        encoded = decoding.encode(self.model, source)  # once: the search and the confidence
        tokens, lengths, score = self.decode(source, encoded)
        if self.for_tflite and self.batch_size is not None:
            # A fixed batch (a Bahdanau model): the interpreter refuses the teacher-forced
            # GRU pass (tflite_functions), so the search's own geometric mean of the tokens'
            # probabilities stands in, uncalibrated.
            confidence = tf.exp(score / tf.cast(tf.maximum(lengths, 1), tf.float32))
        else:
            confidence = self.confidence(source, tokens, encoded)
        if self.for_tflite:  # no regex repair (Flex); identity in character mode anyway
            translation = self.tgt_tokenizer.detokenize_tflite(tokens)
            translation, score, confidence, truncated = (
                t[:batch] for t in (translation, score, confidence, truncated))
        else:
            translation = self.tgt_tokenizer.detokenize(tokens)
        return {"translation": translation, "score": score, "confidence": confidence,
                "truncated": truncated}

    def _score(self, source, target):
        """The ``score`` signature: ``source`` and ``target`` strings ``(B,)`` -> ``tokens``
        string ``(B, T)`` (the target vocabulary's pieces, ``[END]`` last, "" after),
        ``token_ids`` int32 and ``token_log_probs`` float32 ``(B, T)`` (0 after ``[END]``),
        ``log_prob``, ``score`` float32 ``(B,)`` (GNMT-normalised with the export's
        ``alpha``), ``confidence`` float32 ``(B,)``, ``lengths`` int32 ``(B,)`` and
        ``truncated`` bool ``(B,)`` (the target was cut to ``max_len - 1`` tokens):
        ``Translator.score``'s numbers (:func:`keras_attn.decoding.score`, one
        teacher-forced pass)."""
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
                             self.alpha)
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
        tokens, lengths, score = self.decode(source)
        width = tf.reduce_max(tf.concat([lengths, [1]], axis=0))
        return {"tokens": tokens[:, :width], "lengths": lengths, "score": score}


def resolve_text_ops(text_ops, parts, for_tflite=False):
    """``"core"`` or ``"tftext"``: which tokenizer implementation goes into the graph."""
    if text_ops not in TEXT_OPS:
        raise ValueError(f"`text_ops` must be one of {TEXT_OPS}. Received: text_ops={text_ops!r}")
    core_ok = (not for_tflite and CoreCharTokenizer.supports(parts.src_tokenizer)
               and CoreCharTokenizer.supports(parts.tgt_tokenizer))
    if text_ops == "core" and not core_ok:
        raise ValueError("text_ops='core' needs character vocabularies on both sides (and is "
                         "not available for TFLite, whose string kernels are tensorflow-text's). "
                         "Use text_ops='tftext'")
    if text_ops == "auto":
        return "core" if core_ok else "tftext"
    return text_ops


class BuiltinModule(tf.Module):
    """Encoder and one greedy decoding step with fixed shapes (batch 1) for the builtin target.

    ``encode``: ``source`` int32 ``(1, max_len)`` -> ``encoder_output``, ``source_mask``
    float32 ``(1, max_len)``, per layer ``cross_k_<i>``/``cross_v_<i>`` heads-first
    ``(1, H, max_len, d_h)`` (``kv_shape``), ``source_length`` and ``unknown`` float32
    ``(1,)`` (the confidence's source statistics), ``length_limit`` int32 ``(1,)`` (the most
    tokens under ``max_length_factor``: :func:`keras_attn.decoding.processors.row_limits`).
    ``step``: ``token`` int32 ``(1, 1)``, ``index`` int32 ``()``, ``score`` float32 ``(1,)``
    (the sum of log-probabilities so far), ``lowest`` and ``unsure`` float32 ``(1,)`` (the
    least token log-probability so far, 0 at first, and how many tokens were below
    probability 1/2), ``history`` int32 ``(1, max_len)`` (the tokens so far, 0 at first:
    what the repetition controls read), ``source_length``, ``unknown``, ``length_limit``,
    ``source_mask``, ``cross_k_<i>``, ``cross_v_<i>``, ``cache_k_<i>``, ``cache_v_<i>`` ->
    ``next_token`` int32 ``(1,)``, ``finished`` bool ``(1,)`` (``[END]``, or the length
    limit reached), ``score``, ``lowest``, ``unsure`` float32 ``(1,)``, ``history`` with
    ``next_token`` written at ``index``, ``confidence`` float32 ``(1,)`` (of the output if
    it ended with this token: :func:`keras_attn.decoding.confidence.features_from` and the
    run's calibrator), ``logits`` float32 ``(1, V)`` (after the processors) and the updated
    ``cache_k_<i>``, ``cache_v_<i>``.

    The step is :class:`keras_attn.decoding.DecodingStep` (the decoder's cached call), the
    list of processors every loop runs (:func:`keras_attn.decoding.processors_for`: the
    bans and the repetition controls at ``controls``, the export's defaults) and
    :class:`keras_attn.decoding.GreedySampler`'s choice: the app only feeds ``next_token``,
    ``score``, ``lowest``, ``unsure``, ``history`` and the caches back until ``finished``
    (``keras_attn.export.runtime``).

    Args:
        model: a Transformer of :mod:`keras_attn.models`. max_len: the buffers' length.
        calibrator: the run's :class:`~keras_attn.decoding.confidence.Calibrator` (None:
            uncalibrated). controls: ``repetition_penalty``, ``no_repeat_ngram_size`` and
            ``max_length_factor`` (:func:`keras_attn.decoding.options.control_defaults`;
            None: off).
    """

    def __init__(self, model, max_len, calibrator=None, controls=None):
        super().__init__(name="translator_builtin")
        from keras_attn.models import model_kind

        if model_kind(model) != "transformer":
            raise ValueError("the TFLite builtin target supports Transformer models only. "
                             f"Received: a {model_kind(model)} model")
        self._keras = _Untracked(model)
        self._calibrator = _Untracked(calibrator or Calibrator.uncalibrated())
        self.max_len = max_len
        self.controls = dict(CONTROL_DEFAULTS["character"] if controls is None else controls)
        self.num_layers = self.decoder.num_layers
        k, _ = self.decoder.blks[0].attention1.init_cache(1, max_len, layout=HeadsFirstCache)
        self.kv_shape = tuple(k.shape)
        self.encode = tf.function(forward_only(self._encode, False), input_signature=[
            tf.TensorSpec((1, max_len), tf.int32, name="source")])
        kv = [tf.TensorSpec(self.kv_shape, tf.float32, name=f"{kind}_{i}")
              for kind in ("cross_k", "cross_v", "cache_k", "cache_v")
              for i in range(self.num_layers)]
        head = [tf.TensorSpec((1, 1), tf.int32, name="token"),
                tf.TensorSpec((), tf.int32, name="index"),
                tf.TensorSpec((1,), tf.float32, name="score"),
                tf.TensorSpec((1,), tf.float32, name="lowest"),
                tf.TensorSpec((1,), tf.float32, name="unsure")]
        tail = [tf.TensorSpec((1,), tf.float32, name="source_length"),
                tf.TensorSpec((1,), tf.float32, name="unknown")]
        mask = tf.TensorSpec((1, max_len), tf.float32, name="source_mask")
        self.step = tf.function(forward_only(self._step, False), input_signature=[
            *head, tf.TensorSpec((1, max_len), tf.int32, name="history"), *tail,
            tf.TensorSpec((1,), tf.int32, name="length_limit"), mask, *kv])
        # The step's first shipped inputs, frozen (keras_attn.export.contract): an app's loop
        # written against them keeps running, without the repetition controls as then.
        self.step_frozen = tf.function(forward_only(self._step_without_controls, False),
                                       input_signature=[*head, *tail, mask, *kv])

    def tflite_functions(self):
        """``{file name: (signature key, concrete function)}`` (variables tracked)."""
        steps = {TFLITE_FROZEN_STEP_SIGNATURE: self.step_frozen.get_concrete_function(),
                 TFLITE_STEP_SIGNATURE: self.step.get_concrete_function()}
        functions = {"encoder": (TFLITE_ENCODER_SIGNATURE, self.encode.get_concrete_function()),
                     "decoder_step": (None, steps)}
        track_variables(self, [self.encode.get_concrete_function(), *steps.values()])
        return functions

    def metadata(self):
        """What an application needs to run the loop (``metadata.json``)."""
        return {"max_len": self.max_len, "start_id": text.START_ID, "end_id": text.END_ID,
                "pad_id": text.PAD_ID, "num_layers": self.num_layers,
                "confidence": {"calibrated": self._calibrator.value.calibrated},
                "controls": self.controls,
                "kv_shape": list(self.kv_shape),
                "encoder": {"file": "encoder.tflite", "signature": TFLITE_ENCODER_SIGNATURE},
                "decoder_step": {"file": "decoder_step.tflite",
                                 "signature": TFLITE_STEP_SIGNATURE}}

    @property
    def model(self):
        return self._keras.value

    @property
    def encoder(self):
        return self.model.get_layer("encoder")

    @property
    def decoder(self):
        return self.model.get_layer("decoder")

    def _encode(self, source):
        from keras_attn.decoding.confidence import source_statistics
        from keras_attn.decoding.processors import row_limits

        enc = self.encoder(source, training=False)
        cache = self.decoder.init_cache(enc, source, self.max_len, layout=HeadsFirstCache)
        source_length, unknown = source_statistics(source)
        out = {"encoder_output": enc,
               "source_mask": tf.cast(cache["source_mask"], tf.float32),
               "source_length": source_length, "unknown": unknown,
               "length_limit": row_limits(source, self.controls["max_length_factor"],
                                          self.max_len)}
        for i, (k, v) in enumerate(cache["cross"]):
            out[f"cross_k_{i}"], out[f"cross_v_{i}"] = k, v
        return out

    def _step_without_controls(self, token, index, score, lowest, unsure, source_length,
                               unknown, source_mask, *kv):
        """:meth:`_step` with the repetition controls off and no length limit but
        ``max_len`` (the first shipped step's inputs and behaviour); no ``history`` out."""
        out = self._step(token, index, score, lowest, unsure,
                         tf.zeros((1, self.max_len), tf.int32), source_length, unknown,
                         tf.fill([1], self.max_len), source_mask, *kv,
                         controls=CONTROL_DEFAULTS["character"])
        del out["history"]
        return out

    def _step(self, token, index, score, lowest, unsure, history, source_length, unknown,
              length_limit, source_mask, *kv, controls=None):
        from keras_attn import decoding
        from keras_attn import ops as attn_ops
        from keras_attn.decoding.confidence import UNSURE, features_from
        from keras_attn.decoding.processors import StepState, processors_for

        n = self.num_layers
        step = decoding.DecodingStep(self.model, None, self.max_len, True, None)
        step.use_constants({"cross": tuple(HeadsFirstCache(kv[i], kv[n + i]) for i in range(n)),
                            "source_mask": tf.not_equal(source_mask, 0.0)})  # (1, S)
        state = {"self": tuple(HeadsFirstCache(kv[2 * n + i], kv[3 * n + i]) for i in range(n))}
        logits, state, _ = step.step(token[:, 0], state, index)  # (1, V)
        # The list every loop runs, with the export's defaults (Translator's).
        options = DecodingOptions().resolve(self.max_len, controls=controls or self.controls)
        processors = processors_for(options, text.START_ID, self.decoder.vocab_size)
        logits = processors(logits, StepState(index, history))
        greedy = decoding.GreedySampler(self.max_len, text.START_ID, text.END_ID)
        next_token, _, new_score = greedy.select(logits[:, None, :], score[:, None], None)
        new_score = new_score[:, 0]
        history = attn_ops.slice_update(history, (0, index), next_token)  # (1, max_len)
        finished = tf.logical_or(tf.equal(next_token[:, 0], text.END_ID),
                                 index + 1 >= length_limit)
        token_log_prob = new_score - score
        lowest = tf.minimum(lowest, token_log_prob)
        unsure = unsure + tf.cast(token_log_prob < UNSURE, tf.float32)
        confidence = self._calibrator.value(features_from(
            new_score, lowest, unsure, tf.fill([1], index + 1), source_length, unknown))
        out = {"next_token": next_token[:, 0], "finished": finished, "score": new_score,
               "lowest": lowest, "unsure": unsure, "history": history,
               "confidence": confidence, "logits": logits}
        for i, (k, v) in enumerate(state["self"]):
            out[f"cache_k_{i}"], out[f"cache_v_{i}"] = k, v
        return out
