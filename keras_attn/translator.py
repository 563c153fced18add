"""Text in, text out: a trained model with its tokenizers and a decoder.

Example:
    >>> tr = Translator.from_run_dir("runs/dates")
    >>> tr.translate(["3 March 2021", "le 4 juillet 1999"])
    ['2021-03-03', '1999-07-04']
    >>> tr.score(["3 March 2021"], ["2021-03-03"])[0]["log_prob"]
    -0.83
"""
import os

import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding, models

from keras_attn.translation import alignment

from keras_attn.kernels import fastpath

from keras_attn.core import runs

from keras_attn.text import subword

from keras_attn.text import tokenizers as text
from keras_attn.core.config import TrainConfig
from keras_attn.decoding import processors
from keras_attn.decoding.confidence import Calibrator, features, hypothesis_features
from keras_attn.decoding.options import (CONTROLS, LENGTH_PENALTY, OPTIONS,
                                         DecodingOptions, control_defaults)
from keras_attn.translation import pipeline

# The options a traced decoder takes as tensors (changing them does not retrace); the
# others (beam_size, num_hypotheses, return_alignments, target_prefix) shape the graph.
TENSOR_OPTIONS = tuple(name for name, opt in OPTIONS.items()
                       if opt.dtype in ("int32", "float32") and name not in (
                           "beam_size", "num_hypotheses"))
# What :meth:`Translator.search` returns, in the order of its traced functions' outputs.
SEARCH_OUTPUTS = ("tokens", "lengths", "scores", "codes", "features")


def _traced(fn, input_signature):
    """``fn`` as a ``tf.function`` (on TensorFlow) traced under the kernel policy with
    ``dynamic_shapes`` on: a plain graph, where the self-attention caches grow and the
    loops drop the rows that ended (``keras_attn.kernels.fastpath``). JAX compiles the sampler's
    while loop itself; PyTorch runs it eagerly."""
    if keras.backend.backend() != "tensorflow":
        return fn
    return tf.function(fastpath.under(fn, dynamic_shapes=True), input_signature=input_signature)


