"""Tests for keras_attn.data: dates corpus, Tatoeba loader, tf.data pipeline."""
import datetime
import re
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import data
from keras_attn.text import tokenizers as text
from keras_attn.text.tokenizers import END_ID, PAD_ID, START_ID

FRA_ENG = Path(__file__).resolve().parents[3] / "shared" / "data" / "fra-eng"

# -- an independent date parser (written from scratch for the test) --------------------
_EN_MONTHS = "january february march april may june july august september october " \
             "november december".split()
EN_MONTH = {**{m: i + 1 for i, m in enumerate(_EN_MONTHS)},
            **{m[:3]: i + 1 for i, m in enumerate(_EN_MONTHS)}}
_EN_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
EN_WEEKDAY = {**{d: i for i, d in enumerate(_EN_DAYS)},
              **{d[:3]: i for i, d in enumerate(_EN_DAYS)}}
FR_MONTH = {"janvier": 1, "janv.": 1, "février": 2, "févr.": 2, "mars": 3, "avril": 4,
            "avr.": 4, "mai": 5, "juin": 6, "juillet": 7, "juil.": 7, "août": 8,
            "septembre": 9, "sept.": 9, "octobre": 10, "oct.": 10, "novembre": 11,
            "nov.": 11, "décembre": 12, "déc.": 12}
_FR_DAYS = "lundi mardi mercredi jeudi vendredi samedi dimanche".split()
FR_WEEKDAY = {**{d: i for i, d in enumerate(_FR_DAYS)},
              **{d[:3] + ".": i for i, d in enumerate(_FR_DAYS)}}

EN_DAY_FIRST = re.compile(r"(?:(?P<wd>[a-z]+), )?(?:the )?(?P<d>\d{1,2})(?:st|nd|rd|th)? "
                          r"(?:of )?(?P<m>[a-z]+)\.? (?P<y>\d{4})")
EN_MONTH_FIRST = re.compile(r"(?:(?P<wd>[a-z]+), )?(?P<m>[a-z]+)\.? (?P<d>\d{1,2})"
                            r"(?:st|nd|rd|th)?, (?P<y>\d{4}|'?\d{2})")
FR_TEXT = re.compile(r"(?:le )?(?:(?P<wd>[a-zé]+\.?) )?(?P<d>\d{1,2})(?:er)? "
                     r"(?P<m>[a-zéû]+\.?) (?P<y>\d{4})")


def _year(y):
    y = y.lstrip("'")
    return int(y) if len(y) == 4 else datetime.datetime.strptime(y, "%y").year


def parse_date(source):
    """All dates `source` can mean under the rules of the task (should be exactly one)."""
    s = source.lower()
    found = set()
    m = re.fullmatch(r"(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})", s)
    if m:  # day first
        found.add(datetime.date(_year(m[4]), int(m[3]), int(m[1])))
    m = re.fullmatch(r"(\d{4})([/.-]?)(\d{2})\2(\d{2})", s)
    if m:
        found.add(datetime.date(int(m[1]), int(m[3]), int(m[4])))
    for pattern, months, weekdays in ((EN_DAY_FIRST, EN_MONTH, EN_WEEKDAY),
                                      (EN_MONTH_FIRST, EN_MONTH, EN_WEEKDAY),
                                      (FR_TEXT, FR_MONTH, FR_WEEKDAY)):
        m = pattern.fullmatch(s)
        if not m or m["m"] not in months:
            continue
        date = datetime.date(_year(m["y"]), months[m["m"]], int(m["d"]))
        if m["wd"] is not None and weekdays.get(m["wd"]) != date.weekday():
            continue  # unknown or wrong weekday
        found.add(date)
    return found


# -- dates -------------------------------------------------------------------------------
def test_generate_dates_deterministic():
    assert data.generate_dates(500, seed=1) == data.generate_dates(500, seed=1)
    assert data.generate_dates(500, seed=1) != data.generate_dates(500, seed=2)
    assert len(data.generate_dates(0)) == 0
    with pytest.raises(ValueError, match="n=-1"):
        data.generate_dates(-1)


