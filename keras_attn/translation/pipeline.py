"""One request's life, for every engine (pure Python: no TensorFlow, no Keras).

text -> sentences (:mod:`keras_attn.text.documents`) -> batches sorted by length -> hypotheses
with scores, confidences and alignments -> documents joined with their own whitespace, a
sentence longer than the model reads reported (``"truncated"``) or cut at clause
boundaries (``split_long``). It calls only down, into an engine object that supplies what
differs, token ids in and hypotheses out (``Translator`` runs it on its
:class:`keras_attn.translation.engine.KerasEngine`; ``CTranslate2Translator`` is one too):

* ``max_len``, ``controls`` (the repetition controls' defaults), ``split_long``,
  ``calibrator`` (``keras_attn.decoding.confidence.Calibrator``);
* ``options(**kw)``: :func:`resolve` plus what the engine refuses;
* ``tokenize(texts)`` / ``tokenize_target(texts)``: per text its source ids (normalised,
  not cut) / target ids (a ``target_prefix``); ``detokenize(rows)``: id rows -> strings;
* ``decode(source, opts, prefix[, confidence])``: source ids int32 ``(B, S)`` (``[END]``
  last, 0-padded), resolved options and the prefix's target ids -> numpy ``tokens``
  ``(B, N, T)``, ``scores`` ``(B, N)``, optional confidence ``features`` ``(B, N, F)``
  (none when ``confidence`` is False) and ``alignments`` ``(B, N)`` (Pharaoh strings,
  when asked).

Example:
    >>> translate_nbest(engine, ["3 March 2021. 4 July 1999"], beam_size=2)
    [[{'translation': '2021-03-03. 1999-07-04', 'score': -0.02, 'confidence': 0.99,
       'truncated': False, 'sentences': [...]}]]
"""
import dataclasses

import numpy as np

from keras_attn.text import documents
from keras_attn.translation.passthrough import (  # noqa: F401  (read here by engines)
    has_spans, passed_through, passthrough_default)
from keras_attn.decoding.confidence import NumpyOps
from keras_attn.decoding.options import DecodingOptions
from keras_attn.core.special_tokens import END_ID


def resolve(engine, options, refuse=None):
    """:class:`DecodingOptions` from keyword arguments: ``refuse(opts)`` (what the engine
    cannot do: raise ``ValueError``), checked against ``engine.max_len`` and with what the
    request leaves unset filled in (``length_penalty``, ``max_length``, the repetition
    controls: ``engine.controls``) by :meth:`DecodingOptions.resolve`, the rule the served
    graphs run too."""
    opts = DecodingOptions.from_kwargs(**options)
    if refuse is not None:
        refuse(opts)
    opts.validate(max_length_limit=engine.max_len)
    return opts.resolve(engine.max_len, controls=engine.controls)


def pad(rows, width=1, dtype=np.int32):
    """Ragged lists -> ``(B, max(width, longest))`` of ``dtype`` (int32 ids), 0-padded."""
    out = np.zeros((len(rows), max([len(r) for r in rows] + [width])), dtype)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def source_batch(rows, max_len):
    """Source ids as a model reads them (``data.prepare_source``): each row cut to
    ``max_len - 1`` tokens, ``[END]`` appended, 0-padded to int32 ``(B, S)``."""
    return pad([list(row[: max_len - 1]) + [END_ID] for row in rows])


def string_pairs(sources, targets):
    """``sources`` and ``targets`` as two lists of ``str`` of one length (what a scorer
    reads: ``Translator.score``, ``CTranslate2Translator.score``).

    Raises:
        ValueError: naming the argument: one string instead of a list, an item that is not
            a ``str``, or lists of different lengths.
    """
    checked = []
    for name, values in (("sources", sources), ("targets", targets)):
        if isinstance(values, (str, bytes)):
            raise ValueError(f"`{name}` must be a list of strings, not one string. "
                             f"Received: {name}={values!r}")
        values = list(values)
        bad = next((v for v in values if not isinstance(v, str)), None)
        if bad is not None:
            raise ValueError(f"`{name}` must hold strings. Received: an item {bad!r} of type "
                             f"{type(bad).__name__}")
        checked.append(values)
    if len(checked[0]) != len(checked[1]):
        raise ValueError(f"`sources` and `targets` must have the same length. Received: "
                         f"{len(checked[0])} sources and {len(checked[1])} targets")
    return checked


