"""What must not be translated: spans found, cut out of a sentence and put back into its
translation (pure Python: no TensorFlow, no Keras).

URLs, e-mail addresses, inline code, markup tags, numbers and emoji pass through a
translation byte-identical; the rules that find them are data (:data:`RULES`).
:func:`cut` removes them from a sentence, the whitespace collapsed, and records where each
:class:`Group` stood; :func:`put_back` inserts each group into the translation next to the
target word aligned with its source word (Pharaoh ``i-j`` pairs, as
:mod:`keras_attn.translation.alignment` gives them; without them, the word at the same
proportional place) and renumbers the alignment. :mod:`keras_attn.translation.pipeline`
runs both around every engine's sentences (docs/real_text.md).

Example:
    >>> c = cut("Call me at 10:30.")
    >>> c.rest
    'Call me at.'
    >>> put_back(c, "Appelle-moi à.", "0-0 1-0 2-1")[0]
    'Appelle-moi à 10:30.'
"""
import dataclasses
import functools
import os
import re
import unicodedata
from typing import Tuple

# The rules, as data (keras_attn.text.span_rules).
from keras_attn.text.span_rules import (  # noqa: F401
    FINAL_STOP, KINDS, RULES, SPACE, THIN_SPACE, WORD_BOUND, WORD_SPACE)


@functools.lru_cache(maxsize=8)
def compiled(rules=RULES):
    """One alternation of ``rules``, a named group per rule, in their order."""
    return re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in rules))


@dataclasses.dataclass(frozen=True)
class Span:
    """One span: ``text[start:end]`` found by the rule ``kind``."""

    kind: str
    start: int
    end: int
    text: str


def find(text, rules=RULES):
    """The spans of ``text`` (str) that must not be translated, in order, not overlapping;
    ``rules`` are ordered ``(name, pattern)`` pairs (:data:`RULES`).

    Example:
        >>> [(s.kind, s.text) for s in find("Mail a@b.org at 9:30 🙂")]
        [('email', 'a@b.org'), ('number', '9:30'), ('emoji', '🙂')]
    """
    found = []
    for m in compiled(tuple(rules)).finditer(text):
        a, b = m.start(), m.end()
        if m.lastgroup in WORD_BOUND and (
                (a > 0 and (text[a - 1].isalnum() or text[a - 1] in "_-"))
                or (b < len(text) and (text[b].isalnum() or text[b] == "_"))):
            continue  # inside a word: the model's
        found.append(Span(m.lastgroup, a, b, m.group()))
    return found


@dataclasses.dataclass(frozen=True)
class Group:
    """Spans with only whitespace between them, put back as one string.

    Attributes:
        text: the source's characters, spans and the whitespace between them.
        start: where the group began in the sentence.
        mode: ``"after"`` (whitespace before it: put after the target word aligned with
            source word ``anchor``, -1: the sentence's start), ``"before"`` (glued to the
            word after it: put at the start of the target word aligned with ``anchor``) or
            ``"glued"`` (glued to the word before it: put at its end).
        anchor: a word of :attr:`Cut.rest` (whitespace-separated, from 0).
        before: the whitespace between the anchor word and the group in the source.
        after: the whitespace after a group that began the sentence.
        closing: punctuation that followed the group in the source and, in ``rest``,
            follows the anchor word (a sentence's final "."): the group goes before it.
        kinds: the rules that found its spans.
    """

    text: str
    start: int
    mode: str
    anchor: int
    before: str = ""
    after: str = ""
    closing: str = ""
    kinds: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Cut:
    """A sentence with its spans cut out (:func:`cut`).

    Attributes:
        source: the sentence. rest: what is left to translate ("" when nothing is).
        groups: :class:`Group` s, in order. spans: the :class:`Span` s.
        rest_map: per character of ``rest``, its index in ``source``.
    """

    source: str
    rest: str
    groups: Tuple[Group, ...]
    spans: Tuple[Span, ...]
    rest_map: Tuple[int, ...]

    @property
    def only_spans(self):
        """Nothing but spans, whitespace and punctuation: the sentence is its own
        translation (no model call)."""
        return bool(self.groups) and not any(c.isalnum() for c in self.rest)


def _punctuation(s):
    return bool(s) and all(unicodedata.category(c)[0] in "PS" for c in s)


_WORD = re.compile(f"[^{WORD_SPACE}]+")


