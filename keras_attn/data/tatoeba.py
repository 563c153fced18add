"""Parallel text: Tatoeba's files (``English<TAB>Other[<TAB>attribution]``) in either
direction, any tab-separated file of named columns, or two aligned plain-text files. Bad
lines are skipped, counted and reported with their line numbers, never dropped silently.

References: D2L 10.5 (machine translation data).
"""
import dataclasses
import logging
import os
import random
from pathlib import Path

from keras_attn.core import languages
from keras_attn.text import tokenizers as text
from keras_attn.data.download import resolve_data

logger = logging.getLogger(__name__)

D2L_FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
_MAX_LISTED = 10  # bad lines named in a summary; the report keeps them all


@dataclasses.dataclass
class LoadReport:
    """What `load_tatoeba` read: counts and every bad line with its reason.

    Args:
        path: the file read.
        num_read: lines examined.  num_kept: pairs returned.
        bad_lines: list of `(line_no, reason)`, 1-based line numbers.
    Example:
        >>> LoadReport("fra.txt", num_read=3, num_kept=2, bad_lines=[(2, "empty line")])
    """

    path: str
    num_read: int = 0
    num_kept: int = 0
    bad_lines: list = dataclasses.field(default_factory=list)

    def summary(self):
        """One paragraph: counts and the first ten bad lines.

        Example:
            >>> report.summary()
            'fra.txt: read 3 lines, kept 2 pairs, 1 bad line (line 2: empty French field)'
        """
        n_bad = len(self.bad_lines)
        out = (f"{self.path}: read {self.num_read} lines, kept {self.num_kept} pairs, "
               f"{n_bad} bad line{'' if n_bad == 1 else 's'}")
        if n_bad:
            listed = "; ".join(f"line {n}: {r}" for n, r in self.bad_lines[:_MAX_LISTED])
            more = f"; ... {n_bad - _MAX_LISTED} more" if n_bad > _MAX_LISTED else ""
            out += f" ({listed}{more})"
        return out


def _check_file(path, what="Tatoeba corpus", expected=None):
    path = Path(path)
    expected = expected or ("a UTF-8 file of 'English<TAB>French' lines, e.g. fra.txt from "
                            + D2L_FRA_ENG_URL)
    if not path.is_file():
        raise FileNotFoundError(
            f"{what} not found: {path} (expected {expected})" if not path.exists()
            else f"{what} path is not a file: {path}")
    return path


def _decode(raw, line_no):
    """``(text, None)`` of a raw line, or ``(None, reason)``."""
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"invalid UTF-8 at byte {e.start}"


def _pair(source, target, normalize, names):
    """The cleaned pair, or ``(None, reason)`` when a side is empty."""
    if normalize:
        source, target = text.normalize_text(source), text.normalize_text(target)
    else:
        source, target = source.strip(), target.strip()
    if not source or not target:
        return None, f"empty {names[0] if not source else names[1]} field"
    return (source, target), None


def load_tatoeba(path, normalize=True, max_pairs=None, source="en", target="fr",
                 columns=None):
    """Read tab-separated sentence pairs (UTF-8), `English<TAB>French[<TAB>attribution]` by
    default. Bad lines (wrong number of fields, invalid UTF-8, an empty line or field) are
    listed in the report and logged as a warning.

    Args:
        path: the corpus file (e.g. `fra.txt`, `train.txt`).
        normalize: apply `keras_attn.text.tokenizers.normalize_text` (D2L) to both sides.
        max_pairs: stop after this many good pairs (None: read everything).
        source, target: the language codes of the pair to return (BCP 47).
        columns: the file's column languages, comma-separated (``"en,de"``); None:
            :func:`keras_attn.core.languages.data_columns` (English first).
    Returns:
        `(pairs, report)`: a list of `(source, target)` sentences and a `LoadReport`.
        Raises FileNotFoundError (no file) or ValueError (no good pair, or ``columns``
        lacks a language).
    Example:
        >>> load_tatoeba("fra-eng/train.txt")[0][0]
        ('go .', 'va !')
        >>> load_tatoeba("deu.txt", source="de", target="en")[0][0]   # English<TAB>German
        ('Geh.', 'Go.')
    """
    columns = columns or languages.data_columns(source, target)
    src_col, tgt_col, n_named = languages.column_indices(columns, source, target)
    codes = columns.split(",")
    names = [languages.language_name(c) for c in codes]
    side_names = (names[src_col], names[tgt_col])
    path = _check_file(path)

    def parse(line_no, raw):
        line, reason = _decode(raw, line_no)
        if reason is None and not line.strip():
            reason = "empty line"
        if reason is not None:
            return None, reason
        fields = line.split("\t")
        if len(fields) not in (n_named, n_named + 1):
            return None, (f"expected {n_named} or {n_named + 1} tab-separated fields "
                          f"({', '.join(names)}[, attribution]), found {len(fields)}")
        return _pair(fields[src_col], fields[tgt_col], normalize, side_names)

    with open(path, "rb") as f:
        return _collect(LoadReport(path=str(path)), max_pairs,
                        (parse(line_no, raw) for line_no, raw in enumerate(f, start=1)))


