"""Running a CTranslate2 export (CTranslate2-only): :class:`CTranslate2Translator`.

Text in, text out with a model directory written by
:class:`keras_attn.export.ctranslate2.CTranslate2Exporter`, through ``ctranslate2.Translator``
and our own tokenizers, with the per-request options of API.md under our names. How its
decoding compares with ``keras_attn.decoding`` (what is equal, what differs):
:mod:`keras_attn.export.ctranslate2` and docs/decoding_options.md.

Example:
    >>> ct2 = CTranslate2Translator("runs/dates/export/ctranslate2")
    >>> ct2.translate(["3 March 2021"])
    ['2021-03-03']
    >>> ct2.score(["3 March 2021"], ["2021-03-03"])[0]["log_prob"]  # score_batch
    -0.83
"""
import math
import os

import numpy as np

# First: without CTranslate2 (an optional extra) this raises an ImportError naming the extra.
from keras_attn.export.ct2_converter import ct2_vocab

import ctranslate2

from keras_attn import runs, subword, text
from keras_attn.decoding.confidence import Calibrator, features
from keras_attn.decoding.options import LENGTH_PENALTY, DecodingOptions, control_defaults
from keras_attn.decoding.processors import length_penalty

METADATA = "keras_attn.json"  # what the exporter writes beside the model, read here
SRC_VOCAB, TGT_VOCAB = "src_vocab.txt", "tgt_vocab.txt"  # keras_attn.text's vocabulary files


def decoding_options(max_len, beam_size=1):
    """``translate_batch`` options that decode as ``keras_attn.decoding`` does."""
    return {"beam_size": beam_size, "min_decoding_length": 0, "max_decoding_length": max_len,
            "max_input_length": max_len, "return_end_token": True}