def translate_sentences(engine, sentences, batch_size, opts, prefix=(), confidence=True,
                        progress=None, ids=None):
    """Per sentence its hypotheses: ``num_hypotheses`` dicts ``{"translation", "score",
    "confidence"}`` (``"alignment"`` when asked; no ``"confidence"`` when the engine gives
    no features).

    Sentences are decoded ``batch_size`` at a time; a request of more than one batch is
    sorted by source length first, so each batch pads little (CTranslate2's
    ``_process_iterable`` does the same), and its results are put back in order.

    Args:
        engine: the engine (module docstring). sentences: list of str.
        batch_size: sentences per ``decode`` call. opts: resolved ``DecodingOptions``.
        prefix: the ``target_prefix``'s target ids, forced on every sentence.
        confidence: False: ``engine.decode`` is asked for no confidence features.
        progress: optional ``progress(done, total)`` after each batch.
        ids: per sentence its source ids when already tokenized (None where not).
    """
    no_features = () if confidence else (False,)  # engine.decode's `confidence` argument
    ids = list(ids) if ids is not None else [None] * len(sentences)
    todo = [k for k, row in enumerate(ids) if row is None]
    for k, row in zip(todo, engine.tokenize([sentences[k] for k in todo]) if todo else []):
        ids[k] = row
    order = list(range(len(ids)))
    if len(ids) > batch_size:
        order.sort(key=lambda k: len(ids[k]))
    results = [None] * len(ids)
    for start in range(0, len(order), batch_size):
        rows = order[start: start + batch_size]
        out = engine.decode(source_batch([ids[k] for k in rows], engine.max_len), opts,
                            list(prefix), *no_features)
        tokens = np.asarray(out["tokens"])
        b, n = tokens.shape[:2]
        flat = tokens.reshape(b * n, -1)
        used = np.flatnonzero(flat.any(axis=0))  # the columns past every hypothesis: none
        texts = engine.detokenize(flat[:, : used[-1] + 1 if used.size else 1])
        confidences = None
        if "features" in out:
            features = np.asarray(out["features"], np.float32).reshape(b * n, -1)
            confidences = np.asarray(engine.calibrator(features, ops=NumpyOps)).reshape(b, n)
        hyps = hypotheses(np.reshape(np.array(texts, object), (b, n)), out["scores"],
                          confidences, out.get("alignments"))
        for k, row in zip(rows, hyps):
            results[k] = row
        if progress is not None:
            progress(start + len(rows), len(order))
    return results


def hypotheses(translations, scores, confidences=None, alignments=None):
    """Per row its hypotheses ``{"translation", "score"[, "confidence"][, "alignment"]}``
    from ``(B, N)`` arrays (a SavedModel signature's outputs, an engine's n-best)."""
    return [[{"translation": translations[r][h], "score": float(scores[r][h]),
              **({} if confidences is None else {"confidence": float(confidences[r][h])}),
              **({} if alignments is None else {"alignment": alignments[r][h]})}
             for h in range(len(translations[r]))] for r in range(len(translations))]


def translate_nbest(engine, texts, batch_size=128, progress=None, confidence=True,
                    passthrough=None, **options):
    """What ``translate_nbest`` returns for every engine (``Translator.translate_nbest``
    documents it): per text ``num_hypotheses`` dicts, one-sentence texts as their
    sentence's dict (:func:`one_sentence`). ``progress``: as :func:`translate_sentences`'s;
    ``confidence=False`` skips the confidence's pass (the hypotheses have no
    ``"confidence"``). ``passthrough``: URLs, e-mail addresses, code, tags, numbers and
    emoji pass through unchanged (:func:`passed_through`); None: the engine's default
    (:func:`passthrough_default`: on for subwords and words, off on characters). The
    engine is asked for alignments to place them when a text holds one and the engine
    gives alignments (``engine.aligns``, default True)."""
    opts = engine.options(**options)
    prefix = engine.tokenize_target([opts.target_prefix])[0] if opts.target_prefix else []
    opts.validate(max_length_limit=engine.max_len, prefix_tokens=len(prefix))
    texts = list(texts)
    passthrough = passthrough_default(engine) if passthrough is None else bool(passthrough)
    decode = opts
    if passthrough and not opts.return_alignments and getattr(engine, "aligns", True) \
            and has_spans(texts):
        decode = dataclasses.replace(opts, return_alignments=True)
    docs = translate_documents(engine, texts, lambda s, ids=None: translate_sentences(
        engine, s, batch_size, decode, prefix, confidence, progress, ids), opts.num_hypotheses,
        passthrough, opts.return_alignments, confidence)
    return answers(docs)


