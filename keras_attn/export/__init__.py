"""Export a trained translator: a TF-Serving SavedModel and TFLite flatbuffers.

Everything a client needs is inside the exported graphs: the source/target tokenizers, the
Keras model's weights and the decoding loop (``keras_attn.decoding``). ``export_run``
writes, under ``RUN_DIR/export`` (or ``export_dir``)::

    saved_model/translator/1/              TF Serving layout <base>/<model_name>/<version>/
    saved_model/translator/1.report.json   signatures, non-core ops, file sizes
    tflite/text_float32.tflite             strings in -> strings out (tensorflow-text ops)
    tflite/text_int8.tflite                (dynamic-range int8 weights)
    tflite/builtin_float32/                encoder.tflite + decoder_step.tflite (builtin
    tflite/builtin_int8/                    ops only) + metadata.json + vocabularies
    export_report.json                     all of the above + sample translations

SavedModel signatures:

* ``serving_default``: ``text`` string ``(B,)`` -> ``translation`` string ``(B,)``,
  ``score`` float32 ``(B,)`` (sum of log-probabilities, or the beam score),
  ``truncated`` bool ``(B,)`` (the input had more than ``max_len - 1`` tokens and was cut).
* ``translate_ids``: ``source`` int32 ``(B, S)`` -> ``tokens`` int32 ``(B, T)`` (0 after
  ``[END]``), ``lengths`` int32 ``(B,)``, ``score`` float32 ``(B,)``.

Which ops the SavedModel needs. A character vocabulary (the dates task) is tokenized with
core TensorFlow ops (:class:`CoreCharTokenizer`): the graph has no custom op, loads in any
TensorFlow process (``saved_model_cli run`` included) and in any TF Serving image. A
WordPiece vocabulary (Tatoeba) needs tensorflow-text's ``FastWordpieceTokenizeWithOffsets``
and ``TFText>FastWordpieceDetokenize``: ``import tensorflow_text`` before loading, and a TF
Serving image whose TF-Text build has them (tensorflow/serving issue 4057); the report
lists them with the tensorflow-text version. ``saved_model_cli`` cannot register them.

Portable graphs. Keras's TF backend implements ``keras.ops.slice_update`` with
``XlaDynamicUpdateSlice``, an XLA op that TF Serving refuses unless started with
``--xla_cpu_compilation_enabled`` (tensorflow/serving issue 2217). The decoding buffers and
the key/value cache are therefore written with ``keras_attn.ops.slice_update``, core ops on
TensorFlow (``SELECT_V2`` in TFLite); the export fails if an ``Xla*`` op is left.

TFLite targets:

* ``"text"``: one flatbuffer, strings in and strings out: tokenizer, encoder, decoding
  ``WHILE`` loop (stops at ``[END]``), detokenizer. Custom ops
  ``FastWordpieceTokenizeWithOffsets``, ``RaggedTensorToTensor``,
  ``TFText>FastWordpieceDetokenize``; run it with ``InterpreterWithCustomOps(
  custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)``
  (:func:`run_tflite_text`). It detokenizes with ``Tokenizer.detokenize_tflite`` (no
  ``repair`` regexes) and does not normalise its input (``StringLower`` and
  ``StaticRegexReplace`` exist only as Flex ops): call ``keras_attn.text.normalize_text``
  first for a model trained on normalised text (Tatoeba; dates are not normalised).
  Transformers take any batch; a Bahdanau model takes exactly one sentence per call
  (Keras's GRU loops need a static batch in TFLite; :func:`run_tflite_text` loops).
* ``"builtin"`` (Transformer only): two flatbuffers with TFLite builtin ops only (no Flex,
  no custom op; checked), fixed shapes, batch 1; the application runs the greedy loop
  (:func:`run_tflite_builtin` is the reference). ``encoder.tflite`` (signature
  ``encode``): ``source`` int32 ``(1, max_len)`` -> ``encoder_output``, ``source_mask``
  float32 ``(1, max_len)``, per layer ``cross_k_<i>``/``cross_v_<i>`` ``(1, max_len, H,
  d_h)``. ``decoder_step.tflite`` (signature ``decode_step``): ``token`` int32 ``(1, 1)``,
  ``index`` int32 ``()``, ``source_mask``, ``cross_k_<i>``, ``cross_v_<i>``,
  ``cache_k_<i>``, ``cache_v_<i>`` ``(1, max_len, H, d_h)`` -> ``logits`` float32
  ``(1, V)`` and the updated ``cache_k_<i>``, ``cache_v_<i>``.

Quantization: ``float32``; ``float16`` (float16 weights, dequantized at load);
``int8`` (dynamic-range: int8 weights, float activations).

Atomicity: every artefact is written under a temporary name in its destination folder
(starting with ``.tmp-``, never an integer, so TF Serving ignores it) and renamed into
place; existing artefacts are replaced only with ``overwrite=True``.

References: TF Serving SavedModel/REST/gRPC docs; OpenNMT-tf ``opennmt/utils/exporters.py``.
"""
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

from keras_attn import runs, text

MODEL_NAME = "translator"
SERVING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
TFLITE_TEXT_SIGNATURE = "serving_default"
TFLITE_ENCODER_SIGNATURE = "encode"
TFLITE_STEP_SIGNATURE = "decode_step"
TARGETS = ("builtin", "text")
QUANTIZATIONS = ("float32", "float16", "int8")
# Custom ops that tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS registers and that
# the "text" target may use.
TFTEXT_TFLITE_OPS = frozenset({
    "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize",
    "RaggedTensorToTensor", "TFText>WhitespaceTokenize", "TFText>FastBertNormalize",
    "TFText>ByteSplit", "TFText>ByteSplitByOffsets", "TFText>NgramsStringJoin",
    "TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize",
    "TFText>Utf8Binarize", "TFText>RoundRobinTrim", "TFText>RoundRobinGenerateMasks",
    "TFText>SentenceFragmenterV2",
})
SERVING_DOCKER = ("docker run -p 8501:8501 -p 8500:8500 -v {base}:/models/{name} "
                  "-e MODEL_NAME={name} tensorflow/serving")


