"""Translating documents with a sentence translator: split, one batch, join back.

What ``Translator.translate_nbest`` and ``CTranslate2Translator.translate_nbest`` share
(pure Python): the sentences of every text of a call (:mod:`keras_attn.documents`) are
decoded as one batch by the artefact's own sentence translator, and each hypothesis is
joined back with its text's whitespace; a sentence longer than the model reads is reported
or cut at clause boundaries.

Example:
    >>> docs = translate_documents(["Hi. Bye."], lambda s: [[{"translation": x.upper(),
    ...                                                        "score": -1.0}] for x in s])
    >>> docs[0][0]["translation"], docs[0][0]["score"]
    ('HI. BYE.', -2.0)
"""
from keras_attn.documents import join, split_batch


def translate_documents(texts, translate, num_hypotheses=1, cut=None, too_long=None):
    """Translate documents with a sentence translator: split every text, decode the
    sentences of the whole request as one batch, join each hypothesis back.

    Args:
        texts: sequence of B str (sentences, paragraphs, whole files).
        translate: ``sentences -> per sentence a list of num_hypotheses dicts`` with at
            least ``"translation"`` and ``"score"`` (``Translator.translate_nbest`` on
            sentences).
        num_hypotheses: hypotheses per sentence (and per document).
        cut: optional ``sentences -> per sentence a Pieces or None`` (:func:`cut_long`
            with the model's limit, for the sentences over it): a sentence too long for the
            model is translated piece by piece, joined at the clause boundaries it was cut
            at, and its hypotheses say ``"cut": True``.
        too_long: optional ``sentences -> per sentence a bool``, the sentences the model
            reads only in part (when they are not cut): their hypotheses say
            ``"truncated": True``.

    Returns:
        Per text, ``num_hypotheses`` dicts: ``"translation"`` (hypothesis ``h`` of every
        sentence, joined with the input's whitespace), ``"score"`` (the sentences' scores
        summed), ``"confidence"`` (the lowest of the sentences', when the sentence
        translator gives one), ``"truncated"`` (a sentence was read only in part), ``"sentences"`` (per
        sentence the dict of its hypothesis ``h``, with its ``"source"``). A text with no
        sentence translates to its own whitespace, score 0.
    """
    sentences, counts, separators = split_batch(texts)
    units, owners = [], []  # what is decoded, and which sentence each piece belongs to
    pieces = []
    cuts = cut(sentences) if cut is not None and sentences else [None] * len(sentences)
    long = too_long(sentences) if too_long is not None and sentences else [False] * len(sentences)
    for k, (sentence, part) in enumerate(zip(sentences, cuts)):
        if part is not None and part.cut:
            pieces.append(part)
            units += part.pieces
            owners += [k] * len(part.pieces)
        else:
            pieces.append(None)
            units.append(sentence)
            owners.append(k)
    decoded = translate(units) if units else []
    per_sentence = [[] for _ in sentences]
    for k, hyps in zip(owners, decoded):
        per_sentence[k].append(hyps)
    results, start = [], 0
    for count, seps in zip(counts, separators):
        doc = []
        for h in range(num_hypotheses):
            parts = []
            for k in range(start, start + count):
                hyps = [unit[h] for unit in per_sentence[k]]
                if pieces[k] is None:
                    parts.append(dict(hyps[0], source=sentences[k], truncated=bool(long[k])))
                else:  # translated piece by piece: joined at the cuts
                    parts.append({"source": sentences[k], "cut": True, "truncated": False,
                                  "translation": join([p["translation"] for p in hyps],
                                                      pieces[k].separators),
                                  "score": sum(p["score"] for p in hyps),
                                  **_lowest_confidence(hyps)})
            doc.append({"translation": join([p["translation"] for p in parts], seps),
                        "score": float(sum(p["score"] for p in parts)),
                        **_lowest_confidence(parts),
                        "truncated": any(p["truncated"] for p in parts), "sentences": parts})
        results.append(doc)
        start += count
    return results


def _lowest_confidence(hyps):
    """``{"confidence": the lowest of hyps'}`` (1.0 for none: nothing to get wrong), or {}
    when the sentence translator gives no confidence."""
    if any("confidence" not in h for h in hyps):
        return {}
    return {"confidence": float(min((h["confidence"] for h in hyps), default=1.0))}


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
