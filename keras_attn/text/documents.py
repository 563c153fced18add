"""Documents: split text into sentences and join translations back (pure Python, no TF).

:func:`split` cuts a request into sentences, :func:`split_batch` flattens a batch of
requests into one batch of sentences, and :func:`join` puts the translations back with the
input's own whitespace between them.

One rule set, declared as data (:data:`RULES`: ordered ``(name, pattern, replacement)``
rewrites that Python's ``re`` and RE2 read alike), runs here with ``re.sub`` and in a graph
with ``tf.strings.regex_replace`` (:mod:`keras_attn.export.documents`), with the same
result: ``separator BOUNDARY sentence BOUNDARY ... separator``. docs/documents.md gives each
rule with examples.

Example:
    >>> seg = split("Mr. Smith arrived at 10:30. He left!\\n\\nThe end.")
    >>> seg.sentences
    ['Mr. Smith arrived at 10:30.', 'He left!', 'The end.']
    >>> seg.separators
    ['', ' ', '\\n\\n', '']
    >>> join(["M. Smith est arrivé à 10h30.", "Il est parti !", "Fin."], seg.separators)
    'M. Smith est arrivé à 10h30. Il est parti !\\n\\nFin.'

References: Pragmatic Segmenter's Golden Rules (Kevin Dias) as shipped by pySBD
(Sadvilkar & Neumann 2020); RE2 syntax (github.com/google/re2/wiki/Syntax).
"""
import functools
import re
from typing import List, NamedTuple, Sequence

# --- the internal alphabet: Unicode noncharacters, reserved for a program's internal use --
BEGIN = "\ufdd0"      # start of the text
END = "\ufdd1"        # end of the text
BOUNDARY = "\ufdd2"   # between a sentence and a separator
DOT = "\ufdd3"        # a protected "."
SPACE = "\ufdd4"      # a protected " " (inside ". . .")
ELLIPSIS = "\ufdd5"   # a protected "…" (inside "[…]")
CANDIDATE = "\ufdd6"  # a boundary unless a lower-case letter follows
ESCAPE = "\ufddf"     # escapes an internal character found in the input
# Each internal character, and the letter that follows ESCAPE for it in escaped input.
INTERNAL = ((ESCAPE, "e"), (BEGIN, "b"), (END, "n"), (BOUNDARY, "s"), (DOT, "d"),
            (SPACE, "w"), (ELLIPSIS, "h"), (CANDIDATE, "c"))

# --- character classes (contents of [...]), spelled out the same for re and RE2 ---------
# Whitespace: exactly the characters of str.isspace(), so a sentence equals its .strip().
WS = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# Line boundaries: exactly those of str.splitlines(); a newline always ends a sentence.
NL = "\n\x0b\x0c\r\x1c-\x1e\x85\u2028\u2029"
HWS = "\t\x1f \xa0\u1680\u2000-\u200a\u202f\u205f\u3000"  # WS without NL
MARKS = BEGIN + END + BOUNDARY + CANDIDATE                          # not part of any sentence
LOWER = "a-z\xdf-\xf6\xf8-\xff"
UPPER = "A-Z\xc0-\xd6\xd8-\xde"
LETTER = UPPER + LOWER
STOP = ".!?\u2026\u203d"                                   # . ! ? … ‽
CLOSE = "\"'\u201d\u2019\u00bb)\\]}"                       # " ' ” ’ » ) ] }
BULLET = "\u2022\u2043\u2023\u25e6\u25aa"                  # • ⁃ ‣ ◦ ▪
CONTENT = f"[^{WS}{MARKS}]"                                # a character of a sentence

# Words that start a sentence after an abbreviation or an initial (pySBD's English list).
SENTENCE_STARTERS = ("A", "Being", "Did", "For", "He", "How", "However", "I", "In", "It",
                     "Millions", "More", "She", "That", "The", "There", "They", "We", "What",
                     "When", "Where", "Who", "Why")
# Abbreviations that are never the end of a sentence: titles before a name and Latin ones.
ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Mx", "Dr", "Prof", "St", "Mt", "Ft", "Rev", "Hon",
                 "Gen", "Col", "Capt", "Lt", "Sgt", "Cpl", "Maj", "Adm", "Gov", "Sen", "Rep",
                 "Pres", "Supt", "Messrs", "Mme", "Mlle", "Msgr", "Fr",
                 "e\\.g", "E\\.g", "i\\.e", "I\\.e", "vs", "cf", "Cf", "viz", "approx",
                 "et al")