def test_dates_parse_to_their_target():
    samples = data.generate_dates(4000, seed=0, return_formats=True)
    formats = Counter(name for _, _, name in samples)
    assert len(formats) == len(data.DATE_FORMATS) >= 15
    assert any(n.startswith("fr_") for n in formats) and any(n.startswith("en_") for n in formats)
    for source, target, name in samples:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target), target
        assert parse_date(source) == {datetime.date.fromisoformat(target)}, (source, name)


def test_casing_varies():
    sources = [s for s, _, n in data.generate_dates(3000, seed=5, return_formats=True)
               if n.startswith(("en_", "fr_"))]
    assert any(s.isupper() for s in sources)
    assert any(s.islower() for s in sources)
    assert any(s[0].isupper() and not s.isupper() for s in sources)


def test_weekday_is_true_weekday():
    checked = 0
    for source, target in data.generate_dates(3000, seed=4):
        words = re.findall(r"[a-zé]+\.?", source.lower())
        date = datetime.date.fromisoformat(target)
        for w in words:
            if w.rstrip(",") in ("monday", "tuesday", "wednesday", "thursday", "friday",
                                 "saturday", "sunday"):
                assert date.strftime("%A").lower() == w, source
                checked += 1
            if w in FR_WEEKDAY and w != "mar." or w in _FR_DAYS:
                assert FR_WEEKDAY[w] == date.weekday(), source
                checked += 1
    assert checked > 100


def test_numeric_dates_are_day_first():
    samples = data.generate_dates(4000, seed=6, return_formats=True)
    ambiguous = [(s, t) for s, t, n in samples if n == "dd/mm/yyyy"
                 and int(s[:2]) <= 12 and s[:2] != s[3:5]]
    assert len(ambiguous) > 10
    for source, target in ambiguous:
        assert datetime.datetime.strptime(source, "%d/%m/%Y").date().isoformat() == target
        assert datetime.datetime.strptime(source, "%m/%d/%Y").date().isoformat() != target


def test_years_in_range_and_two_digit_pivot():
    samples = data.generate_dates(6000, seed=7, return_formats=True)
    years = [int(t[:4]) for _, t, _ in samples]
    assert min(years) >= 1900 and max(years) <= 2099
    assert min(years) < 1920 and max(years) > 2080  # both centuries covered
    two_digit = [(s, t) for s, t, n in samples if n in ("dd/mm/yy", "d/m/yy")]
    assert two_digit
    for source, target in two_digit:
        fmt = "%d/%m/%y"
        assert datetime.datetime.strptime(source, fmt).date().isoformat() == target
        assert 1969 <= int(target[:4]) <= 2068


def test_dates_splits_disjoint():
    splits = data.dates_splits(num_train=3000, num_valid=300, num_test=300, seed=1)
    assert {k: len(v) for k, v in splits.items()} == {"train": 3000, "valid": 300, "test": 300}
    sources = {k: [s for s, _ in v] for k, v in splits.items()}
    for k in sources:
        assert len(set(sources[k])) == len(sources[k])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["train"]) & set(sources["valid"])
    assert not set(sources["valid"]) & set(sources["test"])
    assert splits == data.dates_splits(num_train=3000, num_valid=300, num_test=300, seed=1)
    assert splits["test"] != data.dates_splits(num_train=3000, num_valid=300, num_test=300,
                                               seed=2)["test"]