# --- the translator's parts ----------------------------------------------------------------
@dataclasses.dataclass
class Parts:
    """What an export needs: model, tokenizers, length limit, input normalisation."""
    model: object
    src_tokenizer: text.Tokenizer
    tgt_tokenizer: text.Tokenizer
    max_len: int
    normalize: bool = False


def _parts(translator_or_parts, max_len=None):
    """A :class:`Parts` from a ``Translator``, a :class:`Parts` or a dict of its fields."""
    obj = translator_or_parts
    if isinstance(obj, Parts):
        parts = dataclasses.replace(obj)
    elif isinstance(obj, dict):
        missing = {"model", "src_tokenizer", "tgt_tokenizer"} - set(obj)
        if missing:
            raise ValueError(f"`translator_or_parts` lacks {sorted(missing)}. "
                             f"Received keys: {sorted(obj)}")
        parts = Parts(obj["model"], obj["src_tokenizer"], obj["tgt_tokenizer"],
                      obj.get("max_len") or max_len, bool(obj.get("normalize", False)))
    elif all(hasattr(obj, a) for a in ("model", "src_tokenizer", "tgt_tokenizer", "max_len")):
        parts = Parts(obj.model, obj.src_tokenizer, obj.tgt_tokenizer, obj.max_len,
                      bool(getattr(obj, "normalize", False)))
    else:
        raise ValueError("`translator_or_parts` must be a keras_attn Translator, an "
                         f"export.Parts or a dict. Received: {type(obj).__name__}")
    if max_len is not None:
        parts.max_len = max_len
    if isinstance(parts.max_len, bool) or not isinstance(parts.max_len, int) or parts.max_len < 2:
        raise ValueError(f"`max_len` must be an integer >= 2 (a token and [END]). "
                         f"Received: max_len={parts.max_len!r}")
    return parts


def _check_beam(beam_size):
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(
            f"`beam_size` must be a positive integer. Received: beam_size={beam_size!r}")


# --- character tokenizer from core ops -------------------------------------------------------
_INVALID_CODEPOINT = 0x10FFFF
class CoreCharTokenizer(tf.Module):
    """A character-level ``keras_attn.text.Tokenizer`` rebuilt from core TensorFlow ops.

    A SavedModel that uses it needs no tensorflow-text op, so it loads in any TensorFlow
    (``saved_model_cli``, a TF Serving image whatever its TF-Text build). Same ids and text
    as the ``Tokenizer`` (``UnicodeDecode`` + ``searchsorted`` to tokenize, string tables +
    ``ReduceJoin`` to detokenize): every character becomes its ``##c`` id; a string with a
    character outside the vocabulary or invalid UTF-8 becomes one ``[UNK]``; detokenizing
    stops at ``[END]``, drops ``[PAD]``/``[START]``, writes ``[UNK]`` (and ids outside the
    vocabulary) as `` [UNK]`` (no space at the start). One difference: the ``Tokenizer``
    (FastWordpiece) reads a reserved token (``[END]``, ...) or ``##`` at the very start of
    an input as that token; here they are ordinary characters.

    Args:
        tokenizer: a character-level ``Tokenizer`` (``supports(tokenizer)`` is True).
    """

    def __init__(self, tokenizer, name=None):
        super().__init__(name=name)
        if not self.supports(tokenizer):
            raise ValueError("CoreCharTokenizer needs a character vocabulary from "
                             "keras_attn.text.char_vocab. Received a word-level tokenizer")
        vocab = tokenizer.vocab
        index = {t: i for i, t in enumerate(vocab)}
        chars = sorted((t for t in vocab[len(text.RESERVED_TOKENS):]
                        if not t.startswith(text.SUFFIX) and ord(t) != _INVALID_CODEPOINT), key=ord)
        self.vocab_size = len(vocab)
        self._codepoints = tf.constant([ord(c) for c in chars], tf.int32)
        self._char_ids = tf.constant([index[text.SUFFIX + c] for c in chars], tf.int32)
        pieces = [t[len(text.SUFFIX):] if t.startswith(text.SUFFIX) else t for t in vocab]
        pieces[text.PAD_ID] = pieces[text.START_ID] = pieces[text.END_ID] = ""
        pieces[text.UNK_ID] = text.UNK
        self._pieces = tf.constant(pieces, tf.string)
        # A reserved token after the first position starts a new word: a space before it.
        self._spaced = tf.constant([" " + p if i == text.UNK_ID else p
                                    for i, p in enumerate(pieces)], tf.string)

    @staticmethod
    def supports(tokenizer):
        """True for a character vocabulary with both forms (``c`` and ``##c``) of every
        character, as ``keras_attn.text.char_vocab`` writes."""
        vocab = tokenizer.vocab
        if not getattr(tokenizer, "char_level", False):
            return False
        body = vocab[len(text.RESERVED_TOKENS):]
        plain = {t for t in body if not t.startswith(text.SUFFIX)}
        suffixed = {t[len(text.SUFFIX):] for t in body if t.startswith(text.SUFFIX)}
        return (vocab[: len(text.RESERVED_TOKENS)] == text.RESERVED_TOKENS
                and all(len(t) == 1 for t in plain) and plain == suffixed)

    def tokenize(self, strings):
        """Strings ``(B,)`` -> ragged int32 ids ``(B, None)``, as ``Tokenizer.tokenize``."""
        # Invalid UTF-8 decodes to U+10FFFF (a noncharacter, never in the table): unknown.
        cps = tf.strings.unicode_decode(strings, "UTF-8", errors="replace",
                                        replacement_char=_INVALID_CODEPOINT)  # ragged (B, None)
        flat = cps.flat_values
        last = tf.shape(self._codepoints)[0] - 1
        slot = tf.minimum(tf.searchsorted(self._codepoints, flat, out_type=tf.int32), last)
        known = tf.equal(tf.gather(self._codepoints, slot), flat)
        ids = cps.with_flat_values(tf.where(known, tf.gather(self._char_ids, slot), -1))
        unknown = tf.reduce_any(ids < 0, axis=1)  # (B,): the whole string becomes [UNK]
        lengths = tf.where(unknown, 1, tf.cast(ids.row_lengths(), tf.int32))
        dense = ids.to_tensor(default_value=text.PAD_ID)
        dense = tf.pad(dense, [[0, 0], [0, 1]])  # width >= 1 for the [UNK] rows
        first = tf.range(tf.shape(dense)[1])[tf.newaxis, :] == 0
        dense = tf.where(unknown[:, tf.newaxis], tf.where(first, text.UNK_ID, 0), dense)
        return tf.RaggedTensor.from_tensor(dense, lengths=lengths)

    def detokenize(self, ids):
        """Ids ``(B, T)`` -> strings ``(B,)``, as ``Tokenizer.detokenize`` (character mode)."""
        ids = tf.cast(ids, tf.int32)
        ids = tf.where((ids >= 0) & (ids < self.vocab_size), ids, text.UNK_ID)
        ended = tf.cumsum(tf.cast(ids == text.END_ID, tf.int32), axis=1) > 0
        keep = tf.logical_not(ended) & (ids != text.PAD_ID) & (ids != text.START_ID)
        first = tf.equal(tf.cumsum(tf.cast(keep, tf.int32), axis=1), 1)  # first kept token
        pieces = tf.where(first, tf.gather(self._pieces, ids), tf.gather(self._spaced, ids))
        return tf.strings.reduce_join(tf.where(keep, pieces, ""), axis=1)