class CTranslate2Translator:
    """Text in, text out with a model directory from :func:`export_ctranslate2`.

    The same interface as ``keras_attn.translator.Translator`` (``encode``,
    ``translate_ids``, ``translate``, ``translate_nbest`` with the per-request options of
    API.md under our names), so ``keras_attn.evaluation.evaluate`` scores it too.
    Tokenizes with our vocabularies (``keras_attn.text.Tokenizer``) and decodes with
    :func:`decoding_options`. CTranslate2 is asked for raw sums of log-probabilities
    (``length_penalty=0``); ``beam_size > 1`` asks for ``beam_size`` hypotheses and reranks
    them with our GNMT penalty ``((5 + n) / 6) ** length_penalty``.

    What is equal to ``Translator`` (docs/decoding_options.md): greedy output, with or
    without ``target_prefix`` (forced with CTranslate2's ``target_prefix``, its
    log-probabilities not in the score, as ours), ``max_length``; beam search's best
    hypothesis on most sentences, not all (another algorithm, module notes). Refused with a
    ``ValueError`` naming the option: sampling (``sampling_topk > 1``: CTranslate2's random
    numbers are not our seeded hash) and ``return_alignments`` (CTranslate2's attention is
    not our alignment).

    Args:
        model_dir: the exported directory.
        device, compute_type, intra_threads, inter_threads: ``ctranslate2.Translator``'s.

    Example:
        >>> ct2 = CTranslate2Translator("runs/dates/export/ctranslate2", intra_threads=2)
        >>> ct2.translate(["3 March 2021"])
        ['2021-03-03']
        >>> ct2.translate_nbest(["3 March 2021"], beam_size=4, num_hypotheses=2)
        [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", intra_threads=0,
                 inter_threads=1):
        meta = runs.read_json(os.path.join(model_dir, METADATA))
        self.max_len = int(meta["max_len"])
        self.normalize = bool(meta["normalize_input"])
        files = meta.get("tokenizers", {"src": SRC_VOCAB, "tgt": TGT_VOCAB})
        self.src_tokenizer = subword.load_tokenizer(os.path.join(model_dir, files["src"]))
        self.tgt_tokenizer = subword.load_tokenizer(os.path.join(model_dir, files["tgt"]))
        self.src_tokens = ct2_vocab(self.src_tokenizer.vocab)
        self.tgt_tokens = ct2_vocab(self.tgt_tokenizer.vocab)
        self.tgt_ids = {t: i for i, t in enumerate(self.tgt_tokens)}
        self.src_ids = {t: i for i, t in enumerate(self.src_tokens)}
        # The export's confidence calibrator (the graphs' own), or uncalibrated without one.
        self.calibrator = (Calibrator.from_dict(meta["calibration"])
                           if meta.get("calibration") else Calibrator.uncalibrated())
        self.controls = dict(control_defaults(self.tgt_tokenizer))  # as Translator's
        self.split_long = False  # as Translator's: long sentences truncated and reported
        self.translator = ctranslate2.Translator(
            os.fspath(model_dir), device=device, compute_type=compute_type,
            intra_threads=intra_threads, inter_threads=inter_threads)

    def encode(self, sentences):
        """Source token strings per sentence (no ``</s>``: the model appends it)."""
        import tensorflow as tf

        if self.normalize:
            sentences = [text.normalize_text(s) for s in sentences]
        ids = self.src_tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
        return [[self.src_tokens[i] for i in row[: self.max_len - 1]] for row in ids]

    def tokens_from_ids(self, source):
        """Token strings from our source ids ``(B, S)`` (``Translator.encode``: ``[END]``
        appended, 0 = padding)."""
        rows = np.asarray(source).tolist()
        return [[self.src_tokens[i] for i in row if i != text.PAD_ID][:-1] for row in rows]

    def options(self, **options):
        """:class:`~keras_attn.decoding.options.DecodingOptions` from keyword arguments, as
        ``Translator.options`` (checked, ``length_penalty`` ``LENGTH_PENALTY`` and ``max_length``
        ``max_len`` filled in), refusing what CTranslate2 cannot give as ours.

        Raises:
            ValueError: a bad or unknown option (``DecodingOptions``), ``sampling_topk > 1``
                or ``return_alignments=True``.
        """
        opts = DecodingOptions.from_kwargs(**options)
        if opts.sampling:
            raise ValueError(
                "`sampling_topk` > 1 (random sampling) is not available with CTranslate2: "
                "its random numbers are not keras_attn's seeded hash, so a `seed` would not "
                "give the same sample (use Translator, the SavedModel or the TFLite file). "
                f"Received: sampling_topk={opts.sampling_topk}")
        if opts.return_alignments:
            raise ValueError(
                "`return_alignments` is not available with CTranslate2: its attention "
                "vectors are not keras_attn's word alignments. "
                f"Received: return_alignments={opts.return_alignments}")
        opts.validate(max_length_limit=self.max_len)
        return opts.resolve(self.max_len, controls=self.controls)

    def prefix_tokens(self, target_prefix):
        """``target_prefix`` as target token strings (our target tokenizer, as
        ``Translator`` forces it; no ``</s>``)."""
        import tensorflow as tf

        if not target_prefix:
            return []
        ids = self.tgt_tokenizer.tokenize(tf.constant([target_prefix], tf.string))
        row = ids.to_list()[0] if hasattr(ids, "to_list") else np.asarray(ids)[0].tolist()
        return [self.tgt_tokens[i] for i in row]

    def decode_nbest(self, tokens, opts, prefix=(), ct2_options=None):
        """``translate_batch`` on source token strings (:meth:`encode`) with options from
        :meth:`options`; per sentence ``[(target ids, score)]``, best first, at most
        ``opts.num_hypotheses`` (ids as ``Translator``'s: ``[END]`` included when the
        hypothesis ended, the prefix's ids first).

        Scores are sums of log-probabilities of the generated tokens (``</s>`` included, the
        forced prefix not), divided for ``beam_size > 1`` by the GNMT penalty of the whole
        length n (prefix and ``</s>`` included), as ``keras_attn.decoding.decode``.

        Args:
            tokens: source token strings per sentence. opts: resolved ``DecodingOptions``.
            prefix: target token strings forced first (:meth:`prefix_tokens`).
            ct2_options: ``translate_batch`` arguments that override ours, with
                CTranslate2's meanings (with its own ``length_penalty`` the hypotheses keep
                CTranslate2's ranking and scores).
        """
        kwargs = dict(decoding_options(self.max_len, opts.beam_size), return_scores=True,
                      max_decoding_length=opts.max_length, length_penalty=0.0,
                      repetition_penalty=opts.repetition_penalty,
                      no_repeat_ngram_size=opts.no_repeat_ngram_size)
        if opts.beam_size > 1:
            kwargs["num_hypotheses"] = opts.beam_size  # rerank the whole beam, as ours
        kwargs.update(ct2_options or {})
        rerank = opts.beam_size > 1 and "length_penalty" not in (ct2_options or {})
        target_prefix = [list(prefix)] * len(tokens) if prefix else None
        if opts.max_length_factor > 0:  # Marian's limit per sentence: one call per limit
            limits = [min(kwargs["max_decoding_length"],
                          max(1, math.ceil(opts.max_length_factor * (len(t) + 1))))
                      for t in tokens]  # + 1: the </s> the model appends, as ours counts
            results = [None] * len(tokens)
            for limit in sorted(set(limits)):
                rows = [i for i, n in enumerate(limits) if n == limit]
                group = self.translator.translate_batch(
                    [tokens[i] for i in rows],
                    [target_prefix[i] for i in rows] if target_prefix else None,
                    **dict(kwargs, max_decoding_length=limit))
                for i, result in zip(rows, group):
                    results[i] = result
        else:
            results = self.translator.translate_batch(tokens, target_prefix, **kwargs)
        out = []
        for result in results:
            hyps = [[self.tgt_ids[t] for t in h] for h in result.hypotheses]
            scores = [float(s) for s in result.scores]
            if rerank:
                penalties = np.asarray(length_penalty(np.array([len(h) for h in hyps]),
                                                      opts.length_penalty))
                scores = [s / float(p) for s, p in zip(scores, penalties)]
            order = sorted(range(len(hyps)), key=lambda j: -scores[j])  # stable: first of equals
            out.append([(hyps[j], scores[j]) for j in order[: opts.num_hypotheses]])
        return out

    def translate_tokens(self, tokens, beam_size=1, alpha=LENGTH_PENALTY, ct2_options=None):
        """Target ids per sentence (``[END]`` included when the hypothesis ended), and
        their scores (sum of log-probabilities; GNMT-normalised with ``beam_size > 1``).

        ``ct2_options``: a dict of ``translate_batch`` arguments that override ours, with
        CTranslate2's meanings (``{"length_penalty": 1.0}``: its ``length ** 1.0``
        ranking, not reranked)."""
        opts = DecodingOptions(beam_size=beam_size, length_penalty=alpha).resolve(
            self.max_len, alpha, self.controls)
        best = [hyps[0] for hyps in self.decode_nbest(tokens, opts, ct2_options=ct2_options)]
        return [ids for ids, _ in best], [score for _, score in best]

    def translate_ids(self, source, beam_size=1, alpha=LENGTH_PENALTY, ct2_options=None):
        """Best output ids ``(B, T)`` for source ids ``(B, S)``, as
        ``Translator.translate_ids`` (``[END]`` included, then 0)."""
        ids, _ = self.translate_tokens(self.tokens_from_ids(source), beam_size, alpha,
                                       ct2_options)
        return _pad(ids)

    def translate_nbest(self, texts, batch_size=128, **options):
        """Translate with per-call decoding options, as ``Translator.translate_nbest``: each
        text is split into sentences (:mod:`keras_attn.documents`), they are decoded as
        one batch and joined back with the text's whitespace; a sentence longer than the
        model reads is cut at a clause boundary.

        Returns, per text, a list of ``num_hypotheses`` dicts ``{"translation": str,
        "score": float, "confidence": float}``, best first (beam: summed log-probability /
        GNMT penalty; greedy: the summed log-probability; confidence: :meth:`confidences`;
        several sentences: scores summed, the lowest confidence, with ``"sentences"``). With
        ``target_prefix`` every sentence's translation starts with the prefix's tokens and
        their log-probabilities are not in the score.

        Raises:
            ValueError: as :meth:`options` (sampling, alignments, bad values), or a
                ``target_prefix`` that leaves no room within ``max_length``.
        """
        from keras_attn import document_translation

        opts = self.options(**options)
        prefix = self.prefix_tokens(opts.target_prefix)
        opts.validate(max_length_limit=self.max_len, prefix_tokens=len(prefix))
        docs = document_translation.translate_documents(
            list(texts), lambda s: self._translate_sentences(s, batch_size, opts, prefix),
            opts.num_hypotheses, cut=self.cut_long if self.split_long else None,
            too_long=self.too_long)
        return [[document_translation.one_sentence(h) for h in hyps] for hyps in docs]

    def too_long(self, sentences):
        """Per sentence whether it has more source tokens than the model reads."""
        return [len(t) > self.max_len - 1 for t in self.encode_all(sentences)]

    def cut_long(self, sentences):
        """As ``Translator.cut_long``: Pieces for the sentences over ``max_len - 1`` tokens."""
        from keras_attn import documents

        limit = self.max_len - 1
        count = lambda piece: len(self.encode_all([piece])[0])  # noqa: E731
        return [documents.cut_long(s, limit, count) if len(tokens) > limit else None
                for s, tokens in zip(sentences, self.encode_all(sentences))]

    def encode_all(self, sentences):
        """Source token strings per sentence, not truncated."""
        import tensorflow as tf

        if not sentences:
            return []
        if self.normalize:
            sentences = [text.normalize_text(s) for s in sentences]
        ids = self.src_tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
        return [[self.src_tokens[i] for i in row] for row in ids]

    def _translate_sentences(self, sentences, batch_size, opts, prefix):
        import tensorflow as tf

        results = []
        for i in range(0, len(sentences), batch_size):
            tokens = self.encode(sentences[i: i + batch_size])
            nbest = self.decode_nbest(tokens, opts, prefix)
            flat = [ids for hyps in nbest for ids, _ in hyps]
            decoded = iter(self.tgt_tokenizer.detokenize(tf.constant(_pad(flat))).numpy())
            confidences = iter(self.confidences(
                [t for t, hyps in zip(tokens, nbest) for _ in hyps],
                [[self.tgt_tokens[j] for j in ids if j != text.END_ID] for ids in flat]))
            results.extend([{"translation": next(decoded).decode("utf-8", errors="replace"),
                             "score": score, "confidence": next(confidences)}
                            for _, score in hyps] for hyps in nbest)
        return results

    def confidences(self, sources, targets, scored=None):
        """The confidence of each target (token strings, no ``</s>``) for its source (token
        strings): ``score_batch``'s log-probabilities (``scored``, if already computed) read
        as ``keras_attn.decoding.confidence.features``, then the export's calibrator."""
        import keras

        if not sources:
            return []
        if scored is None:
            scored = self.translator.score_batch(sources, targets, max_input_length=0)
        log_probs = [list(r.log_probs) for r in scored]
        padded = np.zeros((len(log_probs), max(len(p) for p in log_probs)), np.float32)
        for b, row in enumerate(log_probs):
            padded[b, : len(row)] = row
        source = _pad([[self.src_ids[t] for t in row] + [text.END_ID] for row in sources])
        x = features(padded, np.array([len(p) for p in log_probs], np.int32), source)
        return [float(c) for c in keras.ops.convert_to_numpy(self.calibrator(x))]

    def target_tokens(self, targets):
        """Target token strings per translation (CTranslate2's vocabulary; no ``</s>``:
        ``score_batch`` appends it), cut to ``max_len - 1`` tokens as ``Translator.score``
        cuts them, and whether each was cut."""
        import tensorflow as tf

        if self.normalize:
            targets = [text.normalize_text(t) for t in targets]
        ids = self.tgt_tokenizer.tokenize(tf.constant(list(targets), tf.string))
        rows = ids.to_list() if hasattr(ids, "to_list") else np.asarray(ids).tolist()
        keep = self.max_len - 1
        return [[self.tgt_tokens[i] for i in row[:keep]] for row in rows], \
            [len(row) > keep for row in rows]

    def score(self, sources, targets, batch_size=128, length_penalty=None):
        """Score given translations with CTranslate2's ``score_batch`` (forced decoding),
        as ``Translator.score``: the same dict per pair (``tokens`` in our target
        vocabulary's spelling, ``[END]`` last, ``token_ids``, ``token_log_probs``,
        ``log_prob``, ``score`` = ``log_prob / ((5 + n) / 6) ** length_penalty``,
        ``confidence``, ``truncated``).

        Raises:
            ValueError: ``sources`` and ``targets`` of different lengths, an item that is
                not a string, or a bad ``length_penalty``.
        """
        sources, targets = text.string_pairs(sources, targets)
        alpha = self.options(length_penalty=length_penalty).length_penalty
        vocab = self.tgt_tokenizer.vocab
        out = []
        for i in range(0, len(sources), batch_size):
            target, truncated = self.target_tokens(targets[i: i + batch_size])
            # max_input_length=0: our own cuts above and in encode, none of CTranslate2's.
            source = self.encode(sources[i: i + batch_size])
            scored = self.translator.score_batch(source, target, max_input_length=0)
            confidences = self.confidences(source, target, scored)
            for result, cut, confidence in zip(scored, truncated, confidences):
                ids = [self.tgt_ids[t] for t in result.tokens]  # ..., "</s>"
                log_probs = [float(p) for p in result.log_probs]
                total = float(np.sum(np.asarray(log_probs, np.float32)))
                out.append({"tokens": [vocab[t] for t in ids], "token_ids": ids,
                            "token_log_probs": log_probs, "log_prob": total,
                            "score": total / float(length_penalty(len(ids), alpha)),
                            "confidence": confidence, "truncated": cut})
        return out

    def translate(self, sentences, beam_size=1, alpha=LENGTH_PENALTY, batch_size=128, **options):
        """Translate a list of strings; returns a list of strings (the best translation).

        Any other option of :meth:`translate_nbest` (``length_penalty`` is ``alpha``'s name
        there) gives that method's best hypothesis, as ``Translator.translate``.
        """
        options.setdefault("length_penalty", alpha)
        return [hyps[0]["translation"] for hyps in
                self.translate_nbest(sentences, batch_size, beam_size=beam_size, **options)]


def _pad(rows):
    """Ragged id lists -> int32 ``(B, max(1, longest))``, 0-padded."""
    out = np.zeros((len(rows), max([len(r) for r in rows] + [1])), np.int32)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out