def _collect(report, max_pairs, parsed):
    """The pairs of ``parsed`` (a ``(pair, None)`` or ``(None, reason)`` per line, read
    until ``max_pairs`` good ones), counted in ``report``; ``(pairs, report)``."""
    pairs = []
    for line_no, (pair, reason) in enumerate(parsed, start=1):
        if max_pairs is not None and len(pairs) >= max_pairs:
            break
        report.num_read += 1
        if reason is None:
            pairs.append(pair)
        else:
            report.bad_lines.append((line_no, reason))
    report.num_kept = len(pairs)
    if not pairs:
        raise ValueError(f"No valid sentence pair in {report.path}. {report.summary()}")
    if report.bad_lines:
        logger.warning("load_tatoeba: %s", report.summary())
    return pairs, report


def load_aligned(source_path, target_path, normalize=True, max_pairs=None,
                 source="source", target="target"):
    """Read two aligned plain-text files (UTF-8): line ``i`` of one translates line ``i``
    of the other; ``source`` and ``target`` name their languages in the messages.

    Returns ``(pairs, report)`` as :func:`load_tatoeba` (``normalize``, ``max_pairs`` as
    there). Raises FileNotFoundError (no file) or ValueError (the files differ in line
    count, or hold no good pair).
    """
    expected = "a UTF-8 file of one sentence per line, aligned with the other file"
    source_path = _check_file(source_path, "source text", expected)
    target_path = _check_file(target_path, "target text", expected)
    source_lines, target_lines = (p.read_bytes().splitlines() for p in (source_path, target_path))
    if len(source_lines) != len(target_lines):
        raise ValueError(
            f"the two files are not aligned: {source_path} has {len(source_lines)} lines and "
            f"{target_path} has {len(target_lines)}; line i of one must translate line i of "
            "the other (a sentence per line, the same number of lines)")
    names = (languages.language_name(source), languages.language_name(target))

    def parse(line_no, raw_src, raw_tgt):
        (src, reason), tgt = _decode(raw_src, line_no), None
        if reason is None:
            tgt, reason = _decode(raw_tgt, line_no)
            reason = reason and f"{target_path.name}: {reason}"
        else:
            reason = f"{source_path.name}: {reason}"
        if reason is None and not src.strip() and not tgt.strip():
            reason = "empty line"
        return (None, reason) if reason is not None else _pair(src, tgt, normalize, names)

    return _collect(LoadReport(path=f"{source_path} + {target_path}"), max_pairs,
                    (parse(n, src, tgt) for n, (src, tgt)
                     in enumerate(zip(source_lines, target_lines), start=1)))


def load_tatoeba_references(path, normalize=True, source="en", target="fr", columns=None):
    """Group every translation of each source sentence of ``path`` (e.g. `dev.txt`), for
    multi-reference BLEU; the other arguments as :func:`load_tatoeba`.

    Returns:
        `(sources, references)`: source sentences in order of first appearance and, for
        each, the list of its distinct references.
    Example:
        >>> sources, refs = load_tatoeba_references("fra-eng/dev.txt")
        >>> len(sources), refs[0][:2]
    """
    pairs, _ = load_tatoeba(path, normalize=normalize, source=source, target=target,
                            columns=columns)
    grouped = {}
    for sentence, translation in pairs:
        refs = grouped.setdefault(sentence, [])
        if translation not in refs:
            refs.append(translation)
    return list(grouped), list(grouped.values())


DATA_ENV = "KERAS_ATTN_DATA"  # the corpus when --data is not given


def corpus_location(data_arg=""):
    """The Tatoeba corpus to read: ``data_arg``, else the ``KERAS_ATTN_DATA`` variable
    (ValueError when neither is set)."""
    location = data_arg or os.environ.get(DATA_ENV, "")
    if not location:
        raise ValueError(
            "No Tatoeba corpus given: pass --data (a tab-separated file, a folder with "
            f"train.txt and dev.txt, or a URL such as {D2L_FRA_ENG_URL}) or set {DATA_ENV}.")
    return location


HELD_OUT_PERCENT = 10  # the most each held-out split takes of a corpus's source sentences


