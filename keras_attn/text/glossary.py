"""Glossaries: source terms that must come out as the target terms a user fixes (pure
Python: no TensorFlow, no Keras).

A glossary maps source terms to target terms (``{"ticket": "billet"}``; a term mapped to
itself is "do not translate"). :func:`entries` checks one and gives its canonical pairs;
:func:`find` finds its terms in a sentence (whole words, any case, several words allowed;
scanning left to right, the longest term at a position wins);
:func:`keras_attn.text.term_placement.apply` puts each found term's target into the
sentence's translation. The rules are written so that RE2 (the SavedModel's graph,
:mod:`keras_attn.export.glossary_graph`) reads them alike: docs/real_text.md, "Glossaries".

Example:
    >>> terms = entries({"ticket": "billet"})
    >>> found = find("Show me your ticket.", terms)
    >>> [(m.source, m.target) for m in found]
    [('ticket', 'billet')]
    >>> count("billet", "Un billet, deux billets.")
    1
"""
import csv
import dataclasses
import functools
import re
import reprlib

from keras_attn.text.span_rules import SPACE, WORD_SPACE

MAX_TERMS = 1000
"""The most terms a glossary holds (a request's, an operator's and a key's, merged)."""
MAX_TERM_CHARS = 200
"""The most characters of a source or a target term."""
_META = "\\.+*?()|[]{}^$"  # what both regex engines read as syntax, escaped alike
_NOT_WORD = r"[\W_]"  # Python's; RE2's is [^\pL\pN]


def word_char(c):
    """A letter or a digit: what a whole word is made of (RE2's ``[\\pL\\pN]``)."""
    return c.isalnum()


_SPACES = re.compile(f"[{SPACE}]+")
_ENDS = re.compile(f"^[{SPACE}]+|[{SPACE}]+$")
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


class Entries(tuple):
    """:func:`entries`' result: ``(source, target)`` pairs known to be checked."""


def _collapsed(text):
    """Whitespace runs as one space, none at the ends."""
    return _SPACES.sub(" ", text).strip(" ")


def key(term):
    """What two source terms share when they are one term: lower case, spacing collapsed."""
    return _collapsed(term).lower()


def _check_term(side, term, source):
    if not isinstance(term, str):
        raise ValueError(f"`glossary` terms must be strings. Received: {source!r} -> "
                         f"{term!r} ({side} term of type {type(term).__name__})")
    stripped = _ENDS.sub("", term)
    if not stripped:
        raise ValueError(f"`glossary` has an empty {side} term (only whitespace or "
                         f"nothing). Received: {source!r}")
    if len(stripped) > MAX_TERM_CHARS:
        raise ValueError(f"`glossary` terms are at most {MAX_TERM_CHARS} characters. "
                         f"Received: a {side} term of {len(stripped)} characters: "
                         f"{stripped[:40]!r}...")
    if _LINE_BREAK.search(stripped):
        raise ValueError(f"`glossary` terms are one line each. Received: a {side} term "
                         f"with a line break: {stripped!r}")
    return stripped


def entries(glossary):
    """A glossary checked: its ``(source, target)`` pairs, each term without whitespace at
    its ends (a source term's inner spacing as one space), one pair per source term.

    Args:
        glossary: a dict ``{source term: target term}`` (or ``(source, target)`` pairs),
            at most :data:`MAX_TERMS` terms of at most :data:`MAX_TERM_CHARS` characters,
            each source term holding a letter or a digit; None: no glossary.

    Returns:
        tuple of ``(source, target)`` str pairs, in the order given.

    Raises:
        ValueError: naming the problem: not a dict of strings, an empty term, a term too
            long or with a line break, too many terms, or one source term (in any case and
            spacing) given two different targets.

    Example:
        >>> entries({" ticket ": "billet", "Ticket": "billet"})
        (('ticket', 'billet'),)
    """
    if glossary is None:
        return Entries()
    if isinstance(glossary, Entries):  # checked already
        return glossary
    if isinstance(glossary, dict):
        items = list(glossary.items())
    elif isinstance(glossary, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in glossary):
        items = [tuple(p) for p in glossary]
    else:
        raise ValueError("`glossary` must be an object (a dict) of source term -> target "
                         f"term strings. Received: glossary={reprlib.repr(glossary)}")
    if len(items) > MAX_TERMS:
        raise ValueError(f"`glossary` holds at most {MAX_TERMS} terms. Received: "
                         f"{len(items)} terms")
    out, seen = [], {}
    for source, target in items:
        source = _collapsed(_check_term("source", source, source))
        target = _check_term("target", target, source)
        if not any(word_char(c) for c in source):
            raise ValueError("`glossary` source terms must hold a letter or a digit (terms "
                             f"are found as whole words). Received: {source!r}")
        k = key(source)
        if k in seen:
            if seen[k][1] != target:
                raise ValueError(
                    f"`glossary` gives one source term two targets ({seen[k][0]!r} and "
                    f"{source!r} are one term: any case, any spacing): {seen[k][1]!r} and "
                    f"{target!r}")
            continue
        seen[k] = (source, target)
        out.append((source, target))
    return Entries(out)