def translate(engine, texts, beam_size=1, length_penalty=None, batch_size=128, progress=None,
              passthrough=None, **options):
    """The best translation of each text (every engine's ``translate``); no confidence is
    computed. ``passthrough``: as :func:`translate_nbest`'s."""
    return [hyps[0]["translation"] for hyps in translate_nbest(
        engine, texts, batch_size, progress, False, passthrough, beam_size=beam_size,
        length_penalty=length_penalty, **options)]


def source_lengths(engine, sentences):
    """Source tokens of each sentence (before ``[END]`` and any cut)."""
    return [len(ids) for ids in engine.tokenize(sentences)] if sentences else []


def cut_long(engine, sentences):
    """Per sentence a :class:`keras_attn.text.documents.Pieces` cut at clause boundaries when it
    has more source tokens than the model reads (``max_len - 1`` before ``[END]``), else
    None (:func:`keras_attn.text.documents.cut_long`)."""
    limit = engine.max_len - 1
    count = lambda piece: source_lengths(engine, [piece])[0]  # noqa: E731
    return [documents.cut_long(s, limit, count) if n > limit else None
            for s, n in zip(sentences, source_lengths(engine, sentences))]


def translate_documents(engine, texts, translate, num_hypotheses=1, passthrough=False,
                        keep_alignments=True, confidence=None):
    """Translate documents with a sentence translator (:func:`split_and_join`), a sentence
    too long for the model translated piece by piece or reported.

    Args:
        engine: its ``max_len`` and ``split_long``, and ``tokenize`` to count a sentence's
            tokens: a sentence too long for the model is translated piece by piece (cut at
            clause boundaries, :func:`cut_long`; ``"cut": True``) when ``split_long`` is
            set, else read in part (``"truncated": True``).
        texts: sequence of B str (sentences, paragraphs, whole files).
        translate: ``(sentences, ids) -> per sentence a list of num_hypotheses dicts``
            with at least ``"translation"`` and ``"score"`` (:func:`translate_sentences`);
            ``ids``: per sentence its source ids, None for a piece of a cut sentence.
        num_hypotheses: hypotheses per sentence (and per document).
        passthrough, keep_alignments, confidence: :func:`split_and_join`'s.

    Returns:
        :func:`join_documents`' documents.

    Example:
        >>> docs = translate_documents(engine, ["Hi. Bye."], lambda s, ids: [[{
        ...     "translation": x.upper(), "score": -1.0}] for x in s])
        >>> docs[0][0]["translation"], docs[0][0]["score"]
        ('HI. BYE.', -2.0)
    """
    return split_and_join(texts, lambda sentences: _long_aware(engine, sentences, translate),
                          num_hypotheses, passthrough, keep_alignments, confidence)


def _long_aware(engine, sentences, translate):
    """Per sentence its hypotheses from ``translate(units, ids)``, with ``"truncated"``;
    a sentence cut to fit (``engine.split_long``) is its pieces' hypotheses joined."""
    ids = engine.tokenize(sentences)  # once for the whole request
    long = [len(row) > engine.max_len - 1 for row in ids]
    cuts = cut_long(engine, sentences) if engine.split_long and any(long) else \
        [None] * len(sentences)
    units, unit_ids, owners = [], [], []  # what is decoded, whose sentence
    for k, (sentence, part) in enumerate(zip(sentences, cuts)):
        cut = part is not None and part.cut
        units += part.pieces if cut else [sentence]
        unit_ids += [None] * len(part.pieces) if cut else [ids[k]]
        owners += [k] * (len(part.pieces) if cut else 1)
    per_unit = [[] for _ in sentences]
    for k, hyps in zip(owners, translate(units, unit_ids)):
        per_unit[k].append(hyps)
    out = []
    for k, hyps in enumerate(per_unit):
        if cuts[k] is None or not cuts[k].cut:
            out.append([dict(h, truncated=long[k]) for h in hyps[0]])
        else:  # translated piece by piece: joined at the cuts
            out.append([{"cut": True, "truncated": False,
                         **joined([unit[h] for unit in hyps], cuts[k].separators)}
                        for h in range(len(hyps[0]))])
    return out