# -- Tatoeba loader -------------------------------------------------------------------------
def write_corpus(path):
    lines = [
        "Go.\tVa\u00a0!".encode(),                                  # 1 good
        "Hi.\tSalut !\tCC-BY 2.0 (France) Attribution".encode(),    # 2 good (attribution)
        b"only one field",                                          # 3 bad: 1 field
        "I'm home.\tJe suis chez moi.".encode(),                    # 4 good
        b"bad \xff\xfe bytes\tmauvais",                             # 5 bad: UTF-8
        b"",                                                        # 6 bad: empty line
        b"a\tb\tc\td",                                              # 7 bad: 4 fields
        b"Empty French.\t  ",                                       # 8 bad: empty French
        "Go.\tMarche.".encode(),                                    # 9 good
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_load_tatoeba_reports_bad_lines(tmp_path, caplog):
    path = write_corpus(tmp_path / "fra.txt")
    with caplog.at_level("WARNING"):
        pairs, report = data.load_tatoeba(path)
    assert pairs == [("go .", "va !"), ("hi .", "salut !"), ("i'm home .", "je suis chez moi ."),
                     ("go .", "marche .")]
    assert report.num_read == 9 and report.num_kept == 4
    assert [n for n, _ in report.bad_lines] == [3, 5, 6, 7, 8]
    reasons = dict(report.bad_lines)
    assert "found 1" in reasons[3] and "found 4" in reasons[7]
    assert "UTF-8" in reasons[5] and reasons[6] == "empty line"
    assert reasons[8] == "empty French field"
    summary = report.summary()
    assert "kept 4" in summary and "5 bad lines" in summary and "line 5: invalid UTF-8" in summary
    assert "5 bad lines" in caplog.text  # logged, not silent


def test_load_tatoeba_options(tmp_path):
    path = write_corpus(tmp_path / "fra.txt")
    pairs, report = data.load_tatoeba(path, normalize=False, max_pairs=2)
    assert pairs == [("Go.", "Va\u00a0!"), ("Hi.", "Salut !")]
    assert report.num_kept == 2 and report.num_read == 2


def test_load_tatoeba_empty_corpus(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"no tab here\n\n")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        data.load_tatoeba(path)
    (tmp_path / "zero.txt").write_bytes(b"")
    with pytest.raises(ValueError, match="zero.txt"):
        data.load_tatoeba(tmp_path / "zero.txt")


def test_load_tatoeba_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        data.load_tatoeba(tmp_path / "nowhere.txt")


def test_load_tatoeba_references(tmp_path):
    path = tmp_path / "dev.txt"
    path.write_text("Go.\tVa !\nHi.\tSalut.\nGo.\tMarche.\nGo.\tVa\u202f!\n", encoding="utf-8")
    sources, refs = data.load_tatoeba_references(path)
    assert sources == ["go .", "hi ."]
    assert refs == [["va !", "marche ."], ["salut ."]]  # duplicates after normalising merged


def test_resolve_data(tmp_path):
    plain = write_corpus(tmp_path / "fra.txt")
    assert data.resolve_data(str(plain), tmp_path / "cache") == plain
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        data.resolve_data(tmp_path / "missing.txt", tmp_path / "cache")
    archive = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(plain, "fra-eng/fra.txt")
        zf.writestr("fra-eng/_about.txt", "about")
    cache = tmp_path / "cache"
    local = data.resolve_data(archive.as_uri(), cache)  # URL path: download, then unzip
    assert local.read_bytes() == plain.read_bytes()
    assert (cache / "fra-eng.zip").exists() and local.name == "fra.txt"
    assert data.resolve_data(archive, tmp_path / "cache2").read_bytes() == plain.read_bytes()
    assert not [p for p in cache.rglob("*") if p.name.startswith(".tmp")]  # no half file



def test_tatoeba_corpus_is_data_or_the_environment_variable(tmp_path, monkeypatch):
    """No corpus outside what the user names: --data, else KERAS_ATTN_DATA, else an error
    that says both."""
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    with pytest.raises(ValueError, match="--data.*KERAS_ATTN_DATA"):
        data.tatoeba_splits("", num_valid=1)
    corpus = tmp_path / "fra.txt"
    corpus.write_text("Go.\tVa !\nHi.\tSalut.\nRun.\tCours !\n", encoding="utf-8")
    monkeypatch.setenv(data.DATA_ENV, str(corpus))
    splits, refs = data.tatoeba_splits("", num_valid=1)
    assert sorted(p for split in splits.values() for p in split) == [
        ("Go.", "Va !"), ("Hi.", "Salut."), ("Run.", "Cours !")] and refs is None
    assert data.corpus_location(str(tmp_path / "other.txt")) == str(tmp_path / "other.txt")


def test_a_run_stores_its_corpus_as_an_absolute_path(tmp_path, monkeypatch):
    """``data`` and ``target_data`` absolute (``~`` and KERAS_ATTN_DATA included), a URL as
    given, the dates task untouched: evaluate reads them from any folder."""
    from keras_attn.core.config import TrainConfig

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = data.stored_corpus(TrainConfig(task="tatoeba", data="train.fr",
                                            target_data="~/train.en", source_lang="fr",
                                            target_lang="en"))
    assert (config.data, config.target_data) == (str(tmp_path / "train.fr"),
                                                 str(tmp_path / "home" / "train.en"))
    assert data.stored_corpus(TrainConfig(task="tatoeba", data=data.D2L_FRA_ENG_URL)).data == (
        data.D2L_FRA_ENG_URL)
    monkeypatch.setenv(data.DATA_ENV, "fra-eng")
    assert data.stored_corpus(TrainConfig(task="tatoeba")).data == str(tmp_path / "fra-eng")
    assert data.stored_corpus(TrainConfig(task="dates")).data == ""


def test_a_stored_corpus_is_found_from_another_folder(tmp_path, monkeypatch):
    """A relative path (a run trained before paths were stored absolute) is read from the
    current folder, else from a folder above the run; otherwise the message says what to
    pass. An absolute one that moved says so."""
    (tmp_path / "work" / "runs" / "fra").mkdir(parents=True)
    (tmp_path / "work" / "fra-eng").mkdir()
    (tmp_path / "elsewhere").mkdir()
    run = str(tmp_path / "work" / "runs" / "fra")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert data.run_location("fra-eng", run) == str(tmp_path / "work" / "fra-eng")
    assert data.run_location("fra-eng", "../work/runs/fra") == str(tmp_path / "work" /
                                                                   "fra-eng")
    (tmp_path / "elsewhere" / "fra-eng").mkdir()  # the current folder first, as before
    assert data.run_location("fra-eng", run) == str(tmp_path / "elsewhere" / "fra-eng")
    for stored in (data.D2L_FRA_ENG_URL, "", str(tmp_path / "work" / "fra-eng")):
        assert data.run_location(stored, run) == stored
    with pytest.raises(FileNotFoundError) as info:
        data.run_location("gone.txt", run, "--target-data")
    assert "stored as 'gone.txt', a path relative to the folder" in str(info.value)
    assert "pass --target-data with the corpus's path" in str(info.value)
    with pytest.raises(FileNotFoundError, match="is not there any more: pass --data"):
        data.run_location(str(tmp_path / "moved"), run)


def test_an_old_run_with_a_relative_corpus_resumes_from_its_folder(tmp_path, monkeypatch):
    """The resumed run's absolute path is the old relative one read from the same folder:
    the same options; another corpus is still refused."""
    import dataclasses
    import json

    from keras_attn.core.config import TrainConfig
    from keras_attn.training import recipes

    monkeypatch.chdir(tmp_path)
    old = TrainConfig(task="tatoeba", data="fra.txt")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(dataclasses.asdict(old)))
    recipes._prepare_run_dir(data.stored_corpus(old), "run")
    other = data.stored_corpus(TrainConfig(task="tatoeba", data="deu.txt"))
    with pytest.raises(ValueError, match="holds a run with other options {'data'"):
        recipes._prepare_run_dir(other, "run")