def merged(*glossaries):
    """Glossaries merged, a later one's term winning over an earlier one's for the same
    source term (any case and spacing); each :func:`entries`-checked, and the result too
    (:data:`MAX_TERMS`).

    Example:
        >>> merged({"ticket": "billet", "train": "train"}, {"Ticket": "titre"})
        (('train', 'train'), ('Ticket', 'titre'))
    """
    by_key = {}
    for glossary in glossaries:
        for source, target in entries(glossary):
            by_key.pop(key(source), None)
            by_key[key(source)] = (source, target)
    return entries(list(by_key.values()))


def read_tsv(path):
    """A glossary file: one ``source<TAB>target`` pair a line (UTF-8); blank lines and
    lines starting with ``#`` are skipped. Returns the :func:`entries` pairs.

    Raises:
        ValueError: a line without exactly one tab (naming the file and line), or a bad
            glossary.
    """
    pairs = []
    with open(path, encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE),
                                     1):
            if not row or (len(row) == 1 and not row[0].strip()) or row[0].startswith("#"):
                continue
            if len(row) != 2:
                raise ValueError(f"{path}, line {number}: a glossary line is `source<TAB>"
                                 f"target` (one tab). Received: {chr(9).join(row)!r}")
            pairs.append((row[0], row[1]))
    try:
        return entries(pairs)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def escaped(term):
    """A term as a pattern both regex engines read alike: syntax escaped, each whitespace
    run any whitespace run."""
    text = "".join("\\" + c if c in _META else c for c in term)
    return re.sub(" +", f"[{SPACE}]+", text)


@functools.lru_cache(maxsize=64)
def pattern(sources):
    """The glossary's terms (``sources``: a tuple) as one case-insensitive alternation,
    the longest first (in characters); a term that ends with a letter or a digit is
    followed by a character that is neither, or the end of the text (RE2's ``$``). That
    follower is written once per run of such terms (``(?:a|b)F`` matches as ``aF|bF``):
    RE2 refuses a pattern of a thousand of its character classes."""
    order = sorted(sources, key=len, reverse=True)  # stable: equal lengths keep their order
    ends = [word_char(t[-1]) for t in order]
    parts = []
    for k, term in enumerate(order):
        opens = ends[k] and (k == 0 or not ends[k - 1])
        closes = ends[k] and (k + 1 == len(order) or not ends[k + 1])
        parts.append(("(?:" if opens else "") + escaped(term)
                     + (f")(?:{_NOT_WORD}|\\Z)" if closes else ""))
    return "(?i)(?:" + "|".join(parts) + ")"


@dataclasses.dataclass(frozen=True)
class Match:
    """A term found: ``sentence[start:end]`` is glossary entry ``index``
    (``source`` -> ``target``)."""

    start: int
    end: int
    index: int
    source: str
    target: str


def find(sentence, glossary, outside=()):
    """The glossary's terms in ``sentence``, in order, not overlapping.

    Scanning left to right, at each position the longest term that ends a word there
    matches (RE2 and Python's ``re`` alike); a match is kept when no letter or digit comes
    right before it (a term starting with one) and it is a term of the glossary in lower
    case. ``outside``: ``(start, end)`` ranges no match may touch (spans that pass through).

    Args:
        sentence: str. glossary: :func:`entries` pairs.

    Returns:
        list of :class:`Match`.
    """
    if not glossary:
        return []
    index = {key(s): k for k, (s, _) in enumerate(glossary)}
    found = []
    for m in re.finditer(pattern(tuple(s for s, _ in glossary)), sentence):
        start, end, text = m.start(), m.end(), m.group()
        k = index.get(key(text))
        if k is None or word_char(glossary[k][0][-1]):
            # the term ended with a word character: the character after it was matched too
            k = index.get(key(text[:-1])) if text and not word_char(text[-1]) else k
            end = end - 1 if text and not word_char(text[-1]) and k is not None else end
        if k is None:
            continue
        source, target = glossary[k]
        if word_char(source[0]) and start > 0 and word_char(sentence[start - 1]):
            continue  # inside a word
        if any(a < end and start < b for a, b in outside):
            continue
        found.append(Match(start, end, k, source, target))
    return found


def words(text):
    """``(start, end)`` of each word: cut at ASCII whitespace, as the alignments number them."""
    return [(m.start(), m.end()) for m in re.finditer(f"[^{WORD_SPACE}]+", text)]


def pairs(alignment):
    return [tuple(int(x) for x in p.split("-")) for p in (alignment or "").split()
            if re.fullmatch(r"\d+-\d+", p)]


def occurrences(target, translation, words):
    """The word runs ``(first, last)`` of ``translation`` (its ``words``) where ``target``
    stands as a whole word (exact case), in order."""
    out = []
    for m in re.finditer(re.escape(target), translation):
        a, b = m.start(), m.end()
        if (word_char(target[0]) and a > 0 and word_char(translation[a - 1])) or (
                word_char(target[-1]) and b < len(translation)
                and word_char(translation[b])):
            continue
        out.append((word_at(words, a), word_at(words, b - 1)))
    return out


def count(term, text):
    """How many times ``term`` stands in ``text`` as a whole word (exact case).

    Example:
        >>> count("billet", "Un billet, deux billets.")
        1
    """
    return len(occurrences(term, text, words(text)))


def word_at(words, position):
    """The index of the word holding character ``position`` (or the next one)."""
    return next((k for k, (_, b) in enumerate(words) if position < b), len(words) - 1)


def applied(matches):
    """``{source: target}`` of the terms ``matches`` found (an answer's applied terms)."""
    return {m.source: m.target for m in matches}