def split_and_join(texts, translate, num_hypotheses=1, passthrough=False,
                   keep_alignments=True, confidence=None):
    """Documents from a sentence translator, for every engine and runtime: the texts split
    (:func:`keras_attn.text.documents.split_batch`), the request's sentences translated in
    one call (``translate(sentences)`` -> per sentence ``num_hypotheses`` dicts:
    ``"translation"``, ``"score"``, optional ``"confidence"``, ``"alignment"``,
    ``"truncated"``; not called without a sentence), joined by :func:`join_documents`.

    Args:
        texts: sequence of str. translate: as above. num_hypotheses: per sentence.
        passthrough: what must not be translated passes through (:func:`passed_through`):
            each sentence's spans are cut out before ``translate`` and put back after.
        keep_alignments: with ``passthrough``, the hypotheses keep their ``"alignment"``
            (renumbered over the whole sentence); False: it is dropped (it was asked only
            to place the spans).
        confidence: with ``passthrough``, whether a sentence of spans alone (never sent to
            ``translate``) gets ``"confidence": 1.0``; None: when the others have one.

    Example:
        >>> split_and_join(["Hi. Bye."], lambda s: [[{"translation": x, "score": -1.0,
        ...     "alignment": "0-0"}] for x in s])[0][0]["alignment"]
        '0-0 | 0-0'
    """
    sentences, counts, separators = documents.split_batch(list(texts))
    if passthrough and sentences:
        per_sentence = passed_through(sentences, translate, num_hypotheses, keep_alignments,
                                      confidence)
    else:
        per_sentence = translate(sentences) if sentences else []
    per_sentence = [[dict(h, source=s) for h in hyps]
                    for s, hyps in zip(sentences, per_sentence)]
    return join_documents(per_sentence, counts, separators, num_hypotheses)


ALIGNMENT_SEPARATOR = " | "
"""Between the sentences' alignments in a document's ``"alignment"`` (docs/documents.md)."""


def join_documents(per_sentence, counts, separators, num_hypotheses=1):
    """The one rule that makes documents of sentences' hypotheses (docs/documents.md).

    Hypothesis ``h`` of a document is hypothesis ``h`` of each of its sentences:
    ``"translation"`` theirs joined with the text's own whitespace, ``"score"`` their sum,
    ``"confidence"`` their lowest (1.0 for none; left out when a sentence has none),
    ``"alignment"`` theirs joined by :data:`ALIGNMENT_SEPARATOR` in order, each numbering
    its sentence's words from 0 (left out when a sentence has none, or without a
    sentence), ``"truncated"`` whether any was read only in part, ``"sentences"`` their
    dicts. The served graphs join alike (``keras_attn.export.documents``).

    Args:
        per_sentence: per sentence (every text's, in order) its list of hypotheses.
        counts: B ints, sentences per text. separators: B lists of ``counts[i] + 1`` str
            (:func:`keras_attn.text.documents.split_batch`).
        num_hypotheses: hypotheses per document (a text of no sentence has that many:
            its whitespace, score 0).
    """
    results, start = [], 0
    for count, seps in zip(counts, separators):
        rows, start = per_sentence[start: start + count], start + count
        doc = []
        for h in range(num_hypotheses):
            parts = [row[h] for row in rows]
            out = joined(parts, seps)
            if parts and all("alignment" in p for p in parts):
                out["alignment"] = ALIGNMENT_SEPARATOR.join(p["alignment"] for p in parts)
            doc.append({**out, "truncated": any(p.get("truncated", False) for p in parts),
                        "sentences": parts})
        results.append(doc)
    return results


def joined(hyps, separators):
    """Hypotheses of consecutive pieces as one: translations joined with ``separators``,
    scores summed, the lowest confidence (1.0 for none; left out when a piece has none)."""
    out = {"translation": documents.join([p["translation"] for p in hyps], separators),
           "score": float(sum(p["score"] for p in hyps))}
    if all("confidence" in h for h in hyps):
        out["confidence"] = float(min((h["confidence"] for h in hyps), default=1.0))
    return out


def answers(docs):
    """Documents (:func:`join_documents`) as every engine answers them: per text its
    hypotheses, a one-sentence text's as its sentence's dict (:func:`one_sentence`)."""
    return [[one_sentence(h) for h in hyps] for hyps in docs]


def one_sentence(hyp):
    """A document hypothesis of :func:`translate_documents` as its one sentence's dict when
    it has exactly one sentence (that sentence's keys, such as ``"alignment"``, at the top;
    no ``"sentences"``), the translation with the text's whitespace; else unchanged."""
    if len(hyp["sentences"]) != 1:
        return hyp
    (only,) = hyp["sentences"]
    return {**{k: v for k, v in only.items() if k != "source"},
            "translation": hyp["translation"], "score": hyp["score"],
            **({"confidence": hyp["confidence"]} if "confidence" in hyp else {}),
            "truncated": hyp["truncated"]}
