"""``POST /detect``: the language of a text, by langid.py (Lui & Baldwin's naive Bayes
identifier over byte n-grams, 97 languages, its model shipped in the package).

The answer is LibreTranslate's: the three likeliest languages, ``[{"language": ISO 639-1
code, "confidence": 0-100}]``, best first. Any text gets an answer: one without letters
(digits, punctuation, nothing) gets langid's prior, with a low confidence. A list of texts
gets the mean of each language's probability over the texts.

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


def detect(texts):
    """The likeliest languages of ``texts`` (a string, or a list of strings: their mean).

    Returns:
        ``[{"confidence": float 0-100, "language": code}]``, :data:`TOP` of them, best first.
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    ident = identifier()
    totals = {}
    for text in texts:
        for code, probability in ident.rank(text):
            totals[code] = totals.get(code, 0.0) + probability / len(texts)
    best = sorted(totals.items(), key=lambda item: -item[1])[:TOP]
    return [{"confidence": round(100.0 * p, 1), "language": code} for code, p in best]