def small_domain_corpus(path, num_pairs=3000, num_sources=1703):
    """A corpus of the form a small domain's is: ``num_pairs`` pairs of ``num_sources``
    distinct source sentences (many with several translations), English<TAB>French."""
    lines = [f"Sentence {i % num_sources}.\tPhrase {i % num_sources}, {i // num_sources} !\n"
             for i in range(num_pairs)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_a_small_corpus_holds_out_a_tenth_for_each_split(tmp_path):
    """3,000 pairs of 1,703 distinct sources: 170 held out for validation and 170 for the
    test (10 % each), the rest trains; the split is by source sentence and the log says
    why fewer than --num-valid were held out. (Before: 2,000 held out each, so validation
    took every sentence and training none.)"""
    logged = []
    splits, _ = data.tatoeba_splits(str(small_domain_corpus(tmp_path / "small.txt")),
                                    num_valid=2000, log=logged.append)
    sources = {name: {s for s, _ in pairs} for name, pairs in splits.items()}
    assert (len(sources["valid"]), len(sources["test"]), len(sources["train"])) == (
        170, 170, 1703 - 340)
    assert not (sources["valid"] & sources["test"] or sources["train"] & sources["valid"]
                or sources["train"] & sources["test"])
    assert sum(map(len, splits.values())) == 3000
    assert any("held out 170 of 1703 source sentences" in line and "10 %" in line
               for line in logged), logged


@pytest.mark.parametrize("num_sources, num_valid, expected", [
    (20000, 2000, 2000), (19999, 2000, 1999), (1703, 2000, 170), (1703, 100, 100),
    (9, 2000, 1), (3, 2000, 1)])
def test_the_held_out_size_is_num_valid_at_most_a_tenth(num_sources, num_valid, expected):
    from keras_attn.data.tatoeba import held_out_size

    assert held_out_size(num_sources, num_valid) == expected


@pytest.mark.parametrize("lines, folder, words", [
    (["Go.\tVa !", "Go.\tAllez !", "Hi.\tSalut."], False,
     ["2 distinct source sentences are too few to split", "needs 3 or more",
      "one for validation and one for the test", "dev.txt"]),
    (["Go.\tVa !"], True, ["1 distinct source sentence is too few", "needs 2 or more"])])
def test_a_corpus_too_small_to_split_says_so_and_what_to_do(tmp_path, lines, folder, words):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if folder:
        (corpus / "dev.txt").write_text("Run.\tCours !\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        data.tatoeba_splits(str(corpus if folder else corpus / "train.txt"), num_valid=2000,
                            log=lambda *a: None)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_a_large_corpus_splits_as_before(tmp_path):
    """From 20,000 distinct sources up, --num-valid sentences each (2,000): the first of the
    seeded shuffle of the sorted sources for validation, the next for the test, as always."""
    import random

    corpus = small_domain_corpus(tmp_path / "large.txt", 21000, 20500)
    splits, _ = data.tatoeba_splits(str(corpus), num_valid=2000, log=lambda *a: None)
    order = sorted({f"Sentence {i}." for i in range(20500)})
    random.Random(0).shuffle(order)
    assert {s for s, _ in splits["valid"]} == set(order[:2000])
    assert {s for s, _ in splits["test"]} == set(order[2000:4000])


# The splits of the shared English-French corpus, as made before the held-out share scaled
# (sha256 of each split's pairs as JSON, first 16 hex digits): the recipe's figures hang on them.
FRA_ENG_SPLITS = {
    "folder": {"train": "62b5355529990983", "valid": "4feca253f8c7d63a",
               "test": "669891b85128bbbf"},
    "train.txt": {"train": "61b124b2850bb735", "valid": "4feca253f8c7d63a",
                  "test": "166fb97270634fa9"}}


@pytest.mark.skipif(not FRA_ENG.is_dir(), reason="the English-French corpus is not beside "
                                                 "the checkout")
def test_the_fra_eng_splits_are_unchanged():
    import hashlib
    import json

    for form, path in (("folder", FRA_ENG), ("train.txt", FRA_ENG / "train.txt")):
        splits, _ = data.tatoeba_splits(str(path), log=lambda *a: None)
        digests = {name: hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode())
                   .hexdigest()[:16] for name, pairs in splits.items()}
        assert digests == FRA_ENG_SPLITS[form], form

