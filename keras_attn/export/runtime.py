"""Running the TFLite files as an application does: numpy and ``ai_edge_litert`` only.

Imports neither Keras nor TensorFlow (``tensorflow_text`` is imported by
:func:`text_interpreter` alone, for its TFLite kernels): :func:`run_tflite_builtin` is the
loop an app on a phone runs over the builtin target, with ``ai_edge_litert`` and numpy (the
step file applies the processors, chooses each token, sums its log-probability and says when
the output ends itself: ``keras_attn.export.builtin.BuiltinModule``); :func:`run_tflite_text`
calls the one-file text target (strings in, strings out). The text file takes one sentence
per string (it runs no regex op, so it cannot split documents; its ``translate_sentences``
signature says so, and every signature returns ``needs_split``, True for a string that may
not be one sentence): :func:`split_for_tflite` before it and :func:`join_from_tflite` after
give the SavedModel's answer for any text.

Example:
    >>> out = run_tflite_text("exported/tflite/text_float32.tflite", ["3 March 2021"])
    >>> out["translation"]
    array([b'2021-03-03'], dtype=object)
"""
import dataclasses
import json
import os

import numpy as np

from keras_attn.export.option_sets import LATEST_OPTIONS_SIGNATURE, newest_options_signature
from keras_attn.core.special_tokens import END_ID, START_ID

TFLITE_TEXT_SIGNATURE = "serving_default"
# serving_default's subgraph under a name that says what it takes: one sentence per string.
TFLITE_SENTENCES_SIGNATURE = "translate_sentences"
# The signature run_tflite_options calls in a file that has it (an older file: the newest
# options signature it has, keras_attn.export.contract).
TFLITE_OPTIONS_SIGNATURE = LATEST_OPTIONS_SIGNATURE
TFLITE_SCORE_SIGNATURE = "score"  # keras_attn.export.modules.SCORE_SIGNATURE
TFLITE_ENCODER_SIGNATURE = "encode"
# The builtin step file's signatures: decode_step as first shipped (frozen: no repetition
# controls), decode_step_v2 the step with the tokens so far (every processor).
TFLITE_FROZEN_STEP_SIGNATURE = "decode_step"
TFLITE_STEP_SIGNATURE = "decode_step_v2"
BUILTIN_FILES = ("encoder.tflite", "decoder_step.tflite")
BUILTIN_METADATA = "metadata.json"


def text_interpreter(model_content=None, model_path=None, num_threads=None):
    """An ``ai_edge_litert`` interpreter with tensorflow-text's TFLite kernels registered
    (``tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS``)."""
    import tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    return InterpreterWithCustomOps(
        model_content=model_content, model_path=model_path, num_threads=num_threads,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)


def _text_file(model):
    """:func:`text_interpreter` of a ``.tflite`` path or its content."""
    if isinstance(model, (bytes, bytearray)):
        return text_interpreter(model_content=bytes(model))
    return text_interpreter(model_path=os.fspath(model))


def run_tflite_text(model, texts, split=True, passthrough=False):
    """Translate with a text-target flatbuffer (a path or its bytes).

    Each text may hold several sentences and paragraphs: TFLite's interpreter runs no regex
    op (docs/documents.md), so the texts are split here by the rules of
    :mod:`keras_attn.text.documents` (:func:`split_for_tflite`, the same result as the
    SavedModel's in-graph split), every sentence goes through the file in one batch, and the
    translations are joined back with each text's whitespace (:func:`join_from_tflite`).

    Args:
        model: the ``.tflite`` file or its content.
        texts: str or bytes (what an app passes: the file does its own tokenizing; see the
            export report's ``warnings`` for a model that expects normalised text).
        split: False passes each text to the file as one sentence.
        passthrough: URLs, e-mail addresses, code, tags, numbers and emoji pass through
            unchanged (:func:`keras_attn.translation.pipeline.passed_through`; this
            signature gives no alignments: each is put at its proportional place). Off by
            default: the file does not say whether its vocabulary is characters.

    Returns:
        dict of numpy arrays ``translation`` (bytes), ``score``, ``confidence`` and
        ``truncated`` ``(B,)``, each text's sentences joined (:func:`by_document`: scores
        summed, the lowest confidence, truncated if any sentence was cut at the file's
        ``max_len``); with ``split=False`` the file's outputs as they are, ``needs_split``
        too (bool ``(B,)``, True where a text may not be one sentence; files exported
        before it have none).
    """
    interpreter = _text_file(model)
    runner = interpreter.get_signature_runner(TFLITE_TEXT_SIGNATURE)
    if not split:
        return _run_sentences(runner, text_array(texts))
    return by_document(texts, lambda sentences: _run_sentences(runner, sentences), _SINGLE,
                       passthrough=passthrough)


