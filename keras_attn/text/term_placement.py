"""A glossary's found terms put into a translation (pure Python): in place of the words
aligned with each (Pharaoh ``i-j`` pairs over whitespace-separated words), exactly once,
the alignment renumbered (:func:`apply`). The SavedModel's graph does the same with
:mod:`keras_attn.export.term_placement_graph`; docs/real_text.md, "Glossaries".

Example:
    >>> from keras_attn.text import glossary
    >>> found = glossary.find("Show me your ticket.", glossary.entries({"ticket": "billet"}))
    >>> apply("Show me your ticket.", found, "Montre-moi ton ticket.", "0-0 1-0 2-1 3-2")[0]
    'Montre-moi ton billet.'
"""
import dataclasses
import re
from typing import Tuple

from keras_attn.text.glossary import occurrences, pairs, word_at, word_char, words

_LEAD = r"^[\W_]*"  # "«billet" keeps its "«"
_TRAIL = r"[\W_]*$"  # "billet." keeps its "."


@dataclasses.dataclass(frozen=True)
class _Edit:
    start: int  # characters of the translation replaced: [start, end)
    end: int
    text: str
    order: int  # the match's
    words: Tuple[int, ...]  # the source words of the match


def _trail(word, term=""):
    """The characters that end ``word`` and are neither a letter nor a digit (kept after
    a term put in its place), but those that end the source ``term`` too ("C++")."""
    trail, own = re.search(_TRAIL, word).group(), re.search(_TRAIL, term).group()
    return len(trail) - (len(own) if own and trail.startswith(own) else 0)


def _lead(word, term=""):
    """:func:`_trail` at the start of ``word``."""
    lead, own = re.match(_LEAD, word).group(), re.match(_LEAD, term).group()
    return len(lead) - (len(own) if own and lead.endswith(own) else 0)


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
    src_words, tgt_words = words(sentence), words(translation)
    n_src, n_tgt = len(src_words), len(tgt_words)
    links = pairs(alignment)
    wordy = [any(word_char(c) for c in translation[a:b]) for a, b in tgt_words]
    used = [False] * n_tgt
    edits = []
    for order, m in enumerate(matches):
        own = tuple(k for k, (a, b) in enumerate(src_words) if a < m.end and m.start < b)
        aligned = sorted({j for i, j in links if i in own and j < n_tgt and wordy[j]})
        free = [(lo, hi) for lo, hi in occurrences(m.target, translation, tgt_words)
                if not any(used[lo:hi + 1])]
        here = [(lo, hi) for lo, hi in free if any(lo <= j <= hi for j in aligned)]
        if here or free:
            lo, hi = (here or free)[0]
            used[lo:hi + 1] = [True] * (hi - lo + 1)
            continue
        if n_tgt == 0:  # the targets make the translation
            edits.append(_Edit(len(translation) if order else 0, len(translation),
                               (" " if order else "") + m.target, order, own))
            continue
        if aligned:
            lo = hi = aligned[0]
            while hi + 1 in aligned:
                hi += 1
            if not any(used[lo:hi + 1]):
                used[lo:hi + 1] = [True] * (hi - lo + 1)
                a, b = tgt_words[lo][0], tgt_words[hi][1]
                a += _lead(translation[a:b], m.source)
                b -= _trail(translation[a:b], m.source)
                edits.append(_Edit(a, b, m.target, order, own))
                continue
            j = hi
        else:
            last = own[-1] if own else 0
            j = min(max(round((last + 1) / max(n_src, 1) * n_tgt) - 1, 0), n_tgt - 1)
        while j + 1 < n_tgt and used[j] and used[j + 1]:
            j += 1  # after the used words that follow
        a, b = tgt_words[j]
        at = b - _trail(translation[a:b]) if wordy[j] else b
        edits.append(_Edit(at, at, " " + m.target, order, own))
    return sorted(edits, key=lambda e: (e.start, e.order))


def apply(sentence, matches, translation, alignment=None):
    """``translation`` with every match's target in place (:func:`plan`) and its
    alignment renumbered: each source word of a term aligned with every word of its
    target, the other pairs following their words.

    Args:
        sentence: the source (str). matches: :func:`keras_attn.text.glossary.find`'s.
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
    return final, _renumbered(translation, final, pairs(alignment), placed, moved)


def _renumbered(translation, final, links, placed, moved):
    old, new = words(translation), words(final)
    out = set()
    for i, j in links:
        if j >= len(old):
            continue
        a, b = old[j]
        if any(s < e and s < b and a < e for s, e, _ in moved):
            continue  # a word an edit replaced (in part): its pairs go with the term
        shift = 0
        for s, e, delta in moved:
            if e <= a:
                shift = delta
        out.add((i, word_at(new, a + shift)))
    for begin, e in placed:  # the term's words: those its characters touch
        end = begin + len(e.text.strip(" "))
        out.update((i, j) for i in e.words for j, (a, b) in enumerate(new)
                   if a < end and begin < b)
    return " ".join(f"{i}-{j}" for i, j in sorted(out, key=lambda p: (p[1], p[0])))