# --- the exported module -------------------------------------------------------------------
def _track_variables(module, concrete_functions):
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
    """

    def __init__(self, parts, beam_size=1, alpha=0.6, for_tflite=False, text_ops="auto",
                 batch_size=None, name="translator"):
        super().__init__(name=name)
        _check_beam(beam_size)
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
        self.text_ops = resolve_text_ops(text_ops, parts, for_tflite)
        if self.text_ops == "core":
            self.src_tokenizer = CoreCharTokenizer(parts.src_tokenizer)
            self.tgt_tokenizer = CoreCharTokenizer(parts.tgt_tokenizer)
        else:
            self.src_tokenizer = parts.src_tokenizer
            self.tgt_tokenizer = parts.tgt_tokenizer
        self.serve = tf.function(
            self._serve, input_signature=[tf.TensorSpec([batch_size], tf.string, name="text")])
        self.translate_ids = tf.function(
            self._translate_ids,
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])

    @property
    def model(self):
        return self._keras.value

    def track_variables(self, concrete_functions):
        """Make the variables the traced functions read part of the SavedModel."""
        _track_variables(self, concrete_functions)

    def encode_text(self, strings):
        """Strings ``(B,)`` -> source ids ``(B, S)`` (``[END]`` appended, 0-padded),
        truncated ``(B,)``; exactly ``Translator.encode`` (plus the truncation flag)."""
        if self.normalize:
            strings = text.normalize_text_tf(strings)
        ids = self.src_tokenizer.tokenize(strings)  # ragged (B, None)
        keep = self.max_len - 1
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        truncated = lengths > keep
        n = tf.minimum(lengths, keep)  # (B,)
        dense = tf.cast(ids.to_tensor(default_value=text.PAD_ID), tf.int32)[:, :keep]
        dense = tf.pad(dense, [[0, 0], [0, 1]])  # (B, max(n) + 1)
        pos = tf.range(tf.shape(dense)[1])[tf.newaxis, :]
        source = tf.where(pos == n[:, tf.newaxis], text.END_ID, dense)
        return source, truncated

    def decode(self, source):
        """Source ids ``(B, S)`` -> tokens ``(B, max_len)``, lengths ``(B,)``, score ``(B,)``."""
        from keras_attn import decoding

        if self.beam_size == 1:
            out = decoding.greedy_decode_fixed(self.model, source, self.max_len,
                                               text.START_ID, text.END_ID)
            return out["tokens"], out["lengths"], out["log_prob"]
        out = decoding.beam_decode_fixed(self.model, source, self.beam_size, self.alpha,
                                         self.max_len, text.START_ID, text.END_ID)
        return out["tokens"][:, 0], out["lengths"][:, 0], out["scores"][:, 0]

    def _serve(self, strings):
        batch = tf.shape(strings)[0]
        source, truncated = self.encode_text(strings)
        if self.for_tflite:
            # TFLite leaves the WHILE loop's outputs unallocated for an empty batch (reading
            # them fails): decode one padding row instead and return none of it.
            source = tf.pad(source, [[0, tf.maximum(1 - batch, 0)], [0, 0]])
        tokens, _, score = self.decode(source)
        if self.for_tflite:  # no regex repair (Flex); identity in character mode anyway
            translation = self.tgt_tokenizer.detokenize_tflite(tokens)
            translation, score, truncated = (t[:batch] for t in (translation, score, truncated))
        else:
            translation = self.tgt_tokenizer.detokenize(tokens)
        return {"translation": translation, "score": score, "truncated": truncated}

    def _translate_ids(self, source):
        source = tf.cast(source, tf.int32)[:, : self.max_len]
        # A source of width 0 becomes one padding column (no key: zero attention).
        source = tf.pad(source, [[0, 0], [0, tf.maximum(1 - tf.shape(source)[1], 0)]])
        tokens, lengths, score = self.decode(source)
        width = tf.reduce_max(tf.concat([lengths, [1]], axis=0))
        return {"tokens": tokens[:, :width], "lengths": lengths, "score": score}


TEXT_OPS = ("auto", "core", "tftext")


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


# --- SavedModel ----------------------------------------------------------------------------
def _check_version(version, model_name):
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"`version` must be a non-negative integer (TF Serving reads version "
                         f"folders as integers). Received: version={version!r}")
    if not model_name or os.sep in model_name or model_name in (".", ".."):
        raise ValueError(f"`model_name` must be a plain folder name. Received: "
                         f"model_name={model_name!r}")


def _publish_dir(tmp, final, overwrite):
    """Move the finished folder ``tmp`` to ``final`` with renames (never half visible)."""
    if os.path.exists(final):
        if not overwrite:
            raise FileExistsError(f"{final} already exists; pass overwrite=True (CLI: "
                                  "--overwrite) to replace it, or export another version")
        # Two renames: for a moment there is no `final` (a server unloads the version and
        # loads the new one); a new version number avoids even that.
        old = tempfile.mkdtemp(prefix=".old-" + os.path.basename(final) + "-",
                               dir=os.path.dirname(final))
        replaced = os.path.join(old, "replaced")
        os.rename(final, replaced)
        try:
            os.rename(tmp, final)
        except BaseException:
            os.rename(replaced, final)  # put the previous version back
            raise
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(tmp, final)
    except OSError as e:  # another exporter won the race
        raise FileExistsError(f"{final} appeared while exporting: {e}") from None


def export_saved_model(translator_or_parts, export_dir, model_name=MODEL_NAME, version=1,
                       overwrite=False, beam_size=1, max_len=None, alpha=0.6, text_ops="auto"):
    """Write a TF-Serving SavedModel to ``export_dir/model_name/version/``.

    The model is saved into a temporary folder inside ``export_dir/model_name/`` whose
    name is not an integer (TF Serving ignores it), checked by loading it and translating
    an empty string, then renamed to ``version``: a server watching the folder never sees
    half a model. An interrupted export leaves no version folder (the temporary one is
    removed; one left by a killed process starts with ``.tmp-`` and can be deleted).

    Args:
        translator_or_parts: a ``keras_attn.translator.Translator``, a :class:`Parts` or a
            dict with ``model``, ``src_tokenizer``, ``tgt_tokenizer``, ``max_len`` and
            optionally ``normalize``.
        export_dir: the TF Serving base folder's parent (models go to ``model_name/``).
        model_name: the TF Serving model name. version: integer version folder.
        overwrite: replace an existing version (otherwise ``FileExistsError``).
        beam_size: 1 = greedy decoding; more = beam search with ``alpha``.
        max_len: override the translator's ``max_len``.
        alpha: beam-search length-penalty exponent.
        text_ops: ``"auto"`` (default): character vocabularies are tokenized with core
            TensorFlow ops (:class:`CoreCharTokenizer`; the SavedModel then has no custom op
            and runs in ``saved_model_cli`` and any TF Serving image), WordPiece ones with
            tensorflow-text ops; ``"tftext"``: always the tensorflow-text ``Tokenizer``.

    Returns:
        The report dict (also written to ``export_dir/model_name/<version>.report.json``):
        signatures, non-core ops, file sizes.

    Example:
        >>> export_saved_model(Translator.from_run_dir("runs/dates"), "exported/saved_model")
    """
    parts = _parts(translator_or_parts, max_len)
    _check_beam(beam_size)
    _check_version(version, model_name)
    base = os.path.join(os.fspath(export_dir), model_name)
    final = os.path.join(base, str(version))
    if os.path.exists(final) and not overwrite:
        raise FileExistsError(f"{final} already exists; pass overwrite=True (CLI: "
                              "--overwrite) to replace it, or export another version")
    os.makedirs(base, exist_ok=True)
    tmp = _mkdtemp(f".tmp-{version}-", base)
    try:
        module = TranslatorModule(parts, beam_size, alpha, for_tflite=False, text_ops=text_ops)
        signatures = {SERVING_SIGNATURE: module.serve.get_concrete_function(),
                      IDS_SIGNATURE: module.translate_ids.get_concrete_function()}
        module.track_variables(signatures.values())
        _save(module, tmp, signatures)
        _smoke_test_saved_model(tmp)
        report = saved_model_report(tmp)
        report.update(model_name=model_name, version=version,
                      decoding=_decoding_info(parts, beam_size, alpha, module.normalize),
                      text_ops=module.text_ops)
        if report["xla_ops"]:
            raise RuntimeError(f"the SavedModel graph uses XLA ops {report['xla_ops']} that TF "
                               "Serving runs only with XLA JIT (keras_attn.ops.slice_update "
                               "should have kept them out)")
        _publish_dir(tmp, final, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report["path"] = os.path.abspath(final)
    _write_json(os.path.join(base, f"{version}.report.json"), report)
    return report


def _save(module, path, signatures):
    """``tf.saved_model.save`` (a separate function so tests can interrupt it)."""
    # Serving needs no gradients: the custom-gradient functions (the masked softmax's) are
    # left out of the file.
    tf.saved_model.save(module, path, signatures=signatures,
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))


def _smoke_test_saved_model(path):
    loaded = tf.saved_model.load(path)
    out = loaded.signatures[SERVING_SIGNATURE](text=tf.constant(["", "a"]))
    if out["translation"].shape != (2,):
        raise RuntimeError(f"the exported SavedModel at {path} returned {out}")


def _decoding_info(parts, beam_size, alpha, normalize):
    return {"max_len": parts.max_len, "beam_size": beam_size, "alpha": alpha,
            "start_id": text.START_ID, "end_id": text.END_ID, "pad_id": text.PAD_ID,
            "normalize_input": normalize,
            "src_vocab_size": parts.src_tokenizer.vocab_size,
            "tgt_vocab_size": parts.tgt_tokenizer.vocab_size}


# --- reports -------------------------------------------------------------------------------
def _versions():
    import keras
    import tensorflow_text

    return {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
            "keras": keras.__version__}


def file_sizes(path):
    """``{relative path: bytes}`` of every file under ``path`` (or of the file itself)."""
    if os.path.isfile(path):
        return {os.path.basename(path): os.path.getsize(path)}
    sizes = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            sizes[os.path.relpath(full, path)] = os.path.getsize(full)
    return dict(sorted(sizes.items()))


def _read_saved_model_proto(path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def saved_model_signatures(path):
    """``{signature: {"inputs": {name: {dtype, shape}}, "outputs": {...}}}`` of a SavedModel
    (what ``saved_model_cli show --all`` prints; -1 = any size)."""
    meta = _read_saved_model_proto(path).meta_graphs[0]

    def spec(info):
        shape = (None if info.tensor_shape.unknown_rank
                 else [int(d.size) for d in info.tensor_shape.dim])
        return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": shape}

    return {name: {"method": sig.method_name,
                   "inputs": {k: spec(v) for k, v in sorted(sig.inputs.items())},
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
from tensorflow.python.framework import op_def_registry as registry
ops = json.load(sys.stdin)
missing = [op for op in ops if registry.get(op) is None]
import tensorflow_text
still = [op for op in missing if registry.get(op) is None]
print(json.dumps({"missing_in_tensorflow": missing, "missing_with_tensorflow_text": still}))
"""