def _run_sentences(runner, texts):
    if list(runner.get_input_details()["text"]["shape_signature"]) != [1]:
        return runner(text=texts) if len(texts) else _empty()
    # A fixed batch of one (Bahdanau models): one call per sentence.
    rows = [runner(text=texts[i: i + 1]) for i in range(len(texts))]
    if not rows:
        return _empty()
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def _empty():
    return {"translation": np.zeros((0,), object), "score": np.zeros((0,), np.float32),
            "confidence": np.zeros((0,), np.float32), "truncated": np.zeros((0,), bool)}


def run_tflite_options(model, texts, passthrough=False, **options):
    """Translate with the text file's ``translate`` signature: per-request decoding options
    (API.md, "Decoding options per request"), n-best and alignments.

    Options are checked first (``ValueError`` naming the option, as ``Translator``); the
    file refuses what it alone knows (``beam_size`` above its maximum, ``max_length`` above
    its ``max_len``, a prefix too long) with a failed invocation (``RuntimeError``).

    Args:
        model: the ``.tflite`` file or its content.
        texts: strings. options: keyword arguments of ``DecodingOptions``.
        passthrough: URLs, e-mail addresses, code, tags, numbers and emoji pass through
            unchanged, placed by the file's alignments (off by default, as
            :func:`run_tflite_text`).

    Returns:
        dict of numpy arrays ``translations`` (bytes), ``scores``, ``confidences``,
        ``alignments`` (bytes, empty unless asked) ``(B, N)`` and ``truncated`` ``(B,)``,
        each text's sentences joined as the SavedModel joins them (:func:`by_document`).

    Example:
        >>> run_tflite_options("exported/tflite/text_float32.tflite", ["3 March 2021"],
        ...                    beam_size=4, num_hypotheses=2)["translations"]
    """
    from keras_attn.decoding.options import DecodingOptions

    from keras_attn.translation import pipeline

    opts = DecodingOptions.from_kwargs(**options)
    interpreter = _text_file(model)
    runner = interpreter.get_signature_runner(
        newest_options_signature(interpreter.get_signature_list()))
    decode = opts
    if passthrough and not opts.return_alignments and pipeline.has_spans(_decoded(texts)):
        decode = dataclasses.replace(opts, return_alignments=True)
    inputs = option_inputs(decode, runner.get_input_details())
    return by_document(texts, lambda sentences: runner(text=sentences, **inputs), _NBEST,
                       opts.num_hypotheses, passthrough, opts.return_alignments)


def run_tflite_score(model, sources, targets):
    """Score given translations with the text file's ``score`` signature (forced decoding,
    ``keras_attn.export.modules.TranslatorModule._score``).

    Args:
        model: the ``.tflite`` file or its content. sources, targets: strings, as many.

    Returns:
        dict of numpy arrays ``tokens`` (bytes, "" after ``[END]``), ``token_ids``,
        ``token_log_probs`` ``(B, max_len)``, ``log_prob``, ``score`` (normalised with the
        export's ``alpha``), ``lengths``, ``truncated`` ``(B,)``.

    Example:
        >>> run_tflite_score("exported/tflite/text_float32.tflite", ["3 March 2021"],
        ...                  ["2021-03-03"])["log_prob"]
    """
    if len(sources) != len(targets):
        raise ValueError(f"`sources` and `targets` must have the same length. Received: "
                         f"{len(sources)} sources and {len(targets)} targets")
    interpreter = _text_file(model)
    runner = interpreter.get_signature_runner(TFLITE_SCORE_SIGNATURE)
    return runner(source=text_array(sources), target=text_array(targets))


