"""``POST /attention``: the cross-attention of a translation over its source (the web
page's heatmap), from one teacher-forced pass of the run's Keras model
(:func:`keras_attn.decoding.cross_attention`): row ``t`` while producing target token ``t``.

Example:
    >>> heatmaps = Attention(locate("exported"))
    >>> out = heatmaps.matrix("3 March 2021", "2021-03-03")
    >>> out["source_tokens"][:3], out["target_tokens"][-1], len(out["attention"])
    (['3', '␣', 'M'], '[END]', 11)
"""
import concurrent.futures
import os
import threading

from keras_attn.core import runs


class Attention:
    """The Keras model behind an artefact, loaded on first use, and its attention matrices.

    Args:
        artefact: the served :class:`~keras_attn.serve.locate.Artefact`.

    Attributes:
        unavailable: None when a Keras model is there, else the sentence saying why not.
    """

    def __init__(self, artefact):
        self.run_dir = artefact.run_dir
        self.unavailable = self._why_not(artefact.run_dir)
        self._translator = None
        self._lock = threading.Lock()
        # One thread (started by the first submit): the model's calls stay off the event
        # loop and off the engine's thread.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="attention")

    @staticmethod
    def _why_not(run_dir):
        if run_dir is None:
            return ("no attention weights here: the served artefact does not return them, and "
                    "the run directory it was exported from is unknown (serve the run "
                    "directory, or an export directory that holds its run/)")
        p = runs.paths(run_dir)
        if not (os.path.exists(p["model"]) or os.path.exists(p["best"])):
            return (f"no attention weights here: the run directory {run_dir!r} has no trained "
                    "Keras model (model.keras or checkpoints/best.weights.h5) to compute them")
        return None

    def load(self):
        """Load the run's ``Translator`` (its model and tokenizers) once; returns it."""
        if self.unavailable is not None:
            raise RuntimeError(self.unavailable)
        with self._lock:
            if self._translator is None:
                from keras_attn.translator import Translator

                self._translator = Translator.from_run_dir(self.run_dir)
        return self._translator

    def submit(self, text, translation):
        """:meth:`matrix` in this object's worker thread: a ``concurrent.futures.Future``."""
        return self._executor.submit(self.matrix, text, translation)

    def matrix(self, text, translation):
        """The cross-attention of ``translation`` over ``text``.

        Returns:
            A JSON-able dict: ``source_tokens`` (S labels), ``target_tokens`` (T labels),
            ``attention`` (T rows of S floats, each summing to 1), ``source_words`` /
            ``target_words`` (each token's word, -1 for spaces and reserved tokens) and
            ``truncated`` (a side was cut to ``max_len``).
        """
        import numpy as np

        from keras_attn import decoding
        from keras_attn.core import special_tokens
        from keras_attn.translation import alignment
        from keras_attn.viz.heatmaps import token_labels

        translator = self.load()
        source = np.asarray(translator.encode([text]), dtype="int32")  # (1, S)
        target, cut = translator.encode_targets([translation])  # (1, T), [END] last
        target = np.asarray(target, dtype="int32")
        weights = decoding.cross_attention(translator.model, source, target,
                                           special_tokens.START_ID)  # (1, T, S)
        weights = np.asarray(weights, dtype="float64")[0]
        src_tables, tgt_tables = translator.word_tables
        src_words = np.asarray(alignment.word_positions(source, src_tables))[0]
        tgt_words = np.asarray(alignment.word_positions(target, tgt_tables))[0]
        return {
            "source_tokens": token_labels(translator.src_tokenizer, source[0]),
            "target_tokens": token_labels(translator.tgt_tokenizer, target[0]),
            "attention": [[round(float(w), 6) for w in row] for row in weights],
            "source_words": [int(w) for w in src_words],
            "target_words": [int(w) for w in tgt_words],
            "truncated": bool(translator.too_long([text])[0] or cut[0]),
        }

    def close(self):
        self._executor.shutdown(wait=True)