# Abbreviations that are not the end of a sentence when a number follows.
NUMBER_ABBREVIATIONS = ("No", "Nos", "no", "nos", "Nr", "N\u00b0", "p", "pp", "Vol", "vol",
                        "Fig", "fig", "Figs", "Art", "art", "Ch", "ch", "Sec", "sec", "Op",
                        "Eq", "eq", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep",
                        "Sept", "Oct", "Nov", "Dec") + tuple(
    # Months and weekdays in any case, English and French ("5 nov. 2008", "16 JANV. 1931").
    w for m in ("jan", "janv", "feb", "fev", "fév", "févr", "mar", "apr", "avr",
                "jun", "jul", "juil", "aug", "sep", "sept", "oct", "nov", "dec", "déc",
                "lun", "mer", "jeu", "ven", "sam", "dim", "mon", "tue", "tues", "wed", "thu",
                "thur", "thurs", "fri", "sat", "sun")
    for w in dict.fromkeys((m, m[0].upper() + m[1:], m.upper()))
    if w not in ("Jan", "Mar", "Jun", "Jul", "Sep", "Sept", "Oct", "Nov", "Dec"))


def _alternatives(words):
    return "(?:" + "|".join(words) + ")"


def _sequence_rules():
    """A boundary before "k." in a one-line list ("1. Open it 2. Take it") where "k-1." starts
    the line earlier; one rule per pair, in order, each finding the boundary the last inserted.
    """
    items = [str(i) for i in range(1, 11)] + list("abcdefghij")
    return tuple(
        (f"list item {new} after {old}",
         f"([{BEGIN}{BOUNDARY}{NL}{BULLET}][{HWS}]*{old}\\.\\)?[{HWS}]"
         f"[^{NL}{BOUNDARY}{END}]*?{CONTENT})([{HWS}]+{new}\\.\\)?[{HWS}]+[{UPPER}])",
         f"\\1{BOUNDARY}\\2")
        for old, new in zip(items, items[1:]) if old != "10")


ESCAPE_RULES = tuple(
    (f"escape {code}", char, ESCAPE + code) for char, code in INTERNAL)
"""Applied first, to the raw text: internal characters in the input become ESCAPE + code."""

RULES = (
    # -- a newline always ends a sentence -----------------------------------------------
    ("newline", f"({CONTENT})([{HWS}]*[{NL}])", f"\\1{BOUNDARY}\\2"),
    # -- ellipses that are not boundaries -------------------------------------------------
    ("bracketed ellipsis", "\\[\\.\\.\\.\\]", f"[{DOT}{DOT}{DOT}]"),
    ("bracketed ellipsis char", "\\[\u2026\\]", f"[{ELLIPSIS}]"),
    # "compounds. . . . The practice": the ellipsis starts the next sentence.
    ("period then spaced ellipsis", f"({CONTENT}\\.)( \\. \\. \\.[{HWS}]+[{UPPER}])",
     f"\\1{BOUNDARY}\\2"),
    ("spaced ellipsis", "\\. \\. \\.", f"{DOT}{SPACE}{DOT}{SPACE}{DOT}"),
    # -- abbreviations -------------------------------------------------------------------
    ("abbreviation", f"([^{LETTER}]{_alternatives(ABBREVIATIONS)})\\.", f"\\1{DOT}"),
    ("abbreviation before a number",
     f"([^{LETTER}]{_alternatives(NUMBER_ABBREVIATIONS)})\\.([{HWS}]+[0-9])",
     f"\\1{DOT}\\2"),
    # "I live in the U.S. How about you?", "you and I. Did you see": a boundary.
    ("initials before a sentence starter",
     f"([^{LETTER}.](?:[{UPPER}]\\.|(?:[{LETTER}]\\.){{2,}}))([{HWS}]+"
     f"{_alternatives(SENTENCE_STARTERS)}"
     f"[^{LETTER}.])",
     f"\\1{BOUNDARY}\\2"),
    ("multi-period abbreviation", f"([^{LETTER}.](?:[{LETTER}]\\.)+[{LETTER}])\\.",
     f"\\1{DOT}"),
    ("initial", f"([^{LETTER}.][{UPPER}])\\.", f"\\1{DOT}"),
    # -- lists ---------------------------------------------------------------------------
    ("bullet", f"({CONTENT})([{HWS}]+[{BULLET}])", f"\\1{BOUNDARY}\\2"),
    ("list item in a line", f"({CONTENT})([{HWS}]+[0-9]{{1,2}}\\.?\\)[{HWS}]+[{UPPER}])",
     f"\\1{BOUNDARY}\\2"),
    *_sequence_rules(),
    ("list marker",
     f"((?:[{BEGIN}{BOUNDARY}{NL}{BULLET}]|[{STOP}][{CLOSE}]*[{HWS}])[{HWS}]*"
     f"(?:[0-9]{{1,3}}|[a-z]))\\.(\\)?[{HWS}])",
     f"\\1{DOT}\\2"),
    # -- the boundaries --------------------------------------------------------------------
    # Each rule starts on a character before the run it looks at ([^...] instead of a
    # lookbehind), so re tries a long run of stops or initials once, not once per character.
    ("stop", f"([^{STOP}])([{STOP}]+[{CLOSE}]*)([{WS}])", f"\\1\\2{CANDIDATE}\\3"),
    ("lower case after a stop", f"{CANDIDATE}([{HWS}]+[{LOWER}])", "\\1"),
    ("boundary after a stop", CANDIDATE, BOUNDARY),
    ("one boundary", f"{BOUNDARY}{BOUNDARY}+", BOUNDARY),
    # -- separators: "sep B sentence B sep B sentence ... B sep" -----------------------------
    ("no boundary at the end", f"{BOUNDARY}([{WS}]*){END}", f"\\1{END}"),
    ("separator", f"{BOUNDARY}([{WS}]*)", f"{BOUNDARY}\\1{BOUNDARY}"),
    ("no sentence", f"{BEGIN}([{WS}]*){END}", "\\1"),
    ("leading separator", f"{BEGIN}([{WS}]*)", f"\\1{BOUNDARY}"),
    # Anchored on the sentence's last character, so re scans each whitespace run once.
    ("trailing separator", f"([^{WS}])([{WS}]*){END}", f"\\1{BOUNDARY}\\2"),
)
"""The rule set: ``(name, pattern, replacement)``, applied in order to ``BEGIN + text + END``
(after :data:`ESCAPE_RULES`), each replacing every match (``re.sub``,
``tf.strings.regex_replace(replace_global=True)``). No pattern can match the empty string."""

