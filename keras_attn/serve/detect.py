"""``POST /detect``: the three likeliest languages of a text, best first, by langid.py
(Lui & Baldwin's naive Bayes identifier), as LibreTranslate answers.

Example:
    >>> detect("Bonjour tout le monde, comment allez-vous aujourd'hui ?")[0]
    {'confidence': 99.9, 'language': 'fr'}
"""
import threading

TOP = 3

_lock = threading.Lock()
_identifier = None


def identifier():
    """langid's ``LanguageIdentifier`` with normalised probabilities (loaded once, ~2 s)."""
    global _identifier
    with _lock:
        if _identifier is None:
            from langid.langid import LanguageIdentifier, model

            _identifier = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    return _identifier


def detect(texts, among=None):
    """The likeliest languages of ``texts``.

    Args:
        texts: a string, or a list of strings (their mean probability).
        among: the codes to choose from (a server's sources, normalised over them; a code
            langid does not know gets 0, or an equal share when none is known), or None.

    Returns:
        ``[{"confidence": float 0-100, "language": code}]``, :data:`TOP` of them, best first
        (ties in ``among``'s order).

    Example:
        >>> detect("Das Wetter ist heute herrlich.", among=("en", "fr"))[0]["language"]
        'en'
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    ident = identifier()
    totals = {}
    for text in texts:
        for code, probability in ident.rank(text):
            totals[code] = totals.get(code, 0.0) + probability / len(texts)
    if among is not None:
        totals = _among(totals, tuple(among), set(ident.nb_classes))
    best = sorted(totals.items(), key=lambda item: -item[1])[:TOP]
    return [{"confidence": round(100.0 * p, 1), "language": code} for code, p in best]


def _among(totals, among, known):
    """``totals`` of langid's codes -> the probabilities of the codes ``among``."""
    from keras_attn.core.languages import primary

    scored = {code: totals.get(primary(code), 0.0) for code in among if primary(code) in known}
    mass = sum(scored.values())
    if not scored or mass <= 0.0:  # none langid knows (or none it found): an equal share
        unknown = [c for c in among if c not in scored] or list(among)
        return {code: 1.0 / len(unknown) if code in unknown else 0.0 for code in among}
    return {code: scored[code] / mass if code in scored else 0.0 for code in among}