def classify_ops(ops):
    """Split op types into core TensorFlow and the ones another library registers.

    Runs a fresh Python that imports only ``tensorflow`` (then ``tensorflow_text``) and asks
    its op registry, i.e. exactly what a serving process without keras_attn has. Returns
    ``{"non_core": [{"op", "registered_by", "version"}], "unregistered": [...]}``.
    """
    import tensorflow_text

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    try:
        proc = subprocess.run([sys.executable, "-c", _REGISTRY_PROBE], input=json.dumps(ops),
                              capture_output=True, text=True, env=env, timeout=300, check=True)
        probe = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        raise RuntimeError(f"could not list the ops a bare TensorFlow registers: {e}") from None
    unregistered = probe["missing_with_tensorflow_text"]
    non_core = [{"op": op, "registered_by": "tensorflow_text",
                 "version": tensorflow_text.__version__}
                for op in probe["missing_in_tensorflow"] if op not in unregistered]
    non_core += [{"op": op, "registered_by": "unknown", "version": None} for op in unregistered]
    return {"non_core": non_core, "unregistered": unregistered}


def saved_model_report(path):
    """Report of a SavedModel folder: signatures, ops (non-core ones flagged), sizes."""
    ops = saved_model_ops(path)
    classes = classify_ops(ops)
    sizes = file_sizes(path)
    return {
        "format": "tf_saved_model", "tag_set": "serve", "created": _now(),
        "versions": _versions(), "signatures": saved_model_signatures(path),
        "ops": ops, "non_core_ops": classes["non_core"],
        "xla_ops": [op for op in ops if op.startswith("Xla")],
        "files": sizes, "total_bytes": sum(sizes.values()),
    }


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- TFLite --------------------------------------------------------------------------------
def tflite_ops(model_content):
    """Operator codes of a flatbuffer: ``{"builtin": [...], "custom": [...], "flex": [...]}``.

    ``flex`` are the Select-TF ops (custom code ``Flex<Op>``, need the Flex delegate);
    ``custom`` are the other custom ops (e.g. tensorflow-text kernels).
    """
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_content))
    builtin, custom, flex = set(), set(), set()
    for i, code in enumerate(model.operatorCodes):
        if code.customCode:
            name = code.customCode.decode("utf-8")
            (flex if name.startswith("Flex") else custom).add(name)
        else:
            builtin.add(flatbuffer_utils.opcode_to_name(model, i))
    return {"builtin": sorted(builtin), "custom": sorted(custom), "flex": sorted(flex)}