RESTORE_RULES = (
    ("restore dot", DOT, "."),
    ("restore space", SPACE, " "),
    ("restore ellipsis", ELLIPSIS, "\u2026"),
) + tuple((f"unescape {code}", ESCAPE + code, char) for char, code in INTERNAL[1:]) + (
    ("unescape e", ESCAPE + "e", ESCAPE),)
"""Applied to each sentence and separator after the split at ``BOUNDARY``."""

_ESCAPE = tuple((re.compile(p), r) for _, p, r in ESCAPE_RULES)
_RULES = tuple((re.compile(p), r) for _, p, r in RULES)
_RESTORE = tuple((re.compile(p), r) for _, p, r in RESTORE_RULES)


class Segments(NamedTuple):
    """A text as sentences and the whitespace around them.

    Attributes:
        sentences: list of N str, each without whitespace at either end (N >= 0).
        separators: list of N + 1 str, only whitespace: before the first sentence, between
            each pair, after the last. ``join(sentences, separators)`` is the text.
    """
    sentences: List[str]
    separators: List[str]


class Pieces(NamedTuple):
    """A sentence cut to fit (:func:`cut_long`).

    Attributes:
        pieces: list of str, each without whitespace at either end.
        separators: the whitespace around them (``join(pieces, separators)`` is the sentence).
        cut: True when the sentence was cut (more than one piece).
    """
    pieces: List[str]
    separators: List[str]
    cut: bool


def _check_text(text, name):
    if not isinstance(text, str):
        raise ValueError(f"`{name}` must be a str. Received: {name}={text!r} "
                         f"(of type {type(text).__name__})")


def _apply(rules, text):
    return functools.reduce(lambda t, rule: rule[0].sub(rule[1], t), rules, text)


def mark(text):
    """The text after every rule, before the split at ``BOUNDARY`` (what the graph computes)."""
    _check_text(text, "text")
    return _apply(_RULES, BEGIN + _apply(_ESCAPE, text) + END)


def split(text):
    """Split ``text`` (str, may be empty) into sentences, keeping the whitespace around
    them: :class:`Segments`, ``join(*split(text)) == text``; ValueError when it is no str.

    Example:
        >>> split("Hello World. My name is Jonas.\\n")
        Segments(sentences=['Hello World.', 'My name is Jonas.'], separators=['', ' ', '\\n'])
    """
    pieces = [_apply(_RESTORE, piece) for piece in mark(text).split(BOUNDARY)]
    return Segments(sentences=pieces[1::2], separators=pieces[0::2])


def join(sentences, separators):
    """Rebuild a document, ``separators[0] + sentences[0] + ... + separators[-1]``, from N
    sentences (translations of :func:`split`'s, in order) and its N + 1 ``separators``;
    ValueError when there are not N + 1 separators or an item is no str."""
    sentences, separators = list(sentences), list(separators)
    if len(separators) != len(sentences) + 1:
        raise ValueError(
            f"`separators` must hold one more item than `sentences`. Received: "
            f"{len(sentences)} sentences and separators={separators!r}")
    for name, items in (("sentences", sentences), ("separators", separators)):
        for item in items:
            _check_text(item, name + "[i]")
    return separators[0] + "".join(s + sep for s, sep in zip(sentences, separators[1:]))


