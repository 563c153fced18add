"""Running the TFLite files as an application does: numpy and ``ai_edge_litert`` only
(:func:`text_interpreter` imports ``tensorflow_text`` for its kernels).

:func:`run_tflite_builtin` is an app's loop over the builtin target; :func:`run_tflite_text`
calls the text target, which takes one sentence per string (no regex op):
:func:`split_for_tflite` before it and :func:`join_from_tflite` after handle any text.

Example:
    >>> out = run_tflite_text("exported/tflite/text_float32.tflite", ["3 March 2021"])
    >>> out["translation"]
    array([b'2021-03-03'], dtype=object)
"""
import dataclasses
import os

import numpy as np

from keras_attn.export.option_sets import (LATEST_OPTIONS_SIGNATURE, OPTION_SIGNATURES,
                                           newest_options_signature)
from keras_attn.export.builtin_runtime import (  # noqa: F401  (the TFLite runtime's names)
    BUILTIN_FILES, BUILTIN_METADATA, TFLITE_ALIGNED_STEP_SIGNATURE, TFLITE_ENCODER_SIGNATURE,
    TFLITE_FROZEN_STEP_SIGNATURE, TFLITE_STEP_SIGNATURE, run_tflite_builtin)

TFLITE_TEXT_SIGNATURE = "serving_default"
TFLITE_SENTENCES_SIGNATURE = "translate_sentences"  # serving_default: one sentence a string
# run_tflite_options' signature (an older file: its newest options signature).
TFLITE_OPTIONS_SIGNATURE = LATEST_OPTIONS_SIGNATURE
TFLITE_SCORE_SIGNATURE = "score"  # keras_attn.export.modules.SCORE_SIGNATURE
# The text file's export settings (JSON: "passthrough", "beam_size") in its metadata.
TFLITE_SETTINGS = "keras_attn"


def text_interpreter(model_content=None, model_path=None, num_threads=None):
    """An ``ai_edge_litert`` interpreter with tensorflow-text's TFLite kernels registered
    (``tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS``)."""
    import tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    return InterpreterWithCustomOps(
        model_content=model_content, model_path=model_path, num_threads=num_threads,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)


def _text_file(model):
    """``(interpreter, settings)`` of a text file (a path or its content)."""
    if not isinstance(model, (bytes, bytearray)):
        with open(os.fspath(model), "rb") as f:
            model = f.read()
    return text_interpreter(model_content=bytes(model)), tflite_settings(model)


def tflite_settings(content):
    """The export settings a flatbuffer carries in its metadata (:data:`TFLITE_SETTINGS`,
    JSON): ``{}`` for a file exported before them.

    Example:
        >>> tflite_settings(open("exported/tflite/text_float32.tflite", "rb").read())
        {}
    """
    import json

    from flatbuffers import encode, number_types, packer, table

    buf = bytearray(content)
    model = table.Table(buf, encode.Get(packer.uoffset, buf, 0))

    def vector(t, slot):  # (start, length) of a table's vector field (slot: its order)
        o = t.Offset(4 + 2 * slot)
        return (t.Vector(o), t.VectorLen(o)) if o else (0, 0)

    def child(vec, i):
        return table.Table(buf, model.Indirect(vec + 4 * i))

    metadata, n = vector(model, 6)  # Model.metadata: [Metadata]
    buffers, n_buffers = vector(model, 4)  # Model.buffers: [Buffer]
    for i in range(n):
        entry = child(metadata, i)
        name = entry.String(entry.Pos + entry.Offset(4)) if entry.Offset(4) else b""
        if name.decode("utf-8", "replace") != TFLITE_SETTINGS or not entry.Offset(6):
            continue
        index = entry.Get(number_types.Uint32Flags, entry.Pos + entry.Offset(6))
        if index < n_buffers:
            start, size = vector(child(buffers, index), 0)  # Buffer.data: [ubyte]
            return json.loads(bytes(buf[start:start + size]).decode("utf-8"))
    return {}


