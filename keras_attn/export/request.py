"""Decoding options per request inside a served graph (TensorFlow-only): the options
signatures of the SavedModel and of the TFLite text file.

Each signature of :data:`keras_attn.export.option_sets.OPTION_SIGNATURES` takes ``text`` and
its frozen option set (docs/serving_contract.md); an older one calls the newest with the
unset value of each option it lacks (:func:`signature_function`). The graph checks the
options (:func:`checks`), then decodes with ``Translator.search``. The compiled twins
(``translate_v2_xla``) decode a greedy request in one XLA cluster.

Outputs: ``translations``, ``alignments`` (Pharaoh pairs, empty unless asked) string
``(B, N)``, ``scores``, ``confidences`` float32 ``(B, N)``, ``truncated`` bool ``(B,)``;
with a glossary's inputs (``translate_v4``), ``applied_terms`` int32 ``(B, G)``.
"""
import inspect

import tensorflow as tf

from keras_attn import decoding

from keras_attn.translation import alignment

from keras_attn.kernels import fastpath

from keras_attn.text import tokenizers as text
from keras_attn.decoding.options import (DECODING_NAMES, GLOSSARY_INPUTS, OPTIONS,
                                         DecodingOptions)
from keras_attn.export.option_sets import (COMPILED_BUCKETS, LATEST_OPTIONS_SIGNATURE,
                                            OPTION_SIGNATURES)

# Every input of an options signature but ``text``, and its dtype: the decoding options,
# then ``passthrough`` (translate_v3) and the glossary's two (translate_v4).
OPTION_SPECS = {**{name: tf.as_dtype(OPTIONS[name].dtype) for name in DECODING_NAMES},
                "passthrough": tf.bool, **{name: tf.string for name in GLOSSARY_INPUTS}}
VECTORS = ("target_prefix", *GLOSSARY_INPUTS)  # the inputs of shape (None,)
TRANSLATE_SIGNATURE = "translate"  # the first options signature (frozen, as all are)


def input_signature(batch_size=None, signature=LATEST_OPTIONS_SIGNATURE):
    """``tf.TensorSpec`` s of an options signature: ``text (B,)`` then its options as
    scalars, but ``target_prefix``: strings ``(P,)`` (none, one for all, or ``P = B``) and
    the glossary's: strings ``(G,)``."""
    return [tf.TensorSpec([batch_size], tf.string, name="text")] + [
        tf.TensorSpec([None] if name in VECTORS else [], OPTION_SPECS[name], name=name)
        for name in OPTION_SIGNATURES[signature]]


def unset_value(name):
    """The tensor that leaves option ``name`` to the export (``passthrough``: False; a
    glossary: no term)."""
    if name == "passthrough":
        return tf.constant(False)
    if name in GLOSSARY_INPUTS:
        return tf.constant([], tf.string)
    opt = OPTIONS[name]
    value = opt.signature_value(opt.default)
    return tf.constant([] if opt.dtype == "string" else value, OPTION_SPECS[name])


def signature_function(translate, signature, name=None, newest=LATEST_OPTIONS_SIGNATURE):
    """The Python function of the options signature ``signature``: ``(text, *its inputs)``
    -> ``translate(text, **every input of newest)``, those it lacks at :func:`unset_value`.
    Each argument defaults to it (``passthrough``: True), for the SignatureDef to record."""
    names = OPTION_SIGNATURES[signature]

    def call(text_input, *options):
        values = {name: unset_value(name) for name in OPTION_SIGNATURES[newest]}
        values.update(zip(names, options))
        out = translate(text_input, **values)
        if GLOSSARY_INPUTS[0] not in names:  # an older signature answers as it did
            out.pop("applied_terms", None)
        return out

    def default(name):
        return tf.constant(True) if name == "passthrough" else unset_value(name)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    call.__signature__ = inspect.Signature(
        [inspect.Parameter("text", kind)]
        + [inspect.Parameter(name, kind, default=default(name)) for name in names])
    call.__name__ = name or signature
    return call