def check_builtin_only(model_content, name="model"):
    """Raise ``ValueError`` if a flatbuffer has any Flex (Select TF) or custom op."""
    ops = tflite_ops(model_content)
    if ops["flex"] or ops["custom"]:
        raise ValueError(f"{name} must use TFLite builtin ops only, but it contains Flex ops "
                         f"{ops['flex']} and custom ops {ops['custom']}")
    return ops


def _converter(concrete_fn, module, quantization, builtin_only):
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}. "
                         f"Received: quantization={quantization!r}")
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete_fn], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = not builtin_only
    if quantization == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantization == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic-range int8 weights
    return converter


def _convert(converter, what):
    try:
        return converter.convert()
    except Exception as e:  # the converter raises ConverterError with the op list
        raise ValueError(f"TFLite conversion of {what} failed: {e}") from e


def text_interpreter(model_content=None, model_path=None):
    """An ``ai_edge_litert`` interpreter with tensorflow-text's TFLite kernels."""
    import tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    return InterpreterWithCustomOps(
        model_content=model_content, model_path=model_path,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)


def run_tflite_text(model, texts):
    """Translate with a ``target="text"`` flatbuffer (path or bytes); returns a dict of numpy
    arrays ``translation`` (bytes), ``score``, ``truncated``."""
    if isinstance(model, (bytes, bytearray)):
        interpreter = text_interpreter(model_content=bytes(model))
    else:
        interpreter = text_interpreter(model_path=os.fspath(model))
    runner = interpreter.get_signature_runner(TFLITE_TEXT_SIGNATURE)
    texts = _bytes_array(texts)
    if list(runner.get_input_details()["text"]["shape_signature"]) != [1]:
        return runner(text=texts)
    # A fixed batch of one (Bahdanau models): one call per sentence.
    rows = [runner(text=texts[i: i + 1]) for i in range(len(texts))]
    if not rows:
        return {"translation": np.zeros((0,), object), "score": np.zeros((0,), np.float32),
                "truncated": np.zeros((0,), bool)}
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def _bytes_array(texts):
    """A 1-D object array of ``bytes`` (str is UTF-8 encoded) for a string input."""
    return np.array([t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts],
                    dtype=object).reshape(-1)


def _tflite_text_model(parts, quantization, beam_size, alpha):
    from keras_attn.models import model_kind

    # Keras's GRU loops keep per-step TensorLists whose element shape must be static for
    # TFLite: a Bahdanau model gets a batch of exactly one sentence.
    batch_size = 1 if model_kind(parts.model) == "bahdanau" else None
    module = TranslatorModule(parts, beam_size, alpha, for_tflite=True, text_ops="tftext",
                              batch_size=batch_size)
    fn = module.serve.get_concrete_function()
    module.track_variables([fn])
    content = _convert(_converter(fn, module, quantization, builtin_only=False),
                       "the text target")
    ops = tflite_ops(content)
    unknown = sorted(set(ops["custom"]) - TFTEXT_TFLITE_OPS)
    if ops["flex"] or unknown:
        raise ValueError(f"the text target may use builtin and tensorflow-text ops only; it "
                         f"contains Flex ops {ops['flex']} and custom ops {unknown}")
    out = run_tflite_text(content, ["", "a"])  # kernels registered, the graph runs
    if out["translation"].shape != (2,):
        raise RuntimeError(f"the text TFLite model returned {out}")
    return content, ops


