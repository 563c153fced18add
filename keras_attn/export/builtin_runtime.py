"""What an app on a phone runs around the builtin TFLite target (an encoder file and a
decoder step file, ``keras_attn.export.builtin.BuiltinModule``), with ``ai_edge_litert`` and
numpy only: :func:`run_tflite_builtin` the greedy loop over ids, :func:`run_tflite_builtin_text`
text in and text out (the tokenizers of ``keras_attn.text.python_tokenizers``, the sentence
split and the spans passed through as the SavedModel's ``serving_default`` does). The web
export's JavaScript (``keras_attn/export/webapp/``) is the same around the same files.

Example:
    >>> out = run_tflite_builtin("exported/tflite/builtin_float32", [[5, 6, 7, 3]])
    >>> sorted(out)
    ['confidence', 'lengths', 'log_prob', 'tokens']
    >>> run_tflite_builtin_text("exported/tflite/builtin_float32", ["3 March 2021"])["translation"]
    array([b'2021-03-03'], dtype=object)
"""
import json
import os

import numpy as np

from keras_attn.core.special_tokens import END_ID, PAD_ID, START_ID

TFLITE_ENCODER_SIGNATURE = "encode"
# The step file's signatures: decode_step as first shipped (no repetition controls),
# decode_step_v2 with the tokens so far, decode_step_v3 as v2 with the cross-attention out
# and no bool tensor (finished: int32).
TFLITE_FROZEN_STEP_SIGNATURE = "decode_step"
TFLITE_STEP_SIGNATURE = "decode_step_v2"
TFLITE_ALIGNED_STEP_SIGNATURE = "decode_step_v3"
BUILTIN_FILES = ("encoder.tflite", "decoder_step.tflite")
BUILTIN_METADATA = "metadata.json"


class _Files:
    """A builtin folder (or ``(encoder_path, decoder_step_path)``) loaded: its
    ``metadata.json`` (``meta``), the encoder and the newest step signature."""

    def __init__(self, paths):
        from ai_edge_litert.interpreter import Interpreter

        self.meta, self.folder = {}, None
        if isinstance(paths, (str, os.PathLike)):  # a folder
            self.folder = os.fspath(paths)
            meta_path = os.path.join(self.folder, BUILTIN_METADATA)
            if os.path.exists(meta_path):
                with open(meta_path, encoding="utf-8") as f:
                    self.meta = json.load(f) or {}
            paths = [os.path.join(self.folder, name) for name in BUILTIN_FILES]
        self.encoder = Interpreter(model_path=os.fspath(paths[0])).get_signature_runner(
            TFLITE_ENCODER_SIGNATURE)
        step_file = Interpreter(model_path=os.fspath(paths[1]))
        names = step_file.get_signature_list()
        # The newest step the file has (a file exported before the controls: the first).
        self.step_name = next(n for n in (TFLITE_ALIGNED_STEP_SIGNATURE, TFLITE_STEP_SIGNATURE,
                                          TFLITE_FROZEN_STEP_SIGNATURE) if n in names)
        self.step = step_file.get_signature_runner(self.step_name)
        self.width = int(self.encoder.get_input_details()["source"]["shape"][1])
        self.step_inputs = self.step.get_input_details()
        # What the step rewrites and gets back at the next call, each starting at zero.
        self.fed_back = sorted(n for n in self.step_inputs if n.startswith("cache_")
                               or n in ("lowest", "unsure", "history"))

    def decode(self, ids, max_len, start_id, end_id, length_limit=None):
        """One source row (ids, ``[END]`` included) decoded greedily: ``(tokens, score,
        confidence or None, attention rows or None)``; ``length_limit``: the most tokens
        (None: the encoder's ``length_limit``, the export's ``max_length_factor``)."""
        row = np.zeros((1, self.width), np.int32)
        n = min(self.width, len(ids))
        row[0, :n] = ids[:n]
        enc = self.encoder(source=row)
        consts = {k: v for k, v in enc.items()
                  if k in self.step_inputs and k not in self.fed_back}
        if length_limit is not None and "length_limit" in consts:
            consts["length_limit"] = np.array([length_limit], np.int32)
        state = {k: np.zeros(self.step_inputs[k]["shape"], self.step_inputs[k]["dtype"])
                 for k in self.fed_back}
        token, score = np.array([[start_id]], np.int32), np.zeros((1,), np.float32)
        tokens, confidence, attention = [], None, []
        for i in range(max_len):
            out = self.step(token=token, index=np.array(i, np.int32), score=score, **state,
                            **consts)
            state = {k: out[k] for k in self.fed_back}
            token, score = out["next_token"].reshape(1, 1), out["score"]
            confidence = float(out["confidence"][0]) if "confidence" in out else None
            if "attention" in out:
                attention.append(out["attention"][0])
            tokens.append(int(token[0, 0]))
            if out["finished"][0] if "finished" in out else token[0, 0] == end_id:
                break
        return tokens, float(score[0]), confidence, (attention if attention else None)


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
    files = _Files(paths)
    start_id = files.meta.get("start_id", START_ID) if start_id is None else start_id
    end_id = files.meta.get("end_id", END_ID) if end_id is None else end_id
    # The caches hold as many positions as the encoder's source, whatever their layout.
    max_len = files.width if max_len is None else min(int(max_len), files.width)
    source_ids = np.asarray(source_ids, dtype=np.int32).reshape(len(source_ids), -1)
    batch = source_ids.shape[0]
    tokens = np.zeros((batch, max_len), np.int32)
    lengths = np.zeros((batch,), np.int32)
    log_probs = np.zeros((batch,), np.float32)
    confidences = np.zeros((batch,), np.float32)
    with_confidence = "lowest" in files.step_inputs
    for b in range(batch):
        row, log_probs[b], confidence, _ = files.decode(source_ids[b], max_len, start_id,
                                                       end_id)
        tokens[b, :len(row)] = row
        lengths[b] = len(row)
        if with_confidence:
            confidences[b] = confidence
    result = {"tokens": tokens, "lengths": lengths, "log_prob": log_probs}
    if with_confidence:
        result["confidence"] = confidences
    return result