def _words(text):
    """``(start, end)`` of each word: cut at ASCII whitespace (as the alignments number
    the words of a translation)."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def cut(sentence, rules=RULES):
    """The sentence with its spans cut out, and where each group of them stood.

    Whitespace around a cut collapses to what stood before it: "Visit https://x.org
    today." -> "Visit today."; punctuation glued after a group stays in ``rest``, after
    the word before the group ("at 10:30." -> "at."); a group glued to a word keeps it
    whole ("<b>bold</b>" -> "bold"). ``rules`` as :func:`find`; returns a :class:`Cut`.

    Example:
        >>> cut("Visit https://x.org today.").rest
        'Visit today.'
        >>> cut("1 2 3").only_spans
        True
    """
    spans = find(sentence, rules)
    if not spans:
        return Cut(sentence, sentence, (), (), tuple(range(len(sentence))))
    # Spans with only whitespace between them make one group.
    bounds = []
    for span in spans:
        if bounds and not sentence[bounds[-1][1]: span.start].strip():
            bounds[-1][1] = span.end
        else:
            bounds.append([span.start, span.end])
    keep = [True] * len(sentence)  # which source characters stay in rest
    marks = []  # per group: (start, end, mode, closing, before, after)
    n = len(sentence)
    for start, end in bounds:
        left_space = start == 0 or sentence[start - 1].isspace()
        right_space = end == n or sentence[end].isspace()
        tail = re.match(r"\S*", sentence[end:]).group()
        closing = tail if not right_space and _punctuation(tail) else ""
        keep[start:end] = [False] * (end - start)
        lead = len(sentence[:start].rstrip())
        before, after = sentence[lead:start], ""
        if left_space and (right_space or closing):
            mode = "after"
            if lead > 0 and any(keep[:lead]):  # the whitespace before it goes with it
                keep[lead:start] = [False] * (start - lead)
            else:  # at the start: the whitespace after it goes
                after = sentence[end:n - len(sentence[end:].lstrip())]
                keep[end:end + len(after)] = [False] * len(after)
        elif left_space:
            mode = "before"
        else:
            mode = "glued"
        marks.append((start, end, mode, closing, before, after))
    rest_map = [k for k in range(n) if keep[k]]
    rest = "".join(sentence[k] for k in rest_map)
    # Trim what the cuts left at the ends (a group that ended the sentence after spaces).
    lo = len(rest) - len(rest.lstrip())
    hi = len(rest.rstrip())
    rest, rest_map = rest[lo:hi], rest_map[lo:hi]
    words = _words(rest)
    starts = [rest_map[a] for a, _ in words]  # each rest word's first source character
    groups = []
    for start, end, mode, closing, before, after in marks:
        if mode == "after":
            anchor = sum(1 for s in starts if s < start) - 1
        elif mode == "before":
            anchor = next((i for i, s in enumerate(starts) if s >= end), len(words) - 1)
        else:
            anchor = max(sum(1 for s in starts if s < start) - 1, 0)
        if not words:
            mode, anchor = "after", -1
        kinds = tuple(s.kind for s in spans if start <= s.start < end)
        groups.append(Group(sentence[start:end], start, mode, anchor, before, after,
                            closing, kinds))
    return Cut(sentence, rest, tuple(groups), tuple(spans), tuple(rest_map))


def _pairs(alignment):
    return [tuple(int(x) for x in p.split("-")) for p in (alignment or "").split()
            if re.fullmatch(r"\d+-\d+", p)]


def _target_word(group, pairs, n_source, n_target):
    """The target word that receives ``group``: the last (``"after"``, ``"glued"``) or
    first (``"before"``) one aligned with its anchor; without any, the word at the same
    proportional place."""
    aligned = sorted(j for i, j in pairs if i == group.anchor and j < n_target)
    if aligned:
        return aligned[0] if group.mode == "before" else aligned[-1]
    if group.anchor >= n_source - 1 and group.mode != "before":
        return n_target - 1
    share = (group.anchor + (0 if group.mode == "before" else 1)) / max(n_source, 1)
    j = round(share * n_target) - (0 if group.mode == "before" else 1)
    return min(max(j, 0), n_target - 1)


def put_back(c, translation, alignment=None):
    """The translation of ``c.rest`` with ``c``'s groups put back, and its alignment
    renumbered over the whole sentence and translation.

    Args:
        c: a :class:`Cut`.
        translation: the translation of ``c.rest`` (str).
        alignment: its Pharaoh ``i-j`` pairs over whitespace-separated words (None or "":
            the groups go to the proportional place).
    Returns:
        ``(translation, alignment)``: the alignment None when none was given.
    Example:
        >>> c = cut("Make it <b>bold</b> now")
        >>> put_back(c, "Mets-le en gras maintenant", "0-0 1-0 2-2 3-3")[0]
        'Mets-le en <b>gras</b> maintenant'
    """
    if not c.groups:
        return translation, alignment
    if c.only_spans or not translation.strip():
        return c.source, (_identity(c.source) if alignment is not None else None)
    words = _words(translation)
    n_source = len(_words(c.rest))
    pairs = _pairs(alignment)
    inserts = []  # (position in translation, order, text)
    for order, group in enumerate(c.groups):
        if group.anchor < 0:
            inserts.append((0, order, group.text + (group.after or " ")))
            continue
        j = _target_word(group, pairs, n_source, len(words))
        a, b = words[j]
        if group.mode == "before":
            inserts.append((a, order, group.text))
            continue
        at = b
        word = translation[a:b]
        if group.closing and word.endswith(group.closing) and len(word) > len(group.closing):
            at = b - len(group.closing)
        elif group.mode == "after" and not group.closing:
            tail = re.search(FINAL_STOP, word)
            # The translation's final stop stays last ("... at 10:30" -> "... à 10:30.");
            # emoji that ended the source end the translation.
            ends = group.anchor == n_source - 1 and set(group.kinds) == {"emoji"}
            if tail and j == len(words) - 1 and tail.start() > 0 and not ends:
                at = a + tail.start()
        while at < b and at > a + 1 and translation[at - 1] in THIN_SPACE:
            at -= 1  # before French spacing ("\u202f!")
        inserts.append((at, order, (group.before or " ") + group.text
                        if group.mode == "after" else group.text))
    moved = [0] * (len(translation) + 1)  # characters inserted at or before each position
    final, last, placed = "", 0, []  # placed: (where the text begins in final, order, text)
    for at, order, text in sorted(inserts):
        placed.append((at + moved[at], order, text))
        final += translation[last:at] + text
        last = at
        for k in range(at, len(translation) + 1):
            moved[k] += len(text)
    final += translation[last:]
    if alignment is None:
        return final, None
    return final, _renumbered(c, translation, final, pairs, placed, moved)


def _identity(text):
    return " ".join(f"{i}-{i}" for i in range(len(_words(text))))


def _word_at(words, position):
    """The index of the word holding character ``position`` (or the next one)."""
    for k, (a, b) in enumerate(words):
        if position < b:
            return k
    return len(words) - 1


def _renumbered(c, translation, final, pairs, placed, moved):
    """The rest's pairs over the source's and the final translation's words, and each
    group's words with the words it became."""
    src_words, rest_words = _words(c.source), _words(c.rest)
    base_words, final_words = _words(translation), _words(final)
    out = set()
    for i, j in pairs:
        if i < len(rest_words) and j < len(base_words):
            si = _word_at(src_words, c.rest_map[rest_words[i][0]])
            a = base_words[j][0]
            out.add((si, _word_at(final_words, a + moved[a])))
    for begin, order, text in placed:
        group = c.groups[order]
        begin += len(text) - len(text.lstrip())
        src = sorted({_word_at(src_words, group.start + k) for k in range(len(group.text))
                      if not group.text[k].isspace()})
        tgt = sorted({_word_at(final_words, begin + k) for k in range(len(text.strip()))
                      if not text.strip()[k].isspace()})
        if len(src) == len(tgt):
            out.update(zip(src, tgt))
        else:
            out.update((i, j) for i in src for j in tgt)
    return " ".join(f"{i}-{j}" for i, j in sorted(out, key=lambda p: (p[1], p[0])))


def default_for(tokenizer):
    """Whether spans pass through by default for an artefact whose source tokenizer is
    ``tokenizer``: yes for subwords and words; no on characters (the dates task reads
    "2038-04-01", digits that are its whole input)."""
    return not getattr(tokenizer, "char_level", False)


def default_for_run(run_dir):
    """:func:`default_for` a run directory's source tokenizer, read without TensorFlow
    (a SentencePiece ``src.model``: yes; a character vocabulary: no; a WordPiece
    vocabulary: yes); False when the run or its tokenizer cannot be read."""
    if not run_dir:
        return False
    if os.path.exists(os.path.join(run_dir, "src.model")):
        return True
    path = os.path.join(run_dir, "src_vocab.txt")
    if not os.path.exists(path):
        return False
    from keras_attn.text import python_tokenizers

    return python_tokenizers.load(path) is None  # None: WordPiece (words); else characters
