"""A glossary's terms enforced around any engine (pure Python): found in each sentence
(outside the spans that pass through), the sentence translated whole with its word
alignments, each term's target put in place of the words aligned with it
(:mod:`keras_attn.text.glossary`, :mod:`keras_attn.text.term_placement`;
docs/real_text.md, "Glossaries").
"""
from keras_attn.text import glossary as glossaries
from keras_attn.text import spans, term_placement
from keras_attn.translation.passthrough import passed_through


def has_terms(texts, glossary):
    """Whether any of ``texts`` holds a term of ``glossary`` (its pairs)."""
    return bool(glossary) and any(glossaries.find(t, glossary) for t in texts)


def outside_spans(sentence):
    """The ``(start, end)`` of the span groups of ``sentence`` (a term there is no term)."""
    return tuple((g.start, g.start + len(g.text)) for g in spans.cut(sentence).groups)


def with_glossary(sentences, translate, glossary, num_hypotheses=1, keep_alignments=True,
                  confidence=None, passthrough=False):
    """Per sentence its hypotheses with the glossary's terms put in (each hypothesis gets
    ``"applied_terms"``: ``{source term: target term}`` of the terms found in the
    sentence), the spans passed through first when ``passthrough``.

    Args:
        sentences: list of str. translate: ``sentences -> per sentence num_hypotheses
            dicts``, with ``"alignment"`` where a sentence holds a term.
        glossary: :func:`keras_attn.text.glossary.entries` pairs.
        num_hypotheses, keep_alignments, confidence: as
            :func:`keras_attn.translation.passthrough.passed_through`'s.

    Example:
        >>> with_glossary(["Show me your ticket."], lambda s: [[{"translation": "Montre-moi "
        ...     "ton ticket.", "score": -1.0, "alignment": "0-0 1-0 2-1 3-2"}] for _ in s],
        ...     (("ticket", "billet"),))[0][0]["translation"]
        'Montre-moi ton billet.'
    """
    found = [glossaries.find(s, glossary, outside_spans(s) if passthrough else ())
             for s in sentences]
    aligned = keep_alignments or any(found)
    if passthrough:
        per_sentence = passed_through(sentences, translate, num_hypotheses, aligned,
                                      confidence)
    else:
        per_sentence = translate(sentences) if sentences else []
    out = []
    for sentence, matches, hyps in zip(sentences, found, per_sentence):
        row = []
        for h in hyps:
            h = dict(h, applied_terms=glossaries.applied(matches))
            if matches:
                h["translation"], alignment = term_placement.apply(
                    sentence, matches, h["translation"], h.get("alignment"))
                if alignment is not None:
                    h["alignment"] = alignment
            if not keep_alignments:
                h.pop("alignment", None)
            row.append(h)
        out.append(row)
    return out