# --- text in, text out ----------------------------------------------------------------------
# What the greedy step leaves to the app (the loop's length) and what it fixes at export.
LOOP_OPTIONS = ("max_length", "max_length_factor", "return_alignments")
FIXED_OPTIONS = {"beam_size": 1, "num_hypotheses": 1, "sampling_topk": 1, "target_prefix": ""}


def check_loop_options(opts, controls):
    """``ValueError`` naming an option of ``DecodingOptions`` ``opts`` that a greedy step
    with the repetition controls ``controls`` inside cannot give (one rule for every
    runtime around the builtin files: the web export's JavaScript refuses the same)."""
    for name, value in FIXED_OPTIONS.items():
        if getattr(opts, name) != value:
            raise ValueError(f"`{name}` must be {value!r} with the builtin TFLite files: their "
                             "step is greedy, one hypothesis (use the SavedModel or the text "
                             f"file). Received: {name}={getattr(opts, name)!r}")
    for name in ("repetition_penalty", "no_repeat_ngram_size"):
        value = getattr(opts, name)
        if value is not None and value != controls.get(name, value):
            raise ValueError(f"`{name}` is fixed inside the builtin step at the export's "
                             f"{controls[name]!r}. Received: {name}={value!r}")


def length_limit(ids, factor, max_length):
    """``keras_attn.decoding.processors.row_limits`` of one source row: at most
    ``ceil(factor * source tokens)`` tokens (float32 arithmetic), within ``max_length``."""
    if not factor or factor <= 0:
        return max_length
    tokens = sum(1 for i in ids if i != PAD_ID)
    return min(max(int(np.ceil(np.float32(factor) * np.float32(tokens))), 1), max_length)