# -- tf.data pipeline ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def date_pairs():
    return data.dates_splits(num_train=600, num_valid=0, num_test=0, seed=3)["train"]


@pytest.fixture(scope="module")
def char_tok(date_pairs):
    return text.Tokenizer(text.char_vocab([s for s, _ in date_pairs]))


def batches(ds):
    return [(x["source"].numpy(), x["target_in"].numpy(), y.numpy()) for x, y in ds]


def test_prepare_source_and_target():
    ids = tf.ragged.constant([[5, 6, 7], [8]], dtype=tf.int32)
    assert data.prepare_source(ids).to_list() == [[5, 6, 7, END_ID], [8, END_ID]]
    assert data.prepare_source(ids, max_len=3).to_list() == [[5, 6, END_ID], [8, END_ID]]
    t_in, t_out = data.prepare_target(ids, max_len=3)
    assert t_in.to_list() == [[START_ID, 5, 6], [START_ID, 8]]
    assert t_out.to_list() == [[5, 6, END_ID], [8, END_ID]]


def test_pipeline_shapes_shift_padding(date_pairs, char_tok):
    ds = data.make_dataset(date_pairs, char_tok, char_tok, batch_size=32, seed=0)
    spec_x, spec_y = ds.element_spec
    assert set(spec_x) == {"source", "target_in"}
    assert spec_x["source"].dtype == spec_x["target_in"].dtype == spec_y.dtype == tf.int32
    seen, rows = 0, 0
    for src, t_in, t_out in batches(ds):
        assert src.ndim == t_in.ndim == 2 and t_in.shape == t_out.shape
        assert src.shape[0] == t_in.shape[0] <= 32
        rows += src.shape[0]
        for s_row, i_row, o_row in zip(src, t_in, t_out):
            n = int((o_row != PAD_ID).sum())
            assert (o_row[n:] == PAD_ID).all() and (i_row[n:] == PAD_ID).all()  # padding 0
            assert i_row[0] == START_ID and o_row[n - 1] == END_ID
            np.testing.assert_array_equal(i_row[1:n], o_row[:n - 1])  # the shift
            m = int((s_row != PAD_ID).sum())
            assert s_row[m - 1] == END_ID and (s_row[m:] == PAD_ID).all()
            assert (s_row[:m - 1] > END_ID).all()  # real tokens never reserved ids
            seen += 1
    assert rows == seen == len(date_pairs)
    # Decoding a batch gives back the pairs.
    src, _, t_out = batches(ds)[0]
    sources = set(char_tok.detokenize(tf.constant(src)).numpy())
    targets = set(char_tok.detokenize(tf.constant(t_out)).numpy())
    pairs = {(s.encode(), t.encode()) for s, t in date_pairs}
    assert {t for _, t in pairs} >= targets and {s for s, _ in pairs} >= sources


