"""What must not be translated passes through unchanged (docs/real_text.md): the spans of
:data:`keras_attn.text.spans.RULES` are cut out, the rest translated and the spans put back.
"""
from keras_attn.text import spans


def passed_through(sentences, translate, num_hypotheses=1, keep_alignments=True,
                   confidence=None, rules=spans.RULES):
    """Per sentence its hypotheses, the spans of ``rules`` passed through: cut out, the rest
    translated, each group put back after the target word aligned with the source word
    before it (or at its proportional place). A sentence of spans alone is its own
    translation, score 0.

    Args:
        sentences: list of str. translate: ``sentences -> per sentence num_hypotheses
            dicts``. num_hypotheses: per sentence.
        keep_alignments: False: ``"alignment"`` is dropped. rules: ``(name, pattern)`` pairs.
        confidence: a sentence of spans alone gets ``"confidence": 1.0`` (None: when the
            others have one).

    Example:
        >>> passed_through(["Call me at 10:30."], lambda s: [[{"translation": "Appelle-moi "
        ...     "à.", "score": -1.0, "alignment": "0-0 1-0 2-1"}] for _ in s])[0][0]["translation"]
        'Appelle-moi à 10:30.'
    """
    cuts = [spans.cut(s, rules) for s in sentences]
    todo = [k for k, c in enumerate(cuts) if not c.only_spans and c.rest.strip()]
    done = translate([cuts[k].rest for k in todo]) if todo else []
    if confidence is None:
        confidence = any("confidence" in h for hyps in done for h in hyps)
    out = [None] * len(sentences)
    for k, hyps in zip(todo, done):
        row = []
        for h in hyps:
            translation, alignment = spans.put_back(cuts[k], h["translation"],
                                                    h.get("alignment"))
            h = dict(h, translation=translation)
            if alignment is not None:
                h["alignment"] = alignment
            if not keep_alignments:
                h.pop("alignment", None)
            row.append(h)
        out[k] = row
    for k, c in enumerate(cuts):
        if out[k] is None:  # spans alone: itself
            h = {"translation": c.source, "score": 0.0, "truncated": False,
                 **({"confidence": 1.0} if confidence else {}),
                 **({"alignment": spans.put_back(c, "", "")[1]} if keep_alignments else {})}
            out[k] = [dict(h) for _ in range(num_hypotheses)]
    return out


def has_spans(texts, rules=spans.RULES):
    """Whether any of ``texts`` holds a span that passes through."""
    pattern = spans.compiled(tuple(rules))
    return any(pattern.search(t) for t in texts)


def passthrough_default(engine):
    """Whether an engine passes spans through when a request does not say."""
    return bool(getattr(engine, "passthrough", False))