class _BuiltinModule(tf.Module):
    """Encoder and one decoder step with fixed shapes (batch 1) for the builtin target."""

    def __init__(self, model, max_len):
        super().__init__(name="translator_builtin")
        from keras_attn.models import model_kind

        if model_kind(model) != "transformer":
            raise ValueError("the TFLite builtin target supports Transformer models only. "
                             f"Received: a {model_kind(model)} model")
        self._keras = _Untracked((model.get_layer("encoder"), model.get_layer("decoder")))
        self.max_len = max_len
        self.num_layers = self.decoder.num_layers
        heads = self.decoder.num_heads
        self.kv_shape = (1, max_len, heads, self.decoder.num_hiddens // heads)
        self.encode = tf.function(self._encode, input_signature=[
            tf.TensorSpec((1, max_len), tf.int32, name="source")])
        kv = [tf.TensorSpec(self.kv_shape, tf.float32, name=f"{kind}_{i}")
              for kind in ("cross_k", "cross_v", "cache_k", "cache_v")
              for i in range(self.num_layers)]
        self.step = tf.function(self._step, input_signature=[
            tf.TensorSpec((1, 1), tf.int32, name="token"),
            tf.TensorSpec((), tf.int32, name="index"),
            tf.TensorSpec((1, max_len), tf.float32, name="source_mask"), *kv])

    @property
    def encoder(self):
        return self._keras.value[0]

    @property
    def decoder(self):
        return self._keras.value[1]

    def _encode(self, source):
        enc = self.encoder(source, training=False)
        cache = self.decoder.init_cache(enc, source, self.max_len)
        out = {"encoder_output": enc,
               "source_mask": tf.cast(cache["source_mask"], tf.float32)}
        for i, (k, v) in enumerate(cache["cross"]):
            out[f"cross_k_{i}"], out[f"cross_v_{i}"] = k, v
        return out

    def _step(self, token, index, source_mask, *kv):
        n = self.num_layers
        cache = {"self": tuple((kv[2 * n + i], kv[3 * n + i]) for i in range(n)),
                 "cross": tuple((kv[i], kv[n + i]) for i in range(n)),
                 "source_mask": tf.not_equal(source_mask, 0.0)}  # (1, S)
        logits, cache = self.decoder(token, cache=cache, cache_update_index=index,
                                     training=False)
        out = {"logits": tf.cast(logits[:, 0], tf.float32)}
        for i, (k, v) in enumerate(cache["self"]):
            out[f"cache_k_{i}"], out[f"cache_v_{i}"] = k, v
        return out


def _tflite_builtin_models(parts, quantization):
    module = _BuiltinModule(parts.model, parts.max_len)
    contents, ops = {}, {}
    fns = {"encoder": module.encode.get_concrete_function(),
           "decoder_step": module.step.get_concrete_function()}
    _track_variables(module, fns.values())
    for name, fn in fns.items():
        content = _convert(_converter(fn, module, quantization, builtin_only=True),
                           f"the builtin {name}")
        ops[name] = check_builtin_only(content, f"builtin {name}.tflite")
        contents[name] = content
    meta = {"max_len": parts.max_len, "start_id": text.START_ID, "end_id": text.END_ID,
            "pad_id": text.PAD_ID, "num_layers": module.num_layers,
            "kv_shape": list(module.kv_shape), "tgt_vocab_size": parts.tgt_tokenizer.vocab_size,
            "encoder": {"file": "encoder.tflite", "signature": TFLITE_ENCODER_SIGNATURE},
            "decoder_step": {"file": "decoder_step.tflite", "signature": TFLITE_STEP_SIGNATURE},
            "src_vocab": "src_vocab.txt", "tgt_vocab": "tgt_vocab.txt",
            "normalize_input": bool(parts.normalize)}
    return contents, ops, meta


def _signature_key_rename(content, new_key):
    """Flatbuffers converted from one concrete function get the key ``serving_default``;
    rename it so the encoder and step signatures say what they are."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    for sig in model.signatureDefs:
        sig.signatureKey = new_key.encode("utf-8")
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def export_tflite(translator_or_parts, path, target="text", quantization="float32",
                  beam_size=1, max_len=None, overwrite=False, alpha=0.6):
    """Convert the translator to TFLite.

    Args:
        translator_or_parts: as for :func:`export_saved_model`.
        path: ``target="text"``: the ``.tflite`` file; ``"builtin"``: a folder that gets
            ``encoder.tflite``, ``decoder_step.tflite``, ``metadata.json``,
            ``src_vocab.txt`` and ``tgt_vocab.txt``.
        target: ``"text"`` (strings in/out, tensorflow-text custom ops, decoding loop
            inside) or ``"builtin"`` (Transformer; builtin ops only; the app runs the loop).
        quantization: ``"float32"``, ``"float16"`` (float16 weights) or ``"int8"``
            (dynamic-range int8 weights, float activations).
        beam_size, alpha: decoding of the text target (builtin: the app decides).
        overwrite: replace an existing file/folder (otherwise ``FileExistsError``).

    Returns:
        Report dict: path, target, quantization, ops (builtin/custom/flex per flatbuffer),
        signatures, file sizes.

    Raises:
        ValueError: the builtin target would need a Flex or custom op, or the text target
            an op tensorflow-text's TFLite kernels do not provide.

    Example:
        >>> export_tflite(tr, "export/tflite/text_int8.tflite", "text", "int8")
    """
    parts = _parts(translator_or_parts, max_len)
    _check_beam(beam_size)
    if target not in TARGETS:
        raise ValueError(f"`target` must be one of {TARGETS}. Received: target={target!r}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}. "
                         f"Received: quantization={quantization!r}")
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    report = {"format": "tflite", "target": target, "quantization": quantization,
              "created": _now(), "versions": _versions()}
    if target == "text":
        content, ops = _tflite_text_model(parts, quantization, beam_size, alpha)
        runs.atomic_write_bytes(path, content)
        if parts.normalize:
            report["notes"] = ["the model was trained on normalised text: apply "
                               "keras_attn.text.normalize_text to the input first"]
        report.update(
            ops=ops, decoding=_decoding_info(parts, beam_size, alpha, False),
            runtime="ai_edge_litert InterpreterWithCustomOps with tensorflow_text."
                    "tflite_registrar.SELECT_TFTEXT_OPS",
            signatures={TFLITE_TEXT_SIGNATURE: _tflite_signature(content)})
    else:
        contents, ops, meta = _tflite_builtin_models(parts, quantization)
        contents["encoder"] = _signature_key_rename(contents["encoder"], TFLITE_ENCODER_SIGNATURE)
        contents["decoder_step"] = _signature_key_rename(contents["decoder_step"],
                                                         TFLITE_STEP_SIGNATURE)
        tmp = _mkdtemp(".tmp-" + os.path.basename(path) + "-", folder)
        try:
            for name, content in contents.items():
                runs.atomic_write_bytes(os.path.join(tmp, f"{name}.tflite"), content)
            for name, tok in (("src_vocab.txt", parts.src_tokenizer),
                              ("tgt_vocab.txt", parts.tgt_tokenizer)):  # text.save_vocab format
                runs.atomic_write_bytes(os.path.join(tmp, name),
                                    "".join(t + "\n" for t in tok.vocab).encode("utf-8"))
            _write_json(os.path.join(tmp, "metadata.json"), meta)
            _publish_dir(tmp, path, overwrite)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        report.update(ops=ops, metadata=meta, runtime="ai_edge_litert Interpreter (builtin "
                      "ops only; the application runs the greedy loop, see run_tflite_builtin)",
                      signatures={TFLITE_ENCODER_SIGNATURE: _tflite_signature(contents["encoder"]),
                                  TFLITE_STEP_SIGNATURE: _tflite_signature(
                                      contents["decoder_step"])})
    report["path"] = path
    report["files"] = file_sizes(path)
    report["total_bytes"] = sum(report["files"].values())
    return report


def _tflite_signature(content):
    """Input/output names, dtypes and shapes of a flatbuffer's first signature."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_content=content)
    except (RuntimeError, ValueError):  # custom ops: read through the text interpreter
        interpreter = text_interpreter(model_content=content)
    key = list(interpreter.get_signature_list())[0]
    runner = interpreter.get_signature_runner(key)

    def spec(details):
        return {name: {"dtype": _dtype_name(d["dtype"]),
                       "shape": [int(s) for s in d["shape_signature"]]}
                for name, d in sorted(details.items())}

    return {"key": key, "inputs": spec(runner.get_input_details()),
            "outputs": spec(runner.get_output_details())}


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mkdtemp(prefix, folder):
    """``tempfile.mkdtemp`` with the usual permissions (mkdtemp gives 0700, which a server
    running as another user cannot read once the folder is renamed into place)."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir=folder)
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _write_json(path, obj):
    runs.atomic_write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True)
                               + "\n").encode("utf-8"))


def _dtype_name(dtype):
    dtype = np.dtype(dtype)
    return "string" if dtype.kind in "OSU" else dtype.name


def _log_softmax(logits):
    logits = logits.astype(np.float64)
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def run_tflite_builtin(paths, source_ids, max_len=None, start_id=text.START_ID,
                       end_id=text.END_ID):
    """Reference greedy loop over the builtin target (what an app does), one row at a time.

    Args:
        paths: the builtin folder, or ``(encoder_path, decoder_step_path)``.
        source_ids: int ``(B, S)`` source ids (``[END]`` included, 0 = padding), e.g.
            ``Translator.encode``; each row is padded/cut to the encoder's width.
        max_len: most tokens generated (default and maximum: the exported ``max_len``).
        start_id, end_id: the target ``[START]`` / ``[END]`` ids.

    Returns:
        dict of numpy arrays: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``),
        ``lengths`` int32 ``(B,)``, ``log_prob`` float32 ``(B,)``; the same conventions as
        ``keras_attn.decoding.greedy_decode_fixed`` (ids 0 and ``start_id`` never chosen).

    Example:
        >>> out = run_tflite_builtin("export/tflite/builtin_float32", tr.encode(["3 May 1999"]))
    """
    from ai_edge_litert.interpreter import Interpreter

    if isinstance(paths, (str, os.PathLike)):
        paths = (os.path.join(paths, "encoder.tflite"), os.path.join(paths, "decoder_step.tflite"))
    encoder = Interpreter(model_path=os.fspath(paths[0])).get_signature_runner(
        TFLITE_ENCODER_SIGNATURE)
    step = Interpreter(model_path=os.fspath(paths[1])).get_signature_runner(TFLITE_STEP_SIGNATURE)
    width = int(encoder.get_input_details()["source"]["shape"][1])
    step_inputs = step.get_input_details()
    cache_names = sorted(n for n in step_inputs if n.startswith("cache_"))
    buffer_len = int(step_inputs[cache_names[0]]["shape"][1])
    max_len = buffer_len if max_len is None else min(int(max_len), buffer_len)
    source_ids = np.asarray(source_ids, dtype=np.int32).reshape(len(source_ids), -1)
    batch = source_ids.shape[0]
    tokens = np.zeros((batch, max_len), np.int32)
    lengths = np.zeros((batch,), np.int32)
    log_probs = np.zeros((batch,), np.float32)
    for b in range(batch):
        row = np.zeros((1, width), np.int32)
        n = min(width, source_ids.shape[1])
        row[0, :n] = source_ids[b, :n]
        enc = encoder(source=row)
        consts = {k: v for k, v in enc.items() if k.startswith("cross_") or k == "source_mask"}
        cache = {n: np.zeros(step_inputs[n]["shape"], np.float32) for n in cache_names}
        token, total = start_id, 0.0
        for i in range(max_len):
            out = step(token=np.array([[token]], np.int32), index=np.array(i, np.int32),
                       **consts, **cache)
            cache = {n: out[n] for n in cache_names}
            lp = _log_softmax(out["logits"][0])
            lp[0] = lp[start_id] = -np.inf
            token = int(np.argmax(lp))
            total += lp[token]
            tokens[b, i] = token
            lengths[b] = i + 1
            if token == end_id:
                break
        log_probs[b] = total
    return {"tokens": tokens, "lengths": lengths, "log_prob": log_probs}


# --- a run directory -----------------------------------------------------------------------
def export_run(run_dir, export_dir=None, version=1, overwrite=False, beam_size=1,
               quantizations=("float32", "int8"), log=print):
    """Export a training run: SavedModel, TFLite text/builtin targets and one report.

    Writes under ``export_dir`` (default ``RUN_DIR/export``): ``saved_model/translator/
    <version>/`` (+ ``<version>.report.json``), ``tflite/text_<q>.tflite`` and
    ``tflite/builtin_<q>/`` for each quantization ``q`` (builtin only for Transformers),
    and ``export_report.json``. Prints where everything is and how to serve it.

    Args:
        run_dir: a run directory (``keras_attn.runs``).
        export_dir: output folder. version: SavedModel version. overwrite: replace
            existing artefacts. beam_size: decoding of the SavedModel and text target.
        quantizations: TFLite variants (``"float32"``, ``"float16"``, ``"int8"``).

    Returns:
        The combined report dict (also ``export_dir/export_report.json``).

    Example:
        >>> export_run("runs/dates")          # CLI: keras-attn export runs/dates
    """
    from keras_attn.models import model_kind
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(run_dir)
    export_dir = os.path.abspath(export_dir or runs.paths(run_dir)["export"])
    for q in quantizations:
        if q not in QUANTIZATIONS:
            raise ValueError(f"`quantizations` must be drawn from {QUANTIZATIONS}. "
                             f"Received: {q!r}")
    saved_base = os.path.join(export_dir, "saved_model")
    tflite_dir = os.path.join(export_dir, "tflite")
    targets = [("text", q) for q in quantizations]
    if model_kind(translator.model) == "transformer":
        targets += [("builtin", q) for q in quantizations]
    # Refuse before doing any work if something would be overwritten.
    if not overwrite:
        existing = [p for p in [os.path.join(saved_base, MODEL_NAME, str(version))] + [
            _tflite_path(tflite_dir, t, q) for t, q in targets] if os.path.exists(p)]
        if existing:
            raise FileExistsError(f"{', '.join(existing)} already exist(s); pass "
                                  "overwrite=True (CLI: --overwrite) or another --version")
    report = {"run_dir": os.path.abspath(run_dir), "export_dir": export_dir,
              "created": _now(), "versions": _versions()}
    log(f"exporting {run_dir} -> {export_dir}")
    report["saved_model"] = export_saved_model(translator, saved_base, MODEL_NAME, version,
                                               overwrite, beam_size)
    log(f"  SavedModel: {report['saved_model']['path']}")
    report["tflite"] = {}
    for target, q in targets:
        key = f"{target}_{q}"
        report["tflite"][key] = export_tflite(translator, _tflite_path(tflite_dir, target, q),
                                              target, q, beam_size if target == "text" else 1,
                                              overwrite=overwrite)
        log(f"  TFLite {key}: {report['tflite'][key]['path']} "
            f"({report['tflite'][key]['total_bytes'] / 1e6:.2f} MB)")
    report["samples"] = _sample_outputs(translator, report, _sample_sources(run_dir))
    for key, agree in report["samples"]["agreement_with_saved_model"].items():
        log(f"  {key}: {agree:.0%} of {len(report['samples']['sources'])} sample translations "
            "equal the SavedModel's")
    _write_json(os.path.join(export_dir, "export_report.json"), report)
    base = os.path.join(saved_base, MODEL_NAME)
    non_core = ", ".join(o["op"] for o in report["saved_model"]["non_core_ops"])
    needs = (f"the image's TF-Text build must provide {non_core}" if non_core
             else "core TensorFlow ops only: any recent image")
    example = report["samples"]["sources"][0]
    body = json.dumps({"instances": [{"text": example}]}, ensure_ascii=False)
    log(f"report: {os.path.join(export_dir, 'export_report.json')}\n"
        f"serve it with TF Serving ({needs}):\n"
        f"  {SERVING_DOCKER.format(base=shlex.quote(base), name=MODEL_NAME)}\n"
        f"  curl -d {shlex.quote(body)} http://localhost:8501/v1/models/{MODEL_NAME}:predict\n"
        f"  python scripts/serve_client.py --rest localhost:8501 {shlex.quote(example)}")
    return report


def _sample_sources(run_dir, limit=10):
    """Source sentences to check every artefact on: the run's test samples, else dates."""
    path = runs.paths(run_dir)["metrics"]
    if os.path.exists(path):
        samples = runs.read_json(path).get("samples") or []
        sources = [s["source"] for s in samples if isinstance(s, dict) and "source" in s]
        if sources:
            return sources[:limit]
    return ["3 March 2021", "1999-07-04", "le 4 juillet 1999"]