def run_tflite_text(model, texts, split=True, passthrough=None, glossary=None):
    """Translate with a text-target flatbuffer (a path or its bytes): each text is split as
    the SavedModel splits it, its sentences translated in one batch and joined back.

    Args:
        model: the ``.tflite`` file or its content.
        texts: str or bytes.
        split: False passes each text to the file as one sentence.
        passthrough: URLs, e-mail addresses, code, tags, numbers and emoji pass through
            unchanged (:func:`keras_attn.translation.pipeline.passed_through`), each put
            back by the file's word alignment as the SavedModel's ``serving_default`` does;
            None: as the export's ``serving_default`` does (:func:`tflite_settings`; off for
            a file exported before them).
        glossary: ``{source term: target term}`` put in by the file's word alignment
            (:func:`keras_attn.translation.glossary.with_glossary`).

    Returns:
        dict of numpy arrays ``translation`` (bytes), ``score``, ``confidence`` and
        ``truncated`` ``(B,)``; with ``split=False`` the file's outputs, ``needs_split`` too;
        with a glossary, ``applied_terms`` (per text the terms put in, a list of dicts).
    """
    from keras_attn.text.glossary import entries

    from keras_attn.translation import pipeline

    interpreter, settings = _text_file(model)
    runner = interpreter.get_signature_runner(TFLITE_TEXT_SIGNATURE)
    if not split:
        return _run_sentences(runner, text_array(texts))
    if passthrough is None:
        passthrough = bool(settings.get("passthrough", False))
    run, names = (lambda sentences: _run_sentences(runner, sentences)), _SINGLE
    aligned = _aligned_sentences(interpreter, settings)
    glossary = entries(glossary)
    if aligned is not None and ((passthrough and pipeline.has_spans(_decoded(texts)))
                                or pipeline.has_terms(_decoded(texts), glossary)):
        # serving_default's graph places spans by the alignment: the options signature
        # gives the same decoding with its alignments (and they place a glossary's terms).
        run, names = aligned, {**_SINGLE, "alignment": "alignment"}
    out = by_document(texts, run, names, passthrough=passthrough, glossary=glossary)
    out.pop("alignment", None)
    return out


def _aligned_sentences(interpreter, settings):
    """``sentences -> serving_default's outputs and "alignment"`` through the file's newest
    options signature (None: a file without one)."""
    from keras_attn.decoding.options import DecodingOptions

    signatures = interpreter.get_signature_list()
    if not any(name in signatures for name in OPTION_SIGNATURES):
        return None
    runner = interpreter.get_signature_runner(newest_options_signature(signatures))
    opts = DecodingOptions(beam_size=int(settings.get("beam_size", 1)), return_alignments=True)
    inputs = option_inputs(opts, runner.get_input_details())

    def run(sentences):
        out = runner(text=sentences, **inputs)
        return {**{name: np.asarray(out[plural])[:, 0] for name, plural in _NBEST.items()},
                "truncated": out["truncated"]}

    return run


def _run_sentences(runner, texts):
    if not len(texts):
        return {"translation": np.zeros((0,), object), "score": np.zeros((0,), np.float32),
                "confidence": np.zeros((0,), np.float32), "truncated": np.zeros((0,), bool)}
    if list(runner.get_input_details()["text"]["shape_signature"]) != [1]:
        return runner(text=texts)
    # A fixed batch of one (Bahdanau models): one call per sentence.
    rows = [runner(text=texts[i: i + 1]) for i in range(len(texts))]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def run_tflite_options(model, texts, passthrough=None, **options):
    """Translate with the text file's newest options signature: per-request decoding
    options (API.md), n-best and alignments.

    Args:
        model, passthrough: as :func:`run_tflite_text`'s (``passthrough`` given wins over
            the option's). texts: strings.
        options: keyword arguments of ``DecodingOptions`` (``glossary`` too).

    Returns:
        dict of numpy arrays ``translations`` (bytes), ``scores``, ``confidences``,
        ``alignments`` (bytes, empty unless asked) ``(B, N)`` and ``truncated`` ``(B,)``;
        with a ``glossary``, ``applied_terms``: per text ``{source term: target term}``.

    Raises:
        ValueError: a bad option (checked before the file runs).
        RuntimeError: what only the file refuses (``beam_size`` above its maximum,
            ``max_length`` above its ``max_len``, a prefix too long).

    Example:
        >>> run_tflite_options("exported/tflite/text_float32.tflite", ["3 March 2021"],
        ...                    beam_size=4, num_hypotheses=2)["translations"]
    """
    from keras_attn.decoding.options import DecodingOptions

    from keras_attn.translation import pipeline

    opts = DecodingOptions.from_kwargs(**options)
    interpreter, settings = _text_file(model)
    if passthrough is None:
        passthrough = opts.passthrough
    if passthrough is None:
        passthrough = bool(settings.get("passthrough", False))
    opts = dataclasses.replace(opts, passthrough=bool(passthrough))
    runner = interpreter.get_signature_runner(
        newest_options_signature(interpreter.get_signature_list()))
    decode = pipeline.needs_alignments(None, _decoded(texts), opts)
    inputs = option_inputs(decode, runner.get_input_details())
    return by_document(texts, lambda sentences: runner(text=sentences, **inputs), _NBEST,
                       opts.num_hypotheses, opts.passthrough, opts.return_alignments,
                       opts.glossary)