def option_inputs(opts, accepted=None):
    """An options signature's inputs (numpy scalars) for ``DecodingOptions`` ``opts``, one
    per declared option (``keras_attn.decoding.options.OPTIONS``): its ``unset`` value
    (``max_length`` 0, ``length_penalty`` -1) where ``opts`` leaves it to the artefact;
    ``target_prefix`` a list of no string or one.

    Args:
        accepted: the input names of the signature called (None: every option); an option
            it lacks is left out, and must then be left to the artefact.

    Raises:
        ValueError: ``opts`` sets an option that ``accepted`` lacks (an older export).
    """
    from keras_attn.decoding.options import OPTIONS

    inputs = {}
    for name, opt in OPTIONS.items():
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
            inputs[name] = np.dtype({"int32": np.int32, "float32": np.float32,
                                     "bool": np.bool_}[opt.dtype]).type(value)
    return inputs


def text_array(texts):
    """A 1-D object array of ``bytes`` (str is UTF-8 encoded) for a string input."""
    return np.array([t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts],
                    dtype=object).reshape(-1)


def _builtin_paths(paths):
    """``(encoder, decoder_step, metadata or None)`` of a builtin folder or a file pair."""
    if isinstance(paths, (str, os.PathLike)):
        folder = os.fspath(paths)
        meta_path = os.path.join(folder, BUILTIN_METADATA)
        meta = None
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        return (*(os.path.join(folder, name) for name in BUILTIN_FILES), meta)
    return os.fspath(paths[0]), os.fspath(paths[1]), None


def run_tflite_builtin(paths, source_ids, max_len=None, start_id=None, end_id=None):
    """The loop over the builtin target (what an app does), one row at a time: encode, then
    call the step with what it returned (the token, the score, the tokens so far, the
    caches) until it says ``finished`` or ``max_len`` tokens are written.

    Args:
        paths: the builtin folder, or ``(encoder_path, decoder_step_path)``.
        source_ids: int ``(B, S)`` source ids (``[END]`` included, 0 = padding), e.g.
            ``Translator.encode``; each row is padded/cut to the encoder's width.
        max_len: most tokens generated (default and maximum: the exported ``max_len``).
        start_id, end_id: the target ``[START]`` / ``[END]`` ids (default: the folder's
            ``metadata.json``, else ``keras_attn.core.special_tokens``).

    Returns:
        dict of numpy arrays: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``),
        ``lengths`` int32 ``(B,)``, ``log_prob`` float32 ``(B,)``; the same conventions as
        ``keras_attn.decoding.greedy_decode_fixed``, whose step, processors and choice the
        file runs (the export's default options); and ``confidence`` float32 ``(B,)``, the
        last step's. Files exported before the step kept a state of its own run too (a
        step without a ``history`` input decodes without the repetition controls and ends
        at ``end_id``; one without ``lowest`` returns no ``confidence``): the loop feeds
        back whichever of them the step file has.

    Example:
        >>> out = run_tflite_builtin("export/tflite/builtin_float32", tr.encode(["3 May 1999"]))
    """
    from ai_edge_litert.interpreter import Interpreter

    encoder_path, step_path, meta = _builtin_paths(paths)
    meta = meta or {}
    start_id = meta.get("start_id", START_ID) if start_id is None else start_id
    end_id = meta.get("end_id", END_ID) if end_id is None else end_id
    encoder = Interpreter(model_path=encoder_path).get_signature_runner(
        TFLITE_ENCODER_SIGNATURE)
    step_file = Interpreter(model_path=step_path)
    step = step_file.get_signature_runner(
        TFLITE_STEP_SIGNATURE if TFLITE_STEP_SIGNATURE in step_file.get_signature_list()
        else TFLITE_FROZEN_STEP_SIGNATURE)  # a file exported before the controls
    width = int(encoder.get_input_details()["source"]["shape"][1])
    step_inputs = step.get_input_details()
    # What the step rewrites and gets back at the next call: the caches, and in newer files
    # the confidence's running statistics and the tokens so far. Each starts at zero.
    fed_back = sorted(n for n in step_inputs
                      if n.startswith("cache_") or n in ("lowest", "unsure", "history"))
    # The caches hold as many positions as the encoder's source (BuiltinModule: max_len
    # both), whatever their layout ((1, L, H, d_h), or heads-first (1, H, L, d_h)).
    max_len = width if max_len is None else min(int(max_len), width)
    source_ids = np.asarray(source_ids, dtype=np.int32).reshape(len(source_ids), -1)
    batch = source_ids.shape[0]
    tokens = np.zeros((batch, max_len), np.int32)
    lengths = np.zeros((batch,), np.int32)
    log_probs = np.zeros((batch,), np.float32)
    confidences = np.zeros((batch,), np.float32)
    with_confidence = "lowest" in step_inputs
    for b in range(batch):
        row = np.zeros((1, width), np.int32)
        n = min(width, source_ids.shape[1])
        row[0, :n] = source_ids[b, :n]
        enc = encoder(source=row)
        consts = {k: v for k, v in enc.items() if k in step_inputs and k not in fed_back}
        state = {k: np.zeros(step_inputs[k]["shape"], step_inputs[k]["dtype"])
                 for k in fed_back}
        token, score = np.array([[start_id]], np.int32), np.zeros((1,), np.float32)
        for i in range(max_len):
            out = step(token=token, index=np.array(i, np.int32), score=score, **state,
                       **consts)
            state = {k: out[k] for k in fed_back}
            token, score = out["next_token"].reshape(1, 1), out["score"]
            if with_confidence:
                confidences[b] = out["confidence"][0]
            tokens[b, i] = token[0, 0]
            lengths[b] = i + 1
            if out["finished"][0] if "finished" in out else token[0, 0] == end_id:
                break
        log_probs[b] = score[0]
    result = {"tokens": tokens, "lengths": lengths, "log_prob": log_probs}
    if with_confidence:
        result["confidence"] = confidences
    return result


