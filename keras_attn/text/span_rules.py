"""The rules that find what must not be translated, as data (pure Python): ordered
``(name, pattern)`` pairs that Python's ``re`` (:mod:`keras_attn.text.spans`) and RE2 (the
SavedModel's graph, :mod:`keras_attn.export.spans_graph`) read alike.

Example:
    >>> KINDS
    ('url', 'email', 'code', 'tag', 'emoji', 'number')
"""
from typing import Tuple

# Whitespace as Python's str.isspace() has it, spelled for both regex engines (Python's
# ``\s`` is Unicode's, RE2's ASCII's); the sentence rules use the same class.
from keras_attn.text.documents import WS as SPACE

# Emoji: Unicode's Extended_Pictographic ranges (without (c), (R) and TM, which are
# typography), each with an optional variation selector or skin tone, joined by ZWJ;
# regional-indicator pairs (flags) and keycaps ("1\ufe0f\u20e3").
_PICTO = ("\u203c\u2049\u2194-\u2199\u21a9\u21aa\u231a\u231b\u2328\u23cf\u23e9-\u23f3"
          "\u23f8-\u23fa\u24c2\u25aa\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u27bf\u2934\u2935"
          "\u2b05-\u2b07\u2b1b\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299"
          "\U0001f000-\U0001f1e5\U0001f200-\U0001faff")
_MOD = "(?:\ufe0f|[\U0001f3fb-\U0001f3ff])?[\U000e0020-\U000e007f]*"
_EMOJI = (f"(?:[\U0001f1e6-\U0001f1ff]{{2}}|[0-9#*]\ufe0f?\u20e3"
          f"|[{_PICTO}]{_MOD}(?:\u200d[{_PICTO}]{_MOD})*)")

RULES: Tuple[Tuple[str, str], ...] = (
    # scheme://... or www...., without the closing punctuation that follows a link in prose
    ("url", f"(?:(?:https?|ftp)://|www\\.)[^{SPACE}<>\"'`]*[^{SPACE}<>\"'`.,;:!?)\\]}}]"),
    ("email", r"(?:mailto:)?[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
              r"\.[A-Za-z]{2,}"),
    ("code", r"`[^`\n]+`"),
    # <b>, </b>, <br/>, <a href="...">: a letter right after "<" ("a < b" is no tag)
    ("tag", f"</?[A-Za-z][A-Za-z0-9-]*(?:[{SPACE}]+[^<>]*)?/?>"),
    ("emoji", _EMOJI),
    # digits with . , : / - between them (9,116  3.14  10:30  2008-11-05  1/2), a sign
    # before; never inside a word (:data:`WORD_BOUND`: "MP3", "COVID-19", "3rd" stay the
    # model's)
    ("number", "[-+\u2212]?[0-9]+(?:[.,:/-][0-9]+)*"),
)
"""Ordered ``(name, pattern)`` pairs; the first that matches at a position wins. The
patterns keep to what Python's ``re`` and RE2 read alike (no look-around, no ``\\s`` or
``\\w``), so the SavedModel's graph finds what :func:`find` finds."""

WORD_BOUND = ("number",)
"""The rules whose match is no span when a letter, a digit or ``_`` touches it (or a
``-`` before it): "COVID-19", "MP3", "3rd"."""

KINDS = tuple(name for name, _ in RULES)

# --- what the put-back reads (keras_attn.text.spans.put_back and every runtime of it) -------
WORD_SPACE = " \t\n\r\f\v"
"""What separates the words of a translation and of an alignment's sides: ASCII whitespace
(Pharaoh pairs number these words)."""
FINAL_STOP = "[.!?\u2026\u3002]+$"
"""A translation's final stop, kept last when a group goes after its word."""
THIN_SPACE = "\u202f\xa0\u2009"
"""French spacing before "!", "?", ":": a group goes before it ("10:30\u202f!")."""