def held_out_size(num_sources, num_valid, num_splits=2, report=None, max_pairs=None):
    """Source sentences each held-out split takes from a corpus of ``num_sources`` distinct
    source sentences: ``num_valid``, at most :data:`HELD_OUT_PERCENT` % of them (so a small
    corpus keeps 80 % or more for training), at least one.

    Raises:
        ValueError: ``num_splits`` held-out sentences would leave none to train on; the
            message says what to give instead.
    Example:
        >>> held_out_size(112830, 2000), held_out_size(1703, 2000), held_out_size(5, 2000)
        (2000, 170, 1)
    """
    held = min(num_valid, max(1, num_sources * HELD_OUT_PERCENT // 100))
    if num_sources - num_splits * held < 1:
        where = f"{report.path}: " if report is not None else ""
        read = " (--num-train read only the first pairs: 0 reads them all)" if max_pairs else ""
        raise ValueError(
            f"{where}{num_sources} distinct source sentence{'' if num_sources == 1 else 's'} "
            f"{'is' if num_sources == 1 else 'are'} too few to split{read}: a run holds out at "
            f"least one for validation{' and one for the test' if num_splits == 2 else ''} "
            f"and trains on the rest, so it needs {num_splits + 1} or more (and thousands to "
            "learn a language pair). Give a larger corpus, or a folder with train.txt and "
            "dev.txt (dev.txt is then the test split).")
    return held


def tatoeba_splits(data_arg="", num_valid=2000, max_pairs=None, seed=0, normalize=False,
                   log=print, source="en", target="fr", columns=None, target_data=""):
    """Train/valid/test pairs of a Tatoeba file or folder, a tab-separated file of named
    columns, or two aligned plain-text files; ``valid`` is held out of the training file by
    source sentence.

    Args:
        data_arg: a file, a folder (``train.txt``, and ``dev.txt`` as the test split with
            all references of each source), or a URL (downloaded); empty:
            :func:`corpus_location`.
        num_valid: the most source sentences held out for ``valid`` (and ``test`` without
            a dev file); each takes at most 10 % of a small corpus (:func:`held_out_size`).
        max_pairs, seed: read at most this many pairs; the shuffle's seed.
        normalize: D2L's lower-casing and re-spacing (WordPiece needs it); False keeps the
            text as written (SentencePiece).
        log: where the bad-line summary goes.
        source, target, columns: as :func:`load_tatoeba`.
        target_data: the target side's plain-text file (``data_arg`` is then the source's).
    Returns:
        `(splits, refs)`: ``{"train", "valid", "test"}`` lists of pairs, and the dev file's
        references per test source (None without one).
    Example:
        >>> splits, refs = tatoeba_splits("fra.txt", source="fr", target="en")
        >>> splits["train"][0]          # (French, English)
    """
    path = resolve_data(corpus_location(data_arg))
    dev_path = None
    if target_data:
        pairs, report = load_aligned(path, resolve_data(target_data), normalize=normalize,
                                     max_pairs=max_pairs, source=source, target=target)
    else:
        if os.path.isdir(path):
            dev_path = os.path.join(path, "dev.txt")
            path = os.path.join(path, "train.txt")
            dev_path = dev_path if os.path.exists(dev_path) else None
        pairs, report = load_tatoeba(path, normalize=normalize, max_pairs=max_pairs,
                                     source=source, target=target, columns=columns)
    if report.bad_lines:
        log(report.summary())
    sentences = sorted({s for s, _ in pairs})
    held = held_out_size(len(sentences), num_valid, 1 if dev_path else 2, report, max_pairs)
    if held < num_valid:
        log(f"held out {held} of {len(sentences)} source sentences for validation"
            f"{'' if dev_path else ' and as many for the test'} ({HELD_OUT_PERCENT} % each of "
            f"a corpus under {num_valid * 100 // HELD_OUT_PERCENT} sentences; --num-valid "
            f"{num_valid} is the most)")
    random.Random(seed).shuffle(sentences)
    valid_src = set(sentences[:held])
    test_src = set() if dev_path else set(sentences[held: 2 * held])
    splits = {"train": [p for p in pairs if p[0] not in valid_src and p[0] not in test_src],
              "valid": [p for p in pairs if p[0] in valid_src],
              "test": [p for p in pairs if p[0] in test_src]}
    refs = None
    if dev_path:
        sources, refs = load_tatoeba_references(dev_path, normalize=normalize, source=source,
                                                target=target, columns=columns)
        splits["test"] = [(s, r[0]) for s, r in zip(sources, refs)]
    return splits, refs
