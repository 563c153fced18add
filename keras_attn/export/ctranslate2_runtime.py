"""Running a CTranslate2 export: :class:`CTranslate2Translator`, the CTranslate2 engine of
:mod:`keras_attn.translation.pipeline`. No TensorFlow or Keras (but a WordPiece run's
tokenizer).
"""
import math
import os

import numpy as np

try:
    import ctranslate2
except ImportError as e:  # an optional extra
    raise ImportError("keras_attn.export.ctranslate2_runtime needs CTranslate2: "
                      "pip install -e '.[ctranslate2]'") from e

from keras_attn.core import runs
from keras_attn.core.deprecation import renamed
from keras_attn.decoding.confidence import Calibrator, NumpyOps, features
from keras_attn.decoding.options import LENGTH_PENALTY, DecodingOptions, control_defaults
from keras_attn.decoding.options import length_penalty as gnmt_penalty  # (an argument's name)
from keras_attn.core.special_tokens import END_ID, PAD_ID
from keras_attn.text import python_tokenizers as tokenizers
from keras_attn.text import spans
from keras_attn.translation import pipeline
from keras_attn.export.ctranslate2_tokens import (  # noqa: F401  (read beside the runtime)
    SPECIAL_TOKENS, _GraphTokenizer, _word_ids, ct2_vocab, decoding_options, refuse)

METADATA = "keras_attn.json"  # what the exporter writes beside the model, read here
SRC_VOCAB, TGT_VOCAB = "src_vocab.txt", "tgt_vocab.txt"  # keras_attn.text's vocabulary files