def _require_tflite(ok):
    """int32 0, or a failed invocation when ``ok`` is False. TFLite drops ``Assert``: a
    ``GATHER`` out of bounds fails instead (an error, not a crash). The value must feed
    the result, or the converter prunes it; the table is not uniform, or it folds it."""
    return tf.gather(tf.constant([0, 1]), tf.where(ok, 0, 2))


def checks(options, max_beam_size, max_len, prefix_len, for_tflite):
    """The ops that refuse bad options (messages as ``DecodingOptions``'s ``ValueError``):
    each option's rule (its ``unset`` value allowed), then what the export fixed."""
    rules = []
    for name in DECODING_NAMES:
        opt, value = OPTIONS[name], options[name]
        ok = tf.math.is_finite(value) if opt.dtype == "float32" else None
        if opt.valid is not None:
            valid = opt.valid(value)
            if opt.unset is not None:
                valid = tf.logical_or(valid, tf.equal(value, opt.unset))
            ok = valid if ok is None else tf.logical_and(ok, valid)
        if ok is not None:
            rules.append((ok, f"`{name}` must be {opt.rule}"))
    beam_size, max_length = options["beam_size"], options["max_length"]
    rules += [
        (beam_size <= max_beam_size,
         f"`beam_size` must be at most {max_beam_size} (the maximum fixed at export)"),
        (options["num_hypotheses"] <= beam_size, "`num_hypotheses` must not exceed `beam_size`"),
        (max_length <= max_len,
         f"`max_length` must be at most {max_len} (the maximum fixed at export)"),
        (prefix_len < tf.where(max_length > 0, max_length, max_len),
         "`target_prefix` leaves no room within max_length (too many target tokens)"),
    ]
    guards = []
    for ok, message in rules:
        name = message.split("`")[1]
        if for_tflite:
            guards.append(_require_tflite(ok))
        else:
            guards.append(tf.debugging.Assert(ok, [f"{message}. Received: {name}=",
                                                   options[name]]))
    return guards