class BuiltinTextRuntime:
    """Text in, text out over a builtin folder, as the SavedModel's ``serving_default``
    decodes: documents split into sentences, spans passed through (put back by the word
    alignment of the step's ``attention``), greedy decoding with the export's repetition
    controls, the tokenizers of :mod:`keras_attn.text.python_tokenizers`.

    Args:
        folder: a builtin folder (``tflite/builtin_<q>`` or a web export).

    Example:
        >>> rt = BuiltinTextRuntime("exported/tflite/builtin_float32")
        >>> rt.translate(["3 March 2021. 4 July 1999"])["translation"]
        array([b'2021-03-03 1999-07-04'], dtype=object)
    """

    def __init__(self, folder):
        from keras_attn.export.ctranslate2_tokens import _GraphTokenizer
        from keras_attn.text import python_tokenizers, word_alignment

        self.files = _Files(folder)
        meta = self.files.meta
        paths = [os.path.join(folder, meta.get(k, f"{k}.txt")) for k in ("src_vocab", "tgt_vocab")]
        self.src, self.tgt = (python_tokenizers.load(p) or _GraphTokenizer(p) for p in paths)
        kinds = [("characters" if t.char_level else "sentencepiece"
                  if p.endswith(".model") else "wordpiece") for t, p in zip((self.src, self.tgt), paths)]
        self.flags = [word_alignment.word_flags(t.vocab, k)
                      for t, k in zip((self.src, self.tgt), kinds)]
        self.controls = dict(meta.get("controls", {}))
        self.passthrough = bool(meta.get("passthrough", False))
        self.normalize = bool(meta.get("normalize_input", False))
        self.start_id, self.end_id = meta.get("start_id", START_ID), meta.get("end_id", END_ID)

    def translate(self, texts, passthrough=None, **options):
        """``texts`` (str or UTF-8 bytes) translated.

        Args:
            passthrough: spans pass through (None: the option's, else as the export's
                ``serving_default``, the folder's ``metadata.json``).
            options: ``DecodingOptions`` keywords; the loop honours ``max_length``,
                ``max_length_factor`` and ``return_alignments`` (:func:`check_loop_options`
                refuses what the step fixes); a ``glossary``'s terms are put in by the word
                alignment of the step's ``attention``.

        Returns:
            dict of numpy arrays ``translation`` (bytes), ``score``, ``confidence``,
            ``truncated`` ``(B,)``; ``alignment`` (bytes) with ``return_alignments``;
            ``applied_terms`` (a list of dicts) with a ``glossary``.
        """
        from keras_attn.decoding.options import DecodingOptions
        from keras_attn.export import runtime

        opts = DecodingOptions.from_kwargs(**options)
        check_loop_options(opts, self.controls)
        passthrough = next(p for p in (passthrough, opts.passthrough, self.passthrough)
                           if p is not None)
        names = {**runtime._SINGLE, "alignment": "alignment"}
        out = runtime.by_document(texts, lambda s: self._sentences(s, opts), names,
                                  passthrough=bool(passthrough),
                                  keep_alignments=opts.return_alignments,
                                  glossary=opts.glossary)
        if not opts.return_alignments:
            out.pop("alignment")
        return out

    def _sentences(self, sentences, opts):
        from keras_attn.text import word_alignment

        width = self.files.width
        max_length = min(opts.max_length or width, width)
        factor = (self.controls.get("max_length_factor", 0.0)
                  if opts.max_length_factor is None else opts.max_length_factor)
        texts = [s.decode("utf-8", "replace") for s in sentences]
        if self.normalize:  # a WordPiece run (TensorFlow's tokenizer anyway)
            from keras_attn.text.tokenizers import normalize_text

            texts = [normalize_text(t) for t in texts]
        out = {k: [] for k in ("translation", "score", "confidence", "alignment", "truncated")}
        for ids in self.src.tokenize(texts):
            out["truncated"].append(len(ids) > width - 1)
            ids = list(ids[: width - 1]) + [END_ID]
            tokens, score, confidence, attention = self.files.decode(
                ids, max_length, self.start_id, self.end_id,
                length_limit(ids, factor, max_length))
            out["translation"].append(self.tgt.detokenize([tokens])[0].encode("utf-8"))
            out["score"].append(score)
            out["confidence"].append(0.0 if confidence is None else confidence)
            out["alignment"].append(word_alignment.pharaoh(
                word_alignment.word_positions(ids, self.flags[0]),
                word_alignment.word_positions(tokens, self.flags[1]),
                attention or []).encode("utf-8"))
        return {k: np.array(v, dtype=object if k in ("translation", "alignment") else None)
                for k, v in out.items()}


def run_tflite_builtin_text(folder, texts, passthrough=None, **options):
    """:meth:`BuiltinTextRuntime.translate` of ``texts`` over ``folder``."""
    return BuiltinTextRuntime(folder).translate(texts, passthrough, **options)
