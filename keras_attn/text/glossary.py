"""Glossaries: source terms that must come out as the target terms a user fixes (pure
Python: no TensorFlow, no Keras).

A glossary maps source terms to target terms (``{"ticket": "billet"}``; a term mapped to
itself is "do not translate"). :func:`entries` checks one and gives its canonical pairs;
:func:`find` finds its terms in a sentence (whole words, any case, several words allowed;
scanning left to right, the longest term at a position wins); :func:`apply` puts each
found term's target into the sentence's translation in place of the words aligned with it
(Pharaoh ``i-j`` pairs over whitespace-separated words), exactly once, and renumbers the
alignment. The rules are written so that RE2 (the SavedModel's graph,
:mod:`keras_attn.export.glossary_graph`) reads them alike: docs/real_text.md, "Glossaries".

Example:
    >>> terms = entries({"ticket": "billet"})
    >>> found = find("Show me your ticket.", terms)
    >>> [(m.source, m.target) for m in found]
    [('ticket', 'billet')]
    >>> apply("Show me your ticket.", found, "Montre-moi ton ticket.", "0-0 1-0 2-1 3-2")[0]
    'Montre-moi ton billet.'
"""
import csv
import dataclasses
import functools
import re
import reprlib
from typing import Tuple

from keras_attn.text.span_rules import SPACE, WORD_SPACE

MAX_TERMS = 1000
"""The most terms a glossary holds (a request's, an operator's and a key's, merged)."""
MAX_TERM_CHARS = 200
"""The most characters of a source or a target term."""
_META = "\\.+*?()|[]{}^$"  # what both regex engines read as syntax, escaped alike
_NOT_WORD = r"[\W_]"  # Python's; RE2's is [^\pL\pN]
_LEAD = r"^[\W_]*"  # "«billet" keeps its "«"
_TRAIL = r"[\W_]*$"  # "billet." keeps its "."


def _word_char(c):
    """A letter or a digit: what a whole word is made of (RE2's ``[\\pL\\pN]``)."""
    return c.isalnum()


def _collapsed(text):
    """Whitespace runs as one space, none at the ends."""
    return re.sub(f"[{SPACE}]+", " ", text).strip(" ")


def key(term):
    """What two source terms share when they are one term: lower case, spacing collapsed."""
    return _collapsed(term).lower()


def _check_term(side, term, source):
    if not isinstance(term, str):
        raise ValueError(f"`glossary` terms must be strings. Received: {source!r} -> "
                         f"{term!r} ({side} term of type {type(term).__name__})")
    stripped = re.sub(f"^[{SPACE}]+|[{SPACE}]+$", "", term)
    if not stripped:
        raise ValueError(f"`glossary` has an empty {side} term (only whitespace or "
                         f"nothing). Received: {source!r}")
    if len(stripped) > MAX_TERM_CHARS:
        raise ValueError(f"`glossary` terms are at most {MAX_TERM_CHARS} characters. "
                         f"Received: a {side} term of {len(stripped)} characters: "
                         f"{stripped[:40]!r}...")
    if re.search("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", stripped):
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
        return ()
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
        if not any(_word_char(c) for c in source):
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
    return tuple(out)


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


def term_pattern(term):
    """One alternative of :func:`pattern`: the term, then (if it ends with a letter or a
    digit) a character that is neither, or the end of the text (RE2's ``$``)."""
    return escaped(term) + (f"(?:{_NOT_WORD}|\\Z)" if _word_char(term[-1]) else "")


@functools.lru_cache(maxsize=64)
def pattern(sources):
    """The glossary's terms (``sources``: a tuple) as one case-insensitive alternation,
    the longest first (in characters)."""
    order = sorted(sources, key=len, reverse=True)  # stable: equal lengths keep their order
    return "(?i)" + "|".join(f"(?:{term_pattern(t)})" for t in order)


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
        if k is None or _word_char(glossary[k][0][-1]):
            # the term ended with a word character: the character after it was matched too
            k = index.get(key(text[:-1])) if text and not _word_char(text[-1]) else k
            end = end - 1 if text and not _word_char(text[-1]) and k is not None else end
        if k is None:
            continue
        source, target = glossary[k]
        if _word_char(source[0]) and start > 0 and _word_char(sentence[start - 1]):
            continue  # inside a word
        if any(a < end and start < b for a, b in outside):
            continue
        found.append(Match(start, end, k, source, target))
    return found


def _words(text):
    """``(start, end)`` of each word: cut at ASCII whitespace, as the alignments number them."""
    return [(m.start(), m.end()) for m in re.finditer(f"[^{WORD_SPACE}]+", text)]


def _pairs(alignment):
    return [tuple(int(x) for x in p.split("-")) for p in (alignment or "").split()
            if re.fullmatch(r"\d+-\d+", p)]


def _occurrences(target, translation, words):
    """The word runs ``(first, last)`` of ``translation`` (its ``words``) where ``target``
    stands as a whole word (exact case), in order."""
    out = []
    for m in re.finditer(re.escape(target), translation):
        a, b = m.start(), m.end()
        if (_word_char(target[0]) and a > 0 and _word_char(translation[a - 1])) or (
                _word_char(target[-1]) and b < len(translation)
                and _word_char(translation[b])):
            continue
        out.append((_word_at(words, a), _word_at(words, b - 1)))
    return out