class RequestDecoder:
    """The per-request decoding of a :class:`~keras_attn.export.modules.TranslatorModule`.

    Args:
        module: the ``TranslatorModule`` (its model, graph tokenizers, ``max_len``).
        max_beam_size: the largest ``beam_size`` (and ``num_hypotheses``) a request may ask.
    """

    def __init__(self, module, max_beam_size):
        self.module = module
        self.max_beam_size = int(max_beam_size)
        pairs = alignment.pair_strings(module.max_len)
        if module.for_tflite:
            import tensorflow_text as tf_text

            # FastWordpiece's detokenizer joins the pair strings with spaces in TFLite.
            pairs[0] = text.PAD
            self._pair_detokenizer = tf_text.FastWordpieceTokenizer(
                pairs, suffix_indicator=text.SUFFIX, token_out_type=tf.int32,
                unknown_token=text.PAD, no_pretokenization=True, support_detokenization=True)
        else:
            self._pair_table = tf.constant(pairs, tf.string)
            # The greedy search of the compiled signatures (:meth:`translate_compiled`):
            # one XLA cluster, traced once; XLA compiles it for each bucket's shape.
            options = {name: tf.TensorSpec([], OPTION_SPECS[name], name=name)
                       for name in DECODING_NAMES if name != "target_prefix"}
            rows = tf.TensorSpec([None, module.max_len], tf.int32)
            self._compiled_greedy = fastpath.graph_function(
                fastpath.under(self._greedy_search, dynamic_shapes=False, compiled=True,
                               custom_gradients=False),
                input_signature=[rows, rows, options], jit_compile=True)

    def translate_compiled(self, fallback, strings, **options):
        """The compiled signatures' body: a greedy request is :meth:`translate` with its
        decoding XLA-compiled; beam search and sampling run ``fallback`` (the twinned
        signature's ``tf.function``)."""
        search = tf.logical_or(options["beam_size"] > 1, options["sampling_topk"] > 1)
        return tf.cond(search, lambda: fallback(strings, **options),
                       lambda: self.translate(strings, compiled=True, **options))

    def translate(self, strings, compiled=False, passthrough=False, glossary_source=None,
                  glossary_target=None, **options):
        """The options signatures' body: a SavedModel splits texts into sentences and joins
        them back, a TFLite file translates sentences and returns ``needs_split``.
        ``compiled``: :meth:`translate_compiled`'s. ``passthrough``: a bool (tensor), spans
        pass through (:func:`keras_attn.export.spans_graph.passed_through`; SavedModel).
        ``glossary_source``, ``glossary_target``: strings ``(G,)``, the terms put in
        (:func:`keras_attn.export.glossary_graph.with_glossary`; SavedModel)."""
        from keras_attn.export import documents

        if self.module.for_tflite:  # True where a text may not be one sentence: split first
            return dict(self.translate_sentences(strings, **options),
                        needs_split=documents.needs_split_tensor(strings))

        def sentences_of(sentences):
            owner = tf.cast(sentences.value_rowids(), tf.int32)

            def decode(rest, return_alignments):
                return self.translate_sentences(rest, owner, tf.shape(strings)[0], compiled,
                                                **dict(options,
                                                       return_alignments=return_alignments))

            def spans_kept(flat, keep_alignments):
                if passthrough is False:
                    return decode(flat, keep_alignments)
                from keras_attn.export import spans_graph

                return spans_graph.passed_through(flat, decode, passthrough, keep_alignments)

            if glossary_source is None:
                return spans_kept(sentences.flat_values, options["return_alignments"])
            from keras_attn.export import glossary_graph

            return glossary_graph.with_glossary(
                sentences.flat_values, spans_kept, glossary_source, glossary_target,
                passthrough, options["return_alignments"])

        return documents.translate_documents_tensor(strings, sentences_of)

    def translate_sentences(self, strings, owner=None, texts=None, compiled=False, **options):
        """Decode sentences ``(S,)``; for the prefixes, ``owner`` int32 ``(S,)`` the text each
        belongs to (default: its own) and ``texts`` how many texts there are."""
        m = self.module
        batch = tf.shape(strings)[0] if texts is None else texts
        source, truncated = m.encode_text(strings)
        if m.for_tflite:  # as in TranslatorModule._serve: TFLite needs a row to decode
            source = tf.pad(source, [[0, tf.maximum(1 - batch, 0)], [0, 0]])
        rows = tf.shape(source)[0]
        prefixes = options["target_prefix"]
        count = tf.shape(prefixes)[0]
        tokens = m.tgt_tokenizer.tokenize(prefixes)
        prefix_len = tf.reduce_max(tf.concat([tf.cast(tokens.row_lengths(), tf.int32), [0]], 0))
        guards = checks(options, self.max_beam_size, m.max_len, prefix_len, m.for_tflite)
        count_ok = (count <= 1) | (count == batch)
        if m.for_tflite:
            guards.append(_require_tflite(count_ok))
        else:
            guards.append(tf.debugging.Assert(count_ok, [
                "`target_prefix` must hold no string, one for every sentence or one per "
                "sentence. Received: target_prefix of length", count, "for", batch,
                "sentences"]))
        with tf.control_dependencies([g for g in guards if not isinstance(g, tf.Tensor)]):
            # (P + 1, width + 1): a row and a column of padding (0: nothing forced).
            prefix = tf.pad(tf.cast(tokens.to_tensor(default_value=text.PAD_ID), tf.int32),
                            [[0, 1], [0, 1]])
        if m.for_tflite:  # the guards' values feed the decoding, so they run
            prefix = prefix + tf.add_n(guards)
        # The text's prefix for each sentence, or row 0 for every one (the prefix, padding).
        owner = tf.range(rows) if owner is None else owner
        prefix = tf.gather(prefix, tf.where(count == batch, owner, 0))
        # The export's values where a request sends an option's unset value.
        o = DecodingOptions.holding(options).resolve(m.max_len, m.length_penalty, m.controls)
        if compiled:
            tokens, scores, codes, confidences = self._compiled_search(source, prefix, o)
        else:
            tokens, scores, codes, confidences = self._search(source, prefix, o)
        n = tf.shape(tokens)[1]
        flat = tf.reshape(tokens, [rows * n, m.max_len])
        tok = m.tgt_tokenizer
        words = tok.detokenize_tflite(flat) if m.for_tflite else tok.detokenize(flat)
        out = {"translations": tf.reshape(words, [rows, n]), "scores": scores,
               "confidences": confidences,
               "alignments": tf.reshape(self.pharaoh(tf.reshape(codes, [rows * n, -1])),
                                        [rows, n]),
               "truncated": truncated}
        if m.for_tflite:
            out = {k: v[:tf.shape(strings)[0]] for k, v in out.items()}
        return out

    def _search(self, source, prefix, o, kinds=decoding.KINDS):
        """``Translator.search`` over ``kinds``, the confidences calibrated: tokens
        ``(B, N, max_len)``, scores ``(B, N)``, pair codes ``(B, N, max_len)`` (0 unless
        asked) and confidences ``(B, N)``."""
        out = self.module.translator.search(source, prefix, o, kinds=kinds)
        shape = tf.shape(out["tokens"])
        features = out["features"]
        confidences = self.module.calibrator(tf.reshape(features, [-1, tf.shape(features)[2]]))
        return (out["tokens"], out["scores"], out["codes"],
                tf.reshape(confidences, [shape[0], shape[1]]))

    def _greedy_search(self, source, prefix, options):
        """:meth:`_search`, greedy only, for XLA: ``source`` and ``prefix`` int32
        ``(B, max_len)``, ``options`` the resolved options (scalars) by name."""
        return self._search(source, prefix,
                            DecodingOptions.holding({**options, "target_prefix": ""}),
                            ("greedy",))

    def _compiled_search(self, source, prefix, o):
        """:meth:`_search` of greedy decoding, XLA-compiled: ``source`` and ``prefix`` padded
        to ``max_len`` columns, the rows to the next of :data:`COMPILED_BUCKETS` with copies
        of the last (beyond the last bucket: chunks of it), so XLA compiles a few shapes."""
        length = self.module.max_len
        rows = tf.shape(source)[0]
        source, prefix = (tf.pad(t, [[0, tf.maximum(1 - rows, 0)],  # no sentence: one row
                                     [0, length - tf.shape(t)[1]]]) for t in (source, prefix))
        options = {name: getattr(o, name) for name in DECODING_NAMES if name != "target_prefix"}
        largest = COMPILED_BUCKETS[-1]

        def bucket(size):
            def run():
                chunks = (tf.maximum(rows, 1) + size - 1) // size
                index = tf.minimum(tf.range(chunks * size), tf.maximum(rows, 1) - 1)
                padded = [tf.reshape(tf.gather(t, index), [-1, size, length])
                          for t in (source, prefix)]
                if size < largest:  # one chunk
                    out = self._compiled_greedy(padded[0][0], padded[1][0], options)
                else:
                    out = tf.map_fn(lambda c: self._compiled_greedy(c[0], c[1], options),
                                    tuple(padded), fn_output_signature=(
                                        tf.int32, tf.float32, tf.int32, tf.float32))
                    out = [tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0)) for t in out]
                return tuple(t[:rows] for t in out)
            return run

        which = tf.minimum(tf.reduce_sum(tf.cast(tf.constant(COMPILED_BUCKETS) < rows,
                                                 tf.int32)), len(COMPILED_BUCKETS) - 1)
        return tf.switch_case(which, [bucket(size) for size in COMPILED_BUCKETS])

    def pharaoh(self, codes):
        """Pair codes ``(N, T)`` -> Pharaoh strings ``(N,)``."""
        counts = tf.reduce_sum(tf.cast(codes > 0, tf.int32), axis=1)
        if self.module.for_tflite:
            return self._pair_detokenizer.detokenize(
                tf.RaggedTensor.from_tensor(codes, lengths=counts))
        words = tf.RaggedTensor.from_tensor(tf.gather(self._pair_table, codes), lengths=counts)
        return tf.strings.reduce_join(words, axis=1, separator=" ")