def run_tflite_score(model, sources, targets):
    """Score given translations with the text file's ``score`` signature (forced decoding).

    Args:
        model: as :func:`run_tflite_text`'s. sources, targets: strings, as many.

    Returns:
        dict of numpy arrays ``tokens`` (bytes, "" after ``[END]``), ``token_ids``,
        ``token_log_probs`` ``(B, max_len)``, ``log_prob``, ``score`` (normalised with the
        export's ``length_penalty``), ``lengths``, ``truncated`` ``(B,)``.

    Example:
        >>> run_tflite_score("exported/tflite/text_float32.tflite", ["3 March 2021"],
        ...                  ["2021-03-03"])["log_prob"]
    """
    if len(sources) != len(targets):
        raise ValueError(f"`sources` and `targets` must have the same length. Received: "
                         f"{len(sources)} sources and {len(targets)} targets")
    runner = _text_file(model)[0].get_signature_runner(TFLITE_SCORE_SIGNATURE)
    return runner(source=text_array(sources), target=text_array(targets))


def option_inputs(opts, accepted=None, passthrough=False, glossary=()):
    """An options signature's inputs (numpy scalars) for ``DecodingOptions`` ``opts``, one
    per decoding option (``keras_attn.decoding.options.DECODING_NAMES``; ``target_prefix``:
    a list of no string or one).

    Args:
        accepted: the input names of the signature called (None: every decoding option).
        passthrough: the ``passthrough`` input, where ``accepted`` has it.
        glossary: ``(source, target)`` pairs: the ``glossary_source`` and
            ``glossary_target`` inputs (strings ``(G,)``), where ``accepted`` has them.

    Raises:
        ValueError: ``opts`` sets a decoding option that ``accepted`` lacks (an older
            export).
    """
    from keras_attn.decoding.options import DECODING_NAMES, GLOSSARY_INPUTS, OPTIONS

    inputs = {}
    for name in DECODING_NAMES:
        opt = OPTIONS[name]
        if accepted is not None and name not in accepted:
            if getattr(opts, name) != opt.default:
                raise ValueError(f"`{name}` is not an input of this artefact's options "
                                 f"signature (inputs: {sorted(accepted)}): export it again "
                                 f"to set it. Received: {name}={getattr(opts, name)!r}")
            continue
        value = opt.signature_value(getattr(opts, name))
        if opt.dtype == "string":
            inputs[name] = np.array([value.encode("utf-8")] if value else [], dtype=object)
        else:
            inputs[name] = np.dtype(opt.dtype).type(value)  # int32, float32 or bool
    if accepted is not None and "passthrough" in accepted:
        inputs["passthrough"] = np.bool_(passthrough)
    if accepted is not None and GLOSSARY_INPUTS[0] in accepted:
        for name, side in zip(GLOSSARY_INPUTS, (0, 1)):
            inputs[name] = np.array([p[side].encode("utf-8") for p in glossary], dtype=object)
    return inputs


def text_array(texts):
    """A 1-D object array of ``bytes`` (str is UTF-8 encoded) for a string input."""
    return np.array([t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts],
                    dtype=object).reshape(-1)


# --- documents: split before the TFLite file (it has no regex op), join after --------------
# A file's outputs by the keys of the pipeline's hypotheses: (S,) outputs, (S, N) outputs.
_SINGLE = {"translation": "translation", "score": "score", "confidence": "confidence"}
_NBEST = {"translation": "translations", "score": "scores", "confidence": "confidences",
          "alignment": "alignments"}


