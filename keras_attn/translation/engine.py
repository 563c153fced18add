"""The Keras engine that :mod:`keras_attn.translation.pipeline` drives (:class:`KerasEngine`),
and its forced scoring (``Translator.score``)."""
import functools

import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding
from keras_attn.core.special_tokens import END_ID, START_ID
from keras_attn.decoding.confidence import Calibrator, features
from keras_attn.decoding.options import DecodingOptions, control_defaults
from keras_attn.text import spans
from keras_attn.text import tokenizers as text
from keras_attn.translation import alignment, pipeline
from keras_attn.translation.search import GraphSearch, traced


class KerasEngine:
    """A Keras model as an engine of :mod:`keras_attn.translation.pipeline` (``search``: its
    :class:`GraphSearch`).

    Args:
        model: a model from ``keras_attn.models``. src_tokenizer, tgt_tokenizer: the run's.
        max_len: most tokens per source (longer inputs are truncated) and per output.
        normalize: apply D2L's text normalisation to inputs (WordPiece runs).
        calibrator: a :class:`~keras_attn.decoding.confidence.Calibrator`; None: uncalibrated.

    Example:
        >>> engine = KerasEngine(*run.load("runs/dates"))
        >>> pipeline.translate(engine, ["3 March 2021"])
        ['2021-03-03']
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, max_len=64, normalize=False,
                 calibrator=None):
        self.model, self.src_tokenizer, self.tgt_tokenizer = model, src_tokenizer, tgt_tokenizer
        self.max_len, self.normalize = max_len, normalize
        self.controls = dict(control_defaults(tgt_tokenizer))  # the repetition controls'
        self.split_long = False  # True: a sentence too long is cut at clause boundaries
        self.passthrough = spans.default_for(src_tokenizer)  # off on characters
        self.calibrator = calibrator
        self.search = GraphSearch(model, max_len, lambda: self.word_tables)
        self._score = traced(self._scored, [tf.TensorSpec([None, None], tf.int32)] * 2
                             + [tf.TensorSpec([], tf.float32)])

    @property
    def calibrator(self):
        return self._calibrator

    @calibrator.setter
    def calibrator(self, value):
        # Applied to the features the traced functions return: no retracing.
        self._calibrator = Calibrator.uncalibrated() if value is None else value

    @functools.cached_property
    def word_tables(self):
        """:func:`keras_attn.translation.alignment.word_tables` of both vocabularies."""
        return (alignment.word_tables(self.src_tokenizer),
                alignment.word_tables(self.tgt_tokenizer))

    def _normalized(self, texts):
        return [text.normalize_text(t) for t in texts] if self.normalize else list(texts)

    def tokenize(self, sentences):
        """Source ids per sentence (lists; normalised when the run's are, not cut)."""
        return self.src_tokenizer.tokenize(
            tf.constant(self._normalized(sentences), tf.string)).to_list()

    def tokenize_target(self, texts):
        """Target ids per text (lists), as a ``target_prefix`` is forced."""
        ids = self.tgt_tokenizer.tokenize(tf.constant(list(texts), tf.string))
        return ids.to_list() if hasattr(ids, "to_list") else np.asarray(ids).tolist()

    def detokenize(self, rows):
        """Target id rows ``(R, T)`` -> R strings."""
        return [s.decode("utf-8", errors="replace")
                for s in self.tgt_tokenizer.detokenize(np.asarray(rows, "int32")).numpy()]

    def encode(self, sentences):
        """Token ids ``(B, S)`` int32 for a list of strings (``[END]`` appended, truncated)."""
        return tf.constant(pipeline.source_batch(self.tokenize(sentences), self.max_len))

    def encode_targets(self, targets):
        """Target ids ``(B, T)`` int32 as training reads them (normalised, cut, ``[END]``,
        0-padded), and the bool ``(B,)`` of the rows cut."""
        ids = self.tokenize_target(self._normalized(targets))
        truncated = np.asarray([len(row) > self.max_len - 1 for row in ids], bool)
        return tf.constant(pipeline.source_batch(ids, self.max_len)), truncated

    def options(self, **options):
        """:func:`keras_attn.translation.pipeline.resolve` for this engine."""
        return pipeline.resolve(self, options)

    def defaults(self):
        """The options of a call that names none, resolved for this engine."""
        return DecodingOptions().resolve(self.max_len, controls=self.controls)

    def decode_ids(self, source, opts, prefix=None, confidence=True):
        """:meth:`GraphSearch.decode_ids`."""
        return self.search.decode_ids(source, opts, prefix, confidence)

    def decode(self, source, opts, prefix=(), confidence=True):
        """The pipeline's step: :meth:`decode_ids`, alignments as Pharaoh strings when asked."""
        prefix = np.repeat(np.asarray([list(prefix)], "int32"), len(source), axis=0)
        out = self.decode_ids(source, opts, prefix, confidence)
        if opts.return_alignments:
            out["alignments"] = [[alignment.to_pharaoh(c, self.max_len) for c in row]
                                 for row in out["codes"]]
        return out

    def _scored(self, source, target, length_penalty):
        """:func:`keras_attn.decoding.score` of one batch, and its confidence features."""
        out = decoding.score(self.model, source, target, START_ID, END_ID, length_penalty)
        return (out["token_log_probs"], out["log_prob"], out["score"], out["lengths"],
                features(out["token_log_probs"], out["lengths"], source))

    def words(self, target, per_token):
        """Per row of target ids ``(B, T)`` its ``[(word, mean token log-probability)]``."""
        positions = keras.ops.convert_to_numpy(
            alignment.word_positions(target, self.word_tables[1]))
        out = []
        for row, words in enumerate(positions):
            groups = [np.flatnonzero(words == w) for w in np.unique(words[words >= 0])]
            texts = self.detokenize(pipeline.pad([target[row, g] for g in groups])) \
                if groups else []
            out.append([(w, float(np.mean(per_token[row, g]))) for w, g in zip(texts, groups)])
        return out

    def score(self, sources, targets, batch_size=128, length_penalty=None):
        """Per pair the dict of ``Translator.score`` (which documents it), one traced
        teacher-forced pass per batch."""
        sources, targets = pipeline.string_pairs(sources, targets)
        length_penalty = self.options(length_penalty=length_penalty).length_penalty
        vocab = self.tgt_tokenizer.vocab
        results = []
        for i in range(0, len(sources), batch_size):
            source = np.asarray(self.encode(sources[i: i + batch_size]), "int32")
            target, truncated = self.encode_targets(targets[i: i + batch_size])
            target = np.asarray(target, "int32")
            per_token, log_prob, scores, lengths, signals = (
                keras.ops.convert_to_numpy(t)
                for t in self._score(source, target, np.float32(length_penalty)))
            confidence = keras.ops.convert_to_numpy(self.calibrator(signals))
            words = self.words(target, per_token)
            for row in range(len(source)):
                ids = target[row, : lengths[row]].tolist()
                results.append({"tokens": [vocab[t] for t in ids], "token_ids": ids,
                                "token_log_probs": per_token[row, : lengths[row]].tolist(),
                                "words": words[row],
                                "log_prob": float(log_prob[row]), "score": float(scores[row]),
                                "confidence": float(confidence[row]),
                                "truncated": bool(truncated[row])})
        return results