def split_batch(texts):
    """Split a batch of B texts into one flat list of sentences (translated as one batch):
    ``(sentences, counts, separators)``, the flat list, B ints (sentences per text, 0 for
    a blank text) and B lists of ``counts[i] + 1`` separators.

    Example:
        >>> split_batch(["Hi. Bye.", "", "One"])
        (['Hi.', 'Bye.', 'One'], [2, 0, 1], [['', ' ', ''], [''], ['', '']])
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError("`texts` must be a sequence of str (a list or tuple). Received: "
                         f"texts={texts!r}")
    sentences, counts, separators = [], [], []
    for i, text in enumerate(texts):
        _check_text(text, f"texts[{i}]")
        segments = split(text)
        sentences += segments.sentences
        counts.append(len(segments.sentences))
        separators.append(segments.separators)
    return sentences, counts, separators


def join_batch(sentences, counts, separators):
    """Inverse of :func:`split_batch`: the list of B documents from the flat list of
    ``sum(counts)`` translations, ``counts`` (B ints) and ``separators`` (B lists)."""
    sentences, counts = list(sentences), list(counts)
    if len(counts) != len(separators):
        raise ValueError(f"`counts` and `separators` must have the same length. Received: "
                         f"counts={counts!r} and {len(separators)} separators")
    if any(not isinstance(c, int) or c < 0 for c in counts) or sum(counts) != len(sentences):
        raise ValueError(f"`counts` must be ints >= 0 summing to len(sentences)="
                         f"{len(sentences)}. Received: counts={counts!r}")
    out, start = [], 0
    for count, seps in zip(counts, separators):
        out.append(join(sentences[start:start + count], seps))
        start += count
    return out


# --- sentences too long for the model ------------------------------------------------------
# Where a long sentence may be cut, best first: after ";"/":", after "," or at a dash,
# before a conjunction, between words (each pattern matches the whitespace of a cut).
CUT_LEVELS = (
    ("clause", re.compile(f"(?<=[;:])[{WS}]+")),
    ("comma or dash", re.compile(f"(?<=,)[{WS}]+|[{WS}]+(?=[\u2014\u2013-][{WS}])"
                                 f"|(?<=[\u2014\u2013])[{WS}]+")),
    ("conjunction", re.compile(
        f"[{WS}]+(?=(?:and|but|or|nor|so|yet|because|although|though|while|whereas|which|"
        f"who|where|when|if|unless|until|since)[{WS}])")),
    ("word", re.compile(f"[{WS}]+")),
)


def cut_long(sentence, max_units, count):
    """Cut a sentence longer than ``max_units`` at the best places first.

    Each cut takes the longest piece that fits at the best :data:`CUT_LEVELS` level that has
    one, then between characters; a sentence that fits comes back whole.

    Args:
        sentence: str, one sentence.
        max_units: int > 0, the most units a piece may hold.
        count: callable ``str -> int``, a piece's units (e.g. its token count).
    Returns:
        :class:`Pieces`; ``join(pieces, separators) == sentence``, each piece fits. Raises
        ValueError for bad arguments, or a single character longer than ``max_units``.
    Example:
        >>> cut_long("One, two; three four.", 3, lambda s: len(s.split()))
        Pieces(pieces=['One, two;', 'three four.'], separators=['', ' ', ''], cut=True)
    """
    _check_text(sentence, "sentence")
    if isinstance(max_units, bool) or not isinstance(max_units, int) or max_units <= 0:
        raise ValueError(f"`max_units` must be an int > 0. Received: max_units={max_units!r}")
    if not callable(count):
        raise ValueError(f"`count` must be a callable str -> int. Received: count={count!r}")
    lead = len(sentence) - len(sentence.lstrip())
    body = sentence.strip()
    pieces, separators, start = [], [sentence[:lead]], 0
    while count(body[start:]) > max_units:
        end = _longest_fit(body, start, max_units, count)
        pieces.append(body[start:end[0]])
        separators.append(body[end[0]:end[1]])
        start = end[1]
    pieces.append(body[start:])
    separators.append(sentence[lead + len(body):])
    if not body:
        return Pieces([], [sentence], False)
    return Pieces(pieces, separators, len(pieces) > 1)


def _longest_fit(body, start, max_units, count):
    """(end of the piece, start of the next) for the longest piece from ``start`` that fits."""
    for _, pattern in CUT_LEVELS:
        best = None
        for m in pattern.finditer(body, start):
            if m.start() <= start:
                continue
            if count(body[start:m.start()]) > max_units:
                break
            best = (m.start(), m.end())
        if best is not None:
            return best
    # A single word is too long: the longest prefix that fits.
    end = start
    while end < len(body) and count(body[start:end + 1]) <= max_units:
        end += 1
    if end == start:
        raise ValueError(f"A single character is longer than `max_units`={max_units}: "
                         f"{body[start]!r} counts {count(body[start])}")
    return end, end
