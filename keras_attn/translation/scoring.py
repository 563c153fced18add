"""Forced scoring of given translations with the Keras engine (``Translator.score``)."""
import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding
from keras_attn.core.special_tokens import END_ID, START_ID
from keras_attn.decoding.confidence import features
from keras_attn.translation import alignment, pipeline
from keras_attn.translation.search import traced


class Scorer:
    """Score targets for sources in one traced teacher-forced pass per batch
    (:func:`keras_attn.decoding.score`).

    Args:
        engine: a :class:`keras_attn.translation.engine.KerasEngine`.

    Example:
        >>> scorer = Scorer(engine)
        >>> [r["score"] for r in scorer(["3 March 2021"], ["2021-03-03"], length_penalty=1.0)]
        [-0.07]
    """

    def __init__(self, engine):
        self.engine = engine

        def fn(source, target, length_penalty):
            out = decoding.score(engine.model, source, target, START_ID, END_ID,
                                 length_penalty)
            signals = features(out["token_log_probs"], out["lengths"], source)
            return (out["token_log_probs"], out["log_prob"], out["score"], out["lengths"],
                    signals)

        self._score = traced(fn, [tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.float32)])

    def words(self, target, per_token):
        """Per row of target ids ``(B, T)`` its ``[(word, mean token log-probability)]``."""
        positions = keras.ops.convert_to_numpy(
            alignment.word_positions(target, self.engine.word_tables[1]))
        out = []
        for row, words in enumerate(positions):
            groups = [np.flatnonzero(words == w) for w in np.unique(words[words >= 0])]
            texts = self.engine.detokenize(pipeline.pad([target[row, g] for g in groups])) \
                if groups else []
            out.append([(w, float(np.mean(per_token[row, g]))) for w, g in zip(texts, groups)])
        return out

    def __call__(self, sources, targets, batch_size=128, length_penalty=None):
        """Per pair the dict of ``Translator.score`` (which documents it)."""
        engine = self.engine
        sources, targets = pipeline.string_pairs(sources, targets)
        length_penalty = engine.options(length_penalty=length_penalty).length_penalty
        vocab = engine.tgt_tokenizer.vocab
        results = []
        for i in range(0, len(sources), batch_size):
            source = np.asarray(engine.encode(sources[i: i + batch_size]), "int32")
            target, truncated = engine.encode_targets(targets[i: i + batch_size])
            target = np.asarray(target, "int32")
            per_token, log_prob, scores, lengths, signals = (
                keras.ops.convert_to_numpy(t)
                for t in self._score(source, target, np.float32(length_penalty)))
            confidence = keras.ops.convert_to_numpy(engine.calibrator(signals))
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