# --- documents: split before the TFLite file, join after -----------------------------------
# A TFLite file cannot run the document split (its regex ops have no TFLite kernel:
# docs/documents.md), so an app splits with keras_attn.text.documents' rules, the same ones the
# SavedModel runs in its graph.
# A file's outputs by the keys of the pipeline's hypotheses: (S,) outputs, (S, N) outputs.
_SINGLE = {"translation": "translation", "score": "score", "confidence": "confidence"}
_NBEST = {"translation": "translations", "score": "scores", "confidence": "confidences",
          "alignment": "alignments"}


def by_document(texts, run, names, num_hypotheses=None, passthrough=False,
                keep_alignments=True):
    """A file's outputs for B documents (str or UTF-8 bytes): ``run(sentences)`` gives its
    outputs per sentence, joined back by the pipeline's one rule
    (:func:`keras_attn.translation.pipeline.join_documents`); ``names``: ``{hypothesis
    key: output name}`` (:data:`_SINGLE` or, with ``num_hypotheses`` N, :data:`_NBEST`).
    Returns the outputs ``(B,)`` or ``(B, N)`` under the file's names, ``truncated``
    ``(B,)``. ``passthrough``, ``keep_alignments``: the pipeline's
    (:func:`keras_attn.translation.pipeline.split_and_join`)."""
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
                                   keep_alignments, confidence="confidence" in names)
    shape = (len(docs),) if num_hypotheses is None else (len(docs), n)
    result = {"truncated": np.array([hyps[0]["truncated"] for hyps in docs], bool)}
    for k, name in names.items():
        if k in ("translation", "alignment"):  # "": a text of no sentence aligns nothing
            values = [[h.get(k, "").encode("utf-8") for h in hyps] for hyps in docs]
            result[name] = np.array(values, dtype=object).reshape(shape)
        else:
            result[name] = np.array([[h[k] for h in hyps] for hyps in docs],
                                    np.float32).reshape(shape)
    return result


def _decoded(texts):
    """Documents as str (bytes that are not UTF-8 read with U+FFFD in place of the bad
    bytes, as the SavedModel's split reads them)."""
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
        bytes, every document's sentences in order (the file's ``text`` input, e.g.
        ``run_tflite_text(model, sentences)``); ``counts`` int64 ``(B,)`` sentences per
        document (0 for an empty one); ``separators`` B lists of ``counts[i] + 1`` str, the
        whitespace around them. Per-sentence outputs (``score``, ``truncated``) group back by
        document with ``np.split(x, np.cumsum(counts)[:-1])``.

    Raises:
        ValueError: a document that is not str / bytes (bytes that are not UTF-8 are
            read with U+FFFD in place of the bad bytes).

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
            (the ``translation`` output; for n-best outputs ``(N, K)`` pass a column).
        counts, separators: from :func:`split_for_tflite`.

    Returns:
        list of B str, each document's translations with its own whitespace between them.
    """
    from keras_attn.text import documents

    translations = np.asarray(translations, dtype=object)
    if translations.ndim != 1:
        raise ValueError(f"`translations` must be 1-D (one per sentence). Received: shape "
                         f"{translations.shape}")
    texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in translations]
    return documents.join_batch(texts, [int(c) for c in counts], separators)