class CTranslate2Translator:
    """Text in, text out with a model directory from :func:`export_ctranslate2`.

    The interface of ``keras_attn.translator.Translator`` (``encode``, ``translate_ids``,
    ``translate``, ``translate_nbest``, ``score``). Scores are raw log-probability sums,
    a beam reranked with our GNMT penalty (docs/ctranslate2.md). Refused (:func:`refuse`):
    sampling, alignments.

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

    # Alignments from CTranslate2's attention place passed-through spans in the pipeline
    # (a request's return_alignments is refused).
    aligns = True

    def __init__(self, model_dir, device="cpu", compute_type="default", intra_threads=0,
                 inter_threads=1):
        meta = runs.read_json(os.path.join(model_dir, METADATA))
        self.max_len = int(meta["max_len"])
        self.normalize = bool(meta["normalize_input"])
        files = meta.get("tokenizers", {"src": SRC_VOCAB, "tgt": TGT_VOCAB})
        self.src_tokenizer, self.tgt_tokenizer = (
            tokenizers.load(path) or _GraphTokenizer(path)
            for path in (os.path.join(model_dir, files[side]) for side in ("src", "tgt")))
        self.src_tokens = ct2_vocab(self.src_tokenizer.vocab)
        self.tgt_tokens = ct2_vocab(self.tgt_tokenizer.vocab)
        self.tgt_ids = {t: i for i, t in enumerate(self.tgt_tokens)}
        self.src_ids = {t: i for i, t in enumerate(self.src_tokens)}
        self.calibrator = (Calibrator.from_dict(meta["calibration"])
                           if meta.get("calibration") else Calibrator.uncalibrated())
        self.controls = dict(control_defaults(self.tgt_tokenizer))  # as Translator's
        self.split_long = False  # as Translator's: long sentences truncated and reported
        self.passthrough = spans.default_for(self.src_tokenizer)
        self.translator = ctranslate2.Translator(
            os.fspath(model_dir), device=device, compute_type=compute_type,
            intra_threads=intra_threads, inter_threads=inter_threads)

    def _normalized(self, texts):
        if not self.normalize:  # WordPiece runs only (TensorFlow's normalisation)
            return texts
        from keras_attn.text import tokenizers as text

        return [text.normalize_text(t) for t in texts]

    def tokenize(self, sentences):
        """Source ids per sentence (normalised as the run's, not cut)."""
        return self.src_tokenizer.tokenize(list(self._normalized(sentences)))

    def tokenize_target(self, texts):
        """Target ids per text."""
        return self.tgt_tokenizer.tokenize(list(texts))

    def detokenize(self, rows):
        """Target id rows ``(R, T)`` -> R strings."""
        return self.tgt_tokenizer.detokenize(np.asarray(rows).tolist())

    def encode(self, sentences):
        """Source token strings per sentence (no ``</s>``: the model appends it), cut to
        ``max_len - 1`` tokens."""
        return [[self.src_tokens[i] for i in row[: self.max_len - 1]]
                for row in self.tokenize(sentences)]

    def tokens_from_ids(self, source):
        """Token strings from our source ids ``(B, S)`` (``Translator.encode``'s)."""
        return [[self.src_tokens[i] for i in row if i != PAD_ID][:-1]
                for row in np.asarray(source).tolist()]

    def options(self, **options):
        """``DecodingOptions`` from keyword arguments, as ``Translator.options``
        (``ValueError``: a bad option, or one that :func:`refuse` refuses)."""
        return pipeline.resolve(self, options, refuse)

    def prefix_tokens(self, target_prefix):
        """``target_prefix`` as target token strings (our target tokenizer, as
        ``Translator`` forces it; no ``</s>``)."""
        if not target_prefix:
            return []
        return [self.tgt_tokens[i] for i in self.tokenize_target([target_prefix])[0]]

    def decode_nbest(self, tokens, opts, prefix=(), ct2_options=None, log_probs=False,
                     attention=False):
        """``translate_batch`` on source token strings; per sentence ``[(target ids, score)]``,
        best first, at most ``opts.num_hypotheses``, scored as ``keras_attn.decoding.decode``.

        Args:
            tokens: source token strings per sentence. opts: resolved ``DecodingOptions``.
            prefix: target token strings forced first (:meth:`prefix_tokens`).
            ct2_options: ``translate_batch`` arguments that override ours.
            log_probs: greedy only: each hypothesis ``(ids, score, token log-probabilities
                or None)`` (:meth:`_search_log_probs`).
            attention: each hypothesis ends with CTranslate2's attention (per target token).
        """
        kwargs = dict(decoding_options(self.max_len, opts.beam_size), return_scores=True,
                      max_decoding_length=opts.max_length, length_penalty=0.0,
                      repetition_penalty=opts.repetition_penalty,
                      no_repeat_ngram_size=opts.no_repeat_ngram_size,
                      return_logits_vocab=bool(log_probs), return_attention=bool(attention))
        if opts.beam_size > 1:
            kwargs["num_hypotheses"] = opts.beam_size  # rerank the whole beam, as ours
        kwargs.update(ct2_options or {})
        rerank = opts.beam_size > 1 and "length_penalty" not in (ct2_options or {})
        target_prefix = [list(prefix)] * len(tokens) if prefix else None
        if opts.max_length_factor > 0:  # Marian's limit per sentence
            limits = [min(kwargs["max_decoding_length"],
                          max(1, math.ceil(opts.max_length_factor * (len(t) + 1))))
                      for t in tokens]  # + 1: the </s> the model appends, as ours counts
            results, over = [None] * len(tokens), range(len(tokens))
            if opts.beam_size == 1 and "beam_size" not in (ct2_options or {}):
                # Greedy rows decode independently: one call at the longest limit, then the
                # rows that ran past their own limit again.
                results = self.translator.translate_batch(
                    tokens, target_prefix, **dict(kwargs, max_decoding_length=max(limits)))
                over = [i for i, r in enumerate(results) if len(r.hypotheses[0]) > limits[i]]
            for limit in sorted({limits[i] for i in over}):  # one call per limit
                rows = [i for i in over if limits[i] == limit]
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
                penalties = np.asarray(gnmt_penalty(np.array([len(h) for h in hyps]),
                                                    opts.length_penalty, ops=NumpyOps))
                scores = [s / float(p) for s, p in zip(scores, penalties)]
            order = sorted(range(len(hyps)), key=lambda j: -scores[j])  # stable: first of equals
            extra = (lambda j: (result.attention[j],)) if attention else (lambda j: ())
            if log_probs:
                out.append([(hyps[0], scores[0],
                             self._search_log_probs(result, opts.repetition_penalty),
                             *extra(0))])
                continue
            out.append([(hyps[j], scores[j], *extra(j)) for j in order[: opts.num_hypotheses]])
        return out

    def _search_log_probs(self, result, penalty):
        """A greedy hypothesis' token log-probabilities under the model alone (``score_batch``'s)
        from the search's logits, the repetition penalty undone; None after a banned token
        or without ``[END]`` (the caller scores it)."""
        hyp = result.hypotheses[0]
        if not hyp or hyp[-1] != "</s>":
            return None
        logits = np.stack([np.asarray(step) for step in result.logits[0]])  # (T, V) float32
        if logits.shape[0] != len(hyp) or logits.min() < -1e30:
            return None
        ids = [self.tgt_ids[t] for t in hyp]
        if penalty != 1.0:
            for step in range(1, len(ids)):
                seen = np.unique(ids[:step])
                x = logits[step, seen]
                logits[step, seen] = np.where(x < 0, x / penalty, x * penalty)
        top = logits.max(axis=1, keepdims=True)
        log_z = top[:, 0].astype(np.float64) + np.log(
            np.exp(logits - top).sum(axis=1, dtype=np.float64))
        return logits[np.arange(len(ids)), ids] - log_z

    @renamed(alpha="length_penalty")
    def translate_ids(self, source, beam_size=1, length_penalty=LENGTH_PENALTY,
                      ct2_options=None):
        """Best output ids ``(B, T)`` for source ids ``(B, S)``, as
        ``Translator.translate_ids`` (``ct2_options``: :meth:`decode_nbest`'s)."""
        opts = DecodingOptions(beam_size=beam_size, length_penalty=length_penalty).resolve(
            self.max_len, length_penalty, self.controls)
        nbest = self.decode_nbest(self.tokens_from_ids(source), opts, ct2_options=ct2_options)
        return pipeline.pad([hyps[0][0] for hyps in nbest])

    def translate_nbest(self, texts, batch_size=128, confidence=True, **options):
        """``Translator.translate_nbest``'s result for this model
        (:func:`keras_attn.translation.pipeline.translate_nbest`)."""
        return pipeline.translate_nbest(self, texts, batch_size, confidence=confidence,
                                        **options)

    def too_long(self, sentences):
        """Per sentence whether it has more source tokens than the model reads."""
        return [n > self.max_len - 1 for n in pipeline.source_lengths(self, sentences)]

    def cut_long(self, sentences):
        """As ``Translator.cut_long``: Pieces for the sentences over ``max_len - 1`` tokens."""
        return pipeline.cut_long(self, sentences)

    def decode(self, source, opts, prefix=(), confidence=True):
        """The pipeline's step: source ids ``(B, S)`` -> ``tokens`` ``(B, N, T)``,
        ``scores`` ``(B, N)`` and the confidence ``features`` ``(B, N, F)``."""
        tokens = self.tokens_from_ids(source)
        read = confidence and opts.beam_size == 1 and opts.sampling_topk <= 1 and not prefix
        nbest = self.decode_nbest(tokens, opts, [self.tgt_tokens[i] for i in prefix],
                                  log_probs=read, attention=opts.return_alignments)
        flat = [hyp[0] for hyps in nbest for hyp in hyps]
        shape = (len(nbest), len(flat) // len(nbest), -1)
        out = {"tokens": pipeline.pad(flat).reshape(shape),
               "scores": [[hyp[1] for hyp in hyps] for hyps in nbest]}
        if opts.return_alignments:  # asked by the pipeline, to place passed-through spans
            out["alignments"] = [[self.alignment(row, hyp[0], hyp[-1]) for hyp in hyps]
                                 for row, hyps in zip(tokens, nbest)]
        if confidence:
            sources = [t for t, hyps in zip(tokens, nbest) for _ in hyps]
            log_probs = [hyp[2] if read else None for hyps in nbest for hyp in hyps]
            missing = [i for i, row in enumerate(log_probs) if row is None]
            if missing:  # the rows the search's logits cannot serve: one score_batch pass
                targets = [[self.tgt_tokens[j] for j in flat[i] if j != END_ID]
                           for i in missing]
                passed = self.translator.score_batch([sources[i] for i in missing], targets,
                                                     max_input_length=0)
                for i, result in zip(missing, passed):
                    log_probs[i] = result.log_probs
            out["features"] = self._features(sources, log_probs).reshape(shape)
        return out

    def alignment(self, source, target_ids, attention):
        """Pharaoh ``i-j`` word pairs of one hypothesis from CTranslate2's attention (per
        target token a vector over the ``source`` token strings), as
        ``keras_attn.translation.alignment`` makes ours."""
        src_words = _word_ids(source, self.src_tokenizer)
        tgt_words = _word_ids([self.tgt_tokens[i] for i in target_ids], self.tgt_tokenizer)
        pairs = set()
        for t, row in enumerate(list(attention)[: len(tgt_words)]):
            s = int(np.argmax(row)) if len(row) else -1
            if tgt_words[t] >= 0 and 0 <= s < len(src_words) and src_words[s] >= 0:
                pairs.add((src_words[s], tgt_words[t]))
        return " ".join(f"{i}-{j}" for i, j in sorted(pairs, key=lambda p: (p[1], p[0])))

    def _features(self, sources, log_probs):
        """``keras_attn.decoding.confidence.features`` ``(R, F)`` of targets for their
        sources (token strings) from their tokens' log-probabilities (``</s>``'s last)."""
        padded = pipeline.pad([list(row) for row in log_probs], dtype=np.float32)
        source = pipeline.pad([[self.src_ids[t] for t in row] + [END_ID] for row in sources])
        return features(padded, np.array([len(row) for row in log_probs], np.int32),
                        source, ops=NumpyOps)

    def score(self, sources, targets, batch_size=128, length_penalty=None):
        """Score given translations with CTranslate2's ``score_batch``: ``Translator.score``'s
        dict per pair (and its ``ValueError`` s)."""
        sources, targets = pipeline.string_pairs(sources, targets)
        length_penalty = self.options(length_penalty=length_penalty).length_penalty
        vocab, keep = self.tgt_tokenizer.vocab, self.max_len - 1
        out = []
        for i in range(0, len(sources), batch_size):
            # Target token strings (no </s>) cut as Translator.score cuts them.
            rows = self.tokenize_target(self._normalized(targets[i: i + batch_size]))
            target = [[self.tgt_tokens[t] for t in row[:keep]] for row in rows]
            # max_input_length=0: our own cuts above and in encode, none of CTranslate2's.
            source = self.encode(sources[i: i + batch_size])
            scored = self.translator.score_batch(source, target, max_input_length=0)
            confidences = self.calibrator(self._features(source, [r.log_probs for r in scored]),
                                          ops=NumpyOps)
            for result, row, confidence in zip(scored, rows, confidences):
                ids = [self.tgt_ids[t] for t in result.tokens]  # ..., "</s>"
                log_probs = [float(p) for p in result.log_probs]
                total = float(np.sum(np.asarray(log_probs, np.float32)))
                out.append({"tokens": [vocab[t] for t in ids], "token_ids": ids,
                            "token_log_probs": log_probs, "log_prob": total,
                            "score": total / float(gnmt_penalty(len(ids), length_penalty,
                                                                  ops=NumpyOps)),
                            "confidence": float(confidence), "truncated": len(row) > keep})
        return out

    @renamed(alpha="length_penalty")
    def translate(self, sentences, beam_size=1, length_penalty=LENGTH_PENALTY, batch_size=128,
                  **options):
        """The best translation of each string (options: :meth:`translate_nbest`'s;
        ``alpha=``: ``length_penalty``'s deprecated name)."""
        return pipeline.translate(self, sentences, beam_size, length_penalty, batch_size,
                                  **options)
