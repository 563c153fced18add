"""The loop an app on a phone runs over the builtin TFLite target (an encoder file and a
decoder step file, ``keras_attn.export.builtin.BuiltinModule``), with ``ai_edge_litert`` and
numpy only.

Example:
    >>> out = run_tflite_builtin("exported/tflite/builtin_float32", [[5, 6, 7, 3]])
    >>> sorted(out)
    ['confidence', 'lengths', 'log_prob', 'tokens']
"""
import json
import os

import numpy as np

from keras_attn.core.special_tokens import END_ID, START_ID

TFLITE_ENCODER_SIGNATURE = "encode"
# The step file's signatures: decode_step as first shipped (no repetition controls),
# decode_step_v2 with the tokens so far.
TFLITE_FROZEN_STEP_SIGNATURE = "decode_step"
TFLITE_STEP_SIGNATURE = "decode_step_v2"
BUILTIN_FILES = ("encoder.tflite", "decoder_step.tflite")
BUILTIN_METADATA = "metadata.json"


def run_tflite_builtin(paths, source_ids, max_len=None, start_id=None, end_id=None):
    """The loop over the builtin target (what an app does), one row at a time: encode, then
    call the step with what it returned until it says ``finished`` or ``max_len`` tokens
    are written.

    Args:
        paths: the builtin folder, or ``(encoder_path, decoder_step_path)``.
        source_ids: int ``(B, S)`` source ids (``[END]`` included, 0 = padding), e.g.
            ``Translator.encode``; each row is padded/cut to the encoder's width.
        max_len: most tokens generated (default and maximum: the exported ``max_len``).
        start_id, end_id: the target ``[START]`` / ``[END]`` ids (default: the folder's
            ``metadata.json``, else ``keras_attn.core.special_tokens``).

    Returns:
        dict of numpy arrays: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``),
        ``lengths`` int32 ``(B,)``, ``log_prob`` and ``confidence`` float32 ``(B,)`` (none
        from a step file without ``lowest``).
    """
    from ai_edge_litert.interpreter import Interpreter

    meta = {}
    if isinstance(paths, (str, os.PathLike)):  # a folder
        meta_path = os.path.join(paths, BUILTIN_METADATA)
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f) or {}
        paths = [os.path.join(paths, name) for name in BUILTIN_FILES]
    encoder_path, step_path = os.fspath(paths[0]), os.fspath(paths[1])
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
    # What the step rewrites and gets back at the next call, each starting at zero.
    fed_back = sorted(n for n in step_inputs
                      if n.startswith("cache_") or n in ("lowest", "unsure", "history"))
    # The caches hold as many positions as the encoder's source, whatever their layout.
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