@pytest.mark.heavy  # builds the corpus pipeline twice
def test_pipeline_deterministic(date_pairs, char_tok):
    def first_epoch(seed):
        ds = data.make_dataset(date_pairs, char_tok, char_tok, batch_size=16, seed=seed)
        return [b[0].tolist() for b in batches(ds)]

    assert first_epoch(0) == first_epoch(0)
    assert first_epoch(0) != first_epoch(1)


def test_pipeline_bucketing_and_max_len(char_tok):
    # Mixed lengths: short numeric and long French sources.
    pairs = [(s, t) for s, t, n in data.generate_dates(2000, seed=9, return_formats=True)
             if n in ("d/m/yyyy", "fr_le_jour_d_mois_y")]
    ds = data.make_dataset(pairs, char_tok, char_tok, batch_size=32, seed=0)
    widths = []
    for src, _, _ in batches(ds):
        lengths = (src != PAD_ID).sum(axis=1)
        widths.append(src.shape[1])
        assert lengths.max() - lengths.min() <= 12  # similar lengths batched together
    assert len(set(widths)) > 1
    plain = data.make_dataset(pairs, char_tok, char_tok, batch_size=32, bucket=False,
                              shuffle=False, max_len=8)
    b = batches(plain)
    assert all(s.shape[0] == 32 for s, _, _ in b[:-1])
    assert max(s.shape[1] for s, _, _ in b) == 8 and max(o.shape[1] for _, _, o in b) == 8
    src, t_in, t_out = b[0]
    assert src[0, 7] == END_ID and t_out[0, 7] == END_ID and t_in[0, 0] == START_ID
    with pytest.raises(ValueError, match="max_len=1"):
        data.make_dataset(pairs, char_tok, char_tok, batch_size=4, max_len=1)


