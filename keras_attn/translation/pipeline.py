"""One request's life, for every engine (pure Python: no TensorFlow, no Keras).

text -> sentences -> batches sorted by length -> hypotheses -> documents. The engine
supplies ``max_len``, ``controls``, ``split_long``, ``calibrator``; ``options(**kw)``
(:func:`resolve` plus what it refuses); ``tokenize`` / ``tokenize_target`` (ids per text),
``detokenize`` (id rows -> strings); ``decode(source, opts, prefix[, confidence])``: int32
``(B, S)`` -> numpy ``tokens`` ``(B, N, T)``, ``scores`` ``(B, N)``, optional ``features``
``(B, N, F)`` and ``alignments`` ``(B, N)`` (Pharaoh strings).

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
from keras_attn.translation.glossary import has_terms, with_glossary
from keras_attn.decoding.confidence import NumpyOps
from keras_attn.decoding.options import DecodingOptions
from keras_attn.core.special_tokens import END_ID


def resolve(engine, options, refuse=None):
    """Resolved :class:`DecodingOptions` from keyword arguments (``refuse(opts)`` raises
    ``ValueError`` for what the engine cannot do); ``passthrough`` left unset is the
    engine's (:func:`passthrough_default`)."""
    opts = DecodingOptions.from_kwargs(**options)
    if refuse is not None:
        refuse(opts)
    opts.validate(max_length_limit=engine.max_len)
    return opts.resolve(engine.max_len, controls=engine.controls,
                        passthrough=passthrough_default(engine))


def needs_alignments(engine, texts, opts):
    """``opts`` with ``return_alignments`` where the request asks, or where a text holds a
    span to pass through or a term of the glossary and the engine aligns (the put-back
    places them by the alignments)."""
    if opts.return_alignments or not getattr(engine, "aligns", True):
        return opts
    if (opts.passthrough and has_spans(texts)) or has_terms(texts, opts.glossary):
        return dataclasses.replace(opts, return_alignments=True)
    return opts


def pad(rows, width=1, dtype=np.int32):
    """Ragged lists -> ``(B, max(width, longest))`` of ``dtype`` (int32 ids), 0-padded."""
    out = np.zeros((len(rows), max([len(r) for r in rows] + [width])), dtype)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def source_batch(rows, max_len):
    """Source ids as a model reads them: cut to ``max_len - 1``, ``[END]``, 0-padded."""
    return pad([list(row[: max_len - 1]) + [END_ID] for row in rows])


def string_pairs(sources, targets):
    """``sources`` and ``targets`` checked as two lists of ``str`` of one length."""
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
    """Per sentence ``num_hypotheses`` dicts ``{"translation", "score"[, "confidence"]
    [, "alignment"]}``; more than one batch: sorted by source length, put back in order.

    Args:
        engine: the engine (module docstring). sentences: list of str.
        batch_size: sentences per ``decode`` call. opts: resolved ``DecodingOptions``.
        prefix: the ``target_prefix``'s target ids. confidence: False: no features.
        progress: optional ``progress(done, total)`` after each batch.
        ids: per sentence its source ids, or None where not tokenized yet.
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
    """Per row its hypotheses ``{"translation", "score"[, "confidence"][, "alignment"]}``."""
    return [[{"translation": translations[r][h], "score": float(scores[r][h]),
              **({} if confidences is None else {"confidence": float(confidences[r][h])}),
              **({} if alignments is None else {"alignment": alignments[r][h]})}
             for h in range(len(translations[r]))] for r in range(len(translations))]


def translate_nbest(engine, texts, batch_size=128, progress=None, confidence=True,
                    passthrough=None, **options):
    """Every engine's ``translate_nbest`` (``Translator.translate_nbest`` documents it);
    ``passthrough``: the option's, by position too."""
    if passthrough is not None:
        options["passthrough"] = passthrough
    opts = engine.options(**options)
    prefix = engine.tokenize_target([opts.target_prefix])[0] if opts.target_prefix else []
    opts.validate(max_length_limit=engine.max_len, prefix_tokens=len(prefix))
    texts = list(texts)
    decode = needs_alignments(engine, texts, opts)
    docs = translate_documents(engine, texts, lambda s, ids=None: translate_sentences(
        engine, s, batch_size, decode, prefix, confidence, progress, ids), opts.num_hypotheses,
        opts.passthrough, opts.return_alignments, confidence, opts.glossary)
    return answers(docs)


def translate(engine, texts, beam_size=1, length_penalty=None, batch_size=128, progress=None,
              passthrough=None, **options):
    """The best translation of each text (every engine's ``translate``), no confidence."""
    return [hyps[0]["translation"] for hyps in translate_nbest(
        engine, texts, batch_size, progress, False, passthrough, beam_size=beam_size,
        length_penalty=length_penalty, **options)]


def source_lengths(engine, sentences):
    """Source tokens of each sentence (before ``[END]`` and any cut)."""
    return [len(ids) for ids in engine.tokenize(sentences)] if sentences else []