def by_document(texts, run, names, num_hypotheses=None, passthrough=False,
                keep_alignments=True, glossary=()):
    """``run(sentences)``'s per-sentence outputs joined into B documents by
    :func:`keras_attn.translation.pipeline.split_and_join`: ``(B,)`` or ``(B, N)`` under the
    names of ``names`` (:data:`_SINGLE`, or :data:`_NBEST` with ``num_hypotheses``); with
    a ``glossary`` (its pairs), ``applied_terms`` too (a list of B dicts)."""
    from keras_attn.translation import pipeline

    n = num_hypotheses or 1
    plain = lambda v: v.decode("utf-8") if isinstance(v, bytes) else float(v)  # noqa: E731

    def translate(sentences):
        out = run(text_array(sentences))
        columns = {k: np.asarray(out[name]).reshape(len(sentences), n)
                   for k, name in names.items()}
        return [[{**{k: plain(v[s, j]) for k, v in columns.items()},
                  "truncated": bool(out["truncated"][s])} for j in range(n)]
                for s in range(len(sentences))]

    docs = pipeline.split_and_join(_decoded(texts), translate, n, passthrough,
                                   keep_alignments, "confidence" in names, glossary)
    shape = (len(docs),) if num_hypotheses is None else (len(docs), n)
    result = {"truncated": np.array([hyps[0]["truncated"] for hyps in docs], bool)}
    if glossary:
        result["applied_terms"] = [hyps[0]["applied_terms"] for hyps in docs]
    for k, name in names.items():
        if k in ("translation", "alignment"):  # "": a text of no sentence aligns nothing
            values = [[h.get(k, "").encode("utf-8") for h in hyps] for hyps in docs]
            result[name] = np.array(values, dtype=object).reshape(shape)
        else:
            result[name] = np.array([[h[k] for h in hyps] for hyps in docs],
                                    np.float32).reshape(shape)
    return result


def _decoded(texts):
    """Documents as str (bytes not UTF-8 read with U+FFFD, as the SavedModel reads them)."""
    if isinstance(texts, (str, bytes)):
        raise ValueError("`texts` must be a sequence of documents, not one str/bytes. "
                         f"Received: texts={texts!r}")
    decoded = []
    for text in texts:
        if isinstance(text, (bytes, bytearray, np.bytes_)):
            text = bytes(text).decode("utf-8", errors="replace")
        decoded.append(str(text) if isinstance(text, np.str_) else text)
    return decoded


def split_for_tflite(texts):
    """Split documents into the sentences a TFLite text file translates (one batch).

    Args:
        texts: B documents, str or UTF-8 bytes, each any number of sentences and paragraphs.

    Returns:
        ``(sentences, counts, separators)``: ``sentences`` an object array ``(N,)`` of UTF-8
        bytes (the file's ``text`` input); ``counts`` int64 ``(B,)`` sentences per document;
        ``separators`` B lists of ``counts[i] + 1`` str, the whitespace around them.

    Raises:
        ValueError: a document that is not str / bytes.

    Example:
        >>> sentences, counts, seps = split_for_tflite(["Hi. Bye.", "Yes."])
        >>> out = run_tflite_text("exported/tflite/text_float32.tflite", sentences)
        >>> join_from_tflite(out["translation"], counts, seps)
    """
    from keras_attn.text import documents

    sentences, counts, separators = documents.split_batch(_decoded(texts))
    return text_array(sentences), np.asarray(counts, np.int64), separators


def join_from_tflite(translations, counts, separators):
    """Join a TFLite file's sentence translations back into documents.

    Args:
        translations: ``(N,)`` bytes or str, one per sentence of :func:`split_for_tflite`
            (of n-best outputs ``(N, K)``, a column).
        counts, separators: from :func:`split_for_tflite`.

    Returns:
        list of B str.
    """
    from keras_attn.text import documents

    translations = np.asarray(translations, dtype=object)
    if translations.ndim != 1:
        raise ValueError(f"`translations` must be 1-D (one per sentence). Received: shape "
                         f"{translations.shape}")
    texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in translations]
    return documents.join_batch(texts, [int(c) for c in counts], separators)