@pytest.mark.slow  # reads the whole real corpus
def test_real_corpus():
    if not (FRA_ENG / "train.txt").exists():
        pytest.skip(f"real corpus not found at {FRA_ENG} (shared data folder absent)")
    pairs, report = data.load_tatoeba(FRA_ENG / "train.txt")
    assert report.num_kept == len(pairs) == 161415 and not report.bad_lines
    assert pairs[0] == ("go .", "va !")
    sources, refs = data.load_tatoeba_references(FRA_ENG / "dev.txt")
    assert len(sources) == 2000 and sum(map(len, refs)) <= 2873
    assert not set(sources) & {e for e, _ in pairs}  # split by English sentence
    sample = pairs[::200]
    en = text.Tokenizer(text.learn_wordpiece_vocab([e for e, _ in sample], 500))
    fr = text.Tokenizer(text.learn_wordpiece_vocab([f for _, f in sample], 500))
    ds = data.make_dataset(sample, en, fr, batch_size=64, max_len=40)
    x, y = next(iter(ds))
    assert x["source"].shape[0] == y.shape[0] and y.shape[1] <= 40


@pytest.mark.parametrize("bucket", [True, False])
def test_pipeline_states_its_number_of_batches(date_pairs, char_tok, bucket):
    """model.fit reads the epoch length from the cardinality; unbatch() and bucketing hide
    it, and Keras then warns "Your input ran out of data" at the end of the first epoch."""
    ds = data.make_dataset(date_pairs, char_tok, char_tok, batch_size=24, seed=0,
                           bucket=bucket)
    n = int(ds.cardinality())
    assert n == len(batches(ds)) == len(batches(ds))  # every epoch, reshuffled or not
    assert n >= -(-len(date_pairs) // 24)
    model = keras.Sequential([keras.layers.Embedding(char_tok.vocab_size, 4),
                              keras.layers.Dense(char_tok.vocab_size)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(ds.map(lambda x, y: (x["target_in"], y)), epochs=2, verbose=0)
    assert not [w for w in caught if "ran out of data" in str(w.message)]


def test_pipeline_runs_without_the_autotuning_thread(date_pairs, char_tok):
    """The dataset (and what training makes of it: repeated, given distribution options)
    has tf.data's autotuning thread off, whose sleep an iterator's destruction waited for; a
    pass still gives every pair."""
    ds = data.make_dataset(date_pairs, char_tok, char_tok, batch_size=32, seed=0)
    assert ds.options().autotune.enabled is False
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    assert ds.repeat().with_options(options).options().autotune.enabled is False
    assert sum(int(x["source"].shape[0]) for x, _ in ds) == len(date_pairs)