def cut_long(engine, sentences):
    """Per sentence its :class:`~keras_attn.text.documents.Pieces` when too long, else None."""
    limit = engine.max_len - 1
    count = lambda piece: source_lengths(engine, [piece])[0]  # noqa: E731
    return [documents.cut_long(s, limit, count) if n > limit else None
            for s, n in zip(sentences, source_lengths(engine, sentences))]


def translate_documents(engine, texts, translate, num_hypotheses=1, passthrough=False,
                        keep_alignments=True, confidence=None, glossary=()):
    """:func:`split_and_join`, a sentence too long for the model cut at clause boundaries
    (``engine.split_long``; ``"cut": True``) or read in part (``"truncated": True``).

    Args:
        engine: its ``max_len``, ``split_long`` and ``tokenize``. texts: B str.
        translate: ``(sentences, ids) -> per sentence num_hypotheses dicts``; ``ids`` None
            for a piece of a cut sentence. The rest: :func:`split_and_join`'s.

    Example:
        >>> docs = translate_documents(engine, ["Hi. Bye."], lambda s, ids: [[{
        ...     "translation": x.upper(), "score": -1.0}] for x in s])
        >>> docs[0][0]["translation"], docs[0][0]["score"]
        ('HI. BYE.', -2.0)
    """
    return split_and_join(texts, lambda sentences: _long_aware(engine, sentences, translate),
                          num_hypotheses, passthrough, keep_alignments, confidence, glossary)


def _long_aware(engine, sentences, translate):
    """Per sentence its hypotheses with ``"truncated"``; a cut sentence's pieces joined."""
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
                   keep_alignments=True, confidence=None, glossary=()):
    """Documents from a sentence translator: the texts split into sentences, all translated in
    one call, joined by :func:`join_documents`.

    Args:
        texts: sequence of str. translate: ``sentences -> per sentence num_hypotheses
            dicts``. num_hypotheses: per sentence.
        passthrough, keep_alignments, confidence: :func:`passed_through`'s.
        glossary: :func:`keras_attn.text.glossary.entries` pairs put in by
            :func:`keras_attn.translation.glossary.with_glossary` (each hypothesis then
            says its ``"applied_terms"``).

    Example:
        >>> split_and_join(["Hi. Bye."], lambda s: [[{"translation": x, "score": -1.0,
        ...     "alignment": "0-0"}] for x in s])[0][0]["alignment"]
        '0-0 | 0-0'
    """
    sentences, counts, separators = documents.split_batch(list(texts))
    if glossary:
        per_sentence = with_glossary(sentences, translate, glossary, num_hypotheses,
                                     keep_alignments, confidence, passthrough)
    elif passthrough and sentences:
        per_sentence = passed_through(sentences, translate, num_hypotheses, keep_alignments,
                                      confidence)
    else:
        per_sentence = translate(sentences) if sentences else []
    per_sentence = [[dict(h, source=s) for h in hyps]
                    for s, hyps in zip(sentences, per_sentence)]
    docs = join_documents(per_sentence, counts, separators, num_hypotheses)
    for hyps in docs if glossary else ():  # a text of no sentence applied none
        for h in hyps:
            h.setdefault("applied_terms", {})
    return docs


ALIGNMENT_SEPARATOR = " | "
"""Between the sentences' alignments in a document's ``"alignment"`` (docs/documents.md)."""


def join_documents(per_sentence, counts, separators, num_hypotheses=1):
    """The one rule that makes documents of sentences' hypotheses (docs/documents.md):
    hypothesis ``h`` of a document joins hypothesis ``h`` of its sentences (:func:`joined`),
    alignments joined by :data:`ALIGNMENT_SEPARATOR`, ``"truncated"`` if any is, and
    ``"sentences"``.

    Args:
        per_sentence: per sentence (every text's, in order) its list of hypotheses.
        counts: B ints, sentences per text. separators: B lists of ``counts[i] + 1`` str.
        num_hypotheses: per document.
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
            if parts and "applied_terms" in parts[0]:  # every sentence's terms
                out["applied_terms"] = {k: v for p in parts
                                        for k, v in p["applied_terms"].items()}
            doc.append({**out, "truncated": any(p.get("truncated", False) for p in parts),
                        "sentences": parts})
        results.append(doc)
    return results


def joined(hyps, separators):
    """Hypotheses of consecutive pieces as one: translations joined with ``separators``,
    scores summed, the lowest confidence (left out when a piece has none)."""
    out = {"translation": documents.join([p["translation"] for p in hyps], separators),
           "score": float(sum(p["score"] for p in hyps))}
    if all("confidence" in h for h in hyps):
        out["confidence"] = float(min((h["confidence"] for h in hyps), default=1.0))
    return out


def answers(docs):
    """:func:`one_sentence` of every hypothesis of :func:`join_documents`' documents."""
    return [[one_sentence(h) for h in hyps] for hyps in docs]


def one_sentence(hyp):
    """A document hypothesis of one sentence as that sentence's dict; else ``hyp``."""
    if len(hyp["sentences"]) != 1:
        return hyp
    (only,) = hyp["sentences"]
    return {**{k: v for k, v in only.items() if k != "source"},
            "translation": hyp["translation"], "score": hyp["score"],
            **({"confidence": hyp["confidence"]} if "confidence" in hyp else {}),
            "truncated": hyp["truncated"]}