def _sample_outputs(translator, report, sources):
    """Translations of ``sources`` by each artefact and their agreement with the SavedModel."""
    loaded = tf.saved_model.load(report["saved_model"]["path"])
    saved = loaded.signatures[SERVING_SIGNATURE](text=tf.constant(sources, tf.string))
    outputs = {"saved_model": [t.decode("utf-8", "replace")
                               for t in saved["translation"].numpy().tolist()]}
    for key, rep in report["tflite"].items():
        if rep["target"] == "text":
            texts = sources
            if translator.normalize:  # the text target does not normalise its input
                texts = [text.normalize_text(s) for s in sources]
            got = run_tflite_text(rep["path"], texts)["translation"].tolist()
        else:
            ids = run_tflite_builtin(rep["path"], translator.encode(sources).numpy())["tokens"]
            got = translator.tgt_tokenizer.detokenize(tf.constant(ids)).numpy().tolist()
        outputs[key] = [t.decode("utf-8", "replace") for t in got]
    reference = outputs["saved_model"]
    agreement = {k: sum(a == b for a, b in zip(v, reference)) / max(len(sources), 1)
                 for k, v in outputs.items() if k != "saved_model"}
    return {"sources": sources, "translations": outputs, "agreement_with_saved_model": agreement}


def _tflite_path(tflite_dir, target, quantization):
    name = f"{target}_{quantization}"
    return os.path.join(tflite_dir, name + (".tflite" if target == "text" else ""))
