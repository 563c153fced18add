"""Running the TFLite files as an application does: numpy and ``ai_edge_litert`` only.

Imports neither Keras nor TensorFlow (``tensorflow_text`` is imported by
:func:`text_interpreter` alone, for its TFLite kernels): :func:`run_tflite_builtin` is the
loop an app on a phone runs over the builtin target, with ``ai_edge_litert`` and numpy (the
step file chooses each token and sums its log-probability itself:
``keras_attn.export.modules.BuiltinModule``); :func:`run_tflite_text` calls the one-file
text target (strings in, strings out).

Example:
    >>> out = run_tflite_text("exported/tflite/text_float32.tflite", ["3 March 2021"])
    >>> out["translation"]
    array([b'2021-03-03'], dtype=object)
"""
import json
import os

import numpy as np

from keras_attn.special_tokens import END_ID, START_ID

TFLITE_TEXT_SIGNATURE = "serving_default"
TFLITE_OPTIONS_SIGNATURE = "translate"  # keras_attn.export.request.TRANSLATE_SIGNATURE
TFLITE_SCORE_SIGNATURE = "score"  # keras_attn.export.modules.SCORE_SIGNATURE
TFLITE_ENCODER_SIGNATURE = "encode"
TFLITE_STEP_SIGNATURE = "decode_step"
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


def run_tflite_text(model, texts):
    """Translate with a text-target flatbuffer (a path or its bytes).

    Args:
        model: the ``.tflite`` file or its content.
        texts: str or bytes, passed as they are (what an app passes: the file does its own
            tokenizing; see the export report's ``warnings`` for a model that expects
            normalised text).

    Returns:
        dict of numpy arrays ``translation`` (bytes) ``(B,)``, ``score`` float32 ``(B,)``,
        ``truncated`` bool ``(B,)``.
    """
    if isinstance(model, (bytes, bytearray)):
        interpreter = text_interpreter(model_content=bytes(model))
    else:
        interpreter = text_interpreter(model_path=os.fspath(model))
    runner = interpreter.get_signature_runner(TFLITE_TEXT_SIGNATURE)
    texts = text_array(texts)
    if list(runner.get_input_details()["text"]["shape_signature"]) != [1]:
        return runner(text=texts)
    # A fixed batch of one (Bahdanau models): one call per sentence.
    rows = [runner(text=texts[i: i + 1]) for i in range(len(texts))]
    if not rows:
        return {"translation": np.zeros((0,), object), "score": np.zeros((0,), np.float32),
                "truncated": np.zeros((0,), bool)}
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def run_tflite_options(model, texts, **options):
    """Translate with the text file's ``translate`` signature: per-request decoding options
    (API.md, "Decoding options per request"), n-best and alignments.

    Options are checked first (``ValueError`` naming the option, as ``Translator``); the
    file refuses what it alone knows (``beam_size`` above its maximum, ``max_length`` above
    its ``max_len``, a prefix too long) with a failed invocation (``RuntimeError``).

    Args:
        model: the ``.tflite`` file or its content.
        texts: strings. options: keyword arguments of ``DecodingOptions``.

    Returns:
        dict of numpy arrays ``translations`` (bytes) ``(B, N)``, ``scores`` float32
        ``(B, N)``, ``alignments`` (bytes, empty unless asked) ``(B, N)``, ``truncated``
        ``(B,)``.

    Example:
        >>> run_tflite_options("exported/tflite/text_float32.tflite", ["3 March 2021"],
        ...                    beam_size=4, num_hypotheses=2)["translations"]
    """
    from keras_attn.decoding.options import DecodingOptions

    opts = DecodingOptions.from_kwargs(**options)
    if isinstance(model, (bytes, bytearray)):
        interpreter = text_interpreter(model_content=bytes(model))
    else:
        interpreter = text_interpreter(model_path=os.fspath(model))
    runner = interpreter.get_signature_runner(TFLITE_OPTIONS_SIGNATURE)
    return runner(text=text_array(texts), **option_inputs(opts))


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
    if isinstance(model, (bytes, bytearray)):
        interpreter = text_interpreter(model_content=bytes(model))
    else:
        interpreter = text_interpreter(model_path=os.fspath(model))
    runner = interpreter.get_signature_runner(TFLITE_SCORE_SIGNATURE)
    return runner(source=text_array(sources), target=text_array(targets))


def option_inputs(opts):
    """The ``translate`` signature's option inputs (numpy scalars) for ``DecodingOptions``
    ``opts``: ``max_length`` 0 and ``length_penalty`` -1 where ``opts`` leaves them to
    the artefact."""
    return {
        "beam_size": np.int32(opts.beam_size), "num_hypotheses": np.int32(opts.num_hypotheses),
        "length_penalty": np.float32(-1.0 if opts.length_penalty is None
                                     else opts.length_penalty),
        "max_length": np.int32(opts.max_length or 0),
        "target_prefix": np.array([opts.target_prefix.encode("utf-8")] if opts.target_prefix
                                  else [], dtype=object),
        "sampling_topk": np.int32(opts.sampling_topk),
        "sampling_topp": np.float32(opts.sampling_topp),
        "sampling_temperature": np.float32(opts.sampling_temperature),
        "seed": np.int32(opts.seed), "return_alignments": np.bool_(opts.return_alignments)}


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
    call the step with the token and score it returned until ``end_id`` or ``max_len``.

    Args:
        paths: the builtin folder, or ``(encoder_path, decoder_step_path)``.
        source_ids: int ``(B, S)`` source ids (``[END]`` included, 0 = padding), e.g.
            ``Translator.encode``; each row is padded/cut to the encoder's width.
        max_len: most tokens generated (default and maximum: the exported ``max_len``).
        start_id, end_id: the target ``[START]`` / ``[END]`` ids (default: the folder's
            ``metadata.json``, else ``keras_attn.special_tokens``).

    Returns:
        dict of numpy arrays: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``),
        ``lengths`` int32 ``(B,)``, ``log_prob`` float32 ``(B,)``; the same conventions as
        ``keras_attn.decoding.greedy_decode_fixed``, whose step and choice the file runs.

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
    step = Interpreter(model_path=step_path).get_signature_runner(TFLITE_STEP_SIGNATURE)
    width = int(encoder.get_input_details()["source"]["shape"][1])
    step_inputs = step.get_input_details()
    cache_names = sorted(n for n in step_inputs if n.startswith("cache_"))
    # The caches hold as many positions as the encoder's source (BuiltinModule: max_len
    # both), whatever their layout ((1, L, H, d_h), or heads-first (1, H, L, d_h)).
    buffer_len = width
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
        token, score = np.array([[start_id]], np.int32), np.zeros((1,), np.float32)
        for i in range(max_len):
            out = step(token=token, index=np.array(i, np.int32), score=score, **consts, **cache)
            cache = {n: out[n] for n in cache_names}
            token, score = out["next_token"].reshape(1, 1), out["score"]
            tokens[b, i] = token[0, 0]
            lengths[b] = i + 1
            if token[0, 0] == end_id:
                break
        log_probs[b] = score[0]
    return {"tokens": tokens, "lengths": lengths, "log_prob": log_probs}