class Translator:
    """Tokenize, decode (greedy or beam) and detokenize with a trained model: the Keras
    engine of :mod:`keras_attn.translation.pipeline` (a request's life is there; this
    class supplies token ids in, hypotheses out).

    Args:
        model: a model from ``keras_attn.models``.
        src_tokenizer, tgt_tokenizer: ``keras_attn.text.subword.SentencePieceTokenizer`` or
            ``keras_attn.text.tokenizers.Tokenizer`` objects.
        max_len: most tokens per source (longer inputs are truncated) and per output.
        normalize: apply D2L's text normalisation to inputs (WordPiece runs; a
            SentencePiece model normalises in its own ops).
        calibrator: the :class:`keras_attn.decoding.confidence.Calibrator` that turns a
            hypothesis's signals into its ``confidence`` (``from_run_dir`` loads the run's
            ``calibration.json``); None: ``Calibrator.uncalibrated()``.
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, max_len=64, normalize=False,
                 calibrator=None):
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_len = max_len
        self.normalize = normalize
        self._decoders = {}
        self._word_tables = None  # alignment.word_tables of both sides, when first asked
        # The repetition controls' defaults for this target vocabulary (DecodingOptions).
        self.controls = dict(control_defaults(tgt_tokenizer))
        # A sentence longer than the model reads: read in part and reported ("truncated",
        # as every artefact does), or with split_long cut at clause boundaries first.
        self.split_long = False
        self.calibrator = calibrator

    @property
    def calibrator(self):
        return self._calibrator

    @calibrator.setter
    def calibrator(self, value):
        # Applied to the features the traced functions return: no retracing.
        self._calibrator = Calibrator.uncalibrated() if value is None else value

    @classmethod
    def from_run_dir(cls, run_dir, calibrated=True):
        """Load ``model.keras`` (or the best checkpoint), the vocabularies and the confidence
        calibrator (``calibration.json``; ``calibrated=False`` or none yet: uncalibrated)
        of a run."""
        p = runs.paths(run_dir)
        if not os.path.exists(p["config"]):
            raise FileNotFoundError(f"{run_dir!r} is not a run directory (no config.json)")
        config = runs.read_json(p["config"])
        if os.path.exists(p["model"]):
            model = keras.models.load_model(p["model"], compile=False)
        elif os.path.exists(p["best"]):
            # Interrupted before the end: the best checkpoint so far.
            model = models.build_model(config)
            model.load_weights(p["best"])
        else:
            raise FileNotFoundError(
                f"{run_dir!r} has no trained weights yet (neither model.keras nor "
                "checkpoints/best.weights.h5): finish or resume the training first")
        src_tok, tgt_tok = subword.run_tokenizers(run_dir)
        calibrator = (Calibrator.load(p["calibration"])
                      if calibrated and os.path.exists(p["calibration"]) else None)
        return cls(model, src_tok, tgt_tok, config["max_len"],
                   TrainConfig.from_dict(config).tokenizer == "wordpiece", calibrator)

    def tokenize(self, sentences):
        """Source ids per sentence (lists; normalised when the run's are, not cut)."""
        if self.normalize:
            sentences = [text.normalize_text(s) for s in sentences]
        return self.src_tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()

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

    def translate_ids(self, source, beam_size=1, alpha=LENGTH_PENALTY):
        """Best output ids ``(B, T)`` (numpy int32) for source ids ``(B, S)``."""
        out = self.decode_ids(source, self.options(beam_size=beam_size, length_penalty=alpha),
                              confidence=False)
        tokens, lengths = out["tokens"][:, 0], out["lengths"][:, 0]
        return tokens[:, : max(int(lengths.max(initial=0)), 1)]

    def defaults(self):
        """The options of a call that names none, resolved for this translator."""
        return DecodingOptions().resolve(self.max_len, controls=self.controls)

    def options(self, **options):
        """:class:`DecodingOptions` from keyword arguments, checked against this translator
        (``max_length`` at most ``max_len``) and with its defaults filled in
        (``length_penalty`` ``LENGTH_PENALTY``, ``max_length`` ``max_len``)."""
        return pipeline.resolve(self, options)

    def _options_decoder(self, opts, with_prefix, confidence):
        """:meth:`search` as a ``tf.function``, one per shape of the computation (beam,
        n-best, sampling or not, prefix or not, which repetition controls are on, the
        confidence's pass or not); the other options are tensors (:data:`TENSOR_OPTIONS`),
        so changing them does not retrace."""
        on = tuple(name for name in CONTROLS if processors.active(name, getattr(opts, name)))
        key = ("options", opts.beam_size if not opts.sampling else 0, opts.num_hypotheses,
               opts.sampling, with_prefix, opts.return_alignments, on, confidence)
        if key not in self._decoders:
            def fn(source, prefix, *values):
                # The options that shape the graph as Python values, the others tensors; a
                # control that is off stays a Python value: no op in the loop.
                graph_opts = opts.replaced(**{
                    **dict(zip(TENSOR_OPTIONS, values)),
                    **{name: processors.OFF[name] for name in CONTROLS if name not in on}})
                out = self.search(source, prefix if with_prefix else None, graph_opts,
                                  confidence)
                return tuple(out[name] for name in SEARCH_OUTPUTS if name in out)
            spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)]
            spec += [tf.TensorSpec([], OPTIONS[name].dtype) for name in TENSOR_OPTIONS]
            self._decoders[key] = _traced(fn, spec)
        return self._decoders[key]

    def search(self, source, prefix, opts, confidence=True, kinds=None):
        """The decoding that every Keras/TensorFlow engine traces: ``Translator``'s own
        functions (:meth:`decode_ids`: ``opts`` holds Python values where they shape the
        graph) and the options signatures of the SavedModel and the TFLite text file
        (``keras_attn.export.request``: every option a tensor, ``kinds`` the searches one
        graph holds, picked per request with ``tf.cond``).

        Args:
            source: int32 ``(B, S)`` source ids. prefix: int32 ``(B, P)`` target ids
                forced first (0: none left), or None.
            opts: resolved :class:`DecodingOptions` (:meth:`DecodingOptions.holding` for
                tensors; ``return_alignments`` a Python bool or a bool tensor).
            confidence: also the confidence ``features`` (one more teacher-forced pass).
            kinds: None: the search ``opts`` name (Python ``beam_size`` and ``sampling``);
                one kind of :data:`keras_attn.decoding.KINDS` in a tuple: that search; all
                of them: every one traced and one picked from the tensors (TensorFlow
                graphs only).

        Returns:
            A dict: ``tokens`` int32 ``(B, N, max_len)``, ``lengths`` ``(B, N)``,
            ``scores`` float32 ``(B, N)``, ``codes`` int32 ``(B, N, max_len)`` (alignment
            pair codes, :func:`keras_attn.translation.alignment.hard_alignment`; 0 unless asked) and
            with ``confidence`` ``features`` float32 ``(B, N, F)``
            (:func:`keras_attn.decoding.confidence.hypothesis_features`).
        """
        encoded = decoding.encode(self.model, source)  # once: search, alignments, confidence

        def run(kind):  # a kind picked in the graph fixes what opts' tensors cannot
            options = opts
            if kind == "greedy":
                options = opts.replaced(beam_size=1, num_hypotheses=1, sampling=False)
            elif kind is not None:
                options = opts.replaced(sampling=kind == "sample")
            out = decoding.decode(self.model, source, options, self.max_len, text.START_ID,
                                  text.END_ID, prefix, kind=kind, encoded=encoded)
            return out["tokens"], out["lengths"], out["scores"]

        if kinds is not None and len(kinds) > 1 and set(kinds) != set(decoding.KINDS):
            raise ValueError(f"`kinds` must be one kind or all of {decoding.KINDS}. "
                             f"Received: kinds={kinds!r}")
        if kinds is None or len(kinds) == 1:
            tokens, lengths, scores = run(kinds[0] if kinds else None)
        else:
            sampling = opts.sampling_topk > 1
            beam = tf.logical_and(tf.logical_not(sampling), opts.beam_size > 1)
            tokens, lengths, scores = tf.cond(sampling, lambda: run("sample"), lambda: tf.cond(
                beam, lambda: run("beam"), lambda: run("greedy")))
        out = {"tokens": tokens, "lengths": lengths, "scores": scores}
        shape = keras.ops.shape(tokens)  # (B, N, T)
        flat = keras.ops.reshape(tokens, (-1, shape[2]))

        def codes():
            attention = decoding.cross_attention(self.model, source, flat, text.START_ID,
                                                 encoded)
            pairs = alignment.hard_alignment(attention, keras.ops.repeat(source, shape[1], 0),
                                             flat, *self.word_tables, self.max_len)
            return keras.ops.reshape(pairs, shape)

        if isinstance(opts.return_alignments, bool):
            out["codes"] = codes() if opts.return_alignments else keras.ops.zeros_like(tokens)
        else:
            out["codes"] = tf.cond(opts.return_alignments, codes, lambda: tf.zeros_like(tokens))
        if confidence:
            signals = hypothesis_features(self.model, source, flat, text.START_ID, text.END_ID,
                                          encoded)
            out["features"] = keras.ops.reshape(signals, (shape[0], shape[1], -1))
        return out

    @property
    def word_tables(self):
        """:func:`keras_attn.translation.alignment.word_tables` of the source and target vocabularies,
        made when first asked (alignments, word confidences)."""
        if self._word_tables is None:
            self._word_tables = (alignment.word_tables(self.src_tokenizer),
                                 alignment.word_tables(self.tgt_tokenizer))
        return self._word_tables

    def source_lengths(self, sentences):
        """Source tokens of each sentence (before ``[END]`` and truncation), one batch."""
        return pipeline.source_lengths(self, sentences)

    def too_long(self, sentences):
        """Per sentence whether it has more source tokens than the model reads."""
        return [n > self.max_len - 1 for n in self.source_lengths(sentences)]

    def cut_long(self, sentences):
        """Per sentence the clause-boundary cut of a sentence over ``max_len - 1`` tokens,
        else None (:func:`keras_attn.translation.pipeline.cut_long`)."""
        return pipeline.cut_long(self, sentences)

    def decode_ids(self, source, opts, prefix=None, confidence=True):
        """Decode source ids ``(B, S)`` with resolved :class:`DecodingOptions` (``prefix``:
        target ids ``(B, P)``): numpy ``tokens (B, N, T)``, ``lengths``, ``scores (B, N)``,
        alignment ``codes`` and (``confidence``: one more teacher-forced pass) the
        confidence ``features`` ``(B, N, F)`` of each hypothesis
        (:func:`keras_attn.decoding.confidence.features`)."""
        source = np.asarray(source, "int32")
        prefix = np.zeros((len(source), 0), "int32") if prefix is None else prefix
        fn = self._options_decoder(opts, prefix.shape[1] > 0, confidence)
        values = [np.dtype(OPTIONS[name].dtype).type(getattr(opts, name))
                  for name in TENSOR_OPTIONS]
        return dict(zip(SEARCH_OUTPUTS, (keras.ops.convert_to_numpy(t)
                                         for t in fn(source, prefix, *values))))

    def decode(self, source, opts, prefix=(), confidence=True):
        """The pipeline's step (:mod:`keras_attn.translation.pipeline`): :meth:`decode_ids`
        with the prefix's ids forced on every row, and the alignments as Pharaoh strings."""
        prefix = np.repeat(np.asarray([list(prefix)], "int32"), len(source), axis=0)
        out = self.decode_ids(source, opts, prefix, confidence)
        if opts.return_alignments:
            out["alignments"] = [[alignment.to_pharaoh(c, self.max_len) for c in row]
                                 for row in out["codes"]]
        return out

    def translate_nbest(self, texts, batch_size=128, confidence=True, **options):
        """Translate with per-call decoding options (API.md, "Decoding options per request").

        Each text may hold any number of sentences and paragraphs: it is split into
        sentences (:mod:`keras_attn.text.documents`), the sentences of the whole call are
        decoded as one batch, and each hypothesis is joined back with the text's own
        whitespace. A sentence longer than the model reads is read in part and its
        hypotheses say ``"truncated": True``, as every artefact does; with ``split_long``
        set it is cut at clause boundaries first (:meth:`cut_long`: ``"cut": True``).

        Returns, per text, a list of ``num_hypotheses`` dicts ``{"translation": str,
        "score": float, "confidence": float}``, best first for beam search (score: summed
        log-probability divided by the GNMT length penalty; greedy and sampling: the summed
        log-probability; confidence: the calibrated probability that the hypothesis is
        acceptable, :attr:`calibrator`; a text of several sentences: their scores summed,
        its confidence their lowest, and ``"sentences"``, the hypothesis's dict of each
        sentence with its ``"source"``). With ``target_prefix``,
        every sentence's translation starts with the prefix's tokens and their
        log-probabilities are not in the score. With ``return_alignments=True`` each
        sentence's dict (a one-sentence text's own) also has ``"alignment"``: Pharaoh
        ``i-j`` pairs (source word ``i``, target word ``j``; :mod:`keras_attn.translation.alignment`).
        ``confidence=False`` skips the confidence's teacher-forced pass: no
        ``"confidence"`` key, the same hypotheses.

        Example:
            >>> tr.translate_nbest(["3 March 2021"], beam_size=4, num_hypotheses=2)
            [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
        """
        return pipeline.translate_nbest(self, texts, batch_size, confidence=confidence,
                                        **options)

    def translate(self, texts, beam_size=1, alpha=LENGTH_PENALTY, batch_size=128, progress=None,
                  **options):
        """Translate a list of texts; returns a list of strings (the best translation).

        Each text may hold several sentences and paragraphs (split, decoded as one batch,
        joined with its whitespace: :meth:`translate_nbest`). ``progress``: optional
        ``progress(done, total)``, called after each batch with the number of sentences
        translated so far. Any other decoding option of :meth:`translate_nbest`
        (``length_penalty`` is ``alpha``'s name there) gives that method's best hypothesis
        (:func:`keras_attn.translation.pipeline.translate`: without the confidence's pass).
        """
        return pipeline.translate(self, texts, beam_size, alpha, batch_size, progress, **options)

    def encode_targets(self, targets):
        """Target ids ``(B, T)`` int32 for a list of strings, as training reads them:
        tokenized with the target tokenizer (normalised as the sources are), cut to
        ``max_len - 1`` tokens, ``[END]`` appended, 0-padded; and the bool ``(B,)`` of the
        rows that were cut."""
        if self.normalize:
            targets = [text.normalize_text(t) for t in targets]
        ids = self.tokenize_target(targets)
        truncated = np.asarray([len(row) > self.max_len - 1 for row in ids], bool)
        # source_batch: the cut and the [END] of a training target's output side.
        return tf.constant(pipeline.source_batch(ids, self.max_len)), truncated

    def _scorer(self):
        """The ``tf.function`` of :meth:`score`, traced once for any batch and length."""
        if "score" not in self._decoders:
            def fn(source, target, length_penalty):
                out = decoding.score(self.model, source, target, text.START_ID, text.END_ID,
                                     length_penalty)
                signals = features(out["token_log_probs"], out["lengths"], source)
                return (out["token_log_probs"], out["log_prob"], out["score"], out["lengths"],
                        signals)
            spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32),
                    tf.TensorSpec([], tf.float32)]
            self._decoders["score"] = _traced(fn, spec)
        return self._decoders["score"]

    def _words(self, target, per_token):
        """Per row of target ids ``(B, T)`` its words and their confidence, Bergamot's
        word-level form: ``[(word, mean log-probability of its tokens)]``
        (:func:`keras_attn.translation.alignment.word_positions` groups the tokens)."""
        positions = keras.ops.convert_to_numpy(
            alignment.word_positions(target, self.word_tables[1]))
        out = []
        for row in range(len(target)):
            groups = {}
            for t, w in enumerate(positions[row]):
                if w >= 0:
                    groups.setdefault(int(w), []).append(t)
            if not groups:
                out.append([])
                continue
            longest = max(len(g) for g in groups.values())
            ids = np.zeros((len(groups), longest), "int32")
            for k, g in enumerate(groups.values()):
                ids[k, : len(g)] = target[row, g]
            texts = self.tgt_tokenizer.detokenize(ids).numpy()
            out.append([(w.decode("utf-8", errors="replace"),
                         float(np.mean(per_token[row, g])))
                        for w, g in zip(texts, groups.values())])
        return out

    def score(self, sources, targets, batch_size=128, length_penalty=None):
        """Score given translations (forced decoding; CTranslate2's ``score_batch``).

        Each target is tokenized with the target tokenizer, cut to ``max_len - 1`` tokens
        and ended with ``[END]`` (as training reads it), then read by the decoder after
        ``[START]`` in one teacher-forced pass (:func:`keras_attn.decoding.score`, the bans
        of decoding). A hypothesis that :meth:`translate_nbest` returned gets back its
        score: greedy's ``score`` there is ``log_prob`` here, beam search's is ``score``
        (when its text tokenizes back to the ids the decoder chose: always with character
        vocabularies; SentencePiece may segment a text otherwise than the decoder did,
        and the score is then that of the other segmentation).

        Args:
            sources, targets: lists of strings of the same length.
            batch_size: pairs per decoder call.
            length_penalty: GNMT alpha of ``score`` (default 0.6, as ``translate_nbest``).

        Returns:
            Per pair a dict: ``tokens`` (the target vocabulary's token strings, ``[END]``
            last), ``token_ids``, ``token_log_probs`` (one float per token), ``log_prob``
            (their sum), ``score`` (``log_prob / ((5 + n) / 6) ** length_penalty``, n =
            tokens with ``[END]``) and ``truncated`` (the target had more than ``max_len
            - 1`` tokens and was cut: its score is that of the cut target) and
            ``confidence`` (:attr:`calibrator`; a hypothesis of :meth:`translate_nbest` gets
            the confidence it had there), and ``words``: per target word ``(word, mean
            log-probability of its tokens)``, Bergamot's word-level confidence.

        Raises:
            ValueError: ``sources`` and ``targets`` of different lengths, an item that is
                not a string, or a bad ``length_penalty``.

        Example:
            >>> tr.score(["3 March 2021"], ["2021-03-03"])[0]["log_prob"]
            -0.83
        """
        sources, targets = pipeline.string_pairs(sources, targets)
        alpha = self.options(length_penalty=length_penalty).length_penalty
        vocab = self.tgt_tokenizer.vocab
        results = []
        for i in range(0, len(sources), batch_size):
            source = np.asarray(self.encode(sources[i: i + batch_size]), "int32")
            target, truncated = self.encode_targets(targets[i: i + batch_size])
            target = np.asarray(target, "int32")
            per_token, log_prob, scores, lengths, signals = (
                keras.ops.convert_to_numpy(t)
                for t in self._scorer()(source, target, np.float32(alpha)))
            confidence = keras.ops.convert_to_numpy(self.calibrator(signals))
            words = self._words(target, per_token)
            for row in range(len(source)):
                ids = target[row, : lengths[row]].tolist()
                results.append({"tokens": [vocab[t] for t in ids], "token_ids": ids,
                                "token_log_probs": per_token[row, : lengths[row]].tolist(),
                                "words": words[row],
                                "log_prob": float(log_prob[row]), "score": float(scores[row]),
                                "confidence": float(confidence[row]),
                                "truncated": bool(truncated[row])})
        return results