def count(term, text):
    """How many times ``term`` stands in ``text`` as a whole word (exact case).

    Example:
        >>> count("billet", "Un billet, deux billets.")
        1
    """
    return len(_occurrences(term, text, _words(text)))


def _word_at(words, position):
    """The index of the word holding character ``position`` (or the next one)."""
    return next((k for k, (_, b) in enumerate(words) if position < b), len(words) - 1)


@dataclasses.dataclass(frozen=True)
class _Edit:
    start: int  # characters of the translation replaced: [start, end)
    end: int
    text: str
    order: int  # the match's
    words: Tuple[int, ...]  # the source words of the match


def _trail(word):
    """The punctuation that ends ``word`` (kept after a term put in its place)."""
    return len(re.search(_TRAIL, word).group())


def plan(sentence, matches, translation, alignment):
    """The edits that put each match's target into ``translation`` (:func:`apply`),
    sorted, not overlapping: :class:`_Edit` s.

    The matches in order; target words a match used are its own. A match whose target
    already stands in the translation (whole words, exact case) on words of its own takes
    them (the first occurrence on a word aligned with it, else the first on any word);
    else its first run of consecutive aligned words (holding a letter or a digit) is
    replaced, the punctuation at the run's ends kept; else (the run used, or no aligned
    word) the target goes after that run, or after the word at its proportional place,
    and after the used words that follow.
    """
    src_words, tgt_words = _words(sentence), _words(translation)
    n_src, n_tgt = len(src_words), len(tgt_words)
    pairs = _pairs(alignment)
    wordy = [any(_word_char(c) for c in translation[a:b]) for a, b in tgt_words]
    used = [False] * n_tgt
    edits = []
    for order, m in enumerate(matches):
        words = tuple(k for k, (a, b) in enumerate(src_words) if a < m.end and m.start < b)
        aligned = sorted({j for i, j in pairs if i in words and j < n_tgt and wordy[j]})
        free = [(lo, hi) for lo, hi in _occurrences(m.target, translation, tgt_words)
                if not any(used[lo:hi + 1])]
        here = [(lo, hi) for lo, hi in free if any(lo <= j <= hi for j in aligned)]
        if here or free:
            lo, hi = (here or free)[0]
            used[lo:hi + 1] = [True] * (hi - lo + 1)
            continue
        if n_tgt == 0:  # the targets make the translation
            edits.append(_Edit(len(translation) if order else 0, len(translation),
                               (" " if order else "") + m.target, order, words))
            continue
        if aligned:
            lo = hi = aligned[0]
            while hi + 1 in aligned:
                hi += 1
            if not any(used[lo:hi + 1]):
                used[lo:hi + 1] = [True] * (hi - lo + 1)
                a, b = tgt_words[lo][0], tgt_words[hi][1]
                a += re.match(_LEAD, translation[a:b]).end()
                b -= _trail(translation[a:b])
                edits.append(_Edit(a, b, m.target, order, words))
                continue
            j = hi
        else:
            last = words[-1] if words else 0
            j = min(max(round((last + 1) / max(n_src, 1) * n_tgt) - 1, 0), n_tgt - 1)
        while j + 1 < n_tgt and used[j] and used[j + 1]:
            j += 1  # after the used words that follow
        a, b = tgt_words[j]
        at = b - _trail(translation[a:b]) if wordy[j] else b
        edits.append(_Edit(at, at, " " + m.target, order, words))
    return sorted(edits, key=lambda e: (e.start, e.order))


def apply(sentence, matches, translation, alignment=None):
    """``translation`` with every match's target in place (:func:`plan`) and its
    alignment renumbered: each source word of a term aligned with every word of its
    target, the other pairs following their words.

    Args:
        sentence: the source (str). matches: :func:`find`'s.
        translation: its translation (str).
        alignment: Pharaoh ``i-j`` pairs over the whitespace-separated words of the two
            (None or "": no alignment; each target goes to its proportional place).

    Returns:
        ``(translation, alignment)``; the alignment None when none was given.
    """
    edits = plan(sentence, matches, translation, alignment)
    if not edits:
        return translation, alignment
    final, last, placed, moved = "", 0, [], []
    for e in edits:
        final += translation[last:e.start]
        placed.append((len(final) + (len(e.text) - len(e.text.lstrip(" "))), e))
        final += e.text
        moved.append((e.start, e.end, len(final) - e.end))  # shift of what follows
        last = e.end
    final += translation[last:]
    if alignment is None:
        return final, None
    return final, _renumbered(translation, final, _pairs(alignment), placed, moved)


def _renumbered(translation, final, pairs, placed, moved):
    old, new = _words(translation), _words(final)

    out = set()
    for i, j in pairs:
        if j >= len(old):
            continue
        a, b = old[j]
        if any(s < e and s < b and a < e for s, e, _ in moved):
            continue  # a word an edit replaced (in part): its pairs go with the term
        shift = 0
        for s, e, delta in moved:
            if e <= a:
                shift = delta
        out.add((i, _word_at(new, a + shift)))
    for begin, e in placed:  # the term's words: those its characters touch
        end = begin + len(e.text.strip(" "))
        out.update((i, j) for i in e.words for j, (a, b) in enumerate(new)
                   if a < end and begin < b)
    return " ".join(f"{i}-{j}" for i, j in sorted(out, key=lambda p: (p[1], p[0])))


def applied(matches):
    """``{source: target}`` of the terms ``matches`` found (an answer's applied terms)."""
    return {m.source: m.target for m in matches}
