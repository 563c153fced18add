"""The Tatoeba English-French corpus in D2L's format: ``English<TAB>French[<TAB>attribution]``.

Bad lines (wrong number of fields, invalid UTF-8, an empty line or field) are skipped,
counted and reported with their line numbers, never dropped silently.

References: D2L 10.5 (machine translation data).
"""
import dataclasses
import logging
import os
import random
from pathlib import Path

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
        num_read: lines examined.
        num_kept: pairs returned.
        bad_lines: list of `(line_no, reason)`, 1-based line numbers.
    Example:
        >>> pairs, report = load_tatoeba("fra.txt")
        >>> print(report.summary())
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


def load_tatoeba(path, normalize=True, max_pairs=None):
    """Read `English<TAB>French[<TAB>attribution]` lines (UTF-8) into sentence pairs.

    Bad lines (wrong number of fields, invalid UTF-8, empty line or field) are skipped,
    counted and listed in the report with their line numbers, and a warning is logged.

    Args:
        path: the corpus file (e.g. `fra.txt`, `train.txt`).
        normalize: apply `keras_attn.text.tokenizers.normalize_text` (D2L preprocessing) to both sides.
        max_pairs: stop after this many good pairs (None: read everything).
    Returns:
        `(pairs, report)`: a list of `(english, french)` and a `LoadReport`.
    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file holds no good pair.
    Example:
        >>> pairs, report = load_tatoeba("fra-eng/train.txt")
        >>> pairs[0]
        ('go .', 'va !')
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Tatoeba corpus not found: {path} (expected a UTF-8 file of "
            f"'English<TAB>French' lines, e.g. fra.txt from {D2L_FRA_ENG_URL})"
            if not path.exists() else f"Tatoeba corpus path is not a file: {path}"
        )
    report = LoadReport(path=str(path))
    pairs = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if max_pairs is not None and len(pairs) >= max_pairs:
                break
            report.num_read += 1
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                report.bad_lines.append((line_no, f"invalid UTF-8 at byte {e.start}"))
                continue
            if not line.strip():
                report.bad_lines.append((line_no, "empty line"))
                continue
            fields = line.split("\t")
            if len(fields) not in (2, 3):
                report.bad_lines.append(
                    (line_no, f"expected 2 or 3 tab-separated fields (English, French"
                              f"[, attribution]), found {len(fields)}"))
                continue
            english, french = fields[0], fields[1]
            if normalize:
                english, french = text.normalize_text(english), text.normalize_text(french)
            else:
                english, french = english.strip(), french.strip()
            if not english or not french:
                side = "English" if not english else "French"
                report.bad_lines.append((line_no, f"empty {side} field"))
                continue
            pairs.append((english, french))
    report.num_kept = len(pairs)
    if not pairs:
        raise ValueError(f"No valid sentence pair in {path}. {report.summary()}")
    if report.bad_lines:
        logger.warning("load_tatoeba: %s", report.summary())
    return pairs, report


def load_tatoeba_references(path, normalize=True):
    """Group every French translation of each English sentence, for multi-reference BLEU.

    Args:
        path: corpus file (e.g. `dev.txt`: 2,000 English sentences, all their translations).
        normalize: apply `normalize_text` to both sides.
    Returns:
        `(sources, references)`: English sentences in order of first appearance and, for
        each, the list of its distinct French references.
    Example:
        >>> sources, refs = load_tatoeba_references("fra-eng/dev.txt")
        >>> streams = [[r[i] if i < len(r) else None for r in refs]
        ...            for i in range(max(map(len, refs)))]
        >>> sacrebleu.corpus_bleu(hypotheses, streams)   # None: no such reference
    """
    pairs, _ = load_tatoeba(path, normalize=normalize)
    grouped = {}
    for english, french in pairs:
        refs = grouped.setdefault(english, [])
        if french not in refs:
            refs.append(french)
    return list(grouped), list(grouped.values())


DATA_ENV = "KERAS_ATTN_DATA"  # the corpus when --data is not given


def corpus_location(data_arg=""):
    """The Tatoeba corpus to read: ``data_arg``, else the ``KERAS_ATTN_DATA`` variable.

    Raises:
        ValueError: neither is set; the message names both and D2L's public file.
    """
    location = data_arg or os.environ.get(DATA_ENV, "")
    if not location:
        raise ValueError(
            "No Tatoeba corpus given: pass --data (a tab-separated file, a folder with "
            f"train.txt and dev.txt, or a URL such as {D2L_FRA_ENG_URL}) or set {DATA_ENV}.")
    return location


def tatoeba_splits(data_arg="", num_valid=2000, max_pairs=None, seed=0, normalize=False,
                   log=print):
    """Train/valid/test pairs from a Tatoeba file or a folder with train.txt and dev.txt.

    ``data_arg``: a file, a folder (``train.txt`` and ``dev.txt``: dev becomes the test
    split, with all references of each English sentence for BLEU), or a URL (downloaded,
    then split). Empty: the ``KERAS_ATTN_DATA`` environment variable; a ``ValueError``
    if that is unset too.
    ``valid`` is held out of the training file by English sentence (never in train).
    ``normalize``: D2L's lower-casing and re-spacing of both sides (the WordPiece
    tokenizer needs it); False keeps the text as written (SentencePiece).
    """
    path = resolve_data(corpus_location(data_arg))
    dev_path = None
    if os.path.isdir(path):
        dev_path = os.path.join(path, "dev.txt")
        path = os.path.join(path, "train.txt")
        dev_path = dev_path if os.path.exists(dev_path) else None
    pairs, report = load_tatoeba(path, normalize=normalize, max_pairs=max_pairs)
    if report.bad_lines:
        log(report.summary())
    english = sorted({s for s, _ in pairs})
    random.Random(seed).shuffle(english)
    valid_en = set(english[:num_valid])
    test_en = set() if dev_path else set(english[num_valid: 2 * num_valid])
    splits = {"train": [p for p in pairs if p[0] not in valid_en and p[0] not in test_en],
              "valid": [p for p in pairs if p[0] in valid_en],
              "test": [p for p in pairs if p[0] in test_en]}
    refs = None
    if dev_path:
        sources, refs = load_tatoeba_references(dev_path, normalize=normalize)
        splits["test"] = [(s, r[0]) for s, r in zip(sources, refs)]
    return splits, refs
